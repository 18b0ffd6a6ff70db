//! Write-behind: per-file buffers of sequential writes, and the extents sent but not yet
//! answered ("flights"), with the ordering rules between them.
//!
//! Ordering: every extent is registered as a flight at the moment it is taken for sending,
//! under the same lock that decides what to send, so flights are registered in the order
//! the writes were acknowledged to the caller. A flight waits (before it is sent) only for
//! the earlier flights whose byte ranges overlap its own; non-overlapping writes of one
//! file are in flight together. Barriers (flush, fsync, read, setattr, ...) wait for every
//! flight of the file ([`WriteBehind::flights`]).

use bytes::{Bytes, BytesMut};
use cairn_proto::{Creds, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use tokio::sync::watch;

/// Buffered, not yet sent, sequential data of one file.
struct Pending {
    creds: Creds,
    offset: u64,
    buf: BytesMut,
}

/// An extent sent (or about to be sent) and not answered yet.
struct Flight {
    start: u64,
    end: u64,
    done: Waiter,
}

#[derive(Default)]
struct FileState {
    pending: Option<Pending>,
    /// In registration order (oldest first). Finished ones are pruned lazily.
    flights: Vec<Flight>,
    /// First error of a write sent in the background; reported on the next write, flush,
    /// fsync or release, then cleared.
    error: Option<RemoteError>,
}

impl FileState {
    fn prune(&mut self) {
        self.flights.retain(|f| !f.done.is_done());
    }

    fn idle(&self) -> bool {
        self.pending.is_none() && self.error.is_none() && self.flights.is_empty()
    }

    /// Register `[offset, offset + len)` as in flight: the flights it must wait for (the
    /// overlapping earlier ones) and its completion handle.
    fn register(&mut self, offset: u64, len: usize) -> (Vec<Waiter>, Done) {
        self.prune();
        let end = offset.saturating_add(len as u64);
        let after = self
            .flights
            .iter()
            .filter(|f| f.start < end && offset < f.end)
            .map(|f| f.done.clone())
            .collect();
        let (tx, rx) = watch::channel(());
        self.flights.push(Flight { start: offset, end, done: Waiter(rx) });
        (after, Done(tx))
    }

    fn send_pending(&mut self) -> Option<Send> {
        let p = self.pending.take()?;
        let (after, done) = self.register(p.offset, p.buf.len());
        Some(Send { creds: p.creds, offset: p.offset, data: p.buf.freeze(), after, done })
    }
}

/// Completion of a flight: drop it once the write was answered (or failed, after recording
/// the error with [`WriteBehind::set_error`]).
#[derive(Debug)]
pub struct Done(#[allow(dead_code)] watch::Sender<()>);

/// Waits for one flight to finish.
#[derive(Clone, Debug)]
pub struct Waiter(watch::Receiver<()>);

impl Waiter {
    pub fn is_done(&self) -> bool {
        // Nothing is ever sent on the channel: it only closes, when the `Done` is dropped.
        self.0.has_changed().is_err()
    }

    pub async fn wait(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// An extent to send now, once every `after` has finished; drop `done` when answered.
#[derive(Debug)]
pub struct Send {
    pub creds: Creds,
    pub offset: u64,
    pub data: Bytes,
    pub after: Vec<Waiter>,
    pub done: Done,
}

/// What to do with a write.
#[derive(Debug)]
pub enum Append {
    /// Taken (acknowledge it now); `send`, if any, is an earlier extent to send now (in the
    /// background): the buffer filled up, or this write did not follow on from it.
    Taken { send: Option<Send> },
    /// Too large to buffer: send `flushed` (if any) in the background, then write this one
    /// through after every `after` has finished, and drop `done` when it is answered.
    Through { flushed: Option<Send>, after: Vec<Waiter>, done: Done },
}

/// Write-behind buffers, one per file, each at most `limit` bytes.
pub struct WriteBehind {
    limit: Mutex<usize>,
    files: Mutex<HashMap<Id, FileState>>,
}

impl WriteBehind {
    pub fn new(limit: usize) -> WriteBehind {
        WriteBehind { limit: Mutex::new(limit), files: Mutex::default() }
    }

    pub fn set_limit(&self, limit: usize) {
        *self.limit.lock() = limit;
    }

    pub fn limit(&self) -> usize {
        *self.limit.lock()
    }

    /// Offer a write. Sequential writes by the same caller accumulate until the limit; any
    /// other write below the limit sends the buffer and starts a new one.
    pub fn append(&self, id: Id, creds: &Creds, offset: u64, data: &[u8]) -> Append {
        let limit = *self.limit.lock();
        let mut files = self.files.lock();
        let f = files.entry(id).or_default();
        if data.len() >= limit {
            let flushed = f.send_pending();
            let (after, done) = f.register(offset, data.len());
            return Append::Through { flushed, after, done };
        }
        if let Some(p) = &mut f.pending {
            if p.creds == *creds && p.offset + p.buf.len() as u64 == offset {
                p.buf.extend_from_slice(data);
                let send = if p.buf.len() >= limit { f.send_pending() } else { None };
                return Append::Taken { send };
            }
        }
        let send = f.send_pending();
        let mut buf = BytesMut::with_capacity(limit.min(data.len().max(64 << 10)));
        buf.extend_from_slice(data);
        f.pending = Some(Pending { creds: creds.clone(), offset, buf });
        Append::Taken { send }
    }

    /// Take the buffered extent of a file to send it now (registered as in flight).
    pub fn take(&self, id: Id) -> Option<Send> {
        self.files.lock().get_mut(&id).and_then(|f| f.send_pending())
    }

    /// Every unfinished flight of a file (wait for all of them: a barrier).
    pub fn flights(&self, id: Id) -> Vec<Waiter> {
        let mut files = self.files.lock();
        let Some(f) = files.get_mut(&id) else { return vec![] };
        f.prune();
        f.flights.iter().map(|f| f.done.clone()).collect()
    }

    /// The oldest unfinished flight of a file if it has `max` or more in flight or `max_bytes`
    /// or more bytes in flight (wait for it before adding more).
    pub fn full(&self, id: Id, max: usize, max_bytes: u64) -> Option<Waiter> {
        let mut files = self.files.lock();
        let f = files.get_mut(&id)?;
        f.prune();
        let bytes: u64 = f.flights.iter().map(|f| f.end - f.start).sum();
        if f.flights.len() >= max || bytes >= max_bytes {
            f.flights.first().map(|f| f.done.clone())
        } else {
            None
        }
    }

    /// Something buffered or in flight for this file.
    pub fn busy(&self, id: Id) -> bool {
        let mut files = self.files.lock();
        let Some(f) = files.get_mut(&id) else { return false };
        f.prune();
        f.pending.is_some() || !f.flights.is_empty()
    }

    /// End of the buffered or in-flight data, if any (the size the file will have at least).
    pub fn buffered_end(&self, id: Id) -> Option<u64> {
        let mut files = self.files.lock();
        let f = files.get_mut(&id)?;
        f.prune();
        let pending = f.pending.as_ref().map(|p| p.offset + p.buf.len() as u64);
        f.flights.iter().map(|f| f.end).chain(pending).max()
    }

    /// Every file with something buffered or in flight.
    pub fn dirty(&self) -> Vec<Id> {
        let mut files = self.files.lock();
        files
            .iter_mut()
            .filter_map(|(id, f)| {
                f.prune();
                (f.pending.is_some() || !f.flights.is_empty()).then_some(*id)
            })
            .collect()
    }

    pub fn set_error(&self, id: Id, e: RemoteError) {
        let mut files = self.files.lock();
        let f = files.entry(id).or_default();
        if f.error.is_none() {
            f.error = Some(e);
        }
    }

    pub fn take_error(&self, id: Id) -> Option<RemoteError> {
        let mut files = self.files.lock();
        let f = files.get_mut(&id)?;
        let e = f.error.take();
        f.prune();
        if f.idle() {
            files.remove(&id);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::Errno;

    fn taken(a: Append) -> Option<Send> {
        match a {
            Append::Taken { send } => send,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn coalesces_sequential_and_bounds_memory() {
        let wb = WriteBehind::new(100);
        let c = Creds::root();
        let id = Id(3);
        for i in 0..9u64 {
            assert!(taken(wb.append(id, &c, i * 10, &[i as u8; 10])).is_none());
        }
        assert_eq!(wb.buffered_end(id), Some(90));
        let s = taken(wb.append(id, &c, 90, &[9; 10])).expect("full buffer is sent");
        assert_eq!(s.offset, 0);
        assert_eq!(s.data.len(), 100);
        assert_eq!(s.data[95], 9);
        assert!(s.after.is_empty());
        assert_eq!(wb.buffered_end(id), Some(100), "in flight counts for the size");
        drop(s);
        assert_eq!(wb.buffered_end(id), None);
        assert!(!wb.busy(id));
    }

    #[test]
    fn non_sequential_or_other_caller_sends_the_buffer_and_starts_another() {
        let wb = WriteBehind::new(100);
        let id = Id(4);
        let root = Creds::root();
        let user = Creds { uid: 1000, gid: 1000, groups: vec![] };
        assert!(taken(wb.append(id, &root, 0, b"abc")).is_none());
        let s = taken(wb.append(id, &root, 10, b"x")).unwrap();
        assert_eq!((s.offset, &s.data[..]), (0, &b"abc"[..]));
        let s = taken(wb.append(id, &user, 11, b"d")).unwrap();
        assert_eq!((s.offset, &s.data[..], s.creds.uid), (10, &b"x"[..], 0));
        let s = wb.take(id).unwrap();
        assert_eq!((s.offset, &s.data[..], s.creds.uid), (11, &b"d"[..], 1000));
        assert!(wb.take(id).is_none());
    }

    #[test]
    fn large_write_goes_through_after_the_buffer() {
        let wb = WriteBehind::new(100);
        let id = Id(5);
        let c = Creds::root();
        assert!(taken(wb.append(id, &c, 50, b"abc")).is_none());
        match wb.append(id, &c, 0, &[0; 100]) {
            Append::Through { flushed: Some(f), after, done: _ } => {
                assert_eq!(f.offset, 50);
                assert_eq!(after.len(), 1, "overlaps the flushed buffer: waits for it");
                assert!(!after[0].is_done());
                drop(f.done);
                assert!(after[0].is_done());
            }
            other => panic!("{other:?}"),
        }
        match wb.append(id, &c, 1000, &[0; 100]) {
            Append::Through { flushed: None, after, .. } => assert!(after.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_overlapping_flights_are_waited_for() {
        let wb = WriteBehind::new(1 << 20);
        let id = Id(6);
        let c = Creds::root();
        // Random 4 KiB writes: each sends the one before.
        let blocks = [8u64, 3, 5, 3, 9, 4];
        let mut sent = vec![];
        for b in blocks {
            if let Some(s) = taken(wb.append(id, &c, b * 4096, &[b as u8; 4096])) {
                sent.push(s);
            }
        }
        sent.push(wb.take(id).unwrap());
        let offs: Vec<u64> = sent.iter().map(|s| s.offset / 4096).collect();
        assert_eq!(offs, blocks, "sent in the order they were written");
        let waits: Vec<usize> = sent.iter().map(|s| s.after.len()).collect();
        // Only the second write of block 3 overlaps an earlier flight (the first one).
        assert_eq!(waits, [0, 0, 0, 1, 0, 0]);
        assert_eq!(wb.flights(id).len(), 6);
        // Adjacent is not overlapping: block 4 ends where block 5 starts.
        let w = sent[3].after[0].clone();
        assert!(!w.is_done());
        sent.remove(1);
        assert!(w.is_done(), "the later write of block 3 may go once the first is done");
        assert_eq!(wb.flights(id).len(), 5);
    }

    #[test]
    fn overlap_is_by_byte_range() {
        let wb = WriteBehind::new(1 << 20);
        let id = Id(7);
        let c = Creds::root();
        assert!(taken(wb.append(id, &c, 100, &[1; 50])).is_none()); // [100, 150)
        let a = taken(wb.append(id, &c, 149, &[2; 1])).unwrap(); // sends [100,150); buffers [149,150)
        assert!(a.after.is_empty());
        let b = taken(wb.append(id, &c, 150, &[3; 10])); // sequential: joins [149, 160)
        assert!(b.is_none());
        let b = taken(wb.append(id, &c, 0, &[4; 100])).unwrap(); // sends [149,160); buffers [0,100)
        assert_eq!((b.offset, b.data.len(), b.after.len()), (149, 11, 1));
        let z = wb.take(id).unwrap(); // [0, 100) touches [100, 150) only at its end
        assert!(z.after.is_empty());
        assert_eq!(wb.buffered_end(id), Some(160));
    }

    #[test]
    fn full_bounds_flights_by_count_and_bytes() {
        let wb = WriteBehind::new(1 << 20);
        let id = Id(8);
        let c = Creds::root();
        assert!(wb.full(id, 2, 1 << 20).is_none());
        let mut sent = vec![];
        for b in 0..3u64 {
            sent.extend(taken(wb.append(id, &c, b * 8192, &[0; 4096])));
        }
        assert_eq!(sent.len(), 2);
        let oldest = wb.full(id, 2, 1 << 20).expect("two in flight");
        assert!(wb.full(id, 3, 1 << 20).is_none());
        assert!(wb.full(id, 3, 8192).is_some(), "8 KiB in flight");
        sent.remove(0);
        assert!(oldest.is_done());
        assert!(wb.full(id, 2, 1 << 20).is_none());
    }

    #[tokio::test]
    async fn waiter_wakes_when_done_is_dropped() {
        let wb = WriteBehind::new(100);
        let id = Id(9);
        let c = Creds::root();
        assert!(taken(wb.append(id, &c, 0, b"a")).is_none());
        let s = wb.take(id).unwrap();
        let ws = wb.flights(id);
        assert_eq!(ws.len(), 1);
        let w = tokio::spawn(ws.into_iter().next().unwrap().wait());
        tokio::task::yield_now().await;
        assert!(!w.is_finished());
        drop(s);
        w.await.unwrap();
        assert!(wb.flights(id).is_empty());
        assert!(wb.take_error(id).is_none());
        assert!(wb.dirty().is_empty());
    }

    #[test]
    fn errors_are_reported_once() {
        let wb = WriteBehind::new(100);
        wb.set_error(Id(1), RemoteError::new(Errno::ENOSPC, "full"));
        wb.set_error(Id(1), RemoteError::new(Errno::EIO, "later"));
        assert_eq!(wb.take_error(Id(1)).unwrap().errno, Errno::ENOSPC, "first error wins");
        assert!(wb.take_error(Id(1)).is_none());
    }
}
