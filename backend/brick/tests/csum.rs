//! Data checksums: data changed behind the brick's back is refused on read (ECORRUPT),
//! every way Cairn changes data keeps the checksums right, and the crash rule holds.
mod common;
use cairn_brick::{Brick, Exec, CSUM_BLOCK, ECORRUPT};
use cairn_proto::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
use cairn_proto::msg::{HealState, Op, Reply};
use cairn_proto::{Id, RemoteError, SetAttr};
use common::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const BS: u64 = CSUM_BLOCK;

fn try_read(b: &Brick, id: Id, off: u64, len: u32) -> Result<Vec<u8>, RemoteError> {
    match run_data(b, &root(), Op::Read { id, offset: off, len }, &[])? {
        (Reply::Data { .. }, d) => Ok(d.to_vec()),
        other => panic!("{other:?}"),
    }
}

fn read_all(b: &Brick, id: Id) -> Vec<u8> {
    let size = getattr(b, id).unwrap().size;
    try_read(b, id, 0, size as u32 + 1).expect("verified read")
}

fn backing(root: &Path, name: &str) -> PathBuf {
    root.join("data").join(name)
}

/// Flip one bit of the backing file at `off`, as a failing disk would.
fn flip(p: &Path, off: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, off).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, off).unwrap();
}

fn corrupt(r: Result<Vec<u8>, RemoteError>) -> RemoteError {
    match r {
        Ok(d) => panic!("corrupted data was served ({} bytes)", d.len()),
        Err(e) => {
            assert_eq!(e.errno.0, ECORRUPT, "{e}");
            e
        }
    }
}

fn setattr_size(b: &Brick, id: Id, size: u64) {
    run(b, &root(), Op::SetAttr { id, set: SetAttr { size: Some(size), ..Default::default() } })
        .unwrap();
}

fn fallocate(b: &Brick, id: Id, mode: u32, offset: u64, len: u64) {
    run(b, &root(), Op::Fallocate { id, mode, offset, len }).unwrap();
}

#[test]
fn flipped_byte_is_detected_with_context() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    let data = pattern(1, 3 * BS as usize + 1000);
    write(&b, a.id, 0, &data);
    assert_eq!(read_all(&b, a.id), data);
    flip(&backing(&t.path().join("b0"), "f"), BS + 77);
    let e = corrupt(try_read(&b, a.id, BS, 10));
    assert!(e.message.contains("vol0#0"), "{e}");
    assert!(e.message.contains(&a.id.to_string()), "{e}");
    assert!(e.message.contains(&format!("offset {BS}")), "{e}");
    // A read of the block, wherever it starts in it, and a read spanning it: refused.
    corrupt(try_read(&b, a.id, BS + 70, 10));
    corrupt(try_read(&b, a.id, 0, (3 * BS) as u32));
    // Other blocks are still served.
    assert_eq!(try_read(&b, a.id, 0, 100).unwrap(), data[..100]);
    assert_eq!(try_read(&b, a.id, 2 * BS, 100).unwrap(), data[2 * BS as usize..][..100]);
    // The scrub finds it too, and a heal source refuses to hand it out.
    assert_eq!(b.scrub_file(a.id).unwrap_err().errno.0, ECORRUPT);
    let fetched = b.execute(&root(), &Op::HealFetch { id: a.id }, &[], Exec::Primary);
    assert_eq!(fetched.unwrap_err().errno.0, ECORRUPT);
}

#[test]
fn size_changed_behind_our_back_is_detected() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    write(&b, a.id, 0, b"hello world");
    // A stray write past the end of file (the file grows on disk).
    let f =
        std::fs::OpenOptions::new().write(true).open(backing(&t.path().join("b0"), "f")).unwrap();
    f.write_all_at(b"x", 3000).unwrap();
    corrupt(try_read(&b, a.id, 0, 100));
    corrupt(try_read(&b, a.id, 5000, 100));
    // Truncated behind our back.
    let g = file(&b, Id::ROOT, "g");
    write(&b, g.id, 0, &pattern(2, 1000));
    std::fs::OpenOptions::new()
        .write(true)
        .open(backing(&t.path().join("b0"), "g"))
        .unwrap()
        .set_len(10)
        .unwrap();
    corrupt(try_read(&b, g.id, 0, 5));
}

#[test]
fn small_appends_and_overwrites_keep_checksums_right() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "log");
    let mut model = Vec::new();
    for i in 0..3000u64 {
        let rec = pattern(i, 40 + (i % 7) as usize);
        write(&b, a.id, model.len() as u64, &rec);
        model.extend_from_slice(&rec);
    }
    assert_eq!(read_all(&b, a.id), model);
    // Overwrite inside a block and across a block boundary.
    for (off, n) in [(5u64, 10usize), (BS - 3, 9), (BS + 1, 2)] {
        let d = pattern(off, n);
        write(&b, a.id, off, &d);
        model[off as usize..off as usize + n].copy_from_slice(&d);
    }
    assert_eq!(read_all(&b, a.id), model);
    assert_eq!(b.scrub_file(a.id).unwrap(), model.len() as u64);
    flip(&backing(&t.path().join("b0"), "log"), model.len() as u64 - 1);
    corrupt(try_read(&b, a.id, model.len() as u64 - 10, 10));
}

/// Large page-aligned writes (O_DIRECT on the brick) mixed with small buffered ones over
/// the same blocks, in both orders: data and checksums stay right.
#[test]
fn direct_and_buffered_writes_of_one_file_keep_checksums_right() {
    use bytes::BufMut;
    let aligned = |seed: u64, n: usize| {
        let mut b = cairn_proto::aligned::AlignedBuf::with_capacity(n);
        b.put_slice(&pattern(seed, n));
        b.freeze()
    };
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "big");
    let mut model = vec![0u8; 4 << 20];
    let put = |model: &mut Vec<u8>, off: usize, d: &[u8]| {
        write(&b, a.id, off as u64, d);
        if model.len() < off + d.len() {
            model.resize(off + d.len(), 0);
        }
        model[off..off + d.len()].copy_from_slice(d);
    };
    for i in 0..4 {
        let d = aligned(i, 1 << 20);
        assert!(cairn_proto::aligned::direct_ok(&d, 0));
        put(&mut model, (i as usize) << 20, &d);
    }
    // Small writes into direct-written blocks, then direct writes over dirty cached pages.
    put(&mut model, 5000, &pattern(9, 3000));
    put(&mut model, (1 << 20) - 10, &pattern(10, 20));
    put(&mut model, 0, &aligned(11, 1 << 20));
    put(&mut model, 1 << 20, &aligned(12, 512 << 10));
    // Past the end, leaving a hole.
    put(&mut model, 6 << 20, &aligned(13, 1 << 20));
    assert_eq!(read_all(&b, a.id), model);
    assert_eq!(b.scrub_file(a.id).unwrap(), model.len() as u64);
    flip(&backing(&t.path().join("b0"), "big"), (6 << 20) + 4097);
    corrupt(try_read(&b, a.id, (6 << 20) + 4096, 10));
}

/// Every data-changing op, against an in-memory model, across the xattr/sidecar limit.
#[test]
fn every_change_keeps_checksums_right() {
    let (_t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    let mut model: Vec<u8> = Vec::new();
    let mut x = 12345u64;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let limit = 18 << 20; // past the 16 MiB xattr limit: the table moves to a sidecar
    for step in 0..80u64 {
        let off = match rnd(3) {
            0 => model.len() as u64,
            1 => rnd(model.len() as u64 + 1),
            _ => rnd(limit),
        };
        match rnd(6) {
            0 | 1 => {
                let n = [1, 40, 4096, BS as usize, 3 * BS as usize + 17][rnd(5) as usize];
                let d = pattern(step, n);
                write(&b, a.id, off, &d);
                let end = off as usize + n;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&d);
            }
            2 => {
                setattr_size(&b, a.id, off);
                model.resize(off as usize, 0);
            }
            3 => {
                let len = rnd(3 * BS) + 1;
                fallocate(&b, a.id, PUNCH_HOLE | KEEP_SIZE, off, len);
                let end = ((off + len) as usize).min(model.len());
                if (off as usize) < end {
                    model[off as usize..end].fill(0);
                }
            }
            4 => {
                let len = rnd(3 * BS) + 1;
                fallocate(&b, a.id, ZERO_RANGE, off, len);
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].fill(0);
            }
            _ => {
                let len = rnd(2 * BS) + 1;
                fallocate(&b, a.id, 0, off, len);
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
            }
        }
        assert_eq!(getattr(&b, a.id).unwrap().size, model.len() as u64, "step {step}");
        assert_eq!(b.scrub_file(a.id).unwrap(), model.len() as u64, "step {step}");
        let r = rnd(model.len() as u64 + 1);
        let got = try_read(&b, a.id, r, 100_000).unwrap();
        let end = (r as usize + 100_000).min(model.len());
        assert_eq!(got, model[r as usize..end], "step {step} read at {r}");
    }
    assert_eq!(read_all(&b, a.id), model);
}

#[test]
fn large_file_sidecar_detects_and_goes_with_the_file() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let a = file(&b, Id::ROOT, "big");
    let chunk = pattern(9, 1 << 20);
    for i in 0..20u64 {
        write(&b, a.id, i << 20, &chunk);
    }
    let sidecar = dir.join(".cairn/csum").join(a.id.to_hex());
    assert!(sidecar.exists(), "a 20 MiB file keeps its checksums in a sidecar");
    flip(&backing(&dir, "big"), (17 << 20) + 5);
    corrupt(try_read(&b, a.id, 17 << 20, 4096));
    assert_eq!(try_read(&b, a.id, 0, 4096).unwrap(), chunk[..4096]);
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"big".to_vec() }).unwrap();
    assert!(!sidecar.exists(), "the sidecar is removed with the inode");
}

#[test]
fn heal_from_a_good_copy_repairs_the_bad_one() {
    let t = tempfile::tempdir().unwrap();
    let good = new_brick_at(&t.path().join("b0"), 0);
    let bad = new_brick_at(&t.path().join("b1"), 1);
    let id = Id::new_on_set(1);
    let create = Op::Create {
        dir: Id::ROOT,
        name: b"f".to_vec(),
        id,
        kind: cairn_proto::FileType::Regular,
        perm: 0o644,
        rdev: 0,
        target: None,
        exclusive: true,
    };
    let data = pattern(3, 200_000);
    for br in [&good, &bad] {
        br.execute(&root(), &create, &[], Exec::Primary).unwrap();
        write(br, id, 0, &data);
    }
    flip(&backing(&t.path().join("b1"), "f"), 150_000);
    corrupt(try_read(&bad, id, 140_000, 20_000));
    let (state, d): (HealState, Vec<u8>) =
        match good.execute(&root(), &Op::HealFetch { id }, &[], Exec::Primary).unwrap() {
            (Reply::Heal(s), d) => (*s, d.to_vec()),
            other => panic!("{other:?}"),
        };
    bad.execute(
        &root(),
        &Op::HealApply { state: Box::new(state) },
        &d,
        Exec::Replica { result: None },
    )
    .unwrap();
    assert_eq!(read_all(&bad, id), data);
    assert_eq!(bad.scrub_file(id).unwrap(), data.len() as u64);
}

/// The crash rule: a change cut between its data and its checksum update (the inode is
/// marked dirty) is not corruption after a restart; the same mismatch without the mark is.
#[test]
fn crash_between_data_and_checksums_is_not_corruption() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("b0");
    let b = new_brick_at(&dir, 0);
    let a = file(&b, Id::ROOT, "f");
    let c = file(&b, Id::ROOT, "g");
    write(&b, a.id, 0, &pattern(1, 100_000));
    write(&b, c.id, 0, &pattern(2, 100_000));
    let h = file(&b, Id::ROOT, "h");
    write(&b, h.id, 0, &pattern(3, 100_000));
    drop(b);
    // All idle long enough to be tidied, as the tidy thread does.
    clear_dirty(&dir);
    // "Crash": the files' data changed without their checksums; only f (in the log) and
    // h (a marker file of the earlier format) were listed as in flux.
    for n in ["f", "g", "h"] {
        flip(&backing(&dir, n), 70_000);
    }
    mark_dirty(&dir, a.id);
    std::fs::write(dir.join(".cairn/csum/dirty").join(h.id.to_hex()), b"").unwrap();
    let b = Brick::open(&dir, VOLID, 0).unwrap();
    for id in [a.id, h.id] {
        assert_eq!(try_read(&b, id, 0, 100_000).unwrap().len(), 100_000);
    }
    corrupt(try_read(&b, c.id, 65_536, 10_000));
    assert!(dirty_listed(&dir).is_empty(), "the logs are emptied after the rebuild");
    assert!(!dir.join(".cairn/csum/dirty").join(h.id.to_hex()).exists());
}

/// The ids listed in a brick's dirty logs and the earlier format's marker files.
fn dirty_listed(dir: &std::path::Path) -> Vec<Id> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.join(".cairn/csum/dirty")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name.starts_with("log.") {
            let b = std::fs::read(e.path()).unwrap();
            let ids = b.chunks_exact(16).map(|r| Id::from_bytes(r.try_into().unwrap()));
            out.extend(ids.filter(|id| *id != Id(0))); // zeros: no record
        } else if let Some(id) = Id::from_hex(&name) {
            out.push(id);
        }
    }
    out
}

/// As a tidy round that synced every listed id: nothing listed.
fn clear_dirty(dir: &std::path::Path) {
    for n in ["log.0", "log.1"] {
        std::fs::write(dir.join(".cairn/csum/dirty").join(n), b"").unwrap();
    }
}

/// As a change cut by a crash: `id` listed in the dirty log.
fn mark_dirty(dir: &std::path::Path, id: Id) {
    use std::io::Write;
    let p = dir.join(".cairn/csum/dirty/log.1");
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(&id.to_bytes()).unwrap();
}

/// A write marks its inode dirty while it may be in flux; the mark is on disk before the
/// data changes (so a kill -9 at any point leaves it).
#[test]
fn writes_mark_the_inode_before_changing_data() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    write(&b, a.id, 0, b"abc");
    assert_eq!(dirty_listed(&t.path().join("b0")), vec![a.id], "listed once");
    write(&b, a.id, 3, b"def");
    assert_eq!(dirty_listed(&t.path().join("b0")), vec![a.id], "listed once");
}

/// The tidy thread syncs the ids idle for a while and empties the logs; a later change
/// lists its id again.
#[test]
fn idle_ids_are_tidied_by_the_brick_itself() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let files: Vec<Id> = (0..20).map(|i| file(&b, Id::ROOT, &format!("f{i}")).id).collect();
    for &id in &files {
        write(&b, id, 0, b"abc");
    }
    let mut want = files.clone();
    want.sort();
    let mut got = dirty_listed(&dir);
    got.sort();
    assert_eq!(got, want);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dirty_listed(&dir).is_empty() {
        assert!(std::time::Instant::now() < deadline, "still listed: {:?}", dirty_listed(&dir));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    write(&b, files[3], 0, b"xyz");
    assert_eq!(dirty_listed(&dir), vec![files[3]]);
}

/// The voluntary context switches of this process's thread named `name` (one only).
fn thread_switches(name: &str) -> u64 {
    let mut found = vec![];
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let t = t.unwrap().path();
        if std::fs::read_to_string(t.join("comm")).map(|c| c.trim() == name).unwrap_or(false) {
            let status = std::fs::read_to_string(t.join("status")).unwrap();
            let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
            found.push(line.split_whitespace().nth(1).unwrap().parse().unwrap());
        }
    }
    assert_eq!(found.len(), 1, "one thread named {name}");
    found[0]
}

/// With nothing listed, the tidy thread sleeps (no tick every `LOG_SYNC`) until a change
/// lists an id, which it then tidies as usual.
#[test]
fn a_quiet_brick_tidy_thread_sleeps_until_a_change() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("b0");
    // An index no other test of this binary uses: the thread's name is ours alone.
    let b = common::new_brick_at(&dir, 57);
    let f = file(&b, Id::ROOT, "f").id;
    write(&b, f, 0, b"abc");
    let tidied = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !dirty_listed(&dir).is_empty() {
            assert!(std::time::Instant::now() < deadline, "still listed: {:?}", dirty_listed(&dir));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    tidied();
    // The round that emptied the log may still be finishing.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = thread_switches("cairn-tidy-57");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(thread_switches("cairn-tidy-57"), before, "a quiet tidy thread does not tick");
    write(&b, f, 0, b"xyz");
    assert_eq!(dirty_listed(&dir), vec![f]);
    tidied();
    drop(b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
        std::fs::read_to_string(t.unwrap().path().join("comm"))
            .map(|c| c.trim() == "cairn-tidy-57")
            .unwrap_or(false)
    }) {
        assert!(std::time::Instant::now() < deadline, "the tidy thread outlives its brick");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A partial overwrite of a block that already fails its checksum does not bless the rest
/// of the block: the block keeps failing (until a heal rewrites it).
#[test]
fn partial_overwrite_does_not_launder_corruption() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    write(&b, a.id, 0, &pattern(4, 2 * BS as usize));
    flip(&backing(&t.path().join("b0"), "f"), 100);
    write(&b, a.id, 1000, b"new bytes");
    corrupt(try_read(&b, a.id, 1000, 9));
    setattr_size(&b, a.id, 5000);
    corrupt(try_read(&b, a.id, 0, 10));
    // A full overwrite of the block makes it good again.
    write(&b, a.id, 0, &pattern(5, 5000));
    assert_eq!(try_read(&b, a.id, 0, 5000).unwrap(), pattern(5, 5000));
}

/// A partial overwrite updates the entry from the overwritten bytes only (entries are
/// linear): corruption elsewhere in the block keeps failing, in a sidecar table too; a
/// write straddling the old end and many random small writes keep the table exact.
#[test]
fn partial_overwrite_updates_entries_from_the_range_only() {
    let (t, b) = new_brick();
    for (name, size) in [("small", 3 * BS + 100), ("large", 300 * BS + 100)] {
        let a = file(&b, Id::ROOT, name);
        let mut model = pattern(7, size as usize);
        write(&b, a.id, 0, &model);
        let mut x = 99u64;
        for _ in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let off = (x >> 33) % (size + BS / 2);
            let n = 1 + ((x >> 13) % 9000) as usize;
            let d = pattern(x, n);
            write(&b, a.id, off, &d);
            let end = off as usize + n;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&d);
        }
        assert_eq!(read_all(&b, a.id), model, "{name}");
        assert_eq!(b.scrub_file(a.id).unwrap(), model.len() as u64);
        // Rot in block 1 outside the range overwritten next: still refused after it.
        flip(&backing(&t.path().join("b0"), name), BS + 10);
        write(&b, a.id, BS + 1000, &pattern(1, 1000));
        corrupt(try_read(&b, a.id, BS + 1000, 1000));
        // Rewriting the block whole makes it good again.
        let whole = pattern(2, BS as usize);
        write(&b, a.id, BS, &whole);
        model[BS as usize..2 * BS as usize].copy_from_slice(&whole);
        assert_eq!(read_all(&b, a.id), model, "{name}");
    }
}

const TIB: u64 = 1 << 40;

fn xattr_remove(p: &Path, name: &str) {
    let p = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let r = unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) };
    assert_eq!(r, 0, "removexattr {name}: {}", std::io::Error::last_os_error());
}

fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

/// A write and a truncate at 1 TiB touch only the blocks they change: the table stays
/// sparse (zero blocks are zero entries, holes of the sidecar), the data reads back, the
/// scrub passes over the holes and a flipped bit near 1 TiB is still found.
#[test]
fn huge_offsets_keep_the_table_sparse() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let a = file(&b, Id::ROOT, "sparse");
    let head = pattern(7, 100_000);
    write(&b, a.id, 0, &head);
    let tail = pattern(8, 5000);
    let t0 = std::time::Instant::now();
    write(&b, a.id, TIB + 12_345, &tail);
    eprintln!("pwrite of 5000 bytes at 1 TiB + 12345: {:?}", t0.elapsed());
    let size = TIB + 12_345 + 5000;
    assert_eq!(getattr(&b, a.id).unwrap().size, size);
    let sidecar = dir.join(".cairn/csum").join(a.id.to_hex());
    assert_eq!(std::fs::metadata(&sidecar).unwrap().len(), 16 + (size.div_ceil(BS)) * 4);
    assert!(allocated(&sidecar) < 1 << 20, "sidecar is sparse: {}", allocated(&sidecar));
    assert_eq!(try_read(&b, a.id, TIB + 12_345, 5000).unwrap(), tail);
    assert_eq!(try_read(&b, a.id, 0, 100_000).unwrap(), head);
    assert_eq!(try_read(&b, a.id, TIB / 2, 1000).unwrap(), vec![0u8; 1000]);
    let t0 = std::time::Instant::now();
    assert_eq!(b.scrub_file(a.id).unwrap(), size);
    eprintln!("scrub of the 1 TiB sparse file: {:?}", t0.elapsed());

    // Truncate to 2 TiB and back below 1 TiB + the tail, then up again: O(changed blocks).
    let t0 = std::time::Instant::now();
    setattr_size(&b, a.id, 2 * TIB);
    eprintln!("truncate to 2 TiB: {:?}", t0.elapsed());
    let t0 = std::time::Instant::now();
    setattr_size(&b, a.id, TIB + 12_345 + 100);
    setattr_size(&b, a.id, TIB + 4 * BS);
    eprintln!("truncate down, then up: {:?}", t0.elapsed());
    let mut want = tail[..100].to_vec();
    want.resize(4 * BS as usize - 12_345, 0);
    assert_eq!(try_read(&b, a.id, TIB + 12_345, 4 * BS as u32).unwrap(), want);
    assert_eq!(b.scrub_file(a.id).unwrap(), TIB + 4 * BS);

    flip(&backing(&dir, "sparse"), TIB + 12_345 + 50);
    corrupt(try_read(&b, a.id, TIB + 12_345, 100));
    corrupt(b.scrub_file(a.id).map(|_| vec![]));
}

/// Data zeroed behind Cairn's back (a hole punched in the brick's file) fails the scrub:
/// a hole needs a zero entry.
#[test]
fn hole_punched_behind_our_back_fails_the_scrub() {
    let (t, b) = new_brick();
    let a = file(&b, Id::ROOT, "f");
    write(&b, a.id, 0, &pattern(2, 4 * BS as usize));
    let f =
        std::fs::OpenOptions::new().write(true).open(backing(&t.path().join("b0"), "f")).unwrap();
    use std::os::fd::AsRawFd;
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), mode, BS as i64, 2 * BS as i64) }, 0);
    let e = corrupt(b.scrub_file(a.id).map(|_| vec![]));
    assert!(e.message.contains(&format!("offset {BS}")), "{e}");
}

/// A file written before checksums existed (no table) is not rebuilt whole when it
/// changes: it gets a partial table, blocks becoming verified as they are written, the
/// others served unverified.
#[test]
fn file_without_checksums_gets_them_block_by_block() {
    for (name, size) in [("small", 3 * BS + 10), ("big", 300 * BS + 10)] {
        let (t, b) = new_brick();
        let dir = t.path().join("b0");
        let a = file(&b, Id::ROOT, name);
        let data = pattern(3, size as usize);
        write(&b, a.id, 0, &data);
        // Make it a file from before checksums.
        let _ = std::fs::remove_file(dir.join(".cairn/csum").join(a.id.to_hex()));
        if size < 256 * BS {
            xattr_remove(&backing(&dir, name), "trusted.cairn.csum");
        }
        flip(&backing(&dir, name), 5); // unknown block: served unverified
        let mut model = data.clone();
        model[5] ^= 0x10;
        let t0 = std::time::Instant::now();
        write(&b, a.id, BS, &pattern(4, BS as usize)); // block 1 whole
        write(&b, a.id, size - 4, b"tail!!"); // partial last block, grows
        eprintln!("{name}: two writes to a file without checksums: {:?}", t0.elapsed());
        model[BS as usize..2 * BS as usize].copy_from_slice(&pattern(4, BS as usize));
        model.truncate(size as usize - 4);
        model.extend_from_slice(b"tail!!");
        assert_eq!(read_all(&b, a.id), model, "{name}");
        assert_eq!(b.scrub_file(a.id).unwrap(), size + 2, "{name}");
        // The written block is now verified; another unknown one still is not.
        flip(&backing(&dir, name), BS + 9);
        corrupt(try_read(&b, a.id, BS, 10));
        flip(&backing(&dir, name), 2 * BS + 9);
        assert!(try_read(&b, a.id, 2 * BS, 10).is_ok(), "{name}: unknown block served");
    }
}

fn xattr_get(p: &Path, name: &str) -> Vec<u8> {
    let p = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {name}: {}", std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}

fn xattr_set(p: &Path, name: &str, v: &[u8]) {
    let p = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

/// Blocks of the tables written before 4 KiB blocks.
const OLD: u64 = 64 << 10;

/// Entry of a 64 KiB block as the old tables (`CCS2`, shift 16) stored it: the CRC32C of
/// the block padded with zeros to 64 KiB, XOR that of 64 KiB of zeros.
fn old_entry(c: &[u8]) -> u32 {
    let z = vec![0u8; OLD as usize];
    crc32c::crc32c_append(crc32c::crc32c(c), &z[c.len()..]) ^ crc32c::crc32c(&z)
}

/// A table of 64 KiB blocks (`CCS2`, block shift 16) for `data` of `size` bytes (data
/// past `data.len()` is zeros); `partial`: the flag and entries as a partial table stores
/// them (`unknown` blocks 0, the others XOR 0xffffffff).
fn old_table(data: &[u8], size: u64, partial: bool, unknown: &[u64]) -> Vec<u8> {
    let mut t = b"CCS2".to_vec();
    t.extend([16, partial as u8, 0, 0]);
    t.extend(size.to_le_bytes());
    for b in 0..size.div_ceil(OLD) {
        let (s, e) = ((b * OLD) as usize, (((b + 1) * OLD).min(size)) as usize);
        let c = &data[s.min(data.len())..e.min(data.len())];
        let mut x = if c.iter().all(|&x| x == 0) { 0 } else { old_entry(c) };
        if partial {
            x = if unknown.contains(&b) { 0 } else { x ^ 0xffff_ffff };
        }
        t.extend(x.to_le_bytes());
    }
    t
}

fn header_shift(t: &[u8]) -> u8 {
    assert_eq!(&t[..4], b"CCS2");
    t[4]
}

/// A table of the first format (CCS1: plain CRCs of 64 KiB blocks) is verified and
/// converted to 4 KiB blocks when first loaded.
#[test]
fn first_format_tables_are_read_and_converted() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let a = file(&b, Id::ROOT, "old");
    let data = pattern(6, 3 * OLD as usize + 777);
    write(&b, a.id, 0, &data);
    let path = backing(&dir, "old");
    let mut v1 = b"CCS1".to_vec();
    v1.extend([16, 0, 0, 0]);
    v1.extend((data.len() as u64).to_le_bytes());
    for c in data.chunks(OLD as usize) {
        v1.extend(crc32c::crc32c(c).to_le_bytes());
    }
    xattr_set(&path, "trusted.cairn.csum", &v1);
    assert_eq!(read_all(&b, a.id), data);
    let x = xattr_get(&path, "trusted.cairn.csum");
    assert_eq!(header_shift(&x), 12);
    assert_eq!(x.len() as u64, 16 + 4 * (data.len() as u64).div_ceil(BS));
    assert_eq!(b.scrub_file(a.id).unwrap(), data.len() as u64);
    write(&b, a.id, 10, b"x");
    flip(&path, 2 * OLD + 1);
    corrupt(try_read(&b, a.id, 2 * OLD, 10));
    assert_eq!(try_read(&b, a.id, 0, 20).unwrap()[10], b'x');
}

/// Tables of 64 KiB blocks (`CCS2`, shift 16) in the xattr and in a sparse sidecar, whole
/// or partial, are converted to 4 KiB blocks when first loaded (by a read, a write, a
/// scrub): every 64 KiB block is checked against its old entry first, so one that rotted
/// before the conversion keeps failing (all of its 4 KiB blocks), an unknown block stays
/// unverified, and holes are not read.
#[test]
fn tables_of_64k_blocks_are_checked_and_converted() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let csum = dir.join(".cairn/csum");

    // xattr, loaded first by a read; a block rotted before the conversion.
    let a = file(&b, Id::ROOT, "small");
    let data = pattern(11, 3 * OLD as usize + 777);
    write(&b, a.id, 0, &data);
    let path = backing(&dir, "small");
    xattr_set(&path, "trusted.cairn.csum", &old_table(&data, data.len() as u64, false, &[]));
    flip(&path, OLD + 5);
    assert_eq!(try_read(&b, a.id, 0, 100).unwrap(), data[..100]);
    let x = xattr_get(&path, "trusted.cairn.csum");
    assert_eq!(header_shift(&x), 12);
    // Every 4 KiB block of the rotted 64 KiB block fails, not only the one with the flip.
    let e = corrupt(try_read(&b, a.id, OLD, 10));
    assert!(e.message.contains(&format!("offset {OLD}")), "{e}");
    corrupt(try_read(&b, a.id, 2 * OLD - BS, 10));
    assert_eq!(try_read(&b, a.id, 2 * OLD, 100).unwrap(), data[2 * OLD as usize..][..100]);
    corrupt(b.scrub_file(a.id).map(|_| vec![]));
    // A full overwrite of the 64 KiB block makes it good again.
    let fresh = pattern(12, OLD as usize);
    write(&b, a.id, OLD, &fresh);
    assert_eq!(b.scrub_file(a.id).unwrap(), data.len() as u64);

    // A partial table: block 1 unknown (served unverified after the conversion too).
    let p = file(&b, Id::ROOT, "partial");
    let data = pattern(13, 2 * OLD as usize + 5);
    write(&b, p.id, 0, &data);
    let path = backing(&dir, "partial");
    xattr_set(&path, "trusted.cairn.csum", &old_table(&data, data.len() as u64, true, &[1]));
    flip(&path, OLD + 7);
    // Converted by a write (an unaligned one, into block 2).
    write(&b, p.id, 2 * OLD + 1, b"yz");
    let x = xattr_get(&path, "trusted.cairn.csum");
    assert_eq!((header_shift(&x), x[5]), (12, 1), "still partial");
    assert!(try_read(&b, p.id, OLD, 10).is_ok(), "unknown block served");
    assert_eq!(&try_read(&b, p.id, 2 * OLD, 4).unwrap()[1..3], b"yz");
    flip(&path, 5);
    corrupt(try_read(&b, p.id, 0, 10));

    // A sparse 40 MiB file (a sidecar of 64 KiB blocks), loaded first by the scrub: data
    // at 0 and at 30 MiB, one of its blocks rotted.
    let l = file(&b, Id::ROOT, "large");
    let size = 40u64 << 20;
    setattr_size(&b, l.id, size);
    let (d0, d1) = (pattern(14, 1 << 20), pattern(15, 1 << 20));
    write(&b, l.id, 0, &d0);
    write(&b, l.id, 30 << 20, &d1);
    let mut whole = vec![0u8; size as usize];
    whole[..1 << 20].copy_from_slice(&d0);
    whole[30 << 20..31 << 20].copy_from_slice(&d1);
    let sidecar = csum.join(l.id.to_hex());
    let tmp = csum.join("test.tmp");
    std::fs::write(&tmp, old_table(&whole, size, false, &[])).unwrap();
    std::fs::rename(&tmp, &sidecar).unwrap();
    let path = backing(&dir, "large");
    flip(&path, (30 << 20) + OLD + 100);
    let e = corrupt(b.scrub_file(l.id).map(|_| vec![]));
    assert!(e.message.contains(&format!("offset {}", (30 << 20) + OLD)), "{e}");
    let sc = std::fs::read(&sidecar).unwrap();
    assert_eq!(header_shift(&sc), 12);
    assert_eq!(sc.len() as u64, 16 + 4 * size.div_ceil(BS));
    assert!(allocated(&sidecar) < 1 << 20, "sidecar is sparse: {}", allocated(&sidecar));
    assert_eq!(try_read(&b, l.id, 0, 1 << 20).unwrap(), d0);
    assert_eq!(try_read(&b, l.id, 10 << 20, 4096).unwrap(), vec![0u8; 4096]);
    corrupt(try_read(&b, l.id, (30 << 20) + OLD + 3 * BS, 10));
    write(&b, l.id, (30 << 20) + OLD, &pattern(16, OLD as usize));
    assert_eq!(b.scrub_file(l.id).unwrap(), size);

    // A hole whose old entry is of data (punched behind our back before the conversion).
    let h = file(&b, Id::ROOT, "holed");
    let data = pattern(17, 4 * OLD as usize);
    write(&b, h.id, 0, &data);
    let path = backing(&dir, "holed");
    xattr_set(&path, "trusted.cairn.csum", &old_table(&data, data.len() as u64, false, &[]));
    {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, OLD as i64, OLD as i64) };
        assert_eq!(r, 0);
    }
    corrupt(try_read(&b, h.id, OLD + BS, 10));
    assert_eq!(try_read(&b, h.id, 0, 10).unwrap(), data[..10]);
}

/// Writes of one file run concurrently (shared stripe, claimed blocks, the table planned
/// ahead of the data): threads write regions that share blocks, out of order, appending
/// and overwriting in part, while a reader reads verified; afterwards the data is exactly
/// what each thread wrote and every block passes its checksum — in the xattr table and in
/// a sidecar (past 1 MiB).
#[test]
fn concurrent_writes_of_one_file_keep_checksums_right() {
    for (name, region) in [("small", 150_000u64), ("large", 3 << 20)] {
        let (_t, b) = new_brick();
        let a = file(&b, Id::ROOT, name);
        let threads = 8u64;
        let mut model = vec![0u8; (threads * region) as usize];
        // Each thread: its region in 40 KiB pieces in a scrambled order, then 4 KiB
        // overwrites at odd offsets inside it.
        let plans: Vec<Vec<(u64, Vec<u8>)>> = (0..threads)
            .map(|k| {
                let base = k * region;
                let piece = 40_000u64;
                let n = region.div_ceil(piece);
                let mut w = vec![];
                for i in 0..n {
                    let j = (n - 1 - i + k) % n; // a rotation, backwards: extends out of order
                    let off = j * piece;
                    let len = piece.min(region - off);
                    w.push((base + off, pattern(k * 1000 + i, len as usize)));
                }
                for i in 0..n {
                    let off = base + (i * 9973 + 13 * k) % (region - 4096);
                    w.push((off, pattern(k * 7777 + i, 4096)));
                }
                w
            })
            .collect();
        for plan in &plans {
            for (off, d) in plan {
                model[*off as usize..*off as usize + d.len()].copy_from_slice(d);
            }
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (b, done) = (&b, &done);
            let reader = s.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let size = getattr(b, a.id).unwrap().size;
                    if size > 0 {
                        try_read(b, a.id, size / 3, 200_000).expect("a read during writes");
                    }
                }
            });
            let writers: Vec<_> = plans
                .iter()
                .map(|plan| {
                    s.spawn(move || {
                        for (off, d) in plan {
                            write(b, a.id, *off, d);
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
        });
        assert_eq!(read_all(&b, a.id), model, "{name}");
        b.scrub_file(a.id).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Overlapping writes (which lands last is up to the scheduler): whatever the data
        // ends as, its checksums must match it.
        std::thread::scope(|s| {
            for k in 0..threads {
                let b = &b;
                s.spawn(move || {
                    for i in 0..200u64 {
                        let off = (i * 4099 + k * 1021) % (3 * BS);
                        write(
                            b,
                            a.id,
                            off,
                            &pattern(k * 100 + i, 4096 + (i % 3) as usize * 70_000),
                        );
                    }
                });
            }
        });
        read_all(&b, a.id);
        b.scrub_file(a.id).unwrap_or_else(|e| panic!("{name}, overlapping: {e}"));
    }
}

/// The brick keeps a sidecar open between writes; a sidecar replaced under the same name
/// (as a rebuild does: written aside, renamed in) is noticed, and later writes update the
/// new one.
#[test]
fn sidecar_kept_open_follows_a_replaced_sidecar() {
    let (t, b) = new_brick();
    let dir = t.path().join("b0");
    let a = file(&b, Id::ROOT, "big");
    let mut model = vec![];
    for i in 0..18u64 {
        let d = pattern(i, 1 << 20);
        write(&b, a.id, i << 20, &d);
        model.extend(d);
    }
    let sidecar = dir.join(".cairn/csum").join(a.id.to_hex());
    let copy = dir.join(".cairn/csum/copy");
    std::fs::copy(&sidecar, &copy).unwrap();
    std::fs::rename(&copy, &sidecar).unwrap();
    let entry = |blk: u64| {
        let mut e = [0u8; 4];
        std::fs::File::open(&sidecar).unwrap().read_exact_at(&mut e, 16 + 4 * blk).unwrap();
        e
    };
    let blk = (3 << 20) / BS;
    let before = entry(blk);
    let d = pattern(99, 1 << 20);
    write(&b, a.id, 3 << 20, &d);
    model[3 << 20..4 << 20].copy_from_slice(&d);
    assert_ne!(entry(blk), before, "the write updated the sidecar now in place");
    assert_eq!(read_all(&b, a.id), model);
    b.scrub_file(a.id).unwrap();
}

/// The brick knows which files have a sidecar (a table load of any other goes straight to
/// the xattr): a table that moved to a sidecar — grown past the xattr by a write, rebuilt
/// at open after a crash, created by a heal — must be found again in this process and
/// after a restart, or a flipped bit would be served unverified instead of refused.
#[test]
fn sidecars_are_known_after_growth_restart_rebuild_and_heal() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("b0");
    let sidecar = |id: Id| dir.join(".cairn/csum").join(id.to_hex());
    let b = new_brick_at(&dir, 0);
    // Small first (xattr), then grown past it by a write.
    let a = file(&b, Id::ROOT, "grown");
    let mut data = pattern(21, 100_000);
    write(&b, a.id, 0, &data);
    assert!(!sidecar(a.id).exists());
    let more = pattern(22, 2 << 20);
    write(&b, a.id, data.len() as u64, &more);
    data.extend(&more);
    assert!(sidecar(a.id).exists(), "a 2 MiB table is in a sidecar");
    let off = 1_500_000u64;
    flip(&backing(&dir, "grown"), off);
    corrupt(try_read(&b, a.id, off, 100));
    flip(&backing(&dir, "grown"), off); // back
    assert_eq!(read_all(&b, a.id), data);
    // Truncated to a size the xattr could hold: the table stays in the sidecar.
    setattr_size(&b, a.id, 50_000);
    data.truncate(50_000);
    assert!(sidecar(a.id).exists());
    flip(&backing(&dir, "grown"), 20_000);
    corrupt(try_read(&b, a.id, 20_000, 10));
    flip(&backing(&dir, "grown"), 20_000);

    // A big file whose sidecar a crash lost while its dirty mark was set: rebuilt at open.
    let r = file(&b, Id::ROOT, "rebuilt");
    let rdata = pattern(23, 3 << 20);
    write(&b, r.id, 0, &rdata);
    drop(b);
    // Both idle long enough to be tidied (as the tidy thread does), so the open does not
    // rebuild "grown": its sidecar must be known from the listing.
    clear_dirty(&dir);
    std::fs::remove_file(sidecar(r.id)).unwrap();
    mark_dirty(&dir, r.id);

    // After a restart: both found (listed at open; rebuilt at open).
    let b = Brick::open(&dir, VOLID, 0).unwrap();
    assert!(sidecar(r.id).exists(), "rebuilt into a sidecar at open");
    assert_eq!(read_all(&b, a.id), data);
    assert_eq!(read_all(&b, r.id), rdata);
    flip(&backing(&dir, "grown"), 30_000);
    corrupt(try_read(&b, a.id, 30_000, 10));
    flip(&backing(&dir, "rebuilt"), 2_500_000);
    corrupt(try_read(&b, r.id, 2_500_000, 10));
    // Unlinked: the sidecar goes with the file.
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"rebuilt".to_vec() }).unwrap();
    assert!(!sidecar(r.id).exists());

    // A heal writes a big file onto a brick that had it empty: its new sidecar is known.
    let good = new_brick_at(&t.path().join("b1"), 1);
    let id = Id::new_on_set(1);
    let create = create_op(Id::ROOT, "healed", id, cairn_proto::FileType::Regular, 0o644);
    for br in [&good, &b] {
        br.execute(&root(), &create, &[], Exec::Primary).unwrap();
    }
    let hdata = pattern(24, (1 << 20) + 300_000);
    write(&good, id, 0, &hdata);
    let (state, d): (HealState, Vec<u8>) =
        match good.execute(&root(), &Op::HealFetch { id }, &[], Exec::Primary).unwrap() {
            (Reply::Heal(s), d) => (*s, d.to_vec()),
            other => panic!("{other:?}"),
        };
    b.execute(
        &root(),
        &Op::HealApply { state: Box::new(state) },
        &d,
        Exec::Replica { result: None },
    )
    .unwrap();
    assert!(sidecar(id).exists(), "the healed copy's table is in a sidecar");
    assert_eq!(read_all(&b, id), hdata);
    flip(&backing(&dir, "healed"), 1_200_000);
    corrupt(try_read(&b, id, 1_200_000, 10));
}
