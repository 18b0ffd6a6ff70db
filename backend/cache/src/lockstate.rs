//! Files no other session holds a byte-range lock on, as the bricks said with a lease
//! (`Reply::Unlocked`, asked with `BrickRequest::locks`): a lock test of such a file
//! (smbd's strict-locking check before every read and write of a file it holds no lease
//! on) is answered "no conflict" without a round trip.
//!
//! The head of a file keeps its locks and its leases: it says a file is unlocked only
//! after it leased the file to this session, and another session's lock of the file
//! recalls that lease before it is granted. So an entry stays exact until the recall
//! (`Push::Invalidate`, which drops it like the cached attributes) or the cache timeout
//! (under the brick's lease). A reply in flight across the recall is not installed
//! (`guard.rs`). This session's own locks are not the brick's to report (they never
//! conflict with other sessions' tests, but they do with this session's other lock
//! owners, e.g. Ganesha's NFS clients): a file this session locked is never answered
//! here again ([`LockStates::own_lock`]; one id kept per file it ever locked). A map
//! change drops everything: a new head knows nothing of the leases the old one gave.

use crate::guard::{id_key, Guard};
use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Above this many entries, a put first drops the expired ones.
const PRUNE_AT: usize = 65536;

#[derive(Default)]
struct Map {
    /// File -> when the brick said it was unlocked.
    unlocked: HashMap<Id, Instant>,
    /// Files this session took a lock of.
    own: HashSet<Id>,
}

pub struct LockStates {
    ttl: Mutex<Duration>,
    map: Mutex<Map>,
    guard: Guard,
}

impl LockStates {
    pub fn new(ttl: Duration) -> LockStates {
        LockStates { ttl: Mutex::new(ttl), map: Mutex::default(), guard: Guard::new() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.map.lock().unlocked.clear();
        }
    }

    /// Before sending a request whose reply may say a file is unlocked: its token.
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// The brick said, with a reply to a request begun with `token`, that no other session
    /// holds a lock on `id`. Refused (false) if `id` was recalled, this session locked it,
    /// or everything was dropped since, or the cache is off.
    pub fn put(&self, token: u64, id: Id) -> bool {
        let ttl = *self.ttl.lock();
        let mut m = self.map.lock();
        if ttl.is_zero() || m.own.contains(&id) || self.guard.crossed(token, id_key(id)) {
            return false;
        }
        if m.unlocked.len() >= PRUNE_AT {
            m.unlocked.retain(|_, at| at.elapsed() < ttl);
        }
        m.unlocked.insert(id, Instant::now());
        true
    }

    /// Whether no session (this one's other lock owners included) can hold a lock on `id`
    /// that a lock test must report.
    pub fn unlocked(&self, id: Id) -> bool {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        !m.own.contains(&id) && m.unlocked.get(&id).is_some_and(|at| at.elapsed() < ttl)
    }

    /// This session is about to lock `id`: its lock tests go to the brick from now on.
    pub fn own_lock(&self, id: Id) {
        let mut m = self.map.lock();
        self.guard.stamp(id_key(id));
        m.unlocked.remove(&id);
        m.own.insert(id);
    }

    /// The lease on `id` was recalled (another session's change or lock).
    pub fn invalidate(&self, id: Id) {
        let mut m = self.map.lock();
        self.guard.stamp(id_key(id));
        m.unlocked.remove(&id);
    }

    /// Forget every file said unlocked (a map change: the heads may have moved).
    pub fn clear(&self) {
        let mut m = self.map.lock();
        self.guard.stamp_all();
        m.unlocked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recall_an_own_lock_or_a_clear_ends_what_the_brick_said() {
        let l = LockStates::new(Duration::from_secs(5));
        let (a, b) = (Id(1), Id(2));
        assert!(!l.unlocked(a), "nothing known");
        assert!(l.put(l.begin(), a) && l.unlocked(a));
        l.invalidate(a);
        assert!(!l.unlocked(a), "recalled");
        let t = l.begin();
        l.invalidate(a);
        assert!(!l.put(t, a), "a reply in flight across the recall");
        assert!(l.put(l.begin(), a) && l.put(l.begin(), b));
        l.own_lock(a);
        assert!(!l.unlocked(a) && l.unlocked(b), "own lock of a only");
        assert!(!l.put(l.begin(), a), "never again after an own lock");
        let t = l.begin();
        l.clear();
        assert!(!l.unlocked(b) && !l.put(t, b), "cleared");
    }

    #[test]
    fn entries_expire_and_a_zero_timeout_turns_it_off() {
        let l = LockStates::new(Duration::from_millis(30));
        assert!(l.put(l.begin(), Id(1)));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!l.unlocked(Id(1)), "expired");
        l.set_ttl(Duration::ZERO);
        assert!(!l.put(l.begin(), Id(1)) && !l.unlocked(Id(1)));
    }
}
