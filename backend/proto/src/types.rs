//! Value types shared by every layer: inode ids, attributes, credentials.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A 128-bit inode id, stored with the inode on every brick that holds it.
///
/// The top 32 bits name the replica set the inode was created on (its *home set*), so an
/// id alone (an NFS handle after a restart) routes to the right bricks without a
/// broadcast. The root directory is [`Id::ROOT`] on every set. Directories exist on every
/// replica set with the same id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Id(pub u128);

impl Id {
    pub const ROOT: Id = Id(1);

    /// A fresh id homed on replica set `set_id`.
    pub fn new_on_set(set_id: u32) -> Id {
        let low: u128 = rand_u128() & ((1u128 << 96) - 1);
        let low = if low <= 1 { 2 } else { low };
        Id(((set_id as u128) << 96) | low)
    }

    pub fn home_set(self) -> u32 {
        (self.0 >> 96) as u32
    }

    /// 64-bit fold used where a protocol has room for 64 bits only (st_ino, NFS fileid).
    pub fn ino(self) -> u64 {
        if self == Id::ROOT {
            return 1;
        }
        let folded = (self.0 as u64) ^ ((self.0 >> 64) as u64).rotate_left(17);
        if folded <= 1 {
            folded | 2
        } else {
            folded
        }
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    pub fn from_bytes(b: [u8; 16]) -> Id {
        Id(u128::from_be_bytes(b))
    }

    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    pub fn from_hex(s: &str) -> Option<Id> {
        if s.len() != 32 {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(Id)
    }
}

fn rand_u128() -> u128 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    // Two independently keyed SipHash outputs over a time + counter input: unpredictable
    // enough for ids, with no dependency on a RNG crate in the protocol layer.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut a = RandomState::new().build_hasher();
    a.write_u128(t);
    a.write_u64(n);
    let mut b = RandomState::new().build_hasher();
    b.write_u64(n);
    b.write_u128(t);
    ((a.finish() as u128) << 64) | b.finish() as u128
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_hex())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_hex())
    }
}

/// A file name component: bytes, never containing `/` or NUL, never `.` or `..`.
pub type Name = Vec<u8>;

/// Check a single name component as every brick and client must.
pub fn valid_name(name: &[u8]) -> Result<(), crate::RemoteError> {
    use crate::{Errno, RemoteError};
    if name.is_empty() || name == b"." || name == b".." {
        return Err(RemoteError::new(Errno::EINVAL, "invalid name component"));
    }
    if name.len() > 255 {
        return Err(RemoteError::new(Errno::ENAMETOOLONG, "name longer than 255 bytes"));
    }
    if name.iter().any(|&c| c == b'/' || c == 0) {
        return Err(RemoteError::new(Errno::EINVAL, "name contains '/' or NUL"));
    }
    Ok(())
}

/// Caller credentials, carried by every request; bricks apply them per operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Creds {
    pub fn root() -> Creds {
        Creds { uid: 0, gid: 0, groups: vec![] }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileType {
    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => libc::S_IFREG,
            FileType::Directory => libc::S_IFDIR,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Fifo => libc::S_IFIFO,
            FileType::Socket => libc::S_IFSOCK,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
        }
    }

    pub fn from_mode(mode: u32) -> Option<FileType> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::Regular,
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }
}

/// Attributes of an inode, as POSIX `stat` would give them, keyed by the Cairn id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub id: Id,
    pub kind: FileType,
    /// Permission bits including setuid/setgid/sticky (no `S_IFMT` bits).
    pub perm: u32,
    /// Link count as the user sees it (the brick's internal index link is not counted).
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub rdev: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    /// Changes on every data or metadata change (NFSv4 change attribute).
    pub change: u64,
}

impl Attr {
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// How to set a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SetTime {
    Now,
    At(Timespec),
}

/// A SETATTR request: only the `Some` fields change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

impl SetAttr {
    pub fn is_empty(&self) -> bool {
        self == &SetAttr::default()
    }
}

/// One extended attribute of an `Op::GetXattrs` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    #[serde(with = "serde_bytes")]
    pub name: Name,
    /// `None`: the caller may not read it (`GetXattr` would answer EACCES or EPERM).
    pub value: Option<serde_bytes::ByteBuf>,
}

/// One directory entry. `cookie` resumes the listing right after this entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    #[serde(with = "serde_bytes")]
    pub name: Name,
    pub id: Id,
    pub kind: FileType,
    pub cookie: u64,
    /// Present when the listing was asked "plus" (readdirplus).
    pub attr: Option<Attr>,
}

/// Filesystem statistics of a brick or, summed, a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StatFs {
    pub bsize: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub namemax: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockKind {
    Read,
    Write,
    Unlock,
}

/// A POSIX byte-range lock. `len == 0` means "to end of file". The owner is opaque to the
/// backend and scoped by the client session that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    pub kind: LockKind,
    pub start: u64,
    pub len: u64,
    pub owner: u64,
    /// Process id reported back by GETLK (informational).
    pub pid: u32,
}

/// `fallocate(2)` modes Cairn supports.
pub mod falloc {
    pub const KEEP_SIZE: u32 = libc::FALLOC_FL_KEEP_SIZE as u32;
    pub const PUNCH_HOLE: u32 = libc::FALLOC_FL_PUNCH_HOLE as u32;
    pub const ZERO_RANGE: u32 = libc::FALLOC_FL_ZERO_RANGE as u32;
}

/// `lseek(2)` whence values Cairn supports on the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeekWhence {
    Data,
    Hole,
}

/// Rename flags (renameat2).
pub mod rename_flags {
    pub const NOREPLACE: u32 = 1;
    pub const EXCHANGE: u32 = 2;
}

/// setxattr flags.
pub mod xattr_flags {
    pub const CREATE: u32 = 1;
    pub const REPLACE: u32 = 2;
}
