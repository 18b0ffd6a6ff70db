//! Byte-range locks of the inodes a chain head serves, decided without I/O.
//!
//! A head holds a lock on what a mutation changes from before it applies it until every
//! replica answered its forward, so two mutations that conflict reach every replica in
//! the same order (the one that got the lock first is applied everywhere before the other
//! is sent), and a read at the head never sees a change its replicas do not have yet.
//! Mutations that do not conflict are in flight together: the 16 writes a client keeps
//! in flight to one file go down the chain at once instead of one after the other.
//!
//! A lock is a half-open byte range `[start, end)` of one key (an inode) in one of two
//! modes. Two locks conflict when their ranges overlap and one of them is
//! [`Mode::Exclusive`]. [`Range::WHOLE`] covers every byte: an operation on the whole
//! inode (truncate, setattr, xattrs, namespace changes, heal copies, repair) takes it
//! exclusively and so waits for, and keeps out, every write.
//!
//! Requests are granted in arrival order among those that conflict: a request waits for
//! every held lock *and every earlier waiting request* it conflicts with, so a stream of
//! writes cannot starve a truncate, and a request that conflicts with none of them is
//! granted at once, even past waiting ones. A caller that takes several keys (a rename's
//! directories) takes them in one global order (sorted keys); with the arrival-order rule
//! that cannot deadlock: a request waits only on holders or earlier requests of the same
//! key, and a holder waits only on a larger key.
//!
//! The table stores a caller's token `W` with each waiting request and hands it back when
//! the request is granted; `cairnd` wakes the waiting task with it.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A half-open byte range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// Every byte of the inode (and its metadata).
    pub const WHOLE: Range = Range { start: 0, end: u64::MAX };

    pub fn new(start: u64, end: u64) -> Range {
        Range { start, end: end.max(start) }
    }

    /// From `offset` to the end of any file: what a read there may see, including a
    /// size change by a write beyond it.
    pub fn from(offset: u64) -> Range {
        Range { start: offset, end: u64::MAX }
    }

    /// `[offset, offset + len)` widened to whole blocks of `block` bytes (a power of two),
    /// so two writes into one checksummed block are ordered like overlapping ones. A
    /// zero-length write still locks the block at `offset`.
    pub fn blocks(offset: u64, len: u64, block: u64) -> Range {
        debug_assert!(block.is_power_of_two());
        let start = offset & !(block - 1);
        let end = offset.saturating_add(len.max(1)).checked_next_multiple_of(block);
        Range { start, end: end.unwrap_or(u64::MAX) }
    }

    pub fn overlaps(&self, o: &Range) -> bool {
        self.start < o.end && o.start < self.end
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Reads: any number together.
    Shared,
    /// Mutations: alone on their range.
    Exclusive,
}

/// One request, held or waiting.
#[derive(Debug)]
struct Lock<W> {
    ticket: u64,
    range: Range,
    mode: Mode,
    waker: Option<W>,
}

impl<W> Lock<W> {
    fn conflicts(&self, range: &Range, mode: Mode) -> bool {
        (self.mode == Mode::Exclusive || mode == Mode::Exclusive) && self.range.overlaps(range)
    }
}

struct Entry<W> {
    held: Vec<Lock<W>>,
    /// Waiting requests, oldest first.
    waiting: VecDeque<Lock<W>>,
}

/// A ticket of one request; give it back to [`Table::release`] when done (granted or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

/// The range locks of many keys.
pub struct Table<K, W> {
    keys: HashMap<K, Entry<W>>,
    next: u64,
}

impl<K: Hash + Eq + Clone, W> Default for Table<K, W> {
    fn default() -> Self {
        Table { keys: HashMap::new(), next: 0 }
    }
}

impl<K: Hash + Eq + Clone, W> Table<K, W> {
    /// Ask for `range` of `key` in `mode`. Granted at once (`true`) when it conflicts with
    /// no held lock and no earlier waiting request; otherwise it waits, and `waker` comes
    /// back from the [`Table::release`] that grants it.
    pub fn acquire(&mut self, key: K, range: Range, mode: Mode, waker: W) -> (Ticket, bool) {
        self.next += 1;
        let ticket = self.next;
        let e = self
            .keys
            .entry(key)
            .or_insert_with(|| Entry { held: vec![], waiting: VecDeque::new() });
        let blocked = e.held.iter().chain(e.waiting.iter()).any(|l| l.conflicts(&range, mode));
        let lock = Lock { ticket, range, mode, waker: Some(waker) };
        if blocked {
            e.waiting.push_back(lock);
        } else {
            e.held.push(Lock { waker: None, ..lock });
        }
        (Ticket(ticket), !blocked)
    }

    /// Give back request `t` of `key`, held or still waiting (a waiter that gave up).
    /// Returns the wakers of the requests this grants, in arrival order.
    pub fn release(&mut self, key: &K, t: Ticket) -> Vec<W> {
        let Some(e) = self.keys.get_mut(key) else { return vec![] };
        if let Some(i) = e.held.iter().position(|l| l.ticket == t.0) {
            e.held.swap_remove(i);
        } else if let Some(i) = e.waiting.iter().position(|l| l.ticket == t.0) {
            e.waiting.remove(i);
        } else {
            return vec![];
        }
        let mut granted = vec![];
        let mut still = VecDeque::with_capacity(e.waiting.len());
        while let Some(mut w) = e.waiting.pop_front() {
            let blocked = e.held.iter().chain(still.iter()).any(|l| l.conflicts(&w.range, w.mode));
            if blocked {
                still.push_back(w);
            } else {
                granted.extend(w.waker.take());
                e.held.push(w);
            }
        }
        e.waiting = still;
        if e.held.is_empty() && e.waiting.is_empty() {
            self.keys.remove(key);
        }
        granted
    }

    /// Whether request `t` of `key` is held (granted).
    pub fn is_held(&self, key: &K, t: Ticket) -> bool {
        self.keys.get(key).is_some_and(|e| e.held.iter().any(|l| l.ticket == t.0))
    }

    /// Keys with a held or waiting request (for tests and statistics).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u32 = 1;

    #[test]
    fn ranges() {
        assert_eq!(Range::blocks(4096, 4096, 65536), Range::new(0, 65536));
        assert_eq!(Range::blocks(65535, 2, 65536), Range::new(0, 131072));
        assert_eq!(Range::blocks(65536, 0, 65536), Range::new(65536, 131072));
        assert_eq!(Range::blocks(u64::MAX - 10, 100, 65536).end, u64::MAX);
        assert!(Range::new(0, 10).overlaps(&Range::new(9, 20)));
        assert!(!Range::new(0, 10).overlaps(&Range::new(10, 20)));
        assert!(Range::WHOLE.overlaps(&Range::new(5, 6)));
        assert!(Range::from(100).overlaps(&Range::new(1 << 40, (1 << 40) + 1)));
        assert!(!Range::from(100).overlaps(&Range::new(0, 100)));
    }

    #[test]
    fn disjoint_writes_together_overlapping_ones_in_order() {
        let mut t: Table<u32, &str> = Table::default();
        let (a, ga) = t.acquire(K, Range::new(0, 10), Mode::Exclusive, "a");
        let (b, gb) = t.acquire(K, Range::new(10, 20), Mode::Exclusive, "b");
        assert!(ga && gb, "disjoint ranges are held together");
        let (c, gc) = t.acquire(K, Range::new(5, 15), Mode::Exclusive, "c");
        assert!(!gc, "overlaps both");
        let (_d, gd) = t.acquire(K, Range::new(30, 40), Mode::Exclusive, "d");
        assert!(gd, "conflicts with nobody: passes the waiting one");
        let (_o, go) = t.acquire(2, Range::new(5, 15), Mode::Exclusive, "other key");
        assert!(go, "another key is independent");
        assert!(t.release(&K, a).is_empty(), "c still overlaps b");
        assert_eq!(t.release(&K, b), vec!["c"]);
        assert!(t.is_held(&K, c));
    }

    #[test]
    fn whole_inode_waits_for_every_write_and_keeps_later_ones_out() {
        let mut t: Table<u32, &str> = Table::default();
        let (w1, _) = t.acquire(K, Range::new(0, 10), Mode::Exclusive, "w1");
        let (w2, _) = t.acquire(K, Range::new(100, 110), Mode::Exclusive, "w2");
        let (tr, g) = t.acquire(K, Range::WHOLE, Mode::Exclusive, "truncate");
        assert!(!g);
        // A later write, disjoint from w1 and w2, must not pass the truncate.
        let (w3, g3) = t.acquire(K, Range::new(50, 60), Mode::Exclusive, "w3");
        assert!(!g3, "arrival order: waits behind the waiting truncate");
        assert!(t.release(&K, w1).is_empty());
        assert_eq!(t.release(&K, w2), vec!["truncate"]);
        assert_eq!(t.release(&K, tr), vec!["w3"]);
        assert!(t.release(&K, w3).is_empty());
        assert!(t.is_empty(), "entries are dropped when unused");
    }

    #[test]
    fn reads_share_and_see_no_write_in_flight_at_or_after_them() {
        let mut t: Table<u32, &str> = Table::default();
        let (r1, g1) = t.acquire(K, Range::from(0), Mode::Shared, "r1");
        let (r2, g2) = t.acquire(K, Range::from(4096), Mode::Shared, "r2");
        assert!(g1 && g2);
        let (w, gw) = t.acquire(K, Range::new(1 << 30, (1 << 30) + 4096), Mode::Exclusive, "w");
        assert!(!gw, "a write beyond a read (it may extend the file) waits for it");
        assert!(t.release(&K, r1).is_empty());
        assert_eq!(t.release(&K, r2), vec!["w"]);
        let (_r3, g3) = t.acquire(K, Range::from((1 << 30) + 8192), Mode::Shared, "r3");
        assert!(g3, "a read past the write's range goes on");
        let (_r4, g4) = t.acquire(K, Range::from(0), Mode::Shared, "r4");
        assert!(!g4);
        let _ = w;
    }

    #[test]
    fn a_waiter_that_gives_up_unblocks_those_behind_it() {
        let mut t: Table<u32, &str> = Table::default();
        let (a, _) = t.acquire(K, Range::new(0, 10), Mode::Exclusive, "a");
        let (b, gb) = t.acquire(K, Range::WHOLE, Mode::Exclusive, "b");
        let (c, gc) = t.acquire(K, Range::new(20, 30), Mode::Exclusive, "c");
        assert!(!gb && !gc);
        assert_eq!(t.release(&K, b), vec!["c"], "c only waited for b");
        assert!(t.release(&K, Ticket(999)).is_empty(), "unknown ticket: nothing");
        t.release(&K, a);
        t.release(&K, c);
        assert!(t.is_empty());
    }
}
