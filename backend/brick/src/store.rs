//! The brick: marker, opening, and the dispatch of every operation.

use crate::creds::AsCaller;
use crate::csum::Change;
use crate::error::{fail, io_err, show, BrickError, Ctx, R};
use crate::ids::{self, id_of, id_of_fd, is_dir, is_lnk, is_reg, linkto_of, Found, Index};
use crate::sys::{self, cstr, XTarget};
use bytes::Bytes;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{
    valid_name, Attr, Creds, DirEntry, Errno, FileType, Id, RemoteError, SeekWhence, SetTime,
    StatFs, Timespec,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Contents of `.cairn/brick.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickMarker {
    pub format: u32,
    pub volume: String,
    /// 32 hex digits.
    pub volume_id: String,
    pub index: u32,
}

/// How an operation is executed.
#[derive(Debug, Clone, Copy)]
pub enum Exec<'a> {
    /// The chain head: apply with the caller's credentials.
    Primary,
    /// A forwarded copy: apply as root, idempotently (an entry that already exists with the
    /// same id is success, a missing one on unlink is success), then copy owner and
    /// permission bits from the head's result when one is given.
    Replica { result: Option<&'a Attr> },
}

/// Byte ranges come from peers: one that ends past the largest file offset (`i64::MAX`)
/// is refused before any arithmetic on it (the checksum code adds and multiplies offsets),
/// with the errno the kernel gives for it: EFBIG for a write, an allocation or a size,
/// EINVAL for a seek offset. A READ is not refused: one that crosses that offset is cut
/// short there, one at or past it is end of file (`read_fd`), as NFS READ must answer.
fn check_range(op: &Op, data: &[u8]) -> R<()> {
    let (id, off, len, errno) = match op {
        Op::Write { id, offset } => (id, *offset, data.len() as u64, libc::EFBIG),
        Op::CompareAndWrite { id, offset } => (id, *offset, data.len() as u64 / 2, libc::EFBIG),
        Op::Fallocate { id, offset, len, .. } => (id, *offset, *len, libc::EFBIG),
        Op::SetAttr { id, set } => (id, set.size.unwrap_or(0), 0, libc::EFBIG),
        Op::Seek { id, offset, .. } => (id, *offset, 0, libc::EINVAL),
        _ => return Ok(()),
    };
    match off.checked_add(len) {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(fail(
            errno,
            format!("{} of {id} at {off}+{len}: past the largest file offset", op.name()),
        )),
    }
}

/// The execution context of one operation.
pub(crate) struct Cx<'a> {
    /// Credentials to apply for permission-checked syscalls; `None` = root.
    pub caller: Option<&'a Creds>,
    pub replica: bool,
    pub result: Option<&'a Attr>,
}

impl Cx<'_> {
    /// Run `f` with the caller's credentials on this thread (root again afterwards).
    pub fn user<T>(&self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let _g = AsCaller::apply(self.caller)?;
        f()
    }

    /// POSIX access check for data ops that go through the shared root-opened fd
    /// `fd`. The owner may always read and write an inode it owns (as knfsd does), so a
    /// file created read-only can be written by its creator. A POSIX access ACL
    /// (`system.posix_acl_access`, set by clients such as the NFS gateway) is evaluated
    /// as the kernel does for path-based calls; without one the mode bits decide.
    pub fn check(&self, fd: std::os::fd::RawFd, st: &libc::stat, want: u32) -> R<()> {
        let Some(c) = self.caller else { return Ok(()) };
        if c.uid == st.st_uid {
            return Ok(());
        }
        let in_group = |g: u32| c.gid == g || c.groups.contains(&g);
        let ok = match posix_acl_of(fd) {
            Some(acl) => acl_permits(&acl, c.uid, st.st_gid, &in_group, want),
            None => {
                let mode = st.st_mode;
                let bits = if in_group(st.st_gid) { (mode >> 3) & 7 } else { mode & 7 };
                bits & want == want
            }
        };
        if ok {
            Ok(())
        } else {
            Err(fail(libc::EACCES, format!("uid {} may not access this inode", c.uid)))
        }
    }
}

/// The entries (tag, perm, id) of the POSIX access ACL of `fd`, if it has a valid one.
fn posix_acl_of(fd: std::os::fd::RawFd) -> Option<Vec<(u16, u16, u32)>> {
    let mut buf = vec![0u8; 1024];
    let name = c"system.posix_acl_access";
    let mut n = unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) {
        let size = unsafe { libc::fgetxattr(fd, name.as_ptr(), std::ptr::null_mut(), 0) };
        if size <= 0 {
            return None;
        }
        buf.resize(size as usize, 0);
        n = unsafe { libc::fgetxattr(fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    }
    // header: u32 version 2; entries: u16 tag, u16 perm, u32 id (little-endian)
    if n < 4 || !(n as usize - 4).is_multiple_of(8) || buf[..4] != 2u32.to_le_bytes() {
        return None;
    }
    Some(
        buf[4..n as usize]
            .chunks_exact(8)
            .map(|e| {
                let tag = u16::from_le_bytes([e[0], e[1]]);
                let perm = u16::from_le_bytes([e[2], e[3]]);
                (tag, perm, u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
            })
            .collect(),
    )
}

/// POSIX.1e access for a caller who is not the owner (the kernel's posix_acl_permission).
fn acl_permits(
    acl: &[(u16, u16, u32)],
    uid: u32,
    owning_gid: u32,
    in_group: &dyn Fn(u32) -> bool,
    want: u32,
) -> bool {
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    let mask = acl.iter().find(|e| e.0 == MASK).map_or(7, |e| e.1 as u32);
    let grants = |perm: u16| perm as u32 & mask & want == want;
    if let Some(e) = acl.iter().find(|e| e.0 == USER && e.2 == uid) {
        return grants(e.1);
    }
    let mut member = false;
    for e in acl {
        let matches = (e.0 == GROUP_OBJ && in_group(owning_gid)) || (e.0 == GROUP && in_group(e.2));
        if matches {
            member = true;
            if grants(e.1) {
                return true;
            }
        }
    }
    !member && acl.iter().any(|e| e.0 == OTHER && e.1 as u32 & want == want)
}

/// One entry of a cached directory listing.
#[derive(Clone)]
pub(crate) struct LEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub id: Id,
    pub kind: FileType,
}

pub(crate) struct Listing {
    key: (i64, i64, i64, i64, u64),
    entries: Vec<LEntry>,
}

pub struct Brick {
    pub(crate) root: PathBuf,
    pub(crate) marker: BrickMarker,
    pub(crate) idx: Index,
    pub(crate) pending_dir: OwnedFd,
    /// Ids held open by `Op::Open`, with their count.
    pub(crate) opens: Mutex<HashMap<Id, u32>>,
    pub(crate) pending: Mutex<crate::heal::Pending>,
    pub(crate) listings: Mutex<HashMap<Id, Arc<Listing>>>,
    stripes: Vec<Stripe>,
    /// `.cairn/csum`: checksum sidecars of large files.
    pub(crate) csum_dir: OwnedFd,
    /// `.cairn/csum/dirty/log.*`: inodes whose checksums may lag their data (see
    /// `dirty.rs`).
    pub(crate) dirty: crate::dirty::DirtyLog,
    /// Checksum sidecars kept open between changes (see `csum.rs`, `sidecar_open`).
    pub(crate) csum_fds: Mutex<HashMap<Id, Arc<OwnedFd>>>,
    /// Ids that may have a checksum sidecar (see `csum.rs`, `Sidecars`): a table load of
    /// any other id goes straight to the xattr.
    pub(crate) csum_sidecars: Mutex<crate::csum::Sidecars>,
    /// Starts large writes' write-out early (see `writeback.rs`).
    writeback: crate::writeback::Writeback,
}

/// Cookie of a directory entry: stable, hash based, 56 bits, never 0, 1 or 2.
pub fn cookie(name: &[u8]) -> u64 {
    let c = xxhash_rust::xxh3::xxh3_64(name) & ((1u64 << 56) - 1);
    c.max(3)
}

pub(crate) fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec { sec, nsec: nsec as u32 }
}

/// Attributes of an inode from its `stat`. `indexed`: the inode has an index hard link
/// that the user must not see in `nlink`.
pub(crate) fn attr_of(id: Id, st: &libc::stat, indexed: bool) -> Attr {
    let kind = FileType::from_mode(st.st_mode).unwrap_or(FileType::Regular);
    let mut nlink = st.st_nlink as u32;
    if indexed && kind != FileType::Directory {
        nlink = nlink.saturating_sub(1);
    }
    Attr {
        id,
        kind,
        perm: st.st_mode & 0o7777,
        nlink,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        rdev: st.st_rdev,
        atime: ts(st.st_atime, st.st_atime_nsec),
        mtime: ts(st.st_mtime, st.st_mtime_nsec),
        ctime: ts(st.st_ctime, st.st_ctime_nsec),
        change: (st.st_ctime as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(st.st_ctime_nsec as u64),
    }
}

/// What a name in a directory is.
pub(crate) enum Ent {
    Inode {
        id: Id,
        st: libc::stat,
    },
    Linkto {
        target: Id,
        st: libc::stat,
    },
    /// No Cairn id (not created through Cairn).
    Foreign {
        st: libc::stat,
    },
}

impl Ent {
    pub fn st(&self) -> &libc::stat {
        match self {
            Ent::Inode { st, .. } | Ent::Linkto { st, .. } | Ent::Foreign { st } => st,
        }
    }
}

fn kind_of_dtype(d: u8) -> Option<FileType> {
    Some(match d {
        libc::DT_REG => FileType::Regular,
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::Fifo,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => return None,
    })
}

fn set_time(t: Option<SetTime>) -> libc::timespec {
    match t {
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        Some(SetTime::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        Some(SetTime::At(t)) => libc::timespec { tv_sec: t.sec, tv_nsec: t.nsec as i64 },
    }
}

fn read_marker(path: &Path) -> Result<Option<BrickMarker>, RemoteError> {
    let p = path.join(".cairn/brick.json");
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            RemoteError::new(Errno::EIO, format!("brick marker {}: {e}", p.display()))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(RemoteError::new(
            Errno::from_io(&e),
            format!("reading brick marker {}: {e}", p.display()),
        )),
    }
}

/// Serializes changes of the inodes hashed to it. `lock()` is the exclusive mode
/// (truncate, fallocate, compare-and-write, heal, scrub, a read's re-check, the dirty-mark
/// tidy): no other change of these inodes runs meanwhile. Writes take `rw` shared, claim
/// the checksum blocks they touch (`claim`: a write waits for writes in flight on any of
/// its blocks), and update the checksum table under `table` before writing their data
/// (see `Brick::op_write`).
#[derive(Default)]
pub(crate) struct Stripe {
    pub(crate) rw: parking_lot::RwLock<()>,
    pub(crate) table: Mutex<()>,
    /// Block ranges `(id, first, last)` claimed by writes in flight.
    claimed: Mutex<Vec<(Id, u64, u64)>>,
    freed: parking_lot::Condvar,
}

impl Stripe {
    /// Exclusive: waits for writes in flight on every inode of the stripe.
    pub(crate) fn lock(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.rw.write()
    }

    pub(crate) fn try_lock(&self) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
        self.rw.try_write()
    }

    /// Claim blocks `first..=last` of `id` (the caller holds `rw` shared), waiting while a
    /// write in flight holds any of them; released when the claim is dropped.
    pub(crate) fn claim(&self, id: Id, first: u64, last: u64) -> Claim<'_> {
        let mut c = self.claimed.lock();
        while c.iter().any(|&(i, a, b)| i == id && a <= last && first <= b) {
            self.freed.wait(&mut c);
        }
        c.push((id, first, last));
        Claim { stripe: self, range: (id, first, last) }
    }
}

pub(crate) struct Claim<'a> {
    stripe: &'a Stripe,
    range: (Id, u64, u64),
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut c = self.stripe.claimed.lock();
        if let Some(at) = c.iter().position(|r| *r == self.range) {
            c.swap_remove(at);
        }
        drop(c);
        self.stripe.freed.notify_all();
    }
}

impl Brick {
    /// Make `path` a brick of a volume: create it if missing, refuse it if it is not a
    /// directory, if it already is a brick (of any volume), or if it is not empty (unless
    /// `force`). Writes the marker, `.cairn/` and `data/` (mode 0755, root-owned).
    pub fn prepare(path: &Path, marker: &BrickMarker, force: bool) -> Result<(), RemoteError> {
        let shown = path.display();
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.is_dir() => {
                return Err(RemoteError::new(
                    Errno::ENOTDIR,
                    format!("brick path {shown} exists and is not a directory"),
                ))
            }
            Ok(_) => {
                if let Some(m) = read_marker(path)? {
                    return Err(RemoteError::new(
                        Errno::EEXIST,
                        format!(
                            "{shown} is already brick {} of volume {} ({})",
                            m.index, m.volume, m.volume_id
                        ),
                    ));
                }
                let non_empty = std::fs::read_dir(path)
                    .map_err(|e| io_err(e, format!("listing brick path {shown}")))?
                    .next()
                    .is_some();
                if non_empty && !force {
                    return Err(RemoteError::new(
                        Errno::ENOTEMPTY,
                        format!("brick path {shown} is not empty (use force to reuse it)"),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(path)
                    .map_err(|e| io_err(e, format!("creating brick path {shown}")))?;
            }
            Err(e) => return Err(io_err(e, format!("brick path {shown}"))),
        }
        if marker.volume_id.len() != 32 || Id::from_hex(&marker.volume_id).is_none() {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("volume id {:?} is not 32 hex digits", marker.volume_id),
            ));
        }
        let step = |what: &str, r: io::Result<()>| -> Result<(), RemoteError> {
            match r {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    Err(io_err(e, format!("preparing brick {shown}: {what}")))
                }
                _ => Ok(()),
            }
        };
        use std::os::unix::fs::{symlink, DirBuilderExt, PermissionsExt};
        let mk = |p: PathBuf, mode: u32| -> io::Result<()> {
            std::fs::DirBuilder::new().mode(mode).create(&p)?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
        };
        step("chmod 0711", std::fs::set_permissions(path, PermissionsExt::from_mode(0o711)))?;
        step("chown root", std::os::unix::fs::chown(path, Some(0), Some(0)))?;
        step("mkdir .cairn", mk(path.join(".cairn"), 0o711))?;
        step("mkdir .cairn/ids", mk(path.join(".cairn/ids"), 0o711))?;
        step("mkdir .cairn/pending", mk(path.join(".cairn/pending"), 0o700))?;
        step("mkdir .cairn/csum", mk(path.join(".cairn/csum"), 0o700))?;
        step("mkdir .cairn/csum/dirty", mk(path.join(".cairn/csum/dirty"), 0o700))?;
        step("mkdir data", mk(path.join("data"), 0o755))?;
        step("chown data", std::os::unix::fs::chown(path.join("data"), Some(0), Some(0)))?;
        let data = sys::cstr(path.join("data").as_os_str().as_encoded_bytes())
            .map_err(|e| io_err(e, "brick path"))?;
        step(
            "set root id on data/",
            XTarget::Path(data).set(ids::XATTR_ID, &Id::ROOT.to_bytes(), 0),
        )?;
        step("mkdir .cairn/ids/00", mk(path.join(".cairn/ids/00"), 0o711))?;
        step("mkdir .cairn/ids/00/00", mk(path.join(".cairn/ids/00/00"), 0o711))?;
        step(
            "root index link",
            symlink("../../../../data", path.join(".cairn/ids/00/00").join(Id::ROOT.to_hex())),
        )?;
        let json = serde_json::to_vec_pretty(marker).expect("marker serializes");
        let tmp = path.join(".cairn/brick.json.tmp");
        step("write marker", std::fs::write(&tmp, json))?;
        step("sync marker", std::fs::File::open(&tmp).and_then(|f| f.sync_all()))?;
        step("rename marker", std::fs::rename(&tmp, path.join(".cairn/brick.json")))?;
        step("sync .cairn", std::fs::File::open(path.join(".cairn")).and_then(|f| f.sync_all()))?;
        Ok(())
    }

    /// Open an existing brick, checking its marker names `volume_id` and `index`.
    /// Errors name the path and what did not match.
    ///
    /// Sets the process umask to 0: modes come from clients, which applied their own.
    /// Starts the brick's tidy thread (`cairn-tidy-<index>`), which ends soon after the
    /// last reference is dropped.
    pub fn open(path: &Path, volume_id: &str, index: u32) -> Result<Arc<Brick>, RemoteError> {
        let shown = path.display();
        let marker = read_marker(path)?.ok_or_else(|| {
            RemoteError::new(
                Errno::ENOENT,
                format!("{shown} is not a brick (no .cairn/brick.json)"),
            )
        })?;
        if marker.format != 1 {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("brick {shown}: unknown format {}", marker.format),
            ));
        }
        if marker.volume_id != volume_id {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!(
                    "brick {shown} belongs to volume {} ({}), not {volume_id}",
                    marker.volume, marker.volume_id
                ),
            ));
        }
        if marker.index != index {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("brick {shown} is brick {} of its volume, not {index}", marker.index),
            ));
        }
        let p = sys::cstr(path.as_os_str().as_encoded_bytes()).map_err(|e| io_err(e, &shown))?;
        let open = |dir: RawFd, name: &std::ffi::CStr, what: &str| {
            sys::open_dir_at(dir, name).map_err(|e| io_err(e, format!("brick {shown}: {what}")))
        };
        let root = open(libc::AT_FDCWD, &p, "open")?;
        let ids = open(root.as_raw_fd(), c".cairn/ids", "open .cairn/ids")?;
        let data = open(root.as_raw_fd(), c"data", "open data/")?;
        let pending_dir = open(root.as_raw_fd(), c".cairn/pending", "open .cairn/pending")?;
        // Bricks prepared before data checksums existed get their directories now.
        for d in [c".cairn/csum", c".cairn/csum/dirty"] {
            match sys::mkdirat(root.as_raw_fd(), d, 0o700) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(io_err(e, format!("brick {shown}: mkdir {d:?}")))
                }
                _ => {}
            }
        }
        let csum_dir = open(root.as_raw_fd(), c".cairn/csum", "open .cairn/csum")?;
        let dirty_dir = open(root.as_raw_fd(), c".cairn/csum/dirty", "open .cairn/csum/dirty")?;
        let (tidy_wake, tidy_rx) = std::sync::mpsc::sync_channel(1);
        let dirty = crate::dirty::DirtyLog::open(dirty_dir, tidy_wake)
            .map_err(|e| io_err(e, format!("brick {shown}: opening .cairn/csum/dirty/log.*")))?;
        match id_of_fd(data.as_raw_fd()) {
            Ok(Some(id)) if id == Id::ROOT => {}
            other => {
                return Err(RemoteError::new(
                    Errno::EIO,
                    format!("brick {shown}: data/ does not carry the root id ({other:?})"),
                ))
            }
        }
        unsafe { libc::umask(0) };
        let brick = Brick {
            root: path.to_path_buf(),
            marker,
            idx: Index::new(root, ids, data),
            pending_dir,
            opens: Mutex::new(HashMap::new()),
            pending: Mutex::new(crate::heal::Pending::default()),
            listings: Mutex::new(HashMap::new()),
            stripes: (0..64).map(|_| Stripe::default()).collect(),
            csum_dir,
            dirty,
            csum_fds: Mutex::new(HashMap::new()),
            csum_sidecars: Mutex::new(crate::csum::Sidecars::unknown()),
            writeback: crate::writeback::Writeback::start(index),
        };
        brick.sweep().map_err(|e| io_err(e, format!("brick {shown}: sweeping the id index")))?;
        brick
            .load_pending()
            .map_err(|e| io_err(e, format!("brick {shown}: reading .cairn/pending")))?;
        brick
            .sums_recover()
            .map_err(|e| io_err(e, format!("brick {shown}: recovering data checksums")))?;
        let brick = Arc::new(brick);
        brick.start_tidy(tidy_rx);
        Ok(brick)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn marker(&self) -> &BrickMarker {
        &self.marker
    }

    /// Remove index hard links whose inode has no other name (left by a crash between
    /// unlinking a name and its index link), and leftover temporary links.
    fn sweep(&self) -> io::Result<()> {
        let ids = self.idx.ids_fd();
        let mut removed = 0u64;
        for a in sys::read_dir(ids)? {
            let Ok(afd) = sys::open_dir_at(ids, &cstr(&a.name)?) else { continue };
            for b in sys::read_dir(afd.as_raw_fd())? {
                let Ok(bfd) = sys::open_dir_at(afd.as_raw_fd(), &cstr(&b.name)?) else {
                    continue;
                };
                for e in sys::read_dir(bfd.as_raw_fd())? {
                    let name = cstr(&e.name)?;
                    if e.name.starts_with(b".tmp.") {
                        let _ = sys::unlinkat(bfd.as_raw_fd(), &name, 0);
                        continue;
                    }
                    let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) else {
                        continue;
                    };
                    if id == Id::ROOT {
                        continue;
                    }
                    let st = sys::lstatat(bfd.as_raw_fd(), &name)?;
                    if st.st_nlink != 1 || is_dir(&st) {
                        continue;
                    }
                    // A symlink without the id xattr is a directory's index link.
                    if is_lnk(&st) && id_of(&XTarget::at(bfd.as_raw_fd(), &e.name)?)? != Some(id) {
                        continue;
                    }
                    sys::unlinkat(bfd.as_raw_fd(), &name, 0)?;
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            tracing::info!(brick = %self.root.display(), removed, "removed orphaned index links");
        }
        Ok(())
    }

    /// Execute one operation. `data` is the request's bulk segment (WRITE payload,
    /// COMPARE_AND_WRITE pair); the returned `Bytes` is the reply's bulk segment (READ
    /// data, HEAL_FETCH file contents). Lock ops (`SetLock`, `GetLock`) are not brick
    /// operations and return ENOTSUP here (`cairnd` keeps locks in memory).
    pub fn execute(
        &self,
        creds: &Creds,
        op: &Op,
        data: &[u8],
        mode: Exec<'_>,
    ) -> Result<(Reply, Bytes), RemoteError> {
        let cx = match mode {
            Exec::Primary => Cx {
                caller: if creds.uid == 0 { None } else { Some(creds) },
                replica: false,
                result: None,
            },
            Exec::Replica { result } => Cx { caller: None, replica: true, result },
        };
        self.with_context(op.name(), || self.run(&cx, op, data))
    }

    /// Run `f`, adding the brick (volume, index, path) and `what` to its error.
    pub(crate) fn with_context<T>(
        &self,
        what: &str,
        f: impl FnOnce() -> R<T>,
    ) -> Result<T, RemoteError> {
        f().map_err(|f| {
            let corrupt = f.errno == crate::csum::ECORRUPT;
            let e = RemoteError::from(BrickError {
                volume: self.marker.volume.clone(),
                index: self.marker.index,
                root: self.root.clone(),
                op: what.to_string(),
                errno: f.errno,
                what: f.what,
            });
            if corrupt {
                tracing::error!(volume = %self.marker.volume, brick = self.marker.index, error = %e, "data corruption detected");
            } else {
                tracing::debug!(error = %e, "brick op failed");
            }
            e
        })
    }

    fn run(&self, cx: &Cx, op: &Op, data: &[u8]) -> R<(Reply, Bytes)> {
        let unit = |r: R<Reply>| r.map(|r| (r, Bytes::new()));
        check_range(op, data)?;
        match op {
            Op::Lookup { dir, name } => unit(self.op_lookup(cx, *dir, name)),
            Op::LookupPath { components } => unit(self.op_lookup_path(cx, components)),
            Op::GetAttr { id } => unit(self.attr(*id).map(Reply::Attr)),
            Op::SetAttr { id, set } => unit(self.op_setattr(cx, *id, set)),
            Op::Create { dir, name, id, kind, perm, rdev, target, exclusive } => {
                unit(self.op_create(
                    cx,
                    *dir,
                    name,
                    *id,
                    *kind,
                    *perm,
                    *rdev,
                    target.as_deref(),
                    *exclusive,
                ))
            }
            Op::Mkdir { dir, name, id, perm } => unit(self.op_mkdir(cx, *dir, name, *id, *perm)),
            Op::MkLinkto { dir, name, target } => unit(self.op_mklinkto(cx, *dir, name, *target)),
            Op::Link { id, dir, name } => unit(self.op_link(cx, *id, *dir, name)),
            Op::Unlink { dir, name } => unit(self.op_unlink(cx, *dir, name)),
            Op::Rmdir { dir, name } => unit(self.op_rmdir(cx, *dir, name)),
            Op::Rename { src_dir, src_name, dst_dir, dst_name, flags } => {
                unit(self.op_rename(cx, *src_dir, src_name, *dst_dir, dst_name, *flags))
            }
            Op::Readlink { id } => unit(self.op_readlink(*id)),
            Op::Open { id } => unit(self.op_open(*id)),
            Op::Release { id } => unit(self.op_release(*id)),
            Op::Read { id, offset, len } => self.op_read(cx, *id, *offset, *len),
            Op::Write { id, offset } => unit(self.op_write(cx, *id, *offset, data)),
            Op::Fsync { id, datasync } => unit(self.op_fsync(*id, *datasync)),
            Op::Fallocate { id, mode, offset, len } => {
                unit(self.op_fallocate(cx, *id, *mode, *offset, *len))
            }
            Op::Seek { id, offset, whence } => unit(self.op_seek(*id, *offset, *whence)),
            Op::CompareAndWrite { id, offset } => unit(self.op_caw(cx, *id, *offset, data)),
            Op::GetXattr { id, name } => unit(self.op_getxattr(cx, *id, name)),
            Op::SetXattr { id, name, value, flags } => {
                unit(self.op_setxattr(cx, *id, name, value, *flags))
            }
            Op::ListXattr { id } => unit(self.op_listxattr(*id)),
            Op::RemoveXattr { id, name } => unit(self.op_removexattr(cx, *id, name)),
            Op::StatFs => unit(self.op_statfs()),
            Op::ReadDir { dir, cookie, max, plus } => {
                unit(self.op_readdir(*dir, *cookie, *max, *plus))
            }
            Op::SetLock { .. } | Op::GetLock { .. } | Op::Share { .. } => Err(fail(
                libc::ENOTSUP,
                "locks and share reservations are kept by cairnd, not by the brick store",
            )),
            Op::PendingList { peer } => unit(Ok(Reply::Pending(self.pending_list(*peer)))),
            Op::PendingAdd { peer, ids } => {
                for id in ids {
                    self.pending_add(*peer, *id)?;
                }
                Ok((Reply::Unit, Bytes::new()))
            }
            Op::PendingClear { peer, ids } => {
                unit(self.pending_clear(*peer, ids).map(|_| Reply::Unit))
            }
            Op::HealFetch { id } => self.heal_fetch(*id),
            Op::HealApply { state } => unit(self.heal_apply(state, data).map(|_| Reply::Unit)),
            Op::HealSums { id, first, count, from_data } => unit(
                self.heal_sums(*id, *first, *count, *from_data).map(|s| Reply::Sums(Box::new(s))),
            ),
            Op::HealWrite { id, extents } => unit(
                self.heal_write(*id, extents, data)
                    .map(|bytes| Reply::HealWritten { bytes, wait_ms: 0 }),
            ),
            Op::HealSync { .. } => Err(fail(
                libc::ENOTSUP,
                "heal_sync is coordinated by cairnd, not by the brick store",
            )),
            Op::CopyRange { .. } => Err(fail(
                libc::ENOTSUP,
                "copy_range is run by cairnd as a read and a replicated write",
            )),
            Op::Delegate { .. } | Op::DelegReturn { .. } => Err(fail(
                libc::ENOTSUP,
                "delegations are kept by cairnd at the chain head, not by the brick store",
            )),
        }
    }

    // ----- helpers -----

    /// An fd of directory `id`; an unknown id is ESTALE, a non-directory ENOTDIR.
    pub(crate) fn dir(&self, id: Id) -> R<Arc<OwnedFd>> {
        self.idx.dir_fd(id).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => fail(libc::ESTALE, format!("no directory with id {id}")),
            _ => Err::<(), _>(e).ctx(|| format!("directory {id}")).unwrap_err(),
        })
    }

    pub(crate) fn find(&self, id: Id) -> R<Found> {
        self.idx.find(id).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => fail(libc::ESTALE, format!("no inode with id {id}")),
            _ => Err::<(), _>(e).ctx(|| format!("id {id}")).unwrap_err(),
        })
    }

    pub(crate) fn file(&self, id: Id) -> R<Arc<OwnedFd>> {
        self.idx.file_fd(id).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => fail(libc::ESTALE, format!("no inode with id {id}")),
            _ => Err::<(), _>(e).ctx(|| format!("regular file {id}")).unwrap_err(),
        })
    }

    /// Before a quick-read of regular file `id`, which a lookup of `name` in directory
    /// `dir` just found (the directory's lock still held): open it by that name into the
    /// fd cache, so its GETATTR and READ need no walk of the id index. Best effort: those
    /// fall back to the index if this could not.
    pub fn open_found(&self, dir: Id, name: &[u8], id: Id) {
        let (Ok(dfd), Ok(cname)) = (self.idx.dir_fd(dir), cstr(name)) else { return };
        self.idx.file_fd_at(id, dfd.as_raw_fd(), &cname);
    }

    pub(crate) fn attr(&self, id: Id) -> R<Attr> {
        match self.find(id)? {
            Found::Dir(fd) => {
                let st = sys::fstat(fd.as_raw_fd()).ctx(|| format!("stat of directory {id}"))?;
                Ok(attr_of(id, &st, false))
            }
            Found::Other(st) => Ok(attr_of(id, &st, true)),
        }
    }

    /// What `name` in `dir` is (never following a symlink).
    pub(crate) fn entry(&self, dir: RawFd, name: &[u8]) -> io::Result<Ent> {
        let st = sys::lstatat(dir, &cstr(name)?)?;
        self.entry_of(dir, name, st)
    }

    /// [`Self::entry`] of `name` in `dir` whose `lstat` the caller already made.
    pub(crate) fn entry_of(&self, dir: RawFd, name: &[u8], st: libc::stat) -> io::Result<Ent> {
        let t = XTarget::at(dir, name)?;
        if let Some(id) = id_of(&t)? {
            return Ok(Ent::Inode { id, st });
        }
        if is_reg(&st) {
            if let Some(target) = linkto_of(&t)? {
                return Ok(Ent::Linkto { target, st });
            }
        }
        Ok(Ent::Foreign { st })
    }

    pub(crate) fn forget_listing(&self, dir: Id) {
        self.listings.lock().remove(&dir);
    }

    /// Drop the index link of non-directory `id` once no name and no open refers to it.
    pub(crate) fn drop_if_unused(&self, id: Id) -> R<()> {
        let opens = self.opens.lock();
        if opens.get(&id).copied().unwrap_or(0) > 0 {
            return Ok(());
        }
        match self.idx.lstat_index(id) {
            Ok(st) if st.st_nlink <= 1 && !is_dir(&st) => {
                if is_lnk(&st)
                    && id_of(&self.idx.xtarget(id).ctx(|| "")?).ok().flatten() != Some(id)
                {
                    return Ok(()); // a directory's index link
                }
                self.idx.unlink(id).ctx(|| format!("removing index link of {id}"))?;
                self.sums_forget(id);
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(e).ctx(|| format!("index link of {id}")),
        }
    }

    /// [`Self::apply_result`] onto a replica's new regular file `fd` (just created, named
    /// and linked): owner and mode are changed only where they differ from the head's (a
    /// create by the same caller with the same mode usually leaves them equal; a `chown`
    /// clears set-id bits, so a mode is set again after one), times always. Returns the
    /// file's `stat` as it now is, but for its ctime: that of the create (this copy's own;
    /// a `stat` after the `futimens` is saved).
    fn apply_result_fd(&self, id: Id, fd: RawFd, a: &Attr) -> R<libc::stat> {
        let what = || format!("copying owner/mode of {id} from the head");
        let mut st = sys::fstat(fd).ctx(what)?;
        let perm = a.perm & 0o7777;
        let chown = (st.st_uid, st.st_gid) != (a.uid, a.gid);
        if chown {
            sys::fchown(fd, a.uid, a.gid).ctx(what)?;
            (st.st_uid, st.st_gid) = (a.uid, a.gid);
        }
        if chown || st.st_mode & 0o7777 != perm {
            sys::fchmod(fd, perm).ctx(what)?;
            st.st_mode = (st.st_mode & !0o7777) | perm;
        }
        let ts = [
            libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
            libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
        ];
        sys::futimens(fd, &ts).ctx(what)?;
        (st.st_atime, st.st_atime_nsec) = (ts[0].tv_sec, ts[0].tv_nsec);
        (st.st_mtime, st.st_mtime_nsec) = (ts[1].tv_sec, ts[1].tv_nsec);
        Ok(st)
    }

    /// Copy owner, permission bits and times of the head's result onto a replica's new inode.
    pub(crate) fn apply_result(&self, cx: &Cx, id: Id, dirfd: Option<RawFd>) -> R<()> {
        let Some(a) = cx.result else { return Ok(()) };
        let what = || format!("copying owner/mode of {id} from the head");
        match dirfd {
            Some(fd) => {
                sys::fchown(fd, a.uid, a.gid).ctx(what)?;
                sys::fchmod(fd, a.perm & 0o7777).ctx(what)?;
            }
            None => {
                let r = ids::rel(id);
                sys::lchownat(self.idx.ids_fd(), &r, a.uid, a.gid).ctx(what)?;
                if a.kind != FileType::Symlink {
                    sys::fchmodat(self.idx.ids_fd(), &r, a.perm & 0o7777).ctx(what)?;
                }
            }
        }
        // Times too, so that whichever brick later heads the inode reports what the head
        // reported at creation (ctime cannot be set and stays each copy's own).
        let ts = [
            libc::timespec { tv_sec: a.atime.sec, tv_nsec: a.atime.nsec as i64 },
            libc::timespec { tv_sec: a.mtime.sec, tv_nsec: a.mtime.nsec as i64 },
        ];
        match dirfd {
            Some(fd) => sys::futimens(fd, &ts).ctx(what)?,
            None => {
                let r = ids::rel(id);
                // SAFETY: r is a valid NUL-terminated path relative to the ids dir fd.
                let rc = unsafe {
                    libc::utimensat(
                        self.idx.ids_fd(),
                        r.as_ptr(),
                        ts.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error()).ctx(what);
                }
            }
        }
        Ok(())
    }

    /// The lock stripe of inode `id` (64 stripes; inodes share them by id).
    pub(crate) fn stripe(&self, id: Id) -> &Stripe {
        &self.stripes[(id.0 % self.stripes.len() as u128) as usize]
    }

    // ----- namespace ops -----

    fn op_lookup(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        if name == b".." {
            return self.op_lookup_parent(cx, dir);
        }
        valid_name(name)?;
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let what = || format!("{} in directory {dir}", show(name));
        let cname = cstr(name).ctx(what)?;
        // The lstat as the caller checks its search permission on the directory; its
        // result is the entry's (no second lstat as root).
        let st = cx.user(|| sys::lstatat(d, &cname)).ctx(what)?;
        match self.entry_of(d, name, st).ctx(what)? {
            Ent::Inode { id, st } => {
                Ok(Reply::Entry { attr: attr_of(id, &st, true), linkto: None })
            }
            Ent::Linkto { target, st } => {
                Ok(Reply::Entry { attr: attr_of(target, &st, false), linkto: Some(target) })
            }
            Ent::Foreign { .. } => Err(fail(libc::EIO, format!("{} has no cairn id", what()))),
        }
    }

    /// `..` of directory `dir`: its parent, from the brick's own tree (every brick holds
    /// every directory at its place in the volume), so a gateway can walk up from a
    /// directory it only knows by handle. The root is its own parent.
    fn op_lookup_parent(&self, cx: &Cx, dir: Id) -> R<Reply> {
        let what = || format!("the parent of directory {dir}");
        let pfd = if dir == Id::ROOT {
            self.idx.data.clone()
        } else {
            let dfd = self.dir(dir)?;
            Arc::new(cx.user(|| sys::open_dir_at(dfd.as_raw_fd(), c"..")).ctx(what)?)
        };
        let id = match id_of_fd(pfd.as_raw_fd()).ctx(what)? {
            Some(id) => id,
            None if dir == Id::ROOT => Id::ROOT,
            None => return Err(fail(libc::EIO, format!("{} has no cairn id", what()))),
        };
        let st = sys::fstat(pfd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Entry { attr: attr_of(id, &st, true), linkto: None })
    }

    fn op_lookup_path(&self, cx: &Cx, components: &[Vec<u8>]) -> R<Reply> {
        let mut cur = self.idx.data.clone();
        let mut out = Vec::new();
        for c in components {
            valid_name(c)?;
            let cname = cstr(c).ctx(|| show(c))?;
            let fd = match cx.user(|| sys::open_dir_at(cur.as_raw_fd(), &cname)) {
                Ok(fd) => fd,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e).ctx(|| format!("path component {}", show(c))),
            };
            let Some(id) = id_of_fd(fd.as_raw_fd()).ctx(|| show(c))? else { break };
            let st = sys::fstat(fd.as_raw_fd()).ctx(|| show(c))?;
            out.push(attr_of(id, &st, false));
            cur = self.idx.remember_dir(id, fd);
        }
        Ok(Reply::Attrs(out))
    }

    #[allow(clippy::too_many_arguments)]
    fn op_create(
        &self,
        cx: &Cx,
        dir: Id,
        name: &[u8],
        id: Id,
        kind: FileType,
        perm: u32,
        rdev: u64,
        target: Option<&[u8]>,
        exclusive: bool,
    ) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        if id == Id::ROOT || id == Id(0) {
            return Err(fail(libc::EINVAL, format!("{}: invalid id {id}", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let existing = |cx: &Cx| -> R<Option<Reply>> {
            match self.entry(d, name) {
                Ok(Ent::Inode { id: eid, st }) => {
                    if cx.replica && eid == id {
                        self.apply_result(cx, id, None)?;
                        return Ok(Some(Reply::Attr(self.attr(id)?)));
                    }
                    if !exclusive && !cx.replica && kind == FileType::Regular && is_reg(&st) {
                        return Ok(Some(Reply::Attr(attr_of(eid, &st, true))));
                    }
                    Err(fail(libc::EEXIST, format!("{} exists (id {eid})", what())))
                }
                Ok(_) => Err(fail(libc::EEXIST, format!("{} exists", what()))),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
                Err(e) => Err(e).ctx(what),
            }
        };
        // A non-exclusive create by a caller looks first (an existing file is opened even
        // where the caller may not create one). A replica (root) creates first and looks
        // only on EEXIST: no failing lstat per create (the kernel reports EEXIST before
        // it allocates anything, so a full brick still finds the entry it already has).
        if !exclusive && !cx.replica {
            if let Some(r) = existing(cx)? {
                return Ok(r);
            }
        }
        let perm = perm & 0o7777;
        let mut file: Option<OwnedFd> = None;
        let made = match kind {
            FileType::Regular => cx
                .user(|| {
                    // As root (a root caller, a replica), opened as the fd cache opens a
                    // file, and kept there: the write that follows a create needs no
                    // lstat and open of the index link. A caller's fd is not kept.
                    let how = match cx.caller {
                        None => libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK,
                        Some(_) => libc::O_RDONLY,
                    };
                    sys::openat(
                        d,
                        &cname,
                        libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | how,
                        perm,
                    )
                })
                .map(|fd| file = Some(fd)),
            FileType::Directory => {
                return Err(fail(libc::EINVAL, format!("{}: create of a directory", what())))
            }
            FileType::Symlink => {
                let t = target.ok_or_else(|| {
                    fail(libc::EINVAL, format!("{}: symlink without target", what()))
                })?;
                if t.is_empty() || t.len() > 4095 {
                    return Err(fail(
                        libc::EINVAL,
                        format!("{}: bad symlink target length", what()),
                    ));
                }
                let ct = cstr(t).ctx(what)?;
                cx.user(|| sys::symlinkat(&ct, d, &cname))
            }
            other => cx.user(|| sys::mknodat(d, &cname, other.mode_bits() | perm, rdev)),
        };
        if let Err(e) = made {
            if e.raw_os_error() == Some(libc::EEXIST) && (!exclusive || cx.replica) {
                if let Some(r) = existing(cx)? {
                    return Ok(r);
                }
            }
            return Err(e).ctx(what);
        }
        let finish = || -> io::Result<()> {
            let t = match &file {
                Some(fd) => XTarget::Fd(fd.as_raw_fd()),
                None => XTarget::at(d, name)?,
            };
            t.set(ids::XATTR_ID, &id.to_bytes(), libc::XATTR_CREATE)?;
            self.idx.link_file(id, d, name)
        };
        if let Err(e) = finish() {
            let _ = sys::unlinkat(d, &cname, 0);
            return Err(e).ctx(|| format!("{}: recording id {id}", what()));
        }
        self.forget_listing(dir);
        // A regular file's attributes are read (and a replica's copied from the head's)
        // through the fd the create has, not by the path of its index link.
        let st = match (&file, cx.result.filter(|_| cx.replica)) {
            (Some(fd), Some(a)) => Some(self.apply_result_fd(id, fd.as_raw_fd(), a)?),
            (Some(fd), None) => Some(sys::fstat(fd.as_raw_fd()).ctx(|| format!("stat of {id}"))?),
            (None, _) => {
                if cx.replica {
                    self.apply_result(cx, id, None)?;
                }
                None
            }
        };
        if let (Some(fd), None) = (file, cx.caller) {
            self.idx.remember_file(id, fd);
        }
        match st {
            Some(st) => Ok(Reply::Attr(attr_of(id, &st, true))),
            None => Ok(Reply::Attr(self.attr(id)?)),
        }
    }

    fn op_mkdir(&self, cx: &Cx, dir: Id, name: &[u8], id: Id, perm: u32) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        if id == Id::ROOT || id == Id(0) {
            return Err(fail(libc::EINVAL, format!("{}: invalid id {id}", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match self.entry(d, name) {
            Ok(Ent::Inode { id: eid, st }) if cx.replica && eid == id && is_dir(&st) => {
                let fd = self.dir(id)?;
                self.apply_result(cx, id, Some(fd.as_raw_fd()))?;
                return Ok(Reply::Attr(self.attr(id)?));
            }
            Ok(_) => return Err(fail(libc::EEXIST, format!("{} exists", what()))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        if self.idx.lstat_index(id).is_ok() {
            return Err(fail(libc::EEXIST, format!("{}: id {id} already in use", what())));
        }
        cx.user(|| sys::mkdirat(d, &cname, perm & 0o7777)).ctx(what)?;
        let finish = || -> io::Result<Arc<OwnedFd>> {
            let fd = sys::open_dir_at(d, &cname)?;
            XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_ID, &id.to_bytes(), libc::XATTR_CREATE)?;
            self.idx.set_dir_link(id, dir, name)?;
            Ok(self.idx.remember_dir(id, fd))
        };
        let fd = match finish() {
            Ok(fd) => fd,
            Err(e) => {
                let _ = sys::unlinkat(d, &cname, libc::AT_REMOVEDIR);
                self.idx.forget_dir(id);
                return Err(e).ctx(|| format!("{}: recording id {id}", what()));
            }
        };
        self.forget_listing(dir);
        if cx.replica {
            self.apply_result(cx, id, Some(fd.as_raw_fd()))?;
        }
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Attr(attr_of(id, &st, false)))
    }

    fn op_mklinkto(&self, cx: &Cx, dir: Id, name: &[u8], target: Id) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("linkto {} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match self.entry(d, name) {
            Ok(Ent::Linkto { target: t, .. }) if cx.replica && t == target => {
                return Ok(Reply::Unit)
            }
            Ok(_) => return Err(fail(libc::EEXIST, format!("{} exists", what()))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let fd = sys::openat(
            d,
            &cname,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
            0,
        )
        .ctx(what)?;
        if let Err(e) = XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_LINKTO, &target.to_bytes(), 0) {
            let _ = sys::unlinkat(d, &cname, 0);
            return Err(e).ctx(what);
        }
        self.forget_listing(dir);
        Ok(Reply::Unit)
    }

    fn op_link(&self, cx: &Cx, id: Id, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("link of {id} as {} in directory {dir}", show(name));
        if let Found::Dir(_) = self.find(id)? {
            return Err(fail(libc::EPERM, format!("{}: hard link to a directory", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match cx.user(|| sys::linkat(self.idx.ids_fd(), &ids::rel(id), d, &cname)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && cx.replica => {
                match self.entry(d, name) {
                    Ok(Ent::Inode { id: eid, .. }) if eid == id => {}
                    _ => return Err(e).ctx(what),
                }
            }
            Err(e) => return Err(e).ctx(what),
        }
        self.forget_listing(dir);
        Ok(Reply::Attr(self.attr(id)?))
    }

    fn op_unlink(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let ent = match self.entry(d, name) {
            Ok(e) => e,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => {
                return Ok(Reply::Unit)
            }
            Err(e) => return Err(e).ctx(what),
        };
        if is_dir(ent.st()) {
            return Err(fail(libc::EISDIR, format!("{} is a directory", what())));
        }
        cx.user(|| sys::unlinkat(d, &cname, 0)).ctx(what)?;
        self.forget_listing(dir);
        if let Ent::Inode { id, .. } = ent {
            self.drop_if_unused(id)?;
        }
        Ok(Reply::Unit)
    }

    fn op_rmdir(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let ent = match self.entry(d, name) {
            Ok(e) => e,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => {
                return Ok(Reply::Unit)
            }
            Err(e) => return Err(e).ctx(what),
        };
        if !is_dir(ent.st()) {
            return Err(fail(libc::ENOTDIR, format!("{} is not a directory", what())));
        }
        let mut r = cx.user(|| sys::unlinkat(d, &cname, libc::AT_REMOVEDIR));
        if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY))
            && self.remove_linktos_only(d, name).ctx(what)?
        {
            r = cx.user(|| sys::unlinkat(d, &cname, libc::AT_REMOVEDIR));
        }
        r.ctx(what)?;
        self.forget_listing(dir);
        if let Ent::Inode { id, .. } = ent {
            self.forget_listing(id);
            self.idx.unlink(id).ctx(|| format!("removing index link of {id}"))?;
        }
        Ok(Reply::Unit)
    }

    /// If directory `name` holds linkto entries only, remove them (they are internal, the
    /// user sees the directory as empty). Returns whether it did.
    fn remove_linktos_only(&self, d: RawFd, name: &[u8]) -> io::Result<bool> {
        let sub = sys::open_dir_at(d, &cstr(name)?)?;
        let s = sub.as_raw_fd();
        let entries = sys::read_dir(s)?;
        for e in &entries {
            if !matches!(self.entry(s, &e.name)?, Ent::Linkto { .. }) {
                return Ok(false);
            }
        }
        for e in &entries {
            sys::unlinkat(s, &cstr(&e.name)?, 0)?;
        }
        Ok(true)
    }

    fn op_rename(
        &self,
        cx: &Cx,
        src_dir: Id,
        src_name: &[u8],
        dst_dir: Id,
        dst_name: &[u8],
        flags: u32,
    ) -> R<Reply> {
        valid_name(src_name)?;
        valid_name(dst_name)?;
        let what = || {
            format!(
                "{} in directory {src_dir} to {} in directory {dst_dir}",
                show(src_name),
                show(dst_name)
            )
        };
        use cairn_proto::rename_flags::{EXCHANGE, NOREPLACE};
        if flags & !(EXCHANGE | NOREPLACE) != 0 || flags == EXCHANGE | NOREPLACE {
            return Err(fail(libc::EINVAL, format!("{}: bad flags {flags:#x}", what())));
        }
        let sfd = self.dir(src_dir)?;
        let dfd = self.dir(dst_dir)?;
        let (s, d) = (sfd.as_raw_fd(), dfd.as_raw_fd());
        let (cs, cd) = (cstr(src_name).ctx(what)?, cstr(dst_name).ctx(what)?);
        let src = match self.entry(s, src_name) {
            Ok(e) => Some(e),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => None,
            Err(e) => return Err(e).ctx(what),
        };
        let dst = match self.entry(d, dst_name) {
            Ok(e) => Some(e),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(e).ctx(what),
        };
        if cx.replica && replica_rename_done(cx, src.as_ref(), dst.as_ref(), flags, &what)? {
            return Ok(Reply::Unit);
        }
        let Some(src) = src else {
            return Err(fail(libc::ENOENT, format!("{}: no source", what())));
        };
        let same = |a: &libc::stat, b: &libc::stat| a.st_ino == b.st_ino && a.st_dev == b.st_dev;
        if let (true, Some(Ent::Inode { st, .. }), Ent::Inode { st: sst, .. }) =
            (cx.replica && flags & EXCHANGE == 0, &dst, &src)
        {
            if same(st, sst) && !is_dir(st) {
                // Both names are one inode here but were not at the head (a heal linked the
                // destination name before this rename arrived): rename(2) would do nothing
                // and leave the source name, which the head no longer has. Drop it.
                sys::unlinkat(s, &cs, 0).ctx(what)?;
                self.forget_listing(src_dir);
                self.forget_listing(dst_dir);
                return Ok(Reply::Unit);
            }
        }
        // renameat2 flags have the same values as ours.
        cx.user(|| sys::renameat2(s, &cs, d, &cd, flags)).ctx(what)?;
        self.forget_listing(src_dir);
        self.forget_listing(dst_dir);
        if let Ent::Inode { id, st } = &src {
            if is_dir(st) {
                self.idx
                    .set_dir_link(*id, dst_dir, dst_name)
                    .ctx(|| format!("{}: updating index link of {id}", what()))?;
            }
        }
        if let Some(Ent::Inode { id, st }) = &dst {
            if flags & EXCHANGE != 0 {
                if is_dir(st) {
                    self.idx
                        .set_dir_link(*id, src_dir, src_name)
                        .ctx(|| format!("{}: updating index link of {id}", what()))?;
                }
            } else if !same(st, src.st()) {
                if is_dir(st) {
                    self.forget_listing(*id);
                    self.idx.unlink(*id).ctx(|| format!("removing index link of {id}"))?;
                } else {
                    self.drop_if_unused(*id)?;
                }
            }
        }
        Ok(Reply::Unit)
    }

    fn op_readlink(&self, id: Id) -> R<Reply> {
        match self.find(id)? {
            Found::Other(st) if is_lnk(&st) => {
                let t = sys::readlinkat(self.idx.ids_fd(), &ids::rel(id))
                    .ctx(|| format!("readlink of {id}"))?;
                Ok(Reply::Bytes(t))
            }
            _ => Err(fail(libc::EINVAL, format!("{id} is not a symlink"))),
        }
    }

    fn op_setattr(&self, cx: &Cx, id: Id, set: &cairn_proto::SetAttr) -> R<Reply> {
        let what = || format!("setattr of {id}");
        let times = [set_time(set.atime), set_time(set.mtime)];
        let want_times = set.atime.is_some() || set.mtime.is_some();
        let chown = set.uid.is_some() || set.gid.is_some();
        let (uid, gid) = (set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX));
        let found = self.find(id)?;
        let fd: Option<Arc<OwnedFd>> = match &found {
            Found::Dir(fd) => Some(fd.clone()),
            Found::Other(st) if is_reg(st) => Some(self.file(id)?),
            Found::Other(_) => None,
        };
        let st = match &found {
            Found::Dir(fd) => sys::fstat(fd.as_raw_fd()).ctx(what)?,
            Found::Other(st) => *st,
        };
        let r = ids::rel(id);
        let ix = self.idx.ids_fd();
        if chown {
            match &fd {
                Some(fd) => cx.user(|| sys::fchown(fd.as_raw_fd(), uid, gid)),
                None => cx.user(|| sys::lchownat(ix, &r, uid, gid)),
            }
            .ctx(what)?;
        }
        if let Some(perm) = set.perm {
            match &fd {
                Some(fd) => cx.user(|| sys::fchmod(fd.as_raw_fd(), perm & 0o7777)),
                None if is_lnk(&st) => Err(sys::errno(libc::EOPNOTSUPP)),
                None => cx.user(|| sys::fchmodat(ix, &r, perm & 0o7777)),
            }
            .ctx(what)?;
        }
        if let Some(size) = set.size {
            if is_dir(&st) {
                return Err(fail(libc::EISDIR, format!("{}: truncate of a directory", what())));
            }
            let Some(fd) = fd.as_ref().filter(|_| is_reg(&st)) else {
                return Err(fail(
                    libc::EINVAL,
                    format!("{}: truncate of a non-regular file", what()),
                ));
            };
            cx.check(fd.as_raw_fd(), &st, 2)?;
            let _g = self.stripe(id).lock();
            let f = fd.as_raw_fd();
            self.sums_begin(id)?;
            let old = self.sums_before(id, f, Change::None, Some(size))?;
            let r = sys::ftruncate(f, size);
            let sums = self.sums_changed(id, f, old, Change::None);
            r.ctx(what)?;
            sums?;
        }
        if want_times {
            match &fd {
                Some(fd) => cx.user(|| sys::futimens(fd.as_raw_fd(), &times)),
                None => cx.user(|| sys::lutimensat(ix, &r, &times)),
            }
            .ctx(what)?;
        }
        Ok(Reply::Attr(self.attr(id)?))
    }

    fn op_open(&self, id: Id) -> R<Reply> {
        let mut opens = self.opens.lock();
        self.find(id)?;
        *opens.entry(id).or_insert(0) += 1;
        Ok(Reply::Unit)
    }

    fn op_release(&self, id: Id) -> R<Reply> {
        {
            let mut opens = self.opens.lock();
            match opens.get_mut(&id) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    return Ok(Reply::Unit);
                }
                Some(_) => {
                    opens.remove(&id);
                }
                None => return Ok(Reply::Unit),
            }
        }
        if let Ok(Found::Other(_)) = self.idx.find(id) {
            self.drop_if_unused(id)?;
        }
        Ok(Reply::Unit)
    }

    // ----- data ops -----

    fn op_read(&self, cx: &Cx, id: Id, offset: u64, len: u32) -> R<(Reply, Bytes)> {
        let fd = self.file(id)?;
        self.read_fd(cx, id, &fd, offset, len, false)
    }

    /// READ of `id` open as `fd`. `nowait`: from the page cache only (see
    /// [`Brick::read_verified_at`]); a checksum mismatch is then returned as is, not
    /// re-checked.
    fn read_fd(
        &self,
        cx: &Cx,
        id: Id,
        fd: &OwnedFd,
        offset: u64,
        len: u32,
        nowait: bool,
    ) -> R<(Reply, Bytes)> {
        let what = || format!("read of {id} at {offset}+{len}");
        let f = fd.as_raw_fd();
        let st = sys::fstat(f).ctx(what)?;
        cx.check(f, &st, 4)?;
        if offset >= i64::MAX as u64 {
            // No byte of a file lies there: end of file, checked before any offset
            // arithmetic (pread would refuse a negative offset with EINVAL).
            return Ok((Reply::Data { eof: true }, Bytes::new()));
        }
        // At most what one reply frame carries (a larger one would be refused by the
        // peer), and not past i64::MAX (`check_range`): a short read, as POSIX allows.
        let len = (len as usize)
            .min(cairn_proto::frame::MAX_DATA as usize)
            .min((i64::MAX as u64).saturating_sub(offset) as usize);
        let size = st.st_size as u64;
        // Checked against the checksums without the stripe lock; a mismatch is re-checked
        // under it (a write may have been between its data and its checksum update), and a
        // table of 64 KiB blocks is converted under it.
        let (buf, size) = match self.read_verified_at(id, f, size, offset, len, nowait, false) {
            Err(e)
                if !nowait
                    && (e.errno == crate::csum::ECORRUPT
                        || (e.errno == libc::EAGAIN
                            && e.what.contains(crate::csum::OLD_TABLE))) =>
            {
                let _g = self.stripe(id).lock();
                self.read_verified(id, f, offset, len)?
            }
            r => r?,
        };
        let n = buf.len();
        let eof = n < len || offset.saturating_add(n as u64) >= size;
        Ok((Reply::Data { eof }, buf))
    }

    /// Answer a READ (as chain head, `creds` the caller's) only if that needs no disk I/O:
    /// the file is open in the fd cache and the blocks it covers are in the page cache
    /// (`RWF_NOWAIT`), so it can run on an async thread rather than hop to a blocking
    /// one. `None`: anything else (not a READ, not cached, any error — a checksum mismatch
    /// included): run it with [`Brick::execute`].
    pub fn execute_cached(&self, creds: &Creds, op: &Op) -> Option<(Reply, Bytes)> {
        let Op::Read { id, offset, len } = *op else { return None };
        check_range(op, &[]).ok()?;
        let fd = self.idx.file_fd_cached(id)?;
        let cx = Cx {
            caller: if creds.uid == 0 { None } else { Some(creds) },
            replica: false,
            result: None,
        };
        self.read_fd(&cx, id, &fd, offset, len, true).ok()
    }

    /// A write runs in *shared* mode on its stripe: under the stripe's table mutex it
    /// claims the checksum blocks it touches, reads what a partial overwrite needs and
    /// updates the table as if the data were already written (the table runs ahead of the
    /// data); then it writes the data with only its blocks claimed, so writes of different
    /// blocks of one file reach the page cache in parallel. Everything else that changes
    /// data or checks it against the table (truncate, fallocate, compare-and-write, heal,
    /// scrub, a read's re-check) takes the stripe exclusively and so waits for writes in
    /// flight. A write the table cannot be planned for (a file without a table, a block
    /// that must be summed from disk) takes the stripe exclusively, as before.
    fn op_write(&self, cx: &Cx, id: Id, offset: u64, data: &[u8]) -> R<Reply> {
        let what = || format!("write of {id} at {offset}+{}", data.len());
        let fd = self.file(id)?;
        let f = fd.as_raw_fd();
        let stripe = self.stripe(id);
        let shared = stripe.rw.read();
        let end = offset.saturating_add(data.len() as u64);
        let first = offset / crate::csum::BLOCK;
        let last = end.saturating_sub(1).max(offset) / crate::csum::BLOCK;
        let claim = stripe.claim(id, first, last);
        let st = {
            let _t = stripe.table.lock();
            let st = sys::fstat(f).ctx(what)?;
            cx.check(f, &st, 2)?;
            self.sums_begin(id)?;
            let old = self.sums_before(id, f, Change::Data(offset, data), None)?;
            let new = end.max(st.st_size as u64);
            match self.sums_planned(id, f, old, Change::Data(offset, data), new)? {
                true => st,
                false => {
                    drop(claim);
                    drop(shared);
                    return self.op_write_locked(cx, id, &fd, offset, data);
                }
            }
        };
        if let Err(e) = self.write_data(id, &fd, offset, data) {
            // The table already has this write: re-sum the range from what is on disk.
            drop(claim);
            drop(shared);
            let _g = stripe.lock();
            if let Err(f) = self.sums_disk(id, f, offset, data.len() as u64) {
                tracing::warn!(brick = %self.root.display(), %id, error = %f.what, "after a failed write");
            }
            return Err(e).ctx(what);
        }
        drop(claim);
        self.clear_suid(cx, f, &st).ctx(what)?;
        drop(shared);
        let st = sys::fstat(f).ctx(what)?;
        Ok(Reply::Written { count: data.len() as u32, attr: attr_of(id, &st, true) })
    }

    /// [`Self::op_write`] with the stripe held exclusively around data and table.
    fn op_write_locked(
        &self,
        cx: &Cx,
        id: Id,
        fd: &Arc<OwnedFd>,
        offset: u64,
        data: &[u8],
    ) -> R<Reply> {
        let what = || format!("write of {id} at {offset}+{}", data.len());
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 2)?;
        let f = fd.as_raw_fd();
        self.sums_begin(id)?;
        let old = self.sums_before(id, f, Change::Data(offset, data), None)?;
        let r = self.write_data(id, fd, offset, data);
        let change = match r {
            Ok(()) => Change::Data(offset, data),
            Err(_) => Change::Disk(offset, data.len() as u64),
        };
        let sums = self.sums_changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        self.clear_suid(cx, fd.as_raw_fd(), &st).ctx(what)?;
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Written { count: data.len() as u32, attr: attr_of(id, &st, true) })
    }

    /// Write `data` at `offset` of file `id` (open as `fd`): a large aligned write with
    /// `O_DIRECT`, anything else through the page cache, written out early when large
    /// (`writeback.rs`).
    fn write_data(&self, id: Id, fd: &Arc<OwnedFd>, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        if self.writeback.direct(data, offset) {
            match self.idx.file_fd_direct(id, fd) {
                Ok(d) => match sys::pwrite(d.as_raw_fd(), data, offset) {
                    Ok(n) if n == data.len() => return Ok(()),
                    // Short (a full disk): the rest, unaligned now, through the page cache,
                    // which reports the error.
                    Ok(n) => done = n,
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.writeback.no_direct(&self.root, &e)
                    }
                    // Interrupted, or would block: this write goes through the page cache.
                    Err(e)
                        if e.kind() == io::ErrorKind::Interrupted
                            || e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                },
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.writeback.no_direct(&self.root, &e)
                }
                // Out of fds, say: this write goes through the page cache.
                Err(e) => {
                    tracing::debug!(brick = %self.root.display(), %id, error = %e, "no O_DIRECT fd; writing through the page cache");
                }
            }
        }
        let rest = &data[done..];
        sys::pwrite_all(fd.as_raw_fd(), rest, offset + done as u64)?;
        self.writeback.written(fd, offset + done as u64, rest.len());
        Ok(())
    }

    /// A write by someone other than root clears setuid (and setgid with group exec).
    fn clear_suid(&self, cx: &Cx, fd: RawFd, st: &libc::stat) -> io::Result<()> {
        if cx.caller.is_none() {
            return Ok(());
        }
        let mut kill = libc::S_ISUID;
        if st.st_mode & libc::S_IXGRP != 0 {
            kill |= libc::S_ISGID;
        }
        if st.st_mode & kill != 0 {
            sys::fchmod(fd, st.st_mode & 0o7777 & !kill)?;
        }
        Ok(())
    }

    fn op_fsync(&self, id: Id, datasync: bool) -> R<Reply> {
        let fd = match self.find(id)? {
            Found::Dir(fd) => fd,
            Found::Other(st) if is_reg(&st) => self.file(id)?,
            Found::Other(_) => return Ok(Reply::Unit),
        };
        sys::fsync(fd.as_raw_fd(), datasync).ctx(|| format!("fsync of {id}"))?;
        Ok(Reply::Unit)
    }

    fn op_fallocate(&self, cx: &Cx, id: Id, mode: u32, offset: u64, len: u64) -> R<Reply> {
        use cairn_proto::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
        let what = || format!("fallocate of {id} mode {mode:#x} at {offset}+{len}");
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
            return Err(fail(libc::EOPNOTSUPP, format!("{}: unsupported mode", what())));
        }
        let fd = self.file(id)?;
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 2)?;
        let f = fd.as_raw_fd();
        self.sums_begin(id)?;
        let planned = if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            Change::Zero(offset, len)
        } else {
            Change::None
        };
        let old = self.sums_before(id, f, planned, None)?;
        let r = sys::fallocate(f, mode as i32, offset, len);
        let change = if r.is_err() {
            Change::Disk(offset, len)
        } else if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            Change::Zero(offset, len)
        } else {
            Change::None
        };
        let sums = self.sums_changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        Ok(Reply::Attr(self.attr(id)?))
    }

    fn op_seek(&self, id: Id, offset: u64, whence: SeekWhence) -> R<Reply> {
        let fd = self.file(id)?;
        let w = match whence {
            SeekWhence::Data => libc::SEEK_DATA,
            SeekWhence::Hole => libc::SEEK_HOLE,
        };
        // lseek on a shared fd moves its offset; nothing else uses the offset (pread/pwrite).
        let off = sys::lseek(fd.as_raw_fd(), offset, w)
            .ctx(|| format!("seek {whence:?} of {id} from {offset}"))?;
        Ok(Reply::Offset(off))
    }

    fn op_caw(&self, cx: &Cx, id: Id, offset: u64, data: &[u8]) -> R<Reply> {
        let what = || format!("compare_and_write of {id} at {offset}+{}", data.len() / 2);
        if data.len() & 1 != 0 {
            return Err(fail(libc::EINVAL, format!("{}: payload has odd length", what())));
        }
        let (cmp, new) = data.split_at(data.len() / 2);
        let fd = self.file(id)?;
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 6)?;
        let f = fd.as_raw_fd();
        let (cur, _) = self.read_verified(id, f, offset, cmp.len())?;
        let mut cur = cur.to_vec();
        cur.resize(cmp.len(), 0);
        if let Some(at) = cur.iter().zip(cmp).position(|(a, b)| a != b) {
            return Err(fail(
                Errno::EMISCOMPARE.0,
                format!("{}: miscompare at byte {}", what(), offset + at as u64),
            ));
        }
        self.sums_begin(id)?;
        let old = self.sums_before(id, f, Change::Data(offset, new), None)?;
        let r = sys::pwrite_all(f, new, offset);
        let change = match r {
            Ok(()) => Change::Data(offset, new),
            Err(_) => Change::Disk(offset, new.len() as u64),
        };
        let sums = self.sums_changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Written { count: new.len() as u32, attr: attr_of(id, &st, true) })
    }

    // ----- xattrs -----

    /// Where the xattrs of `id` live; the fd (if any) is kept alive by the returned Arc.
    fn xtarget(&self, id: Id) -> R<(XTarget, Option<Arc<OwnedFd>>)> {
        let what = || format!("xattrs of {id}");
        match self.find(id)? {
            Found::Dir(fd) => Ok((XTarget::Fd(fd.as_raw_fd()), Some(fd))),
            Found::Other(st) if is_reg(&st) => {
                let fd = self.file(id)?;
                Ok((XTarget::Fd(fd.as_raw_fd()), Some(fd)))
            }
            Found::Other(_) => Ok((self.idx.xtarget(id).ctx(what)?, None)),
        }
    }

    fn op_getxattr(&self, cx: &Cx, id: Id, name: &[u8]) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let (t, _keep) = self.xtarget(id)?;
        let what = || format!("xattr {} of {id}", show(name));
        let v = if privileged { t.get(&disk) } else { cx.user(|| t.get(&disk)) }.ctx(what)?;
        Ok(Reply::Bytes(v))
    }

    fn op_setxattr(&self, cx: &Cx, id: Id, name: &[u8], value: &[u8], flags: u32) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let what = || format!("xattr {} of {id}", show(name));
        use cairn_proto::xattr_flags::{CREATE, REPLACE};
        if flags & !(CREATE | REPLACE) != 0 {
            return Err(fail(libc::EINVAL, format!("{}: bad flags {flags:#x}", what())));
        }
        let mut f = 0;
        if flags & CREATE != 0 {
            f |= libc::XATTR_CREATE;
        }
        if flags & REPLACE != 0 {
            f |= libc::XATTR_REPLACE;
        }
        let (t, _keep) = self.xtarget(id)?;
        if privileged { t.set(&disk, value, f) } else { cx.user(|| t.set(&disk, value, f)) }
            .ctx(what)?;
        Ok(Reply::Unit)
    }

    fn op_removexattr(&self, cx: &Cx, id: Id, name: &[u8]) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let what = || format!("xattr {} of {id}", show(name));
        let (t, _keep) = self.xtarget(id)?;
        if privileged { t.remove(&disk) } else { cx.user(|| t.remove(&disk)) }.ctx(what)?;
        Ok(Reply::Unit)
    }

    fn op_listxattr(&self, id: Id) -> R<Reply> {
        Ok(Reply::Names(self.visible_xattrs(id)?))
    }

    /// The client-visible xattr names of `id`.
    pub(crate) fn visible_xattrs(&self, id: Id) -> R<Vec<Vec<u8>>> {
        let (t, _keep) = self.xtarget(id)?;
        let names = t.list().ctx(|| format!("xattrs of {id}"))?;
        Ok(names.into_iter().filter_map(|n| unmap_xattr(&n)).collect())
    }

    /// Read a client-visible xattr as root (heal).
    pub(crate) fn xattr_pairs(&self, id: Id) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        let root = Cx { caller: None, replica: true, result: None };
        let (t, _keep) = self.xtarget(id)?;
        let mut out = Vec::new();
        for n in self.visible_xattrs(id)? {
            let (disk, _) = map_xattr(&root, &n)?;
            match t.get(&disk) {
                Ok(v) => out.push((n, v)),
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e).ctx(|| format!("xattr {} of {id}", show(&n))),
            }
        }
        Ok(out)
    }

    /// Make the client-visible xattrs of `id` exactly `want` (heal, as root).
    pub(crate) fn set_xattrs(&self, id: Id, want: &[(Vec<u8>, Vec<u8>)]) -> R<()> {
        let root = Cx { caller: None, replica: true, result: None };
        let (t, _keep) = self.xtarget(id)?;
        for n in self.visible_xattrs(id)? {
            if !want.iter().any(|(w, _)| *w == n) {
                let (disk, _) = map_xattr(&root, &n)?;
                t.remove(&disk).ctx(|| format!("removing xattr {} of {id}", show(&n)))?;
            }
        }
        for (n, v) in want {
            let (disk, _) = map_xattr(&root, n)?;
            t.set(&disk, v, 0).ctx(|| format!("setting xattr {} of {id}", show(n)))?;
        }
        Ok(())
    }

    fn op_statfs(&self) -> R<Reply> {
        let s = sys::fstatvfs(self.idx.root.as_raw_fd()).ctx(|| "statfs")?;
        Ok(Reply::StatFs(StatFs {
            bsize: s.f_frsize as u32,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            namemax: s.f_namemax as u32,
        }))
    }

    // ----- directories -----

    /// Every entry of directory `dir` (with linkto entries when `linktos`), sorted by
    /// cookie. Cached per directory, keyed by its mtime/ctime and dropped on every change
    /// made through this brick.
    pub(crate) fn listing(&self, dir: Id, d: RawFd) -> R<Arc<Listing>> {
        let what = || format!("listing directory {dir}");
        let st = sys::fstat(d).ctx(what)?;
        let key = (st.st_mtime, st.st_mtime_nsec, st.st_ctime, st.st_ctime_nsec, st.st_ino);
        if let Some(l) = self.listings.lock().get(&dir) {
            if l.key == key {
                return Ok(l.clone());
            }
        }
        let mut entries = Vec::new();
        for e in sys::read_dir(d).ctx(what)? {
            match self.entry(d, &e.name) {
                Ok(Ent::Inode { id, st }) => {
                    let kind = kind_of_dtype(e.d_type)
                        .or_else(|| FileType::from_mode(st.st_mode))
                        .unwrap_or(FileType::Regular);
                    entries.push(LEntry { cookie: cookie(&e.name), name: e.name, id, kind });
                }
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                Err(err) => return Err(err).ctx(|| format!("{}: {}", what(), show(&e.name))),
            }
        }
        entries.sort_by(|a, b| a.cookie.cmp(&b.cookie).then_with(|| a.name.cmp(&b.name)));
        let l = Arc::new(Listing { key, entries });
        let mut cache = self.listings.lock();
        if cache.len() >= 64 {
            cache.clear(); // bounded memory; listings are cheap to rebuild once
        }
        cache.insert(dir, l.clone());
        Ok(l)
    }

    fn op_readdir(&self, dir: Id, cookie: u64, max: u32, plus: bool) -> R<Reply> {
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let l = self.listing(dir, d)?;
        let start = l.entries.partition_point(|e| e.cookie <= cookie);
        let mut end = (start + max.max(1) as usize).min(l.entries.len());
        // Never split entries whose cookies collide across two pages.
        while end < l.entries.len()
            && end > start
            && l.entries[end].cookie == l.entries[end - 1].cookie
        {
            end += 1;
        }
        let mut out = Vec::with_capacity(end - start);
        for e in &l.entries[start..end] {
            let attr = if plus {
                match sys::lstatat(d, &cstr(&e.name).ctx(|| show(&e.name))?) {
                    Ok(st) => Some(attr_of(e.id, &st, true)),
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
                    Err(err) => return Err(err).ctx(|| format!("stat of {}", show(&e.name))),
                }
            } else {
                None
            };
            out.push(DirEntry {
                name: e.name.clone(),
                id: e.id,
                kind: e.kind,
                cookie: e.cookie,
                attr,
            });
        }
        Ok(Reply::Dir { entries: out, eof: end == l.entries.len() })
    }
}

/// Map a client xattr name to its on-disk name; `true` when it needs uid 0.
pub(crate) fn map_xattr(cx: &Cx, name: &[u8]) -> R<(CString, bool)> {
    let shown = || show(name);
    if name.is_empty() || name.len() > 255 || name.contains(&0) {
        return Err(fail(libc::EINVAL, format!("bad xattr name {}", shown())));
    }
    if (name.starts_with(b"user.") && name.len() > 5)
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
    {
        return Ok((cstr(name).ctx(shown)?, false));
    }
    if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
        if cx.caller.is_some() {
            return Err(fail(libc::EPERM, format!("xattr {} needs uid 0", shown())));
        }
        let mut disk = b"trusted.cairn.x.".to_vec();
        disk.extend_from_slice(name);
        return Ok((cstr(&disk).ctx(shown)?, true));
    }
    Err(fail(libc::ENOTSUP, format!("xattr namespace of {} is not supported", shown())))
}

/// The client-visible name of an on-disk xattr, or `None` for internal/foreign ones.
pub(crate) fn unmap_xattr(disk: &[u8]) -> Option<Vec<u8>> {
    if let Some(rest) = disk.strip_prefix(b"trusted.cairn.x.") {
        return Some(rest.to_vec());
    }
    if disk.starts_with(b"user.")
        || disk == b"system.posix_acl_access"
        || disk == b"system.posix_acl_default"
    {
        return Some(disk.to_vec());
    }
    None
}

/// Whether a rename forwarded by the head is already applied on this replica (`Ok(true)`:
/// do nothing), to apply (`Ok(false)`), or impossible here (`Err`). The head sends the id
/// of the inode it moved (`cx.result`); the replica must hold that inode under the source
/// name. If it does not, either the destination holds it (the rename is applied already:
/// a re-sent forward, or a heal copied the directories first) or this brick missed an
/// earlier change of these names — a rename into the source name while it was down, say.
/// Applying nothing and answering success would hide that miss from the head; the error
/// makes the head record the inodes as pending for this brick, which then heals them.
fn replica_rename_done(
    cx: &Cx,
    src: Option<&Ent>,
    dst: Option<&Ent>,
    flags: u32,
    what: &dyn Fn() -> String,
) -> R<bool> {
    use cairn_proto::rename_flags::EXCHANGE;
    let id_of = |e: Option<&Ent>| match e {
        Some(Ent::Inode { id, .. }) => Some(*id),
        Some(Ent::Linkto { target, .. }) => Some(*target),
        _ => None,
    };
    let moved = cx.result.map(|a| a.id);
    let (have, at_dst) = (id_of(src), id_of(dst));
    match moved {
        // A head that does not say what it moved: apply what is here.
        None if src.is_some() => Ok(false),
        Some(m) if src.is_some() && have == Some(m) => Ok(false),
        // Applied before (the source name may have been taken again since).
        Some(m) if flags & EXCHANGE == 0 && at_dst == Some(m) => Ok(true),
        _ if src.is_none() => Err(fail(
            libc::ENOENT,
            format!(
                "{}: the source is not on this replica, which missed an earlier change of it (the head moved {})",
                what(),
                moved.map(|m| m.to_string()).unwrap_or_else(|| "an unknown inode".into())
            ),
        )),
        _ => Err(fail(
            libc::ESTALE,
            format!(
                "{}: the source is {} on this replica, which missed an earlier change of it (the head moved {})",
                what(),
                have.map(|h| h.to_string()).unwrap_or_else(|| "not a cairn inode".into()),
                moved.map(|m| m.to_string()).unwrap_or_default()
            ),
        )),
    }
}
