//! The dirty log of the checksum crash rule (see `csum/` and `docs/brick-format.md`,
//! "Data checksums"): the ids whose checksum tables may lag their data, so that the next
//! open rebuilds their tables instead of reporting a change a crash cut as corruption.
//!
//! - Two append-only files, `.cairn/csum/dirty/log.0` and `log.1`, of 16-byte ids (the
//!   id's bytes; a torn last record is ignored). The first change of an id since it was
//!   last tidied appends the id to the *current* log: one `write(2)` into the page cache,
//!   instead of a file made per id and removed again later.
//! - The log is written to disk by the tidy thread at most [`LOG_SYNC`] after an append
//!   (`fdatasync`): a window no longer than that of the journaled directory entry of a
//!   marker file, which the journal's commit interval (5 s) bounded.
//! - **Tidy** (a thread per brick, `Checksums::tidy` in `csum/recover.rs`): once some
//!   id has been idle [`IDLE`], a round swaps the current log for the other one, appends to
//!   the new current log the ids still busy (changed within `IDLE`, or a change in flight:
//!   the caller's `busy`), makes the others' data and tables durable (`sync`: one
//!   `fdatasync` per file for a few, one `syncfs` for many) and the new log too, and only
//!   then empties the old log. So an id is always listed in a log not emptied since,
//!   while its data may not be on disk. A round whose sync failed empties nothing: the old
//!   log keeps its ids until a later round syncs them.
//! - At open, every id of both logs (and the empty files `<32 hex>` of the earlier format,
//!   one per id) is rebuilt by the brick, then the logs are emptied.

use crate::sys::{self, cstr};
use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An id idle this long is tidied (its data synced, its listing dropped).
pub(crate) const IDLE: Duration = Duration::from_secs(3);
/// Appends reach the disk within this long (the tidy thread's tick).
pub(crate) const LOG_SYNC: Duration = Duration::from_secs(1);
/// Up to this many ids a round syncs each file (`fdatasync`); more, the whole filesystem
/// once (`syncfs`: one journal commit and cache flush instead of one per file).
pub(crate) const SYNC_EACH_MAX: usize = 16;
const REC: usize = 16;
/// Each log keeps at least this many bytes allocated (4096 records), zeros where no record
/// is: emptying a log overwrites its records with zeros instead of freeing its blocks, so
/// listing an id on a full filesystem needs no new block (an overwrite of existing data,
/// such as a block LUN's, must keep working on a full brick). A zero record is no id.
const PREALLOC: u64 = 64 << 10;
/// A log grown past this (a round listing over 262144 ids) is truncated when emptied.
const SHRINK_ABOVE: u64 = 4 << 20;
const LOGS: [&std::ffi::CStr; 2] = [c"log.0", c"log.1"];

struct Inner {
    /// Listed ids not tidied since, with the time of their last change.
    ids: HashMap<Id, Instant>,
    /// Index of the log appends go to.
    cur: usize,
    /// Bytes of records in each log. Records are written at this offset (not appended),
    /// so a torn record (a short write) is overwritten by the next and never misaligns
    /// the ones after it.
    len: [u64; 2],
    /// Appends to the current log since its last `fdatasync`.
    unsynced: bool,
}

pub(crate) struct DirtyLog {
    dir: OwnedFd,
    /// Wakes the tidy thread when the first id is listed after a quiet spell (it sleeps
    /// while [`quiet`](Self::quiet)). Dropped with the log, which ends the thread.
    wake: SyncSender<()>,
    logs: [Arc<OwnedFd>; 2],
    inner: Mutex<Inner>,
    /// One tidy round at a time.
    round: Mutex<()>,
    /// [`IDLE`] (shorter in unit tests).
    idle: Duration,
}

/// How a round made the data of the idle ids durable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Synced {
    /// Each file (`fdatasync`).
    Each,
    /// The whole filesystem (`syncfs`).
    All,
}

impl DirtyLog {
    /// Open (creating) the logs in `dir` (`.cairn/csum/dirty`). Nothing may be listed
    /// before [`recovered`](Self::recovered).
    /// `wake` is the tidy thread's (a channel of capacity 1: a wake-up already pending is
    /// enough).
    pub(crate) fn open(dir: OwnedFd, wake: SyncSender<()>) -> io::Result<DirtyLog> {
        let open = |n: &std::ffi::CStr| {
            sys::openat(dir.as_raw_fd(), n, libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW, 0o600)
                .map(Arc::new)
        };
        let logs = [open(LOGS[0])?, open(LOGS[1])?];
        Ok(DirtyLog {
            dir,
            wake,
            logs,
            // Set by `recovered`, before the first append.
            inner: Mutex::new(Inner { ids: HashMap::new(), cur: 0, len: [0; 2], unsynced: false }),
            round: Mutex::new(()),
            idle: IDLE,
        })
    }

    /// Every id a crash may have left with a stale table: both logs' and the earlier
    /// format's marker files'.
    pub(crate) fn listed(&self) -> io::Result<HashSet<Id>> {
        let mut out = HashSet::new();
        for log in &self.logs {
            let mut buf = Vec::new();
            let mut off = 0u64;
            loop {
                let mut chunk = vec![0u8; 64 << 10];
                let n = sys::pread(log.as_raw_fd(), &mut chunk, off)?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                off += n as u64;
            }
            for r in buf.chunks_exact(REC) {
                let id = Id::from_bytes(r.try_into().expect("16-byte record"));
                if id != Id(0) {
                    out.insert(id);
                }
            }
        }
        for e in sys::read_dir(self.dir.as_raw_fd())? {
            if let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                out.insert(id);
            }
        }
        Ok(out)
    }

    /// After the brick rebuilt every [`listed`](Self::listed) id: empty the logs and
    /// remove the earlier format's marker files, durably.
    pub(crate) fn recovered(&self) -> io::Result<()> {
        let d = self.dir.as_raw_fd();
        let mut legacy = false;
        for e in sys::read_dir(d)? {
            if std::str::from_utf8(&e.name).ok().and_then(Id::from_hex).is_some() {
                sys::unlinkat(d, &cstr(&e.name)?, 0)?;
                legacy = true;
            }
        }
        let mut g = self.inner.lock();
        for (log, len) in self.logs.iter().zip(&mut g.len) {
            empty(log, u64::MAX)?;
            sys::fsync(log.as_raw_fd(), true)?;
            *len = 0;
        }
        if legacy {
            sys::fsync(d, false)?;
        }
        Ok(())
    }

    /// Before a change of `id`: list it unless it is listed (one append), and note the
    /// change. An error (ENOSPC) means the change must not be made.
    pub(crate) fn begin(&self, id: Id) -> io::Result<()> {
        let mut g = self.inner.lock();
        if let Some(t) = g.ids.get_mut(&id) {
            *t = Instant::now();
            return Ok(());
        }
        self.append(&mut g, &id.to_bytes())?;
        let first = g.ids.is_empty();
        g.ids.insert(id, Instant::now());
        if first {
            // Full: a wake-up is pending already. Disconnected: no thread (logged at start).
            let _ = self.wake.try_send(());
        }
        Ok(())
    }

    /// Nothing to do until the next [`begin`](Self::begin): no id listed in memory and
    /// the log on disk. The tidy thread then sleeps instead of ticking.
    pub(crate) fn quiet(&self) -> bool {
        let g = self.inner.lock();
        g.ids.is_empty() && !g.unsynced
    }

    /// After a change of a listed `id`: its idle time starts again.
    pub(crate) fn touch(&self, id: Id) {
        if let Some(t) = self.inner.lock().ids.get_mut(&id) {
            *t = Instant::now();
        }
    }

    /// `id` is gone: nothing to tidy (a stale record of it is skipped at open).
    pub(crate) fn forget(&self, id: Id) {
        self.inner.lock().ids.remove(&id);
    }

    /// The tidy thread's tick: write the current log's appends to disk.
    pub(crate) fn sync_log(&self) -> io::Result<()> {
        let log = {
            let mut g = self.inner.lock();
            if !g.unsynced {
                return Ok(());
            }
            g.unsynced = false;
            self.logs[g.cur].clone()
        };
        sys::fsync(log.as_raw_fd(), true).inspect_err(|_| self.inner.lock().unsynced = true)
    }

    /// One tidy round (see the module doc). `busy(id)`: a change of `id` is in flight
    /// (asked under the log's lock; must not block). `sync(ids, how)`: make the data and
    /// tables of `ids` durable (`Synced::Each`: per file; `Synced::All`: with `syncfs`).
    /// Returns how many ids were tidied and how, or None when no id was due.
    pub(crate) fn tidy(
        &self,
        busy: impl Fn(Id) -> bool,
        sync: impl FnOnce(&[Id], &Synced) -> io::Result<()>,
    ) -> io::Result<Option<(usize, Synced)>> {
        let _round = self.round.lock();
        let (due, old, new) = {
            let mut g = self.inner.lock();
            if !g.ids.values().any(|t| t.elapsed() >= self.idle) {
                return Ok(None);
            }
            let (old, new) = (g.cur, g.cur ^ 1);
            let (mut due, mut hot) = (Vec::new(), Vec::new());
            for (&id, t) in &g.ids {
                if t.elapsed() >= self.idle && !busy(id) {
                    due.push(id);
                } else {
                    hot.push(id);
                }
            }
            if due.is_empty() {
                return Ok(None);
            }
            let bytes: Vec<u8> = hot.iter().flat_map(|id| id.to_bytes()).collect();
            g.cur = new;
            if let Err(e) = self.append(&mut g, &bytes) {
                g.cur = old;
                return Err(e);
            }
            for id in &due {
                g.ids.remove(id);
            }
            (due, old, new)
        };
        let how = if due.len() <= SYNC_EACH_MAX { Synced::Each } else { Synced::All };
        let r = sync(&due, &how).and_then(|()| {
            // The busy ids are listed again in the new log; it must be on disk before
            // the old one is emptied (`syncfs` wrote it).
            if how == Synced::Each {
                self.inner.lock().unsynced = false;
                sys::fsync(self.logs[new].as_raw_fd(), true)?;
            }
            Ok(())
        });
        if let Err(e) = r {
            // Not emptied: the old log keeps the ids. Listed in memory again, so a later
            // round retries them (an id changed since is listed in the new log too).
            let mut g = self.inner.lock();
            g.unsynced = true;
            let long_ago = Instant::now().checked_sub(self.idle).unwrap_or_else(Instant::now);
            for id in due {
                g.ids.entry(id).or_insert(long_ago);
            }
            return Err(e);
        }
        // Not the current log, and rounds are serialized: nothing writes to it meanwhile.
        let used = self.inner.lock().len[old];
        empty(&self.logs[old], used)?;
        self.inner.lock().len[old] = 0;
        Ok(Some((due.len(), how)))
    }

    /// Write whole records at the end of the current log (lock held).
    fn append(&self, g: &mut Inner, records: &[u8]) -> io::Result<()> {
        let cur = g.cur;
        sys::pwrite_all(self.logs[cur].as_raw_fd(), records, g.len[cur])?;
        g.len[cur] += records.len() as u64;
        g.unsynced = true;
        Ok(())
    }
}

/// Empty a log whose records take its first `used` bytes: zeros over them, its blocks
/// kept (see [`PREALLOC`]); grown to `PREALLOC` if smaller (best effort: on a full
/// filesystem it grows at the next append), truncated if grown past [`SHRINK_ABOVE`].
fn empty(log: &OwnedFd, used: u64) -> io::Result<()> {
    let fd = log.as_raw_fd();
    let size = sys::fstat(fd)?.st_size as u64;
    if size > SHRINK_ABOVE {
        sys::ftruncate(fd, 0)?;
    } else {
        let zeros = [0u8; 64 << 10];
        let mut off = 0;
        while off < used.min(size) {
            let n = (used.min(size) - off).min(zeros.len() as u64);
            sys::pwrite_all(fd, &zeros[..n as usize], off)?;
            off += n;
        }
    }
    if !(PREALLOC..=SHRINK_ABOVE).contains(&size) {
        let _ = sys::fallocate(fd, 0, 0, PREALLOC);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn log_in(t: &tempfile::TempDir, idle: Duration) -> DirtyLog {
        log_and_wakes_in(t, idle).0
    }

    fn log_and_wakes_in(
        t: &tempfile::TempDir,
        idle: Duration,
    ) -> (DirtyLog, std::sync::mpsc::Receiver<()>) {
        let dir = sys::open_dir_at(
            libc::AT_FDCWD,
            &cstr(t.path().as_os_str().as_encoded_bytes()).unwrap(),
        )
        .unwrap();
        let (wake, wakes) = std::sync::mpsc::sync_channel(1);
        let mut l = DirtyLog::open(dir, wake).unwrap();
        l.idle = idle;
        (l, wakes)
    }

    fn ids(n: u128) -> Vec<Id> {
        (1..=n).map(|i| Id(i << 64 | 7)).collect()
    }

    fn listed(l: &DirtyLog) -> Vec<Id> {
        let mut v: Vec<Id> = l.listed().unwrap().into_iter().collect();
        v.sort();
        v
    }

    #[test]
    fn an_id_is_listed_once_and_found_again_by_a_new_open() {
        let t = tempfile::tempdir().unwrap();
        let l = log_in(&t, IDLE);
        l.recovered().unwrap();
        for id in ids(3).into_iter().chain(ids(3)) {
            l.begin(id).unwrap();
        }
        let log = std::fs::read(t.path().join("log.0")).unwrap();
        assert_eq!(log.len() as u64, PREALLOC, "allocated ahead");
        assert!(log[3 * REC..].iter().all(|&b| b == 0), "three records");
        // A crash: a new open finds them, plus an id of the earlier format's marker files,
        // and a torn record at the end is ignored.
        drop(l);
        std::fs::write(t.path().join(Id(99).to_hex()), b"").unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(t.path().join("log.0")).unwrap();
        std::io::Write::write_all(&mut f, &[0xab; 7]).unwrap();
        let l = log_in(&t, IDLE);
        let mut want = ids(3);
        want.push(Id(99));
        want.sort();
        assert_eq!(listed(&l), want);
        l.recovered().unwrap();
        assert!(listed(&l).is_empty());
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 2, "only the two logs left");
        // Written at the start again (the records and the torn bytes were zeroed).
        l.begin(Id(5)).unwrap();
        assert_eq!(listed(&l), vec![Id(5)]);
    }

    #[test]
    fn the_first_id_after_a_quiet_spell_wakes_the_thread_once() {
        let t = tempfile::tempdir().unwrap();
        let (l, wakes) = log_and_wakes_in(&t, Duration::ZERO);
        l.recovered().unwrap();
        assert!(l.quiet());
        assert!(wakes.try_recv().is_err());
        l.begin(Id(1)).unwrap();
        l.begin(Id(2)).unwrap();
        l.begin(Id(1)).unwrap();
        assert!(!l.quiet());
        assert!(wakes.try_recv().is_ok(), "the first listing wakes the thread");
        assert!(wakes.try_recv().is_err(), "once");
        // Tidied, and the (empty) new log synced: quiet again.
        assert_eq!(l.tidy(|_| false, |_, _| Ok(())).unwrap(), Some((2, Synced::Each)));
        assert!(l.quiet());
        // An id forgotten before its round leaves the log to be synced: not quiet yet.
        l.begin(Id(3)).unwrap();
        assert!(wakes.try_recv().is_ok());
        l.forget(Id(3));
        assert!(!l.quiet());
        l.sync_log().unwrap();
        assert!(l.quiet());
    }

    #[test]
    fn a_round_syncs_idle_ids_and_keeps_busy_ones_listed() {
        let t = tempfile::tempdir().unwrap();
        let l = log_in(&t, Duration::ZERO);
        l.recovered().unwrap();
        let all = ids(4);
        for &id in &all {
            l.begin(id).unwrap();
        }
        let synced = RefCell::new(Vec::new());
        let busy = all[1];
        let r = l
            .tidy(
                |id| id == busy,
                |ids, how| {
                    assert_eq!(*how, Synced::Each);
                    synced.borrow_mut().extend_from_slice(ids);
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(r, Some((3, Synced::Each)));
        let mut s = synced.into_inner();
        s.sort();
        assert_eq!(s, vec![all[0], all[2], all[3]]);
        // Only the busy id is still listed, on disk and in memory.
        assert_eq!(listed(&l), vec![busy]);
        assert_eq!(l.inner.lock().ids.keys().copied().collect::<Vec<_>>(), vec![busy]);
        // A tidied id changed again is listed again (in the log now current).
        l.begin(all[0]).unwrap();
        assert_eq!(listed(&l), vec![all[0], busy]);
        // The next round empties the other log, which held the tidied ids.
        l.tidy(|_| false, |_, _| Ok(())).unwrap();
        assert!(listed(&l).is_empty());
        // Emptied logs keep their blocks (zeros): listing needs no space.
        for n in ["log.0", "log.1"] {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(t.path().join(n)).unwrap();
            assert_eq!((m.len(), m.blocks() * 512 >= PREALLOC), (PREALLOC, true), "{n}");
        }
    }

    #[test]
    fn a_failed_sync_empties_nothing_and_a_later_round_retries() {
        let t = tempfile::tempdir().unwrap();
        let l = log_in(&t, Duration::ZERO);
        l.recovered().unwrap();
        let all = ids(2);
        for &id in &all {
            l.begin(id).unwrap();
        }
        let e = l.tidy(|_| false, |_, _| Err(sys::errno(libc::EIO))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(listed(&l), all, "still listed on disk");
        let again = RefCell::new(Vec::new());
        l.tidy(
            |_| false,
            |ids, _| {
                again.borrow_mut().extend_from_slice(ids);
                Ok(())
            },
        )
        .unwrap();
        let mut a = again.into_inner();
        a.sort();
        assert_eq!(a, all, "retried");
        // Both logs emptied over the following rounds.
        l.begin(Id(1)).unwrap();
        l.tidy(|_| false, |_, _| Ok(())).unwrap();
        assert!(listed(&l).is_empty());
    }

    #[test]
    fn many_ids_are_synced_with_one_syncfs_and_nothing_waits_before_idle() {
        let t = tempfile::tempdir().unwrap();
        let mut l = log_in(&t, Duration::from_secs(3600));
        l.recovered().unwrap();
        for id in ids(SYNC_EACH_MAX as u128 + 1) {
            l.begin(id).unwrap();
        }
        assert_eq!(l.tidy(|_| false, |_, _| panic!("nothing is idle")).unwrap(), None);
        l.idle = Duration::ZERO;
        let r = l.tidy(
            |_| false,
            |_, how| {
                assert_eq!(*how, Synced::All);
                Ok(())
            },
        );
        assert_eq!(r.unwrap(), Some((SYNC_EACH_MAX + 1, Synced::All)));
        assert!(listed(&l).is_empty());
    }
}
