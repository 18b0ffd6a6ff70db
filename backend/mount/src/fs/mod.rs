//! The FUSE filesystem: each kernel request is translated into one `cairn_client::Volume`
//! call, spawned onto the tokio runtime, and answered from there (fuser's `Reply*` objects
//! are `Send`), so a slow call never holds up the session loop or other requests.

use crate::creds::GroupCache;
use crate::inodes::InodeTable;
use crate::lend;
use bytes::Bytes;
use cairn_client::{
    Attr, Creds, FileType, Id, Lock, LockKind, SeekWhence, SetAttr, SetTime, Volume,
};
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::oneshot;
use tracing::{debug, warn};

/// Entries asked from the bricks per READDIR / READDIRPLUS (the kernel's buffer is one
/// page; what does not fit is asked again from the last cookie that did).
const READDIR_BATCH: u32 = 128;
const READDIRPLUS_BATCH: u32 = 32;
/// Preferred I/O size reported in `st_blksize`.
const BLKSIZE: u32 = 128 * 1024;
/// POSIX lock `end` meaning "to end of file" (the kernel's OFFSET_MAX).
const OFFSET_MAX: u64 = i64::MAX as u64;

pub use cairn_client::InvalidateFn;

#[derive(Debug, Clone)]
pub struct FsConfig {
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
    pub writeback_cache: bool,
    /// FUSE session threads (`CAIRN_MOUNT_FUSE_THREADS`): all but one of them may wait
    /// on the runtime, for a LOOKUP's or GETATTR's reply ([`CairnFs::run_here`]) or for
    /// a lent WRITE's data to be done with (`lend`).
    pub session_threads: usize,
}

/// An open file.
struct Handle {
    id: Id,
    /// The opener's credentials: I/O on the handle runs with them, as permission was
    /// checked at open (writeback from the page cache arrives with pid 0 and no groups).
    creds: Creds,
    /// O_SYNC / O_DSYNC: writes go through to every replica before returning.
    sync: bool,
    /// Credentials for reads: the opener's, or root for a write-only open. With the
    /// writeback cache the kernel reads partial pages of a file opened O_WRONLY before
    /// writing them back; the opener may lack read permission, and what is read only fills
    /// the page cache (a read(2) still needs a readable open, which the kernel checks).
    read_creds: Creds,
    /// Opened O_RDONLY: nothing written through it can be pending at close.
    read_only: bool,
}

struct Shared {
    vol: Arc<Volume>,
    cfg: FsConfig,
    inodes: Mutex<InodeTable>,
    handles: Mutex<HashMap<u64, Handle>>,
    /// Open handles per file: a file open here may hold dirty pages in the kernel, so its
    /// kernel inode must not be replaced (writeback cache, see `entry_generation`).
    opens: Mutex<HashMap<Id, u32>>,
    next_fh: AtomicU64,
    groups: GroupCache,
    /// (inode, lock owner) pairs that may hold POSIX locks: FLUSH releases them (close(2)
    /// drops a process's locks), and only these cost a round trip on close.
    lockers: Mutex<HashSet<(Id, u64)>>,
    /// Inodes known to carry no `security.capability`, and since when. The kernel asks
    /// before every write (to drop file capabilities); without this each write(2) through
    /// the writeback cache would cost a brick round trip. Trusted for the attribute TTL.
    no_caps: Mutex<HashMap<Id, std::time::Instant>>,
    /// Regular files a WRITE reached through this mount since the kernel last flushed
    /// their times (see `times_flush_is_redundant`), with their attributes as cached when
    /// the first of those writes came (a write drops them from the client's cache) and
    /// the size grown to the end of the writes.
    written: Mutex<HashMap<Id, Attr>>,
    /// FUSE requests received, by opcode (read through [`STATS_XATTR`]).
    ops: Mutex<BTreeMap<&'static str, u64>>,
    /// Session threads waiting on the runtime right now (a lent WRITE, a LOOKUP or
    /// GETATTR run here): one budget of `session_threads - 1` for both, so one thread is
    /// always left to read requests.
    parked: lend::Slots,
}

const CAPS: &[u8] = b"security.capability";
/// Virtual extended attribute of the mount root: the FUSE requests received by opcode and
/// the client library's brick round trips by operation, one `fuse.OP N` / `brick.OP N` a
/// line (what the benchmark reports per file operation). Never sent to the bricks.
pub const STATS_XATTR: &[u8] = b"trusted.cairn.mount-stats";

pub struct CairnFs {
    sh: Arc<Shared>,
    rt: tokio::runtime::Handle,
}

// The conversions between the client's and the kernel's types.
mod convert;
pub use convert::*;

impl CairnFs {
    pub fn new(vol: Arc<Volume>, root: Id, cfg: FsConfig, rt: tokio::runtime::Handle) -> CairnFs {
        let parked = cfg.session_threads.saturating_sub(1);
        CairnFs {
            sh: Arc::new(Shared {
                vol,
                cfg,
                inodes: Mutex::new(InodeTable::new(root)),
                handles: Mutex::new(HashMap::new()),
                opens: Mutex::new(HashMap::new()),
                next_fh: AtomicU64::new(1),
                groups: GroupCache::default(),
                lockers: Mutex::new(HashSet::new()),
                no_caps: Mutex::new(HashMap::new()),
                written: Mutex::new(HashMap::new()),
                ops: Mutex::new(BTreeMap::new()),
                parked: lend::Slots::new(parked),
            }),
            rt,
        }
    }

    /// Returns a maker of the upcall to register with `Volume::on_invalidate`, given the
    /// session's notifier (which exists only once the filesystem moved into the session).
    /// Lease recalls are passed to the kernel's caches from a thread of their own: a
    /// notification can wait on kernel locks held by a request that itself waits on us, so
    /// it must not run on the session loop nor hold a runtime worker. The client library
    /// acknowledges the recall to the brick only once the thread has passed it on (each
    /// recall's completion is signalled, or dropped, when done), or after its bounded wait
    /// (`cairn_client::INVALIDATE_ACK_WAIT`) if the kernel is stuck: otherwise the other
    /// client's change could complete while the kernel still serves what it replaced.
    pub fn invalidator_factory(&self) -> impl FnOnce(Notifier) -> InvalidateFn {
        let sh = self.sh.clone();
        move |notifier| {
            let (tx, rx) = std::sync::mpsc::channel::<(Id, bool, oneshot::Sender<()>)>();
            std::thread::Builder::new()
                .name("cairn-inval".into())
                .spawn(move || {
                    while let Ok((id, entries, done)) = rx.recv() {
                        let (ino, names) = {
                            let t = sh.inodes.lock();
                            let Some(ino) = t.ino_of(id) else { continue };
                            (ino, if entries { t.children(ino) } else { Vec::new() })
                        };
                        if let Err(e) = notifier.inval_inode(INodeNo(ino), 0, 0) {
                            debug!(%id, ino, error = %e, "inval_inode");
                        }
                        // Writeback cache: the kernel keeps its own size and mtime of a
                        // regular file for as long as the inode lives, so drop its dentry
                        // too; unless the file is open here, the inode goes with it and the
                        // next lookup builds a fresh one from the bricks' attributes.
                        if sh.cfg.writeback_cache && !entries {
                            let name = sh.inodes.lock().tracked_name(ino);
                            if let Some((dir, name)) = name {
                                let r =
                                    notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(&name));
                                if let Err(e) = r {
                                    debug!(%id, ino, error = %e, "inval_entry (file)");
                                }
                            }
                        }
                        for name in names {
                            if let Err(e) =
                                notifier.inval_entry(INodeNo(ino), OsStr::from_bytes(&name))
                            {
                                debug!(%id, ino, error = %e, "inval_entry");
                            }
                        }
                        let _ = done.send(());
                    }
                })
                .expect("spawn invalidation thread");
            Arc::new(move |id: Id, entries: bool| {
                let (done, rx) = oneshot::channel();
                tx.send((id, entries, done)).ok()?;
                Some(rx)
            })
        }
    }

    fn count(&self, op: &'static str) {
        *self.sh.ops.lock().entry(op).or_default() += 1;
    }

    /// The text of [`STATS_XATTR`].
    fn stats_text(&self) -> Vec<u8> {
        let mut s = String::new();
        for (op, n) in self.sh.ops.lock().iter() {
            s.push_str(&format!("fuse.{op} {n}\n"));
        }
        let st = self.sh.vol.stats();
        for (op, n) in st.by_op {
            s.push_str(&format!("brick.{op} {n}\n"));
        }
        s.push_str(&format!("brick.round_trips {}\n", st.round_trips));
        s.push_str(&format!("client.quick_reads {}\n", st.quick_reads));
        s.into_bytes()
    }

    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        self.rt.spawn(f);
    }

    /// Run `f` (a LOOKUP or GETATTR) to completion on this FUSE session thread: the
    /// request frame is written by this thread and the reply wakes it directly, with no
    /// hand-off to a runtime worker and back (on the small-file read path, one LOOKUP per
    /// file is the only round trip). At most all but one session thread wait so: the last
    /// one hands `f` to the runtime like every other request, so a slow or unreachable
    /// brick can hold up to `session_threads - 1` threads but never stop this mount from
    /// reading its other requests (READs from the cache, RELEASE, FORGET, INTERRUPT).
    fn run_here(&self, f: impl Future<Output = ()> + Send + 'static) {
        match self.sh.parked.take(Duration::ZERO) {
            Some(_slot) => self.rt.block_on(f),
            None => self.spawn(f),
        }
    }

    fn creds(&self, req: &Request) -> Creds {
        self.sh.groups.creds(req.uid(), req.gid(), req.pid())
    }

    fn id(&self, ino: u64) -> Result<Id, i32> {
        self.sh.inodes.lock().id(ino).ok_or(libc::ESTALE)
    }

    /// The open file `fh` (of inode `ino`): its id, the opener's credentials, O_SYNC.
    fn handle(&self, fh: u64, ino: u64) -> Result<(Id, Creds, bool), i32> {
        match self.sh.handles.lock().get(&fh) {
            Some(h) => Ok((h.id, h.creds.clone(), h.sync)),
            // Not a handle we issued (directories get fh 0): never guess credentials.
            None => {
                debug!(fh, ino, "request on an unknown file handle");
                Err(libc::EBADF)
            }
        }
    }

    /// Under the writeback cache the kernel stamps mtime and ctime itself at each
    /// `write(2)` and, at close (or inode writeback), flushes them in a SETATTR of exactly
    /// `FATTR_MTIME | FATTR_CTIME | FATTR_FH` with mtime == ctime (Linux `fuse_flush_times`;
    /// it ignores the reply). If a WRITE of this file reached this mount since the last such
    /// flush, that WRITE (or one still to come for the pages dirtied) moves the file's mtime
    /// and ctime on the bricks after the kernel's stamp, so the SETATTR would only replace
    /// the bricks' time of the write by the kernel's a few milliseconds earlier: it is
    /// answered here, without a round trip. Returns the attributes to reply with.
    ///
    /// A user's `utime(s)`/`futimens` never carries a file handle (the kernel sets one only
    /// for `ftruncate`, which has a size, and for this flush), and a chmod, chown, truncate
    /// or atime change has other fields: all of those still reach the bricks. A flush with
    /// no write since (e.g. of a ctime moved by setxattr or link) does too.
    fn times_flush_is_redundant(
        &self,
        ino: u64,
        id: Id,
        set: &SetAttr,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
    ) -> Option<Attr> {
        let sh = &self.sh;
        if !sh.cfg.writeback_cache
            || set.perm.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || set.atime.is_some()
        {
            return None;
        }
        let (Some(SetTime::At(m)), Some(c), Some(FileHandle(fh))) = (set.mtime, ctime, fh) else {
            return None;
        };
        if m != to_timespec(c) {
            return None;
        }
        match sh.handles.lock().get(&fh) {
            Some(h) if h.id == id && !h.read_only => {}
            _ => return None,
        }
        let mut a = sh.written.lock().remove(&id)?;
        if a.kind != FileType::Regular {
            return None;
        }
        a.mtime = m;
        a.ctime = m;
        // The kernel holds these times now (and the bricks the write's): a LOOKUP after
        // close sees the difference and hands out a fresh inode with the bricks' times.
        sh.inodes.lock().local_change(ino, None, None, Some((m.sec, m.nsec)));
        debug!(%id, ino, "kernel's mtime/ctime flush after a write answered without the bricks");
        Some(a)
    }

    fn new_handle(sh: &Shared, id: Id, creds: Creds, flags: i32) -> u64 {
        let fh = sh.next_fh.fetch_add(1, Ordering::Relaxed);
        let sync = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let read_creds =
            if flags & libc::O_ACCMODE == libc::O_WRONLY { Creds::root() } else { creds.clone() };
        *sh.opens.lock().entry(id).or_default() += 1;
        let read_only = flags & libc::O_ACCMODE == libc::O_RDONLY;
        sh.handles.lock().insert(fh, Handle { id, creds, sync, read_creds, read_only });
        fh
    }
}

macro_rules! try_reply {
    ($e:expr, $reply:ident) => {
        match $e {
            Ok(v) => v,
            Err(n) => return $reply.error(Errno::from_i32(n)),
        }
    };
}

// The FUSE operations by group (each an `impl CairnFs` of `op_*` methods that the
// `Filesystem` impl below calls); declared after `try_reply`, which they use.
mod dir;
mod entries;
use entries::{entry_generation, note_no_caps};
mod io;
mod locks;
mod xattr;

impl Filesystem for CairnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut caps = InitFlags::FUSE_POSIX_LOCKS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_ASYNC_DIO
            // The bricks drop setuid/setgid on writes themselves, so the kernel need not
            // ask for security.capability before every write(2).
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        if self.sh.cfg.writeback_cache {
            caps |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        for cap in caps.iter() {
            if config.add_capabilities(cap).is_err() {
                debug!(?cap, "kernel lacks FUSE capability");
            }
        }
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        Ok(())
    }
    fn lookup(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.op_lookup(req, INodeNo(parent), name, reply)
    }

    fn forget(&self, _req: &Request, INodeNo(ino): INodeNo, nlookup: u64) {
        self.op_forget(_req, INodeNo(ino), nlookup)
    }

    fn getattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        self.op_getattr(req, INodeNo(ino), _fh, reply)
    }

    fn setattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.op_setattr(
            req,
            INodeNo(ino),
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime,
            fh,
            _crtime,
            _chgtime,
            _bkuptime,
            _flags,
            reply,
        )
    }

    fn readlink(&self, req: &Request, INodeNo(ino): INodeNo, reply: ReplyData) {
        self.op_readlink(req, INodeNo(ino), reply)
    }

    fn mknod(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.op_mknod(req, INodeNo(parent), name, mode, _umask, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.op_mkdir(req, INodeNo(parent), name, mode, _umask, reply)
    }

    fn unlink(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_unlink(req, INodeNo(parent), name, reply)
    }

    fn rmdir(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_rmdir(req, INodeNo(parent), name, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.op_symlink(req, INodeNo(parent), link_name, target, reply)
    }

    fn rename(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.op_rename(req, INodeNo(parent), name, INodeNo(newparent), newname, flags, reply)
    }

    fn link(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.op_link(req, INodeNo(ino), INodeNo(newparent), newname, reply)
    }

    fn open(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        OpenFlags(flags): OpenFlags,
        reply: ReplyOpen,
    ) {
        self.op_open(req, INodeNo(ino), OpenFlags(flags), reply)
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.op_read(_req, _ino, FileHandle(fh), offset, size, _flags, _lock_owner, reply)
    }

    fn write(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.op_write(
            _req,
            INodeNo(ino),
            FileHandle(fh),
            offset,
            data,
            _write_flags,
            _flags,
            _lock_owner,
            reply,
        )
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        reply: ReplyEmpty,
    ) {
        self.op_flush(req, _ino, FileHandle(fh), LockOwner(lock_owner), reply)
    }

    fn release(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.op_release(_req, INodeNo(ino), FileHandle(fh), _flags, _lock_owner, _flush, reply)
    }

    fn fsync(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.op_fsync(req, INodeNo(ino), FileHandle(fh), datasync, reply)
    }

    fn opendir(&self, _req: &Request, INodeNo(ino): INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.op_opendir(_req, INodeNo(ino), _flags, reply)
    }

    fn readdir(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.op_readdir(req, INodeNo(ino), _fh, offset, reply)
    }

    fn readdirplus(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.op_readdirplus(req, INodeNo(ino), _fh, offset, reply)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.op_releasedir(_req, _ino, _fh, _flags, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.op_fsyncdir(_req, _ino, _fh, _datasync, reply)
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.op_statfs(req, _ino, reply)
    }

    fn setxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.op_setxattr(req, INodeNo(ino), name, value, flags, _position, reply)
    }

    fn getxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.op_getxattr(req, INodeNo(ino), name, size, reply)
    }

    fn listxattr(&self, req: &Request, INodeNo(ino): INodeNo, size: u32, reply: ReplyXattr) {
        self.op_listxattr(req, INodeNo(ino), size, reply)
    }

    fn removexattr(&self, req: &Request, INodeNo(ino): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.op_removexattr(req, INodeNo(ino), name, reply)
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.op_access(_req, _ino, _mask, reply)
    }

    fn create(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.op_create(req, INodeNo(parent), name, mode, _umask, flags, reply)
    }

    fn getlk(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.op_getlk(
            req,
            INodeNo(ino),
            FileHandle(fh),
            LockOwner(lock_owner),
            start,
            end,
            typ,
            pid,
            reply,
        )
    }

    fn setlk(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.op_setlk(
            req,
            INodeNo(ino),
            FileHandle(fh),
            LockOwner(lock_owner),
            start,
            end,
            typ,
            pid,
            sleep,
            reply,
        )
    }

    fn fallocate(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.op_fallocate(req, INodeNo(ino), FileHandle(fh), offset, length, mode, reply)
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        INodeNo(ino_in): INodeNo,
        FileHandle(fh_in): FileHandle,
        offset_in: u64,
        INodeNo(ino_out): INodeNo,
        FileHandle(fh_out): FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.op_copy_file_range(
            _req,
            INodeNo(ino_in),
            FileHandle(fh_in),
            offset_in,
            INodeNo(ino_out),
            FileHandle(fh_out),
            offset_out,
            len,
            flags,
            reply,
        )
    }

    fn lseek(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.op_lseek(req, INodeNo(ino), FileHandle(fh), offset, whence, reply)
    }
}

fn reply_xattr(v: Vec<u8>, size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(&v)
    }
}
