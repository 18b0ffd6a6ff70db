//! Conversions between the client library's types and the kernel's (fuser's): errno,
//! file kinds, times, attributes, POSIX locks.

use super::{BLKSIZE, OFFSET_MAX};
use cairn_client::{Attr, FileType, Lock, LockKind, RemoteError, SetTime, Timespec};
use fuser::{FileAttr, INodeNo, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::{debug, warn};

/// errno to hand the kernel for a client error.
pub fn errno(e: &RemoteError) -> i32 {
    match e.errno.0 {
        // Internal to the client/brick protocol: must never reach an application.
        libc::EREMCHG => libc::EIO,
        n if n <= 0 => libc::EIO,
        n => n,
    }
}

pub(super) fn fail(op: &str, what: impl std::fmt::Display, e: &RemoteError) -> i32 {
    let n = errno(e);
    if n == libc::ENOENT || n == libc::EEXIST || n == libc::ENODATA || n == libc::ENOTEMPTY {
        debug!(op, %what, error = %e, "fuse op failed");
    } else {
        warn!(op, %what, error = %e, "fuse op failed");
    }
    n
}

pub fn kind(k: FileType) -> fuser::FileType {
    match k {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
    }
}

pub fn to_system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

pub fn to_timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            // Negative: floor to whole seconds below, nanoseconds counted upwards.
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timespec { sec, nsec }
        }
    }
}

pub fn file_attr(a: &Attr, ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.ctime),
        kind: kind(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: BLKSIZE,
        flags: 0,
    }
}

pub(super) fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(st) => SetTime::At(to_timespec(st)),
    }
}

/// A FUSE lock range (`start..=end`, `end == OFFSET_MAX` for "to EOF") as a Cairn lock.
pub fn to_lock(typ: i32, start: u64, end: u64, owner: u64, pid: u32) -> Result<Lock, i32> {
    let kind = match typ {
        libc::F_RDLCK => LockKind::Read,
        libc::F_WRLCK => LockKind::Write,
        libc::F_UNLCK => LockKind::Unlock,
        _ => return Err(libc::EINVAL),
    };
    if end < start {
        return Err(libc::EINVAL);
    }
    let len = if end >= OFFSET_MAX { 0 } else { end - start + 1 };
    Ok(Lock { kind, start, len, owner, pid })
}

/// A Cairn lock as the FUSE `(start, end, type, pid)` the kernel expects from GETLK.
pub fn from_lock(l: &Lock) -> (u64, u64, i32, u32) {
    let typ = match l.kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
        LockKind::Unlock => libc::F_UNLCK,
    };
    let end =
        if l.len == 0 { OFFSET_MAX } else { l.start.saturating_add(l.len - 1).min(OFFSET_MAX) };
    (l.start, end, typ, l.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_client::Id;

    #[test]
    fn errno_passthrough_and_internal() {
        let e = |n| RemoteError::new(cairn_client::Errno(n), "x");
        assert_eq!(errno(&e(libc::ENOENT)), libc::ENOENT);
        assert_eq!(errno(&e(libc::EREMCHG)), libc::EIO);
        assert_eq!(errno(&e(0)), libc::EIO);
    }

    #[test]
    fn timespec_roundtrip() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec { sec: 1_700_000_000, nsec: 123_456_789 },
            Timespec { sec: -1, nsec: 500_000_000 },
            Timespec { sec: -86_400, nsec: 0 },
        ] {
            assert_eq!(to_timespec(to_system_time(t)), t, "{t:?}");
        }
    }

    #[test]
    fn lock_ranges() {
        let l = to_lock(libc::F_WRLCK, 10, OFFSET_MAX, 7, 99).unwrap();
        assert_eq!((l.kind, l.start, l.len, l.owner), (LockKind::Write, 10, 0, 7));
        assert_eq!(from_lock(&l), (10, OFFSET_MAX, libc::F_WRLCK, 99));
        let l = to_lock(libc::F_RDLCK, 0, 9, 1, 2).unwrap();
        assert_eq!(l.len, 10);
        assert_eq!(from_lock(&l), (0, 9, libc::F_RDLCK, 2));
        assert!(to_lock(99, 0, 1, 0, 0).is_err());
        assert!(to_lock(libc::F_RDLCK, 5, 4, 0, 0).is_err());
    }

    #[test]
    fn attr_conversion() {
        let a = Attr {
            id: Id::new_on_set(2),
            kind: FileType::Directory,
            perm: 0o1777,
            nlink: 3,
            uid: 10,
            gid: 20,
            size: 4096,
            blocks: 8,
            rdev: 0,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: 3, nsec: 4 },
            ctime: Timespec { sec: 5, nsec: 6 },
            change: 9,
        };
        let f = file_attr(&a, 42);
        assert_eq!(f.ino, fuser::INodeNo(42));
        assert_eq!(f.kind, fuser::FileType::Directory);
        assert_eq!(f.perm, 0o1777);
        assert_eq!((f.nlink, f.uid, f.gid, f.size, f.blocks), (3, 10, 20, 4096, 8));
        assert_eq!(f.mtime, UNIX_EPOCH + Duration::new(3, 4));
    }
}
