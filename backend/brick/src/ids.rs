//! The id index `.cairn/ids/ab/cd/<32 hex>` and the caches of open fds by id.
//!
//! A non-directory's index entry is a hard link to the inode itself; a directory's is a
//! symlink `../../pp/qq/<parent hex>/<name>` that is never followed by the kernel: the
//! store reads it and opens the directory one component at a time from `data/`, with
//! `O_NOFOLLOW`, checking the id xattr at the end.

use crate::sys::{self, cstr, XTarget};
use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

pub const XATTR_ID: &std::ffi::CStr = c"trusted.cairn.id";
pub const XATTR_LINKTO: &std::ffi::CStr = c"trusted.cairn.linkto";
/// On a moved stub (docs/rebalance.md): the replica set the inode lives on now, 4 bytes
/// little-endian. A stub is the id's index entry on its home set after a rebalance moved
/// the inode: an empty regular file, mode 0, with no name in any directory.
pub const XATTR_MOVED: &std::ffi::CStr = c"trusted.cairn.moved";
/// Longest chain of parent directories followed before giving up (a corrupt loop).
const MAX_DEPTH: usize = 4096;

/// A small LRU of fds keyed by id. Eviction is O(1) amortized: `order` lists uses oldest
/// first, and an entry of it is stale once its id was used again (its tick is no longer
/// the map's) or removed; stale entries are skipped when evicting and swept when `order`
/// grows past a few times the capacity.
pub struct FdLru {
    cap: usize,
    tick: u64,
    map: HashMap<Id, (Arc<OwnedFd>, u64)>,
    order: VecDeque<(u64, Id)>,
}

impl FdLru {
    pub fn new(cap: usize) -> FdLru {
        FdLru { cap, tick: 0, map: HashMap::new(), order: VecDeque::new() }
    }

    fn used(&mut self, id: Id) -> u64 {
        self.tick += 1;
        self.order.push_back((self.tick, id));
        if self.order.len() > 4 * self.cap.max(16) {
            let map = &self.map;
            self.order.retain(|(t, id)| map.get(id).is_some_and(|e| e.1 == *t));
            // The use being recorded is not in the map yet when called from `put`.
            if self.order.back() != Some(&(self.tick, id)) {
                self.order.push_back((self.tick, id));
            }
        }
        self.tick
    }

    pub fn get(&mut self, id: Id) -> Option<Arc<OwnedFd>> {
        if !self.map.contains_key(&id) {
            return None;
        }
        let t = self.used(id);
        self.map.get_mut(&id).map(|e| {
            e.1 = t;
            e.0.clone()
        })
    }

    /// Keep `fd` as `id`'s. Returns the fd this evicted (or replaced), for the caller to
    /// close after it let go of the cache's lock.
    #[must_use = "drop the evicted fd after releasing the cache's lock"]
    pub fn put(&mut self, id: Id, fd: Arc<OwnedFd>) -> Option<Arc<OwnedFd>> {
        let mut evicted = None;
        if self.map.len() >= self.cap && !self.map.contains_key(&id) {
            while let Some((t, old)) = self.order.pop_front() {
                if self.map.get(&old).is_some_and(|e| e.1 == t) {
                    evicted = self.map.remove(&old).map(|e| e.0);
                    break;
                }
            }
        }
        let t = self.used(id);
        self.map.insert(id, (fd, t)).map(|e| e.0).or(evicted)
    }

    pub fn remove(&mut self, id: Id) -> Option<Arc<OwnedFd>> {
        self.map.remove(&id).map(|e| e.0)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// What an id names on this brick.
pub enum Found {
    Dir(Arc<OwnedFd>),
    /// A non-directory: its `lstat` through the index link.
    Other(libc::stat),
}

pub struct Index {
    pub root: OwnedFd,
    pub ids: OwnedFd,
    pub data: Arc<OwnedFd>,
    dirs: Mutex<FdLru>,
    files: Mutex<FdLru>,
    /// `O_DIRECT` write-only fds of regular files (large aligned writes; `Brick::op_write`).
    direct: Mutex<FdLru>,
}

pub fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}
pub fn is_reg(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}
pub fn is_lnk(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

pub fn bucket(id: Id) -> (String, String) {
    let h = id.to_hex();
    (h[0..2].to_string(), format!("{}/{}", &h[0..2], &h[2..4]))
}

/// `ab/cd/<hex>` relative to `.cairn/ids`.
pub fn rel(id: Id) -> CString {
    let h = id.to_hex();
    CString::new(format!("{}/{}/{}", &h[0..2], &h[2..4], h)).expect("hex has no NUL")
}

/// The target of a directory's index symlink.
pub fn dir_link_target(parent: Id, name: &[u8]) -> Vec<u8> {
    let h = parent.to_hex();
    let mut t = format!("../../{}/{}/{}/", &h[0..2], &h[2..4], h).into_bytes();
    t.extend_from_slice(name);
    t
}

/// Parse a directory index symlink target back into (parent id, name).
pub fn parse_dir_link(t: &[u8]) -> Option<(Id, Vec<u8>)> {
    let rest = t.strip_prefix(b"../../")?;
    if rest.len() < 6 + 32 + 2 || rest[2] != b'/' || rest[5] != b'/' || rest[38] != b'/' {
        return None;
    }
    let hex = std::str::from_utf8(&rest[6..38]).ok()?;
    if hex.as_bytes()[0..2] != rest[0..2] || hex.as_bytes()[2..4] != rest[3..5] {
        return None;
    }
    let id = Id::from_hex(hex)?;
    let name = rest[39..].to_vec();
    cairn_proto::valid_name(&name).ok()?;
    Some((id, name))
}

/// Read the id xattr of an open inode.
pub fn id_of_fd(fd: RawFd) -> io::Result<Option<Id>> {
    id_of(&XTarget::Fd(fd))
}

/// Open regular file `name` in `dir` as the fd cache keeps it: read-write where the
/// filesystem allows, never following a symlink.
fn open_file_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK;
    match sys::openat(dir, name, libc::O_RDWR | flags, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            sys::openat(dir, name, libc::O_RDONLY | flags, 0)
        }
        other => other,
    }
}

pub fn id_of(t: &XTarget) -> io::Result<Option<Id>> {
    match t.get(XATTR_ID) {
        Ok(v) if v.len() == 16 => Ok(Some(Id::from_bytes(v.try_into().expect("16 bytes")))),
        Ok(_) => Err(sys::errno(libc::EIO)),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The set a moved stub names; `None` for any inode without the xattr.
pub fn moved_of(t: &XTarget) -> io::Result<Option<u32>> {
    match t.get(XATTR_MOVED) {
        Ok(v) if v.len() == 4 => Ok(Some(u32::from_le_bytes(v.try_into().expect("4 bytes")))),
        Ok(_) => Err(sys::errno(libc::EIO)),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether an index entry's `lstat` has a moved stub's shape (empty regular file, mode
/// 0); only such an entry's xattr is read to tell.
pub fn stub_shaped(st: &libc::stat) -> bool {
    is_reg(st) && st.st_mode & 0o7777 == 0 && st.st_size == 0
}

/// The error of an op by id that found a moved stub (`EREMOTE`, the brick's EMOVED):
/// `Brick::find` and `Brick::file` read the set with [`Index::moved`].
fn moved_err() -> io::Error {
    sys::errno(libc::EREMOTE)
}

pub fn linkto_of(t: &XTarget) -> io::Result<Option<Id>> {
    match t.get(XATTR_LINKTO) {
        Ok(v) if v.len() == 16 => Ok(Some(Id::from_bytes(v.try_into().expect("16 bytes")))),
        Ok(_) => Err(sys::errno(libc::EIO)),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Index {
    pub fn new(root: OwnedFd, ids: OwnedFd, data: OwnedFd) -> Index {
        Index {
            root,
            ids,
            data: Arc::new(data),
            dirs: Mutex::new(FdLru::new(1024)),
            files: Mutex::new(FdLru::new(256)),
            direct: Mutex::new(FdLru::new(64)),
        }
    }

    pub fn ids_fd(&self) -> RawFd {
        self.ids.as_raw_fd()
    }

    /// The xattr target of a non-directory's index link.
    pub fn xtarget(&self, id: Id) -> io::Result<XTarget> {
        let mut p = format!("/proc/self/fd/{}/", self.ids.as_raw_fd()).into_bytes();
        p.extend_from_slice(rel(id).as_bytes());
        Ok(XTarget::Path(cstr(&p)?))
    }

    pub(crate) fn ensure_bucket(&self, id: Id) -> io::Result<()> {
        let (a, ab) = bucket(id);
        for d in [a, ab] {
            match sys::mkdirat(self.ids_fd(), &cstr(d.as_bytes())?, 0o711) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Run `f`, which makes an entry in `id`'s bucket; if that fails with ENOENT (the
    /// bucket does not exist yet: the first id of the 65536), make the bucket and run it
    /// again. Buckets are never removed, so most creates cost no `mkdirat`.
    fn in_bucket(&self, id: Id, f: impl Fn() -> io::Result<()>) -> io::Result<()> {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.ensure_bucket(id)?;
                f()
            }
            r => r,
        }
    }

    /// `lstat` of the index entry of `id`.
    pub fn lstat_index(&self, id: Id) -> io::Result<libc::stat> {
        sys::lstatat(self.ids_fd(), &rel(id))
    }

    /// Hard-link the non-directory `name` in `dir` into the index as `id`. An index entry
    /// that already is this inode is fine; one that is another inode is EEXIST.
    pub fn link_file(&self, id: Id, dir: RawFd, name: &[u8]) -> io::Result<()> {
        let cname = cstr(name)?;
        let r = rel(id);
        match self.in_bucket(id, || sys::linkat(dir, &cname, self.ids_fd(), &r)) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                let a = sys::lstatat(dir, &cname)?;
                let b = self.lstat_index(id)?;
                if a.st_ino == b.st_ino && a.st_dev == b.st_dev {
                    Ok(())
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Create or replace (atomically) the index symlink of directory `id`.
    pub fn set_dir_link(&self, id: Id, parent: Id, name: &[u8]) -> io::Result<()> {
        let target = cstr(&dir_link_target(parent, name))?;
        let r = rel(id);
        match self.in_bucket(id, || sys::symlinkat(&target, self.ids_fd(), &r)) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                let (_, ab) = bucket(id);
                let tmp = cstr(format!("{}/.tmp.{}", ab, id.to_hex()).as_bytes())?;
                let _ = sys::unlinkat(self.ids_fd(), &tmp, 0);
                sys::symlinkat(&target, self.ids_fd(), &tmp)?;
                sys::renameat2(self.ids_fd(), &tmp, self.ids_fd(), &r, 0)
            }
            Err(e) => Err(e),
        }
    }

    /// The set `id` was moved to, if its index entry is a moved stub.
    pub fn moved(&self, id: Id) -> io::Result<Option<u32>> {
        let st = self.lstat_index(id)?;
        self.moved_st(id, &st)
    }

    fn moved_st(&self, id: Id, st: &libc::stat) -> io::Result<Option<u32>> {
        if !stub_shaped(st) {
            return Ok(None);
        }
        moved_of(&self.xtarget(id)?)
    }

    /// Make (or rewrite) the index entry of `id` a moved stub naming `set`, atomically
    /// (a new file renamed over the entry): the inode the entry linked loses that link
    /// (its names, if any, are the caller's business). Cached fds of `id` are forgotten.
    pub fn make_stub(&self, id: Id, set: u32) -> io::Result<()> {
        let (_, ab) = bucket(id);
        let tmp = cstr(format!("{}/.tmp.stub.{}", ab, id.to_hex()).as_bytes())?;
        let _ = sys::unlinkat(self.ids_fd(), &tmp, 0);
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW;
        let fd = match sys::openat(self.ids_fd(), &tmp, flags, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.ensure_bucket(id)?;
                sys::openat(self.ids_fd(), &tmp, flags, 0)?
            }
            r => r?,
        };
        sys::fchmod(fd.as_raw_fd(), 0)?;
        XTarget::Fd(fd.as_raw_fd()).set(XATTR_MOVED, &set.to_le_bytes(), 0)?;
        sys::fsync(fd.as_raw_fd(), false)?;
        drop(fd);
        let _fds = (
            self.files.lock().remove(id),
            self.direct.lock().remove(id),
            self.dirs.lock().remove(id),
        );
        sys::renameat2(self.ids_fd(), &tmp, self.ids_fd(), &rel(id), 0)
    }

    /// Remove the index entry of `id` (missing is fine) and forget cached fds.
    pub fn unlink(&self, id: Id) -> io::Result<()> {
        // The fds close after the locks are let go.
        let _fds = (
            self.files.lock().remove(id),
            self.direct.lock().remove(id),
            self.dirs.lock().remove(id),
        );
        match sys::unlinkat(self.ids_fd(), &rel(id), 0) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
            _ => Ok(()),
        }
    }

    pub fn forget_dir(&self, id: Id) {
        let _fd = self.dirs.lock().remove(id);
    }

    pub fn remember_dir(&self, id: Id, fd: OwnedFd) -> Arc<OwnedFd> {
        let fd = Arc::new(fd);
        let _evicted = self.dirs.lock().put(id, fd.clone());
        fd
    }

    /// Is the symlink index entry of `id` a directory link (no id xattr) rather than a
    /// hard link to a user symlink (which carries the id)?
    fn is_dir_link(&self, id: Id) -> io::Result<bool> {
        Ok(id_of(&self.xtarget(id)?)? != Some(id))
    }

    /// What `id` names here. ENOENT when this brick has no such inode.
    pub fn find(&self, id: Id) -> io::Result<Found> {
        if id == Id::ROOT {
            return Ok(Found::Dir(self.data.clone()));
        }
        if let Some(fd) = self.dirs.lock().get(id) {
            return Ok(Found::Dir(fd));
        }
        // A file whose fd is cached: its inode is the index link's (the cache forgets an id
        // before its link goes, [`Self::unlink`]), so no path walk.
        if let Some(fd) = self.files.lock().get(id) {
            let st = sys::fstat(fd.as_raw_fd())?;
            if st.st_nlink > 0 {
                return Ok(Found::Other(st));
            }
        }
        let st = self.lstat_index(id)?;
        if is_lnk(&st) && self.is_dir_link(id)? {
            return Ok(Found::Dir(self.dir_fd(id)?));
        }
        if self.moved_st(id, &st)?.is_some() {
            return Err(moved_err());
        }
        Ok(Found::Other(st))
    }

    /// (parent id, name) of directory `id`, from its index symlink.
    pub fn dir_parent(&self, id: Id) -> io::Result<(Id, Vec<u8>)> {
        let t = sys::readlinkat(self.ids_fd(), &rel(id))?;
        parse_dir_link(&t).ok_or_else(|| sys::errno(libc::EIO))
    }

    /// An fd of directory `id`, found through the index symlinks.
    pub fn dir_fd(&self, id: Id) -> io::Result<Arc<OwnedFd>> {
        self.dir_fd_depth(id, 0)
    }

    fn dir_fd_depth(&self, id: Id, depth: usize) -> io::Result<Arc<OwnedFd>> {
        if id == Id::ROOT {
            return Ok(self.data.clone());
        }
        if let Some(fd) = self.dirs.lock().get(id) {
            return Ok(fd);
        }
        if depth > MAX_DEPTH {
            return Err(sys::errno(libc::ELOOP));
        }
        let st = self.lstat_index(id)?;
        if !is_lnk(&st) || !self.is_dir_link(id)? {
            return Err(sys::errno(libc::ENOTDIR));
        }
        let (parent, name) = self.dir_parent(id)?;
        let pfd = self.dir_fd_depth(parent, depth + 1)?;
        let fd = match sys::open_dir_at(pfd.as_raw_fd(), &cstr(&name)?) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(sys::errno(libc::ESTALE))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(sys::errno(libc::ESTALE))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(sys::errno(libc::ESTALE))
            }
            Err(e) => return Err(e),
        };
        if id_of_fd(fd.as_raw_fd())? != Some(id) {
            return Err(sys::errno(libc::ESTALE));
        }
        Ok(self.remember_dir(id, fd))
    }

    /// Keep `fd`, opened read-write as root (as [`Self::file_fd`] opens), as the fd of
    /// regular file `id`, whose index link exists.
    pub fn remember_file(&self, id: Id, fd: OwnedFd) {
        let _evicted = self.files.lock().put(id, Arc::new(fd));
    }

    /// The fd of regular file `id` if the fd cache holds it (no syscall).
    pub fn file_fd_cached(&self, id: Id) -> Option<Arc<OwnedFd>> {
        self.files.lock().get(id)
    }

    /// An fd (read-write when the filesystem allows) of the regular file `id`.
    pub fn file_fd(&self, id: Id) -> io::Result<Arc<OwnedFd>> {
        if let Some(fd) = self.files.lock().get(id) {
            return Ok(fd);
        }
        let r = rel(id);
        let st = sys::lstatat(self.ids_fd(), &r)?;
        if self.moved_st(id, &st)?.is_some() {
            return Err(moved_err());
        }
        if !is_reg(&st) {
            return Err(sys::errno(if is_lnk(&st) && self.is_dir_link(id)? {
                libc::EISDIR
            } else {
                libc::EINVAL
            }));
        }
        let fd = Arc::new(open_file_at(self.ids_fd(), &r)?);
        let _evicted = self.files.lock().put(id, fd.clone());
        Ok(fd)
    }

    /// [`Self::file_fd`] of regular file `id` that is `name` in directory `dir` (the caller
    /// just looked it up and holds the directory's lock): opened by that name, whose dentry
    /// the lookup warmed, rather than by its index link, a second path walk through two
    /// bucket directories that are cold on a cold cache. The fd is kept only if its inode
    /// carries `id`; `None` otherwise (the name changed meanwhile) or on any error: the
    /// caller falls back to the index.
    pub fn file_fd_at(&self, id: Id, dir: RawFd, name: &CStr) -> Option<Arc<OwnedFd>> {
        if let Some(fd) = self.files.lock().get(id) {
            return Some(fd);
        }
        let fd = open_file_at(dir, name).ok()?;
        if id_of_fd(fd.as_raw_fd()).ok()? != Some(id) {
            return None;
        }
        let fd = Arc::new(fd);
        let _evicted = self.files.lock().put(id, fd.clone());
        Some(fd)
    }

    /// An `O_DIRECT` write-only fd of regular file `id`, whose open fd is `fd`: the same
    /// open file reopened through `/proc/self/fd` (so the same inode, whatever its links
    /// became meanwhile), cached beside the plain fds.
    pub fn file_fd_direct(&self, id: Id, fd: &OwnedFd) -> io::Result<Arc<OwnedFd>> {
        if let Some(d) = self.direct.lock().get(id) {
            return Ok(d);
        }
        let path =
            CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("a path without NUL");
        let flags = libc::O_WRONLY | libc::O_DIRECT | libc::O_NOCTTY;
        let d = Arc::new(sys::openat(libc::AT_FDCWD, &path, flags, 0)?);
        let _evicted = self.direct.lock().put(id, d.clone());
        Ok(d)
    }
}

/// What a name in a directory is.
pub enum Ent {
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

/// What `name` in `dir` is (never following a symlink).
pub fn entry(dir: RawFd, name: &[u8]) -> io::Result<Ent> {
    let st = sys::lstatat(dir, &cstr(name)?)?;
    entry_of(dir, name, st)
}

/// [`entry`] of `name` in `dir` whose `lstat` the caller already made.
pub fn entry_of(dir: RawFd, name: &[u8], st: libc::stat) -> io::Result<Ent> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<OwnedFd> {
        Arc::new(sys::openat(libc::AT_FDCWD, c"/dev/null", libc::O_RDONLY, 0).unwrap())
    }

    #[test]
    fn fd_lru_evicts_the_least_recently_used_and_stays_bounded() {
        let mut l = FdLru::new(3);
        let (a, b, c, d) = (Id(1), Id(2), Id(3), Id(4));
        for id in [a, b, c] {
            assert!(l.put(id, fd()).is_none());
        }
        // a used again: b is now the oldest.
        assert!(l.get(a).is_some());
        let f = fd();
        let evicted = l.put(d, f.clone()).expect("full: one evicted");
        assert!(!Arc::ptr_eq(&evicted, &f));
        assert!(l.get(b).is_none(), "b was the least recently used");
        assert!(l.get(a).is_some() && l.get(c).is_some() && l.get(d).is_some());
        assert_eq!(l.len(), 3);
        // Replacing an id's fd hands back the old one and evicts nothing.
        let old = l.put(c, fd()).expect("the replaced fd");
        assert_eq!(Arc::strong_count(&old), 1);
        assert_eq!(l.len(), 3);
        // Removed ids leave stale use records behind; many uses keep the record bounded.
        assert!(l.remove(a).is_some());
        for _ in 0..10_000 {
            assert!(l.get(d).is_some());
        }
        assert!(l.order.len() <= 4 * 16 + 1, "use records swept: {}", l.order.len());
        // Room again after the remove: nothing evicted, then the oldest (c, then d) goes.
        assert!(l.put(a, fd()).is_none());
        assert!(l.put(b, fd()).is_some());
        assert!(l.get(c).is_none(), "c was used before d's last use");
        assert!(l.get(d).is_some() && l.get(a).is_some() && l.get(b).is_some());
    }
}
