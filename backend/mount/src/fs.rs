//! The FUSE filesystem: each kernel request is translated into one `cairn_client::Volume`
//! call, spawned onto the tokio runtime, and answered from there (fuser's `Reply*` objects
//! are `Send`), so a slow call never holds up the session loop or other requests.

use crate::creds::GroupCache;
use crate::inodes::InodeTable;
use crate::lend;
use bytes::Bytes;
use cairn_client::{
    Attr, Creds, FileType, Id, Lock, LockKind, RemoteError, SeekWhence, SetAttr, SetTime, Timespec,
    Volume,
};
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, Notifier, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
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

/// errno to hand the kernel for a client error.
pub fn errno(e: &RemoteError) -> i32 {
    match e.errno.0 {
        // Internal to the client/brick protocol: must never reach an application.
        libc::EREMCHG => libc::EIO,
        n if n <= 0 => libc::EIO,
        n => n,
    }
}

fn fail(op: &str, what: impl std::fmt::Display, e: &RemoteError) -> i32 {
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

fn set_time(t: TimeOrNow) -> SetTime {
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

fn mtime_of(a: &Attr) -> (i64, u32) {
    (a.mtime.sec, a.mtime.nsec)
}

/// The FUSE generation to hand out with an entry for `a` as inode `ino`. Only regular
/// files under the writeback cache are tracked: the kernel ignores the size and mtime we
/// send for an inode it already has, so when another client changed them, a new generation
/// makes it replace the inode (at a LOOKUP, when nothing has the file open here; a lease
/// recall drops the dentry to get there sooner). `refresh` is false where the kernel does
/// not check generations (READDIRPLUS of a known dentry).
fn entry_generation(sh: &Shared, ino: u64, a: &Attr, refresh: bool) -> u64 {
    if !sh.cfg.writeback_cache || a.kind != FileType::Regular {
        return sh.inodes.lock().generation(ino);
    }
    let refresh = refresh && !sh.opens.lock().contains_key(&a.id);
    let now = crate::inodes::Seen { size: a.size, mtime: mtime_of(a) };
    sh.inodes.lock().entry_attr(ino, now, refresh)
}

/// `id` has no `security.capability` as of now (trusted for the attribute TTL).
fn note_no_caps(sh: &Shared, id: Id) {
    let mut m = sh.no_caps.lock();
    if m.len() > 100_000 {
        m.clear();
    }
    m.insert(id, std::time::Instant::now());
}

/// Reply to an entry-creating call: reference the inode and hand it to the kernel.
fn reply_entry(sh: &Shared, parent: u64, name: &[u8], attr: &Attr, reply: ReplyEntry) {
    let ino = sh.inodes.lock().add_entry(parent, name, attr.id);
    let gen = entry_generation(sh, ino, attr, true);
    reply.entry(&sh.cfg.entry_ttl, &file_attr(attr, ino), Generation(gen));
}

macro_rules! try_reply {
    ($e:expr, $reply:ident) => {
        match $e {
            Ok(v) => v,
            Err(n) => return $reply.error(Errno::from_i32(n)),
        }
    };
}

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
        self.count("lookup");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.run_here(async move {
            match sh.vol.lookup(&c, dir, &name).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "lookup",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn forget(&self, _req: &Request, INodeNo(ino): INodeNo, nlookup: u64) {
        self.count("forget");
        self.sh.inodes.lock().forget(ino, nlookup);
    }

    fn getattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        self.count("getattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.run_here(async move {
            match sh.vol.getattr(&c, id).await {
                Ok(a) => reply.attr(&sh.cfg.attr_ttl, &file_attr(&a, ino)),
                Err(e) => reply.error(Errno::from_i32(fail("getattr", id, &e))),
            }
        });
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
        self.count("setattr");
        debug!(ino, ?mode, ?uid, ?gid, ?size, ?atime, ?mtime, ?ctime, ?fh, "setattr");
        let id = try_reply!(self.id(ino), reply);
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        // After an unlink the kernel moves the inode's ctime and, under the writeback
        // cache, sends it in a SETATTR of the times. If that unlink (ours) removed the
        // last name and nothing here has the file open, no one can reach the file any more:
        // answer without asking the bricks, which would only say it is gone.
        let times_only =
            set.perm.is_none() && set.uid.is_none() && set.gid.is_none() && set.size.is_none();
        if times_only
            && self.sh.inodes.lock().is_gone(ino)
            && !self.sh.opens.lock().contains_key(&id)
        {
            return reply.error(Errno::from_i32(libc::ENOENT));
        }
        if let Some(a) = self.times_flush_is_redundant(ino, id, &set, ctime, fh) {
            return reply.attr(&self.sh.cfg.attr_ttl, &file_attr(&a, ino));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let r = if set.is_empty() {
                sh.vol.getattr(&c, id).await
            } else {
                sh.vol.setattr(&c, id, &set).await
            };
            match r {
                Ok(a) => {
                    let mtime = set.mtime.is_some().then(|| mtime_of(&a));
                    let size = set.size.map(|_| a.size);
                    sh.inodes.lock().local_change(ino, None, size, mtime);
                    reply.attr(&sh.cfg.attr_ttl, &file_attr(&a, ino))
                }
                Err(e) => reply.error(Errno::from_i32(fail("setattr", id, &e))),
            }
        });
    }

    fn readlink(&self, req: &Request, INodeNo(ino): INodeNo, reply: ReplyData) {
        self.count("readlink");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.readlink(&c, id).await {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(Errno::from_i32(fail("readlink", id, &e))),
            }
        });
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
        self.count("mknod");
        let dir = try_reply!(self.id(parent), reply);
        let k = try_reply!(FileType::from_mode(mode).ok_or(libc::EINVAL), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.mknod(&c, dir, &name, k, mode & 0o7777, rdev as u64).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "mknod",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
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
        self.count("mkdir");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.mkdir(&c, dir, &name, mode & 0o7777).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "mkdir",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn unlink(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("unlink");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            // The client library looks the name up first anyway (cached after the kernel's
            // LOOKUP): its last link tells whether the inode is gone after this.
            let victim = sh.vol.lookup(&c, dir, &name).await.ok();
            match sh.vol.unlink(&c, dir, &name).await {
                Ok(()) => {
                    let mut t = sh.inodes.lock();
                    t.remove_name(parent, &name);
                    if let Some(a) = victim.filter(|a| a.kind != FileType::Directory) {
                        let open = sh.opens.lock().contains_key(&a.id);
                        if let (Some(ino), false, true) = (t.ino_of(a.id), open, a.nlink <= 1) {
                            t.mark_gone(ino);
                        }
                    }
                    drop(t);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "unlink",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn rmdir(&self, req: &Request, INodeNo(parent): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("rmdir");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.rmdir(&c, dir, &name).await {
                Ok(()) => {
                    sh.inodes.lock().remove_name(parent, &name);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "rmdir",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn symlink(
        &self,
        req: &Request,
        INodeNo(parent): INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.count("symlink");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, target) =
            (link_name.as_bytes().to_vec(), target.as_os_str().as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.symlink(&c, dir, &name, &target).await {
                Ok(a) => reply_entry(&sh, parent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "symlink",
                    format!("{dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
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
        self.count("rename");
        let flags = flags.bits();
        use cairn_proto::rename_flags::{EXCHANGE, NOREPLACE};
        if flags & !(NOREPLACE | EXCHANGE) != 0 || flags == NOREPLACE | EXCHANGE {
            return reply.error(Errno::from_i32(libc::EINVAL)); // RENAME_WHITEOUT and nonsense
        }
        let src = try_reply!(self.id(parent), reply);
        let dst = try_reply!(self.id(newparent), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, newname) = (name.as_bytes().to_vec(), newname.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.rename(&c, src, &name, dst, &newname, flags).await {
                Ok(()) => {
                    let mut t = sh.inodes.lock();
                    if flags & EXCHANGE == 0 {
                        t.remove_name(parent, &name);
                    }
                    t.add_name(newparent, &newname);
                    drop(t);
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "rename",
                    format!("{src}/{} -> {dst}/{}", name.escape_ascii(), newname.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn link(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        INodeNo(newparent): INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.count("link");
        let id = try_reply!(self.id(ino), reply);
        let dir = try_reply!(self.id(newparent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), newname.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.link(&c, id, dir, &name).await {
                Ok(a) => reply_entry(&sh, newparent, &name, &a, reply),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "link",
                    format!("{id} -> {dir}/{}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn open(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        OpenFlags(flags): OpenFlags,
        reply: ReplyOpen,
    ) {
        self.count("open");
        let id = try_reply!(self.id(ino), reply);
        // No round trip: answered here.
        let c = self.creds(req);
        self.sh.vol.note_open(id);
        reply.opened(FileHandle(CairnFs::new_handle(&self.sh, id, c, flags)), FopenFlags::empty());
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
        self.count("read");
        let (id, c) = match self.sh.handles.lock().get(&fh) {
            Some(h) => (h.id, h.read_creds.clone()),
            None => return reply.error(Errno::from_i32(libc::EBADF)),
        };
        // Quick-read content: answered here.
        if let Some((data, _eof)) = self.sh.vol.read_cached(&c, id, offset, size) {
            return reply.data(&data);
        }
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.read(&c, id, offset, size).await {
                Ok((data, _eof)) => reply.data(&data),
                Err(e) => {
                    reply.error(Errno::from_i32(fail("read", format!("{id}@{offset}+{size}"), &e)))
                }
            }
        });
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
        self.count("write");
        let (id, c, sync) = try_reply!(self.handle(fh, ino), reply);
        if self.sh.cfg.writeback_cache {
            let end = offset + data.len() as u64;
            let mut w = self.sh.written.lock();
            match w.get_mut(&id) {
                Some(a) => a.size = a.size.max(end),
                None => {
                    if let Some(mut a) = self.sh.vol.cached_attr(id) {
                        a.size = a.size.max(end);
                        w.insert(id, a);
                    }
                }
            }
        }
        let sh = self.sh.clone();
        let run = move |data: Bytes| async move {
            let len = data.len();
            let r = if sync {
                sh.vol.write_through(&c, id, offset, data).await
            } else {
                sh.vol.write(&c, id, offset, data).await
            };
            match r {
                Ok(n) => {
                    sh.inodes.lock().local_change(ino, Some(offset + n as u64), None, None);
                    reply.written(n)
                }
                Err(e) => {
                    reply.error(Errno::from_i32(fail("write", format!("{id}@{offset}+{len}"), &e)))
                }
            }
        };
        // Large writes: the data stays in fuser's buffer and this thread waits until the
        // write is done with it; the reply still goes out from the runtime.
        match (data.len() >= lend::LEND_MIN).then(|| self.sh.parked.take(lend::SLOT_WAIT)).flatten()
        {
            Some(_slot) => {
                self.count("write.lent");
                lend::with_lent(data, |data| self.spawn(run(data)));
            }
            None => self.spawn(run(Bytes::copy_from_slice(data))),
        }
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        reply: ReplyEmpty,
    ) {
        self.count("flush");
        let (id, read_only) = match self.sh.handles.lock().get(&fh) {
            Some(h) => (h.id, h.read_only),
            None => return reply.error(Errno::from_i32(libc::EBADF)),
        };
        // A read-only open wrote nothing to report at close: unless it may hold POSIX
        // locks, answer here rather than on the runtime.
        if read_only && !self.sh.lockers.lock().contains(&(id, lock_owner)) {
            return reply.ok();
        }
        let (c, sh, pid) = (self.creds(req), self.sh.clone(), req.pid());
        self.spawn(async move {
            let r = sh.vol.flush(id).await;
            // close(2) releases every POSIX lock the process holds on the file.
            if sh.lockers.lock().remove(&(id, lock_owner)) {
                let unlock =
                    Lock { kind: LockKind::Unlock, start: 0, len: 0, owner: lock_owner, pid };
                if let Err(e) = sh.vol.setlock(&c, id, unlock, false).await {
                    warn!(%id, lock_owner, error = %e, "releasing POSIX locks on close");
                }
            }
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("flush", id, &e))),
            }
        });
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
        self.count("release");
        let h = self.sh.handles.lock().remove(&fh);
        let read_only = h.as_ref().map(|h| h.read_only).unwrap_or(false);
        let id = match h {
            Some(h) => {
                let mut opens = self.sh.opens.lock();
                if let Some(n) = opens.get_mut(&h.id) {
                    *n -= 1;
                    if *n == 0 {
                        opens.remove(&h.id);
                        self.sh.written.lock().remove(&h.id);
                    }
                }
                h.id
            }
            None => try_reply!(self.id(ino), reply),
        };
        // A read-only open with nothing of the file to wait for: answered here (a deferred
        // error of another open's writes is left to that one).
        if read_only && self.sh.vol.release_if_idle(id) {
            return reply.ok();
        }
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.release(id).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("release", id, &e))),
            }
        });
    }

    fn fsync(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsync");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.fsync(&c, id, datasync).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("fsync", id, &e))),
            }
        });
    }

    fn opendir(&self, _req: &Request, INodeNo(ino): INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.count("opendir");
        try_reply!(self.id(ino), reply);
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.count("readdir");
        let dir = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let mut cookie = offset;
            loop {
                let (ents, eof) = match sh.vol.readdir(&c, dir, cookie, READDIR_BATCH, false).await
                {
                    Ok(r) => r,
                    Err(e) => {
                        return reply.error(Errno::from_i32(fail(
                            "readdir",
                            format!("{dir}@{cookie}"),
                            &e,
                        )))
                    }
                };
                let got_some = !ents.is_empty();
                for e in &ents {
                    let eino = sh.inodes.lock().ino_of(e.id).unwrap_or_else(|| e.id.ino());
                    if reply.add(INodeNo(eino), e.cookie, kind(e.kind), OsStr::from_bytes(&e.name))
                    {
                        return reply.ok();
                    }
                    cookie = e.cookie;
                }
                if eof || got_some {
                    return reply.ok();
                }
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.count("readdirplus");
        let dir = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let mut cookie = offset;
            loop {
                let (ents, eof) =
                    match sh.vol.readdir(&c, dir, cookie, READDIRPLUS_BATCH, true).await {
                        Ok(r) => r,
                        Err(e) => {
                            return reply.error(Errno::from_i32(fail(
                                "readdirplus",
                                format!("{dir}@{cookie}"),
                                &e,
                            )))
                        }
                    };
                let got_some = !ents.is_empty();
                for e in ents {
                    let attr = match e.attr {
                        Some(a) => a,
                        None => match sh.vol.getattr(&c, e.id).await {
                            Ok(a) => a,
                            // Gone between listing and stat: skip it.
                            Err(_) => {
                                cookie = e.cookie;
                                continue;
                            }
                        },
                    };
                    // Every entry the kernel accepts holds a lookup reference.
                    let eino = sh.inodes.lock().add_entry(ino, &e.name, attr.id);
                    // The kernel does not check generations of dentries it has here.
                    let gen = entry_generation(&sh, eino, &attr, false);
                    let mut t = sh.inodes.lock();
                    let fa = file_attr(&attr, eino);
                    let ttl = sh.cfg.entry_ttl;
                    if reply.add(
                        INodeNo(eino),
                        e.cookie,
                        OsStr::from_bytes(&e.name),
                        &ttl,
                        &fa,
                        Generation(gen),
                    ) {
                        t.forget(eino, 1);
                        drop(t);
                        return reply.ok();
                    }
                    cookie = e.cookie;
                }
                if eof || got_some {
                    return reply.ok();
                }
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.count("releasedir");
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsyncdir");
        // Directory operations are synchronous on the bricks.
        reply.ok();
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.count("statfs");
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.statfs(&c).await {
                Ok(s) => reply.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namemax, s.bsize,
                ),
                Err(e) => reply.error(Errno::from_i32(fail("statfs", "volume", &e))),
            }
        });
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
        self.count("setxattr");
        let id = try_reply!(self.id(ino), reply);
        self.sh.no_caps.lock().remove(&id);
        let (c, sh) = (self.creds(req), self.sh.clone());
        let (name, value) = (name.as_bytes().to_vec(), value.to_vec());
        self.spawn(async move {
            match sh.vol.setxattr(&c, id, &name, &value, flags as u32).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "setxattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn getxattr(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.count("getxattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        if ino == crate::inodes::ROOT_INO && name == STATS_XATTR {
            return reply_xattr(self.stats_text(), size, reply);
        }
        if name == CAPS {
            let fresh =
                sh.no_caps.lock().get(&id).map(|t| t.elapsed() < sh.cfg.attr_ttl).unwrap_or(false);
            if fresh {
                return reply.error(Errno::from_i32(libc::ENODATA));
            }
        }
        self.spawn(async move {
            match sh.vol.getxattr(&c, id, &name).await {
                Ok(v) => reply_xattr(v, size, reply),
                Err(e) if name == CAPS && e.errno.0 == libc::ENODATA => {
                    note_no_caps(&sh, id);
                    reply.error(Errno::from_i32(libc::ENODATA))
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "getxattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn listxattr(&self, req: &Request, INodeNo(ino): INodeNo, size: u32, reply: ReplyXattr) {
        self.count("listxattr");
        let id = try_reply!(self.id(ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.listxattr(&c, id).await {
                Ok(names) => {
                    let mut buf = Vec::new();
                    for n in names {
                        buf.extend_from_slice(&n);
                        buf.push(0);
                    }
                    reply_xattr(buf, size, reply)
                }
                Err(e) => reply.error(Errno::from_i32(fail("listxattr", id, &e))),
            }
        });
    }

    fn removexattr(&self, req: &Request, INodeNo(ino): INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.count("removexattr");
        let id = try_reply!(self.id(ino), reply);
        self.sh.no_caps.lock().remove(&id);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        self.spawn(async move {
            match sh.vol.removexattr(&c, id, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail(
                    "removexattr",
                    format!("{id} {}", name.escape_ascii()),
                    &e,
                ))),
            }
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.count("access");
        // default_permissions: the kernel checks mode bits against our attributes.
        reply.ok();
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
        self.count("create");
        let dir = try_reply!(self.id(parent), reply);
        let (c, sh, name) = (self.creds(req), self.sh.clone(), name.as_bytes().to_vec());
        let excl = flags & libc::O_EXCL != 0;
        self.spawn(async move {
            let what = || format!("{dir}/{}", name.escape_ascii());
            let mut a = match sh.vol.create(&c, dir, &name, mode & 0o7777, excl).await {
                Ok(a) => a,
                Err(e) => return reply.error(Errno::from_i32(fail("create", what(), &e))),
            };
            // Lost a race with another creator: O_TRUNC still applies to what we open.
            if !excl && flags & libc::O_TRUNC != 0 && a.size > 0 {
                let set = SetAttr { size: Some(0), ..Default::default() };
                match sh.vol.setattr(&c, a.id, &set).await {
                    Ok(t) => a = t,
                    Err(e) => {
                        return reply.error(Errno::from_i32(fail("create(truncate)", what(), &e)))
                    }
                }
            }
            if let Err(e) = sh.vol.open(&c, a.id).await {
                return reply.error(Errno::from_i32(fail("create(open)", what(), &e)));
            }
            let ino = sh.inodes.lock().add_entry(parent, &name, a.id);
            let gen = entry_generation(&sh, ino, &a, true);
            if excl {
                // O_EXCL: created here just now, so it has no file capability and the
                // kernel's ask before the first write needs no brick.
                note_no_caps(&sh, a.id);
            }
            let fh = CairnFs::new_handle(&sh, a.id, c, flags);
            reply.created(
                &sh.cfg.entry_ttl,
                &file_attr(&a, ino),
                Generation(gen),
                FileHandle(fh),
                FopenFlags::empty(),
            );
        });
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
        self.count("getlk");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let lock = try_reply!(to_lock(typ, start, end, lock_owner, pid), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.getlock(&c, id, lock).await {
                Ok(Some(l)) => {
                    let (s, e, t, p) = from_lock(&l);
                    reply.locked(s, e, t, p)
                }
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
                Err(e) => reply.error(Errno::from_i32(fail("getlk", id, &e))),
            }
        });
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
        self.count("setlk");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let lock = try_reply!(to_lock(typ, start, end, lock_owner, pid), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            let taking = lock.kind != LockKind::Unlock;
            if taking {
                sh.lockers.lock().insert((id, lock_owner));
            }
            match sh.vol.setlock(&c, id, lock, sleep).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("setlk", id, &e))),
            }
        });
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
        self.count("fallocate");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        // The kernel's loff_t values: negative ones arrive here as huge.
        let max = i64::MAX as u64;
        if offset > max || length == 0 || length > max {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.fallocate(&c, id, mode as u32, offset, length).await {
                Ok(()) => {
                    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                        let end = Some(offset + length);
                        sh.inodes.lock().local_change(ino, end, None, None);
                    }
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "fallocate",
                    format!("{id}@{offset}+{length}"),
                    &e,
                ))),
            }
        });
    }

    /// copy_file_range(2) inside the volume: the bricks copy when both files share a
    /// replica set (`Volume::copy_range`), so the data does not come through this mount.
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
        self.count("copy_file_range");
        let (src, _, _) = try_reply!(self.handle(fh_in, ino_in), reply);
        // The credentials the destination was opened with, as for a WRITE of it.
        let (dst, c, _) = try_reply!(self.handle(fh_out, ino_out), reply);
        let max = i64::MAX as u64;
        if flags.bits() != 0 || offset_in > max || offset_out > max {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        // The reply carries a 32-bit count (the kernel asks for at most that much anyway).
        let len = len.min(u32::MAX as u64 & !0xfff);
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.copy_range(&c, src, offset_in, dst, offset_out, len).await {
                Ok(n) => {
                    sh.inodes.lock().local_change(ino_out, Some(offset_out + n), None, None);
                    reply.written(n as u32)
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "copy_file_range",
                    format!("{src}@{offset_in} to {dst}@{offset_out}+{len}"),
                    &e,
                ))),
            }
        });
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
        self.count("lseek");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let w = match whence {
            libc::SEEK_DATA => SeekWhence::Data,
            libc::SEEK_HOLE => SeekWhence::Hole,
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        if offset < 0 {
            return reply.error(Errno::from_i32(libc::ENXIO));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.seek(&c, id, offset as u64, w).await {
                Ok(o) => reply.offset(o as i64),
                Err(e) => reply.error(Errno::from_i32(fail("lseek", format!("{id}@{offset}"), &e))),
            }
        });
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

#[cfg(test)]
mod tests {
    use super::*;

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
