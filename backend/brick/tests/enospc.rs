//! Errors of the underlying filesystem pass through with context: ENOSPC from a small
//! loop-mounted ext4 (a 4 MiB tmpfs when loop devices are not available).
mod common;
use cairn_proto::msg::Op;
use cairn_proto::{Errno, FileType, Id};
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        // Lazily if something still holds it open (a panic mid-test): the loop device
        // is freed when the last fd goes, rather than left mounted.
        let ok = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

fn small_fs(dir: &Path) -> (Mount, &'static str) {
    let mnt = dir.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let img = dir.join("img");
    let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    if ok(Command::new("truncate").arg("-s").arg("8M").arg(&img))
        && ok(Command::new("mkfs.ext4").arg("-q").arg(&img))
        && ok(Command::new("mount").arg("-o").arg("loop").arg(&img).arg(&mnt))
    {
        return (Mount(mnt), "ext4");
    }
    assert!(
        ok(Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(&mnt)),
        "neither a loop-mounted ext4 nor a tmpfs could be mounted (tests must run as root)"
    );
    (Mount(mnt), "tmpfs")
}

#[test]
fn enospc_passes_through_with_context() {
    enospc_case(vec![0xabu8; 1 << 20].into());
}

/// The same with page-aligned 1 MiB writes, as they arrive off the wire: the brick writes
/// them with O_DIRECT, and a full disk still reads as ENOSPC.
#[test]
fn enospc_of_direct_writes_passes_through_with_context() {
    use bytes::BufMut;
    let mut b = cairn_proto::aligned::AlignedBuf::with_capacity(1 << 20);
    b.put_bytes(0xab, 1 << 20);
    let chunk = b.freeze();
    assert!(cairn_proto::aligned::direct_ok(&chunk, 0));
    enospc_case(chunk);
}

fn enospc_case(chunk: bytes::Bytes) {
    let t = tempfile::tempdir().unwrap();
    let (m, kind) = small_fs(t.path());
    let b = new_brick_at(&m.0.join("brick"), 7);
    let f = file(&b, Id::ROOT, "filler");
    let mut err = None;
    for i in 0..64u64 {
        match run_data(&b, &root(), Op::Write { id: f.id, offset: i << 20 }, &chunk) {
            Ok(_) => {}
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let e = err.unwrap_or_else(|| panic!("a 64 MiB write fit on an 8 MiB {kind}"));
    assert_eq!(e.errno, Errno::ENOSPC, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("vol0#7"), "{msg}");
    assert!(msg.contains(&m.0.join("brick").display().to_string()), "{msg}");
    assert!(msg.contains("write"), "{msg}");
    assert!(msg.contains(&f.id.to_hex()), "{msg}");
    // fallocate too, and the brick still serves reads
    let e = run(&b, &root(), Op::Fallocate { id: f.id, mode: 0, offset: 0, len: 64 << 20 })
        .unwrap_err();
    assert_eq!(e.errno, Errno::ENOSPC, "{e}");
    assert_eq!(read(&b, f.id, 0, 4).0, vec![0xab; 4]);
    // deleting frees space and writes work again
    run(&b, &root(), Op::Unlink { dir: Id::ROOT, name: b"filler".to_vec() }).unwrap();
    let g = create_as(&b, &root(), Id::ROOT, "after", FileType::Regular, 0o644).unwrap();
    write(&b, g.id, 0, &chunk);
    drop(b);
}

/// Listing a file in the checksum dirty log must not need space: an overwrite of existing
/// data (no new block) works on a full brick, also for a file tidied before it filled up.
/// On a tmpfs: ext4 lets a small append through on a full filesystem from its reserves.
#[test]
fn an_overwrite_on_a_full_brick_still_works() {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "mount a tmpfs (tests run as root)");
    let (m, kind) = (Mount(mnt), "tmpfs");
    let dir = m.0.join("brick");
    let b = new_brick_at(&dir, 7);
    let keep = file(&b, Id::ROOT, "keep");
    write(&b, keep.id, 0, &[1u8; 65536]);
    // Idle until tidied: no record left, so the next change lists `keep` again.
    let listed = || {
        ["log.0", "log.1"].iter().any(|n| {
            std::fs::read(dir.join(".cairn/csum/dirty").join(n)).unwrap().iter().any(|&b| b != 0)
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while listed() {
        assert!(std::time::Instant::now() < deadline, "never tidied");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Something else fills the filesystem (as root, reserved blocks too).
    let mut hog = std::fs::File::create(m.0.join("hog")).unwrap();
    let chunk = vec![0xabu8; 4096];
    let e = (0..4096)
        .find_map(|_| {
            std::io::Write::write_all(&mut hog, &chunk).and_then(|()| hog.sync_all()).err()
        })
        .unwrap_or_else(|| panic!("16 MiB fit on an 8 MiB {kind}"));
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    write(&b, keep.id, 4096, &[2u8; 4096]);
    let (got, _) = read(&b, keep.id, 0, 65536);
    assert_eq!(&got[..4096], &[1u8; 4096][..]);
    assert_eq!(&got[4096..8192], &[2u8; 4096][..]);
    drop(b);
}
