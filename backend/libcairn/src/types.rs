//! The plain C types of the ABI and their conversions from the client's Rust types.
//!
//! Everything here is `#[repr(C)]` and appears in `cairn.h`. Layouts are part of the ABI:
//! never reorder or resize a field; add new fields only behind a new `CAIRN_ABI_VERSION`.

#![allow(non_camel_case_types)]

use cairn_client::{Attr, DirEntry, FileType, Id, Lock, LockKind, StatFs, Timespec};
use libc::{c_char, c_int, c_void};

/// Version of the binary interface described by this header. Bumped on any incompatible
/// change; compare with `cairn_abi_version()` at run time.
pub const CAIRN_ABI_VERSION: u32 = 1;

/// Version of `cairn_options_t` this header describes (set by `cairn_options_init`).
pub const CAIRN_OPTIONS_VERSION: u32 = 2;

/// `cairn_create` flag: fail with -EEXIST if the name exists.
pub const CAIRN_CREATE_EXCL: u32 = 1;

/// `cairn_setattr` mask bits: which fields of the `cairn_attr_t` argument to apply.
pub const CAIRN_SETATTR_MODE: u32 = 1;
pub const CAIRN_SETATTR_UID: u32 = 2;
pub const CAIRN_SETATTR_GID: u32 = 4;
pub const CAIRN_SETATTR_SIZE: u32 = 8;
pub const CAIRN_SETATTR_ATIME: u32 = 16;
pub const CAIRN_SETATTR_MTIME: u32 = 32;
/// Set atime to the server's current time (takes precedence over CAIRN_SETATTR_ATIME).
pub const CAIRN_SETATTR_ATIME_NOW: u32 = 64;
/// Set mtime to the server's current time (takes precedence over CAIRN_SETATTR_MTIME).
pub const CAIRN_SETATTR_MTIME_NOW: u32 = 128;

/// `cairn_rename` flags (same meaning as renameat2's RENAME_NOREPLACE / RENAME_EXCHANGE).
pub const CAIRN_RENAME_NOREPLACE: u32 = 1;
pub const CAIRN_RENAME_EXCHANGE: u32 = 2;

/// `cairn_setxattr` flags (same meaning as XATTR_CREATE / XATTR_REPLACE).
pub const CAIRN_XATTR_CREATE: u32 = 1;
pub const CAIRN_XATTR_REPLACE: u32 = 2;

/// `cairn_readdir` flag: fill `cairn_dirent_t.attr` (readdirplus).
pub const CAIRN_READDIR_PLUS: u32 = 1;

/// Invalidation flag: the directory entries of the id changed too, not only its
/// attributes/data.
pub const CAIRN_INVALIDATE_ENTRIES: u32 = 1;

/// Returned (negated) by `cairn_compare_and_write` when the data differs (EILSEQ; maps to
/// SCSI MISCOMPARE).
pub const CAIRN_EMISCOMPARE: i32 = 84;

/// Returned (negated) by `cairn_share` when the reservation conflicts with another
/// opener's access or deny mode, through any gateway or protocol (ETXTBSY; maps to
/// NFS4ERR_SHARE_DENIED and NT_STATUS_SHARING_VIOLATION).
pub const CAIRN_ESHAREDENIED: i32 = 26;

/// `cairn_share` access and deny bits.
pub const CAIRN_SHARE_READ: u32 = 1;
pub const CAIRN_SHARE_WRITE: u32 = 2;

/// A 128-bit inode id: the handle of a file, stable across client, gateway and server
/// restarts. Compare with memcmp; store the 16 bytes verbatim in NFS/SMB handles.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct cairn_id_t {
    pub bytes: [u8; 16],
}

impl From<Id> for cairn_id_t {
    fn from(id: Id) -> Self {
        cairn_id_t { bytes: id.to_bytes() }
    }
}

impl From<cairn_id_t> for Id {
    fn from(id: cairn_id_t) -> Self {
        Id::from_bytes(id.bytes)
    }
}

/// Caller credentials, passed to every call that touches the volume. A NULL
/// `const cairn_creds_t *` means root (uid 0, gid 0, no groups).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cairn_creds_t {
    pub uid: u32,
    pub gid: u32,
    /// Number of entries in `groups` (at most 65536).
    pub ngroups: u32,
    /// Supplementary groups; may be NULL when `ngroups` is 0.
    pub groups: *const libc::gid_t,
}

/// Attributes of an inode, as stat(2) would give them.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cairn_attr_t {
    pub id: cairn_id_t,
    /// 64-bit fold of `id` for st_ino / NFS fileid (1 for the root).
    pub ino: u64,
    /// File type as a dirent d_type value (DT_REG, DT_DIR, DT_LNK, ...).
    pub r#type: u32,
    /// Type and permission bits (S_IFMT | 07777), as st_mode.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    pub rdev: u64,
    pub atime: libc::timespec,
    pub mtime: libc::timespec,
    pub ctime: libc::timespec,
    /// Changes on every data or metadata change (NFSv4 change attribute).
    pub change: u64,
}

#[allow(clippy::unnecessary_cast)] // time_t / c_long differ by target
fn ts(t: Timespec) -> libc::timespec {
    libc::timespec { tv_sec: t.sec as libc::time_t, tv_nsec: t.nsec as libc::c_long }
}

#[allow(clippy::unnecessary_cast)]
pub(crate) fn from_ts(t: libc::timespec) -> Timespec {
    Timespec { sec: t.tv_sec as i64, nsec: t.tv_nsec.clamp(0, 999_999_999) as u32 }
}

pub(crate) fn d_type(kind: FileType) -> u32 {
    (match kind {
        FileType::Regular => libc::DT_REG,
        FileType::Directory => libc::DT_DIR,
        FileType::Symlink => libc::DT_LNK,
        FileType::Fifo => libc::DT_FIFO,
        FileType::Socket => libc::DT_SOCK,
        FileType::CharDevice => libc::DT_CHR,
        FileType::BlockDevice => libc::DT_BLK,
    }) as u32
}

impl From<&Attr> for cairn_attr_t {
    fn from(a: &Attr) -> Self {
        cairn_attr_t {
            id: a.id.into(),
            ino: a.id.ino(),
            r#type: d_type(a.kind),
            mode: a.mode(),
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            blocks: a.blocks,
            rdev: a.rdev,
            atime: ts(a.atime),
            mtime: ts(a.mtime),
            ctime: ts(a.ctime),
            change: a.change,
        }
    }
}

/// One directory entry handed to a `cairn_readdir_cb`. Valid only during the callback.
#[repr(C)]
pub struct cairn_dirent_t {
    /// NUL-terminated name (never "." or "..").
    pub name: *const c_char,
    pub namelen: usize,
    pub id: cairn_id_t,
    /// d_type value (DT_REG, DT_DIR, ...).
    pub r#type: u32,
    /// Pass this cookie to `cairn_readdir` to resume right after this entry.
    pub cookie: u64,
    /// Attributes when CAIRN_READDIR_PLUS was given and the server returned them, else NULL.
    pub attr: *const cairn_attr_t,
}

pub(crate) struct OwnedDirent {
    pub name: std::ffi::CString,
    pub namelen: usize,
    pub id: cairn_id_t,
    pub kind: u32,
    pub cookie: u64,
    pub attr: Option<cairn_attr_t>,
}

impl OwnedDirent {
    pub fn new(e: &DirEntry) -> OwnedDirent {
        // Names never contain NUL (checked by every brick); be defensive anyway.
        let bytes: Vec<u8> = e.name.iter().copied().filter(|&b| b != 0).collect();
        OwnedDirent {
            namelen: bytes.len(),
            name: std::ffi::CString::new(bytes).unwrap_or_default(),
            id: e.id.into(),
            kind: d_type(e.kind),
            cookie: e.cookie,
            attr: e.attr.as_ref().map(cairn_attr_t::from),
        }
    }

    pub fn as_c(&self) -> cairn_dirent_t {
        cairn_dirent_t {
            name: self.name.as_ptr(),
            namelen: self.namelen,
            id: self.id,
            r#type: self.kind,
            cookie: self.cookie,
            attr: self.attr.as_ref().map_or(std::ptr::null(), |a| a as *const cairn_attr_t),
        }
    }
}

/// Volume-wide space and inode counts, as statvfs(3).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct cairn_statfs_t {
    pub bsize: u32,
    pub namemax: u32,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
}

impl From<StatFs> for cairn_statfs_t {
    fn from(s: StatFs) -> Self {
        cairn_statfs_t {
            bsize: s.bsize,
            namemax: s.namemax,
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
        }
    }
}

/// A POSIX byte-range lock (fcntl F_SETLK/F_GETLK semantics, offsets always absolute).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct cairn_lock_t {
    /// F_RDLCK, F_WRLCK or F_UNLCK (from <fcntl.h>).
    pub r#type: c_int,
    /// Process id; reported back by cairn_getlock (informational).
    pub pid: u32,
    pub start: u64,
    /// 0 means "to end of file".
    pub len: u64,
    /// Opaque lock owner (e.g. the NFSv4 lock-owner or the SMB open), scoped by this mount.
    pub owner: u64,
}

impl cairn_lock_t {
    pub(crate) fn to_lock(self) -> Option<Lock> {
        let kind = match self.r#type {
            libc::F_RDLCK => LockKind::Read,
            libc::F_WRLCK => LockKind::Write,
            libc::F_UNLCK => LockKind::Unlock,
            _ => return None,
        };
        Some(Lock { kind, start: self.start, len: self.len, owner: self.owner, pid: self.pid })
    }

    pub(crate) fn from_lock(l: &Lock) -> cairn_lock_t {
        let t = match l.kind {
            LockKind::Read => libc::F_RDLCK,
            LockKind::Write => libc::F_WRLCK,
            LockKind::Unlock => libc::F_UNLCK,
        };
        cairn_lock_t { r#type: t, pid: l.pid, start: l.start, len: l.len, owner: l.owner }
    }
}

/// Mount options. Always initialise with `cairn_options_init` and then change fields, so
/// that a program built against an older header keeps working with a newer library.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cairn_options_t {
    /// Must be CAIRN_OPTIONS_VERSION (set by cairn_options_init).
    pub version: u32,
    /// Coalesce small sequential writes (flushed on fsync, flush, release, or a conflicting
    /// access). Default true.
    pub write_behind: bool,
    /// Bytes buffered per file before a flush is forced. Default 1 MiB.
    pub write_behind_bytes: usize,
    /// Longest time cached attributes/entries are trusted without a lease recall.
    /// Default 1000 ms.
    pub cache_timeout_ms: u32,
    /// Per-server connect timeout. Default 5000 ms.
    pub connect_timeout_ms: u32,
    /// Worker threads of the process-wide runtime; 0 = min(4, CPUs). Only the first mount
    /// of a process decides.
    pub runtime_threads: u32,
    /// Label in the servers' logs (e.g. "ganesha@gw1"); NULL = "libcairn". Copied.
    pub client_name: *const c_char,
    /// (Options version 2.) Credentials file (PEM: certificate, cluster CA, key) the
    /// process connects with, e.g. a gateway-role certificate; NULL = `CAIRN_CREDENTIALS`
    /// or the default paths. One credential per process: a later mount naming another
    /// file fails with -EINVAL. Copied.
    pub credentials: *const c_char,
}

/// The options as version 1 callers lay them out (no `credentials`): still accepted.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct cairn_options_v1_t {
    pub version: u32,
    pub write_behind: bool,
    pub write_behind_bytes: usize,
    pub cache_timeout_ms: u32,
    pub connect_timeout_ms: u32,
    pub runtime_threads: u32,
    pub client_name: *const c_char,
}

/// Completion of an asynchronous call: `result` is the byte count (reads/writes) or 0, or
/// a negative errno. Runs on a library thread, never inside the submitting call.
pub type cairn_aio_cb = Option<unsafe extern "C" fn(result: c_int, arg: *mut c_void)>;

/// Called once per directory entry by `cairn_readdir`, on the calling thread. Return 0 to
/// continue, non-zero to stop (the entry counts as consumed).
pub type cairn_readdir_cb =
    Option<unsafe extern "C" fn(entry: *const cairn_dirent_t, arg: *mut c_void) -> c_int>;

/// Called once per request kind by `cairn_stats`, with the kind's name (valid only during
/// the callback) and how many requests of that kind the mount has sent.
pub type cairn_stats_cb =
    Option<unsafe extern "C" fn(op: *const c_char, count: u64, arg: *mut c_void)>;

/// Called once per extended attribute by `cairn_getxattrs`, on the calling thread, with its
/// NUL-terminated name and its value (`value` NULL with `size` 0: the caller may not read
/// it); both valid only during the call. Return 0 to continue, non-zero to stop.
pub type cairn_xattr_cb = Option<
    unsafe extern "C" fn(
        name: *const c_char,
        value: *const c_void,
        size: usize,
        arg: *mut c_void,
    ) -> c_int,
>;

/// Lease-recall upcall: drop cached state of `id` (and its entries when `flags` has
/// CAIRN_INVALIDATE_ENTRIES). Runs on a library thread.
pub type cairn_invalidate_cb =
    Option<unsafe extern "C" fn(id: cairn_id_t, flags: u32, arg: *mut c_void)>;

/// Delegation-recall upcall: another client needs `id`; give back the delegation taken
/// with `cairn_delegate` (`cairn_deleg_return`). Runs on a library thread.
pub type cairn_recall_cb = Option<unsafe extern "C" fn(id: cairn_id_t, arg: *mut c_void)>;

/// Most bricks `cairn_layout` reports for one replica set.
pub const CAIRN_LAYOUT_MAX_BRICKS: usize = 8;
/// Size of the NUL-terminated `node` and `addr` strings of a `cairn_layout_brick_t`.
pub const CAIRN_LAYOUT_NAME_MAX: usize = 64;

/// `cairn_layout_brick_t.state`: not running, or its node's lease expired.
pub const CAIRN_BRICK_DOWN: u32 = 0;
/// `cairn_layout_brick_t.state`: catching up (takes forwarded writes, serves no reads).
pub const CAIRN_BRICK_HEALING: u32 = 1;
/// `cairn_layout_brick_t.state`: in sync; may serve reads and head chains.
pub const CAIRN_BRICK_UP: u32 = 2;

/// One brick of a replica set, as `cairn_layout` reports it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cairn_layout_brick_t {
    /// The brick's index in the volume (stable for its life).
    pub index: u32,
    /// CAIRN_BRICK_DOWN, CAIRN_BRICK_HEALING or CAIRN_BRICK_UP.
    pub state: u32,
    /// Name of the node (peer) serving it, NUL-terminated (truncated to fit).
    pub node: [c_char; CAIRN_LAYOUT_NAME_MAX],
    /// `host:port` of that node's cairnd, NUL-terminated (truncated to fit).
    pub addr: [c_char; CAIRN_LAYOUT_NAME_MAX],
}

/// Where a file's data lives: its replica set and the set's bricks in the file's chain
/// order (the first brick in `bricks` that is CAIRN_BRICK_UP is the chain head).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct cairn_layout_t {
    /// Volume map epoch the answer was read from (moves on every membership or liveness
    /// change: a caller that cached an answer asks again when it changes).
    pub epoch: u64,
    /// The replica set's id.
    pub set: u32,
    /// Where the chain order starts in the set's brick list (0 .. nbricks - 1);
    /// `cairn_set_layout(fs, set, rotation, ...)` gives the same order back.
    pub rotation: u32,
    /// Number of valid entries in `bricks`.
    pub nbricks: u32,
    pub bricks: [cairn_layout_brick_t; CAIRN_LAYOUT_MAX_BRICKS],
}

impl cairn_layout_t {
    pub(crate) fn fill(&mut self, p: &cairn_client::Placement) {
        self.epoch = p.epoch;
        self.set = p.set;
        self.rotation = p.rotation;
        self.nbricks = p.bricks.len().min(CAIRN_LAYOUT_MAX_BRICKS) as u32;
        for (slot, b) in self.bricks.iter_mut().zip(&p.bricks) {
            slot.index = b.index;
            slot.state = match b.state {
                cairn_proto::map::BrickState::Down => CAIRN_BRICK_DOWN,
                cairn_proto::map::BrickState::Healing => CAIRN_BRICK_HEALING,
                cairn_proto::map::BrickState::Up => CAIRN_BRICK_UP,
            };
            copy_cstr(&mut slot.node, &b.node);
            copy_cstr(&mut slot.addr, &b.addr);
        }
    }
}

/// Copy `s` into `dst` NUL-terminated, truncated to fit.
fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    dst[n] = 0;
}
