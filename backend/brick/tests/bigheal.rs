//! Chunked, sparse-aware heal of regular files: the steps `cairnd` runs (see
//! `copy_file` in cairnd/src/heal.rs) on two bricks, with no size limit, copying only the
//! blocks whose checksums differ and punching holes rather than writing zeros.
mod common;
use cairn_brick::{heal_diff, Brick, Exec};
use cairn_proto::msg::{HealExtent, HealSums, Op, Reply, HEAL_SUMS_MAX};
use cairn_proto::{FileType, Id, SetAttr};
use common::*;
use std::path::Path;

const BLOCK: u64 = cairn_brick::CSUM_BLOCK;
const GIB: u64 = 1 << 30;

fn sums_of(b: &Brick, id: Id, first: u64, count: u32, from_data: bool) -> HealSums {
    match run(b, &root(), Op::HealSums { id, first, count, from_data }).unwrap() {
        Reply::Sums(s) => *s,
        other => panic!("{other:?}"),
    }
}

fn sums(b: &Brick, id: Id, first: u64, count: u32) -> HealSums {
    sums_of(b, id, first, count, false)
}

fn apply_meta(src: &Brick, dst: &Brick, id: Id) {
    let state = src.heal_meta(id).unwrap();
    dst.execute(
        &root(),
        &Op::HealApply { state: Box::new(state) },
        &[],
        Exec::Replica { result: None },
    )
    .unwrap();
}

/// What `cairnd`'s `copy_file` does, minus locks and network: returns the data bytes sent.
fn chunked_heal(src: &Brick, dst: &Brick, id: Id) -> u64 {
    chunked_heal_counted(src, dst, id).0
}

/// `chunked_heal`, also returning how many ranges of entries were compared.
fn chunked_heal_counted(src: &Brick, dst: &Brick, id: Id) -> (u64, u32) {
    apply_meta(src, dst, id);
    let size = getattr(src, id).unwrap().size;
    let nb = size.div_ceil(BLOCK);
    let (mut first, mut sent, mut ranges) = (0, 0, 0);
    while first < nb {
        ranges += 1;
        let count = (nb - first).min(HEAL_SUMS_MAX as u64) as u32;
        let (mine, theirs) = (sums(src, id, first, count), sums_of(dst, id, first, count, true));
        assert_eq!(theirs.kind, Some(FileType::Regular));
        for (a, b) in heal_diff(first, &mine.entries, &theirs.entries, (4 << 20) / BLOCK) {
            let (extents, data) = src.heal_extents(id, a, b).unwrap();
            if extents.is_empty() {
                continue;
            }
            match run_data(dst, &root(), Op::HealWrite { id, extents }, &data).unwrap() {
                (Reply::HealWritten { bytes, .. }, _) => {
                    assert_eq!(bytes, data.len() as u64);
                    sent += bytes;
                }
                other => panic!("{other:?}"),
            }
        }
        first += count as u64;
        if let (Some(a), Some(b)) = (mine.next, theirs.next) {
            first = first.max(a.min(b));
        }
    }
    apply_meta(src, dst, id);
    (sent, ranges)
}

/// Both copies hold the same bytes: same size, the target's data gives the entries of the
/// source's table for every block (page by page), and the target's table is right about
/// its data (scrub).
fn assert_same(src: &Brick, dst: &Brick, id: Id) {
    let (a, b) = (getattr(src, id).unwrap(), getattr(dst, id).unwrap());
    assert_eq!(a.size, b.size);
    assert_eq!(a.mtime, b.mtime);
    assert_eq!((a.perm, a.uid, a.gid), (b.perm, b.uid, b.gid));
    let nb = a.size.div_ceil(BLOCK);
    let mut first = 0;
    while first < nb {
        let count = (nb - first).min(HEAL_SUMS_MAX as u64) as u32;
        let (x, y) = (sums(src, id, first, count), sums_of(dst, id, first, count, true));
        assert!(x.entries.iter().all(|e| e.is_some()), "source table has unknown entries");
        assert_eq!(x.entries, y.entries, "entries of blocks {first}..+{count}");
        first += count as u64;
    }
    assert_eq!(dst.scrub_file(id).unwrap(), a.size);
}

fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

fn create_on(bricks: &[&Brick], name: &str) -> Id {
    let id = Id::new_on_set(1);
    let op = create_op(Id::ROOT, name, id, FileType::Regular, 0o644);
    for b in bricks {
        run(b, &root(), op.clone()).unwrap();
    }
    id
}

fn set_size(b: &Brick, id: Id, size: u64) {
    run(b, &root(), Op::SetAttr { id, set: SetAttr { size: Some(size), ..Default::default() } })
        .unwrap();
}

/// A 2 GiB sparse file (a LUN backing file) on which a few MiB changed while the target
/// was away: only the changed blocks travel, holes stay holes on the target.
#[test]
fn big_sparse_file_heals_by_copying_only_changed_blocks() {
    let t = tempfile::tempdir().unwrap();
    let src = new_brick_at(&t.path().join("b0"), 0);
    let dst = new_brick_at(&t.path().join("b1"), 1);
    let id = create_on(&[&src, &dst], "lun");
    // The common past: 2 GiB, data at the start, at 1 GiB and at the end.
    for b in [&src, &dst] {
        set_size(b, id, 2 * GIB);
        write(b, id, 0, &pattern(1, 1 << 20));
        write(b, id, GIB, &pattern(2, 2 << 20));
        write(b, id, 2 * GIB - 300_000, &pattern(3, 300_000));
    }
    // While the target was away: 3 MiB written at an unaligned offset in a hole, 64 KiB
    // overwritten at 1 GiB, and the first 512 KiB zeroed (punched).
    write(&src, id, 700 * (1 << 20) + 12_345, &pattern(4, 3 << 20));
    write(&src, id, GIB + 128 * 1024, &pattern(5, 64 * 1024));
    run(&src, &root(), Op::Fallocate { id, mode: 0x01 | 0x02, offset: 0, len: 512 << 10 }).unwrap();
    let changed = (3u64 << 20) + 64 * 1024;
    let sent = chunked_heal(&src, &dst, id);
    // 3 MiB at an unaligned offset touches one block more than it covers; the punched range sends nothing.
    assert!(sent >= changed && sent <= changed + 2 * BLOCK, "sent {sent} for {changed} changed");
    assert_same(&src, &dst, id);
    assert_eq!(read(&dst, id, 700 * (1 << 20) + 12_345, 1 << 20).0, pattern(4, 3 << 20)[..1 << 20]);
    assert_eq!(read(&dst, id, 0, 4096).0, vec![0u8; 4096]);
    // Holes stay holes: the target holds about as much as the source, not 2 GiB.
    let (a, b) =
        (allocated(&t.path().join("b0/data/lun")), allocated(&t.path().join("b1/data/lun")));
    assert!(b <= a + (1 << 20), "target allocates {b} bytes, source {a}");
    assert!(b < 16 << 20, "target allocates {b} bytes");
    // Healing again copies nothing: the copies are identical.
    assert_eq!(chunked_heal(&src, &dst, id), 0);
}

/// A target that is larger (stale tail), has data where the source has a hole, and one
/// with an old copy that predates checksums: all converge.
#[test]
fn larger_stale_and_unchecksummed_targets_converge() {
    let t = tempfile::tempdir().unwrap();
    let src = new_brick_at(&t.path().join("b0"), 0);
    let dst = new_brick_at(&t.path().join("b1"), 1);
    let id = create_on(&[&src, &dst], "f");
    write(&src, id, 0, &pattern(1, 5 << 20));
    set_size(&src, id, 40 << 20);
    write(&dst, id, 0, &pattern(9, 10 << 20));
    write(&dst, id, 30 << 20, &pattern(9, 1 << 20));
    set_size(&dst, id, 3 * GIB);
    write(&dst, id, 3 * GIB - 10, b"stale tail");
    chunked_heal(&src, &dst, id);
    assert_same(&src, &dst, id);
    assert_eq!(read(&dst, id, 30 << 20, 4096).0, vec![0u8; 4096]);
    assert!(allocated(&t.path().join("b1/data/f")) < 8 << 20);

    // A block of the target rotted (its table is right, its data is not): the target's
    // entries are computed from its data, so that block is copied again.
    let bad = t.path().join("b1/data/f");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&bad).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, 3 * BLOCK + 5).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], 3 * BLOCK + 5).unwrap();
    }
    assert!(dst.scrub_file(id).is_err());
    assert_eq!(chunked_heal(&src, &dst, id), BLOCK);
    assert_same(&src, &dst, id);

    // No checksums on the target (a copy from before they existed), one block of it
    // stale: the compare (from the target's data) finds that block and copies just it.
    let id2 = create_on(&[&src, &dst], "old");
    write(&src, id2, 0, &pattern(2, 1 << 20));
    write(&dst, id2, 0, &pattern(2, 1 << 20));
    write(&dst, id2, 300_000, b"stale bytes");
    let p = std::ffi::CString::new(t.path().join("b1/data/old").as_os_str().as_encoded_bytes())
        .unwrap();
    let n = c"trusted.cairn.csum";
    assert_eq!(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) }, 0);
    assert!(sums(&dst, id2, 0, 16).entries.iter().all(|e| e.is_none()));
    assert_eq!(chunked_heal(&src, &dst, id2), BLOCK);
    assert_same(&src, &dst, id2);
}

/// A 1 TiB sparse file (data at the start and at the end) with a rotten block near its
/// end: the compare skips what is a hole on both copies (the `next` hints), so it looks at
/// a few ranges of entries, not the 268 M of the whole file, and copies just the block.
#[test]
fn huge_sparse_file_heals_without_walking_its_holes() {
    const TIB: u64 = 1 << 40;
    let t = tempfile::tempdir().unwrap();
    let src = new_brick_at(&t.path().join("b0"), 0);
    let dst = new_brick_at(&t.path().join("b1"), 1);
    let id = create_on(&[&src, &dst], "tib");
    for b in [&src, &dst] {
        write(b, id, 0, &pattern(1, 1 << 20));
        write(b, id, TIB, &pattern(2, 64 << 10));
    }
    let hint = sums(&src, id, 0, HEAL_SUMS_MAX);
    assert_eq!(hint.next, Some(TIB / BLOCK), "the next data after the first range");
    let end = sums_of(&dst, id, TIB / BLOCK, HEAL_SUMS_MAX, true);
    assert_eq!(end.next, Some((TIB + (64 << 10)) / BLOCK), "past the data: the block count");
    let bad = t.path().join("b1/data/tib");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&bad).unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, TIB + 5 * BLOCK + 7).unwrap();
        f.write_all_at(&[b[0] ^ 0x01], TIB + 5 * BLOCK + 7).unwrap();
    }
    let (sent, ranges) = chunked_heal_counted(&src, &dst, id);
    assert_eq!(sent, BLOCK);
    assert!(ranges <= 2, "compared {ranges} ranges of entries");
    assert_eq!(read(&dst, id, TIB, 64 << 10).0, pattern(2, 64 << 10));
    assert_eq!(read(&dst, id, 0, 1 << 20).0, pattern(1, 1 << 20));
    // Data on the target where the source has a hole is found too: it is compared, and
    // punched.
    write(&dst, id, TIB / 2, &pattern(3, 8192));
    let (sent, ranges) = chunked_heal_counted(&src, &dst, id);
    assert_eq!(sent, 0);
    assert!(ranges <= 3, "compared {ranges} ranges of entries");
    assert_eq!(read(&dst, id, TIB / 2, 8192).0, vec![0u8; 8192]);
    assert!(allocated(&bad) < 4 << 20, "target allocates {} bytes", allocated(&bad));
}

/// A range of blocks past the largest file offset, as a hostile or broken peer may ask
/// for (found by `cairnd/tests/wire_fuzz.rs`: block 2^63 overflowed the byte offset and
/// panicked the request): refused with EINVAL naming the inode, on a file and on an id
/// the brick does not hold, and the brick still answers a sane range.
#[test]
fn heal_sums_past_the_largest_offset_is_einval() {
    let (_t, b) = new_brick();
    let id = create_on(&[&b], "f");
    write(&b, id, 0, &pattern(1, 3 * BLOCK as usize));
    let last = i64::MAX as u64 / BLOCK;
    for target in [id, Id::new_on_set(1)] {
        for (first, count) in [(1 << 63, 0), (u64::MAX, 1), (last, 1), (last - 5, HEAL_SUMS_MAX)] {
            for from_data in [true, false] {
                let op = Op::HealSums { id: target, first, count, from_data };
                let e = run(&b, &root(), op).unwrap_err();
                assert_eq!(e.errno.0, libc::EINVAL, "{first}+{count}: {e}");
                assert!(e.message.contains(&target.to_hex()), "{e}");
            }
        }
    }
    assert_eq!(sums_of(&b, id, last - 1, 1, true).entries, vec![Some(0)], "the last block");
    assert_eq!(sums(&b, id, 0, 4).entries.len(), 4);
}

/// Extents past the largest file offset, or whose lengths add up past 2^64, as a hostile
/// or broken peer may send them (found by `cairnd/tests/wire_fuzz.rs`: two extents of
/// 2^63 bytes overflowed the sum of their lengths and panicked the request): refused with
/// EINVAL naming the inode, the file untouched.
#[test]
fn heal_write_past_the_largest_offset_is_einval() {
    let (_t, b) = new_brick();
    let id = create_on(&[&b], "f");
    write(&b, id, 0, &pattern(1, 8192));
    let ext = |offset, len, zero| HealExtent { offset, len, zero };
    for extents in [
        vec![ext(0, 1 << 63, false), ext(0, 1 << 63, false)],
        vec![ext(0, u64::MAX, false), ext(0, 2, false)],
        vec![ext(u64::MAX, 4, false)],
        vec![ext(0, 4, false), ext(u64::MAX - 1, 4096, true)],
        vec![ext(i64::MAX as u64, 1, true)],
    ] {
        let e = run_data(&b, &root(), Op::HealWrite { id, extents: extents.clone() }, b"data")
            .unwrap_err();
        assert_eq!(e.errno.0, libc::EINVAL, "{extents:?}: {e}");
        assert!(e.message.contains(&id.to_hex()), "{e}");
    }
    assert_eq!(read(&b, id, 0, 8192).0, pattern(1, 8192), "nothing written");
    let ok = vec![ext(0, 4, false), ext(4096, 4096, true)];
    run_data(&b, &root(), Op::HealWrite { id, extents: ok }, b"data").unwrap();
    assert_eq!(&read(&b, id, 0, 4).0[..], b"data");
}
