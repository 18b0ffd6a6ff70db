//! The brick: the `Brick` type, the execution context of an operation and the helpers
//! every operation uses (find an inode by id, what a name is, the lock stripe, copying a
//! head's result onto a replica). The operations are grouped by idea in the files of this
//! folder; `dispatch` routes a request to them.

mod attrs;
mod data;
mod dir;
mod migrate;
mod namespace;
mod open;
mod scrub;
mod xattr;

pub use dir::cookie;
pub(crate) use dir::Listing;
pub use migrate::FENCE_TTL;

use crate::acl::{acl_permits, posix_acl_of};
use crate::creds::AsCaller;
use crate::error::{fail, io_err, BrickError, Ctx, R};
use crate::ids::{self, id_of, is_dir, is_lnk, Found, Index};
use crate::marker::BrickMarker;
use crate::pending::PendingLog;
use crate::stripe::Stripe;
use crate::sys::{self, cstr};
use cairn_proto::{Attr, Creds, FileType, Id, RemoteError, Timespec};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

pub struct Brick {
    root: PathBuf,
    marker: BrickMarker,
    idx: Index,
    /// Ids held open by `Op::Open`, with their count.
    opens: Mutex<HashMap<Id, u32>>,
    /// Files fenced while a rebalance copies them to another set, with that set and
    /// when the fence was last set (`migrate.rs`).
    fences: Mutex<HashMap<Id, (u32, std::time::Instant)>>,
    pending: PendingLog,
    listings: Mutex<HashMap<Id, Arc<Listing>>>,
    stripes: Vec<Stripe>,
    /// The data checksums (`csum/`): sidecars, their open fds, the dirty log.
    csum: crate::csum::Checksums,
    /// Starts large writes' write-out early (see `writeback.rs`).
    writeback: crate::writeback::Writeback,
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

impl Brick {
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn marker(&self) -> &BrickMarker {
        &self.marker
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
                moved: f.moved,
            });
            if corrupt {
                tracing::error!(volume = %self.marker.volume, brick = self.marker.index, error = %e, "data corruption detected");
            } else {
                tracing::debug!(error = %e, "brick op failed");
            }
            e
        })
    }

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
            Some(libc::EREMOTE) => self.moved_fail(id),
            _ => Err::<(), _>(e).ctx(|| format!("id {id}")).unwrap_err(),
        })
    }

    pub(crate) fn file(&self, id: Id) -> R<Arc<OwnedFd>> {
        self.idx.file_fd(id).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => fail(libc::ESTALE, format!("no inode with id {id}")),
            Some(libc::EREMOTE) => self.moved_fail(id),
            _ => Err::<(), _>(e).ctx(|| format!("regular file {id}")).unwrap_err(),
        })
    }

    /// EMOVED for `id`, whose index entry here is a moved stub: the error names the set
    /// the inode lives on now, in its `moved` field (`RemoteError::moved_to`).
    fn moved_fail(&self, id: Id) -> crate::error::Fail {
        match self.idx.moved(id) {
            Ok(Some(set)) => crate::error::Fail {
                moved: Some(set),
                ..fail(libc::EREMOTE, cairn_proto::error::moved_message(id, set))
            },
            // Replaced again meanwhile (a heal): the client asks again.
            Ok(None) => fail(libc::ESTALE, format!("inode {id}: moved stub changed")),
            Err(e) => Err::<(), _>(e).ctx(|| format!("moved stub of {id}")).unwrap_err(),
        }
    }

    /// Make the index entry of `id` a moved stub naming replica set `set` (the inode
    /// itself now lives there; docs/rebalance.md).
    pub fn make_stub(&self, id: Id, set: u32) -> Result<(), RemoteError> {
        self.with_context("make_stub", || {
            self.idx.make_stub(id, set).ctx(|| format!("moved stub of {id} to set {set}"))?;
            self.csum.forget(id);
            Ok(())
        })
    }

    /// The set `id` was moved to, if its index entry here is a moved stub.
    pub fn moved(&self, id: Id) -> Option<u32> {
        self.idx.moved(id).ok().flatten()
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
                // A moved stub has no name and no open; it forwards the id.
                if ids::stub_shaped(&st) && self.idx.moved(id).ok().flatten().is_some() {
                    return Ok(());
                }
                if is_lnk(&st)
                    && id_of(&self.idx.xtarget(id).ctx(|| "")?).ok().flatten() != Some(id)
                {
                    return Ok(()); // a directory's index link
                }
                self.idx.unlink(id).ctx(|| format!("removing index link of {id}"))?;
                self.csum.forget(id);
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

    /// Record, durably, that `id` changed while brick `peer` was not receiving writes.
    /// Recording an id already pending gives its record a new generation (`pending.rs`).
    pub fn pending_add(&self, peer: u32, id: Id) -> Result<(), RemoteError> {
        self.pending.add(peer, id).map_err(|e| {
            io_err(
                e,
                format!(
                    "brick {}#{} ({}): recording pending heal of {id} for peer {peer}",
                    self.marker.volume,
                    self.marker.index,
                    self.root.display()
                ),
            )
        })
    }

    /// Number of ids pending for each peer.
    pub fn pending_counts(&self) -> Vec<(u32, u64)> {
        self.pending.counts()
    }

    /// Peers this brick holds `id` pending for.
    pub fn pending_peers(&self, id: Id) -> Vec<u32> {
        self.pending.peers(id)
    }

    /// The ids pending for `peer`, sorted, each with its record's generation.
    pub fn pending_list(&self, peer: u32) -> Vec<(Id, u64)> {
        self.pending.list(peer)
    }

    /// Make `path` a brick of a volume: create it if missing, refuse it if it is not a
    /// directory, if it already is a brick (of any volume), or if it is not empty (unless
    /// `force`). Writes the marker, `.cairn/` and `data/` (see `marker.rs`).
    pub fn prepare(path: &Path, marker: &BrickMarker, force: bool) -> Result<(), RemoteError> {
        crate::marker::prepare(path, marker, force)
    }

    /// Make `path` brick `marker.index` of its volume again after its disk was replaced,
    /// flagged for a full heal (see `marker::reset`).
    pub fn reset(path: &Path, marker: &BrickMarker, force: bool) -> Result<(), RemoteError> {
        crate::marker::reset(path, marker, force)
    }

    /// True while a full crawl is owed to this brick.
    pub fn full_heal_requested(&self) -> bool {
        crate::marker::full_heal_requested(&self.root)
    }

    pub fn request_full_heal(&self, why: &str) -> Result<(), RemoteError> {
        crate::marker::request_full_heal_at(&self.root, why)
    }

    /// The position the running (or a cut) full crawl saved, if any.
    pub fn full_heal_position(&self) -> Option<Vec<u8>> {
        crate::marker::full_heal_position(&self.root)
    }

    /// Save the position of the running full crawl (durably; only while one is owed).
    pub fn save_full_heal_position(&self, body: &[u8]) -> Result<(), RemoteError> {
        crate::marker::save_full_heal_position(&self.root, body)
    }

    /// A full crawl finished: forget the request (and its position).
    pub fn clear_full_heal(&self) -> Result<(), RemoteError> {
        crate::marker::clear_full_heal(&self.root)
    }
}

impl Brick {
    /// Forget the records of `peer` for these ids whose generation is still the one given
    /// (`PendingClear`); returns the ids whose records stayed.
    pub(crate) fn pending_clear(&self, peer: u32, ids: &[(Id, u64)]) -> R<Vec<Id>> {
        self.pending.clear(peer, ids)
    }
}

impl crate::heal::Store for Brick {
    fn index(&self) -> &Index {
        &self.idx
    }
    fn checksums(&self) -> &crate::csum::Checksums {
        &self.csum
    }
    fn stripe(&self, id: Id) -> &Stripe {
        Brick::stripe(self, id)
    }
    fn root(&self) -> &Path {
        &self.root
    }
    fn brick_index(&self) -> u32 {
        self.marker.index
    }
    fn with_context<T>(&self, what: &str, f: impl FnOnce() -> R<T>) -> Result<T, RemoteError> {
        Brick::with_context(self, what, f)
    }
    fn dir(&self, id: Id) -> R<Arc<OwnedFd>> {
        Brick::dir(self, id)
    }
    fn file(&self, id: Id) -> R<Arc<OwnedFd>> {
        Brick::file(self, id)
    }
    fn attr(&self, id: Id) -> R<Attr> {
        Brick::attr(self, id)
    }
    fn forget_listing(&self, dir: Id) {
        Brick::forget_listing(self, dir)
    }
    fn drop_if_unused(&self, id: Id) -> R<()> {
        Brick::drop_if_unused(self, id)
    }
    fn xattr_pairs(&self, id: Id) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        Brick::xattr_pairs(self, id)
    }
    fn set_xattrs(&self, id: Id, want: &[(Vec<u8>, Vec<u8>)]) -> R<()> {
        Brick::set_xattrs(self, id, want)
    }
    fn pending_add(&self, peer: u32, id: Id) -> Result<(), RemoteError> {
        Brick::pending_add(self, peer, id)
    }
}
