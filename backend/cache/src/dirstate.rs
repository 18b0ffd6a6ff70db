//! Complete directories (the negative-lookup cache, GlusterFS's nl-cache idea): for a
//! directory whose every name this client knows, a lookup of any other name is answered
//! "no such entry" from memory, so a create of a new name costs no LOOKUP round trip.
//!
//! A directory becomes complete by listing it on every replica set to the end: each
//! set's READDIR is answered under the directory's read lock at its chain head and grants
//! this session a lease on the directory's entries there, the head every create, link,
//! mkdir, unlink or rename changing the directory's entries on that set goes through (a
//! rename's other directory is recalled by the replica heading it, `cairnd` `replicate`).
//! So another client's change recalls the state before it completes, and the state is:
//!
//! - dropped on any recall of the directory's entries (from any set);
//! - never installed by a listing that a recall, or a change by this client, crossed
//!   (the guard [`DirStates::begin`] / [`DirStates::install`], `guard.rs`, as
//!   quick-read's and positive entries');
//! - kept current by this client's own changes, which do not recall its own lease
//!   ([`DirStates::touch`] before and after each, then [`DirStates::added`] /
//!   [`DirStates::removed`], or [`DirStates::invalidate`] when the outcome is unknown);
//! - trusted for the cache timeout after its listing at most, and only under the map it
//!   was listed under and while no rebalance runs (a head fail-over changes the map and
//!   the new head does not know the old one's holders; a rebalance moves names between
//!   sets). After that the next miss lists the directory again.

use crate::guard::{id_key, Guard};
use cairn_proto::{Id, Name};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Directories tracked at most (dropped wholesale beyond, like the other caches).
const MAX_DIRS: usize = 4096;
/// How long a directory found too big (or not listable) is not listed again.
const GIVE_UP: Duration = Duration::from_secs(10);

struct Complete {
    names: HashSet<Name>,
    at: Instant,
    epoch: u64,
}

struct State {
    dirs: HashMap<Id, Complete>,
    /// Directories being listed, found too big to list, or whose listing failed: not
    /// listed (again) before the time given.
    skip: HashMap<Id, Instant>,
}

pub struct DirStates {
    ttl: Mutex<Duration>,
    state: Mutex<State>,
    /// A recall of one directory voids listings in flight of the directories sharing its
    /// slot too (harmless: they are listed again later).
    guard: Guard,
}

impl DirStates {
    pub fn new(ttl: Duration) -> DirStates {
        DirStates {
            ttl: Mutex::new(ttl),
            state: Mutex::new(State { dirs: HashMap::new(), skip: HashMap::new() }),
            guard: Guard::new(),
        }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.state.lock().dirs.clear();
        }
    }

    /// Whether `name` is known absent from `dir` under map `epoch` (no round trip needed).
    pub fn absent(&self, dir: Id, name: &[u8], epoch: u64) -> bool {
        let ttl = *self.ttl.lock();
        let s = self.state.lock();
        match s.dirs.get(&dir) {
            Some(c) => c.epoch == epoch && c.at.elapsed() < ttl && !c.names.contains(name),
            None => false,
        }
    }

    /// Whether a listing of `dir` is worth starting now: caching on, no valid state, not
    /// being listed, and not found too big lately. A yes marks it as being listed (until
    /// [`install`](Self::install), [`give_up`](Self::give_up), or the cache timeout).
    pub fn want(&self, dir: Id, epoch: u64) -> bool {
        let ttl = *self.ttl.lock();
        if ttl.is_zero() {
            return false;
        }
        let mut s = self.state.lock();
        if let Some(c) = s.dirs.get(&dir) {
            if c.epoch == epoch && c.at.elapsed() < ttl {
                return false;
            }
        }
        let now = Instant::now();
        if s.skip.get(&dir).is_some_and(|until| *until > now) {
            return false;
        }
        if s.skip.len() >= MAX_DIRS {
            s.skip.retain(|_, until| *until > now);
            if s.skip.len() >= MAX_DIRS {
                s.skip.clear();
            }
        }
        s.skip.insert(dir, now + ttl);
        true
    }

    /// Before sending the listing of a directory: the token to [`install`](Self::install)
    /// it with. Taken before the first request leaves, so a recall answered after that
    /// voids it.
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// `names` is every name of `dir` (all sets listed to the end, under map `epoch`, each
    /// listing having granted a lease): make it complete, unless a recall of it or a
    /// change by this client came since `token`. Returns whether it was installed.
    pub fn install(&self, token: u64, dir: Id, names: HashSet<Name>, epoch: u64) -> bool {
        if self.ttl.lock().is_zero() {
            return false;
        }
        let mut s = self.state.lock();
        s.skip.remove(&dir);
        if self.guard.crossed(token, id_key(dir)) {
            return false;
        }
        if s.dirs.len() >= MAX_DIRS {
            s.dirs.clear();
        }
        s.dirs.insert(dir, Complete { names, at: Instant::now(), epoch });
        true
    }

    /// A listing of `dir` was not complete (too big) or failed: do not try for a while.
    pub fn give_up(&self, dir: Id) {
        let ttl = *self.ttl.lock();
        self.state.lock().skip.insert(dir, Instant::now() + GIVE_UP.max(ttl));
    }

    /// This client is changing (or has just changed) `dir`'s entries: listings in flight
    /// may or may not include the change, so none of them is installed. The state kept is
    /// updated by the caller when the change's outcome is known.
    pub fn touch(&self, dir: Id) {
        self.guard.stamp(id_key(dir));
    }

    /// This client made `name` in `dir` (its own changes recall nothing here).
    pub fn added(&self, dir: Id, name: &[u8]) {
        if let Some(c) = self.state.lock().dirs.get_mut(&dir) {
            c.names.insert(name.to_vec());
        }
    }

    /// This client removed `name` from `dir`.
    pub fn removed(&self, dir: Id, name: &[u8]) {
        if let Some(c) = self.state.lock().dirs.get_mut(&dir) {
            c.names.remove(name);
        }
    }

    /// `dir`'s entries changed in a way not known here (a lease recall, or a change of
    /// this client whose outcome is unknown): drop its state and void listings in flight.
    pub fn invalidate(&self, dir: Id) {
        let mut s = self.state.lock();
        self.guard.stamp(id_key(dir));
        s.dirs.remove(&dir);
    }

    pub fn clear(&self) {
        let mut s = self.state.lock();
        self.guard.stamp_all();
        s.dirs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> HashSet<Name> {
        n.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    const D: Id = Id(0x1234_5678_9abc_def0_1111_2222_3333_4444);

    #[test]
    fn a_complete_directory_answers_absent_names_only() {
        let s = DirStates::new(Duration::from_secs(60));
        assert!(!s.absent(D, b"x", 1), "nothing known before a listing");
        let t = s.begin();
        assert!(s.install(t, D, names(&["a"]), 1));
        assert!(s.absent(D, b"x", 1));
        assert!(!s.absent(D, b"a", 1), "a listed name is not absent");
        assert!(!s.absent(D, b"x", 2), "another map: not trusted");
        s.added(D, b"x");
        assert!(!s.absent(D, b"x", 1), "made by this client");
        s.removed(D, b"a");
        assert!(s.absent(D, b"a", 1));
    }

    /// The race guard: a listing whose answer crosses a recall of the directory (the
    /// recall was handled while it was in flight) is not installed.
    #[test]
    fn a_listing_that_crosses_a_recall_is_not_installed() {
        let s = DirStates::new(Duration::from_secs(60));
        let t = s.begin();
        s.invalidate(D); // recall arrives before the listing's answer is handled
        assert!(!s.install(t, D, names(&[]), 1));
        assert!(!s.absent(D, b"x", 1));
        // A listing begun after the recall is installed.
        let t = s.begin();
        assert!(s.install(t, D, names(&[]), 1));
        assert!(s.absent(D, b"x", 1));
    }

    /// A listing that crosses this client's own change of the directory is not installed
    /// either (it may or may not include the change; the change recalls nothing here).
    #[test]
    fn a_listing_that_crosses_an_own_change_is_not_installed() {
        let s = DirStates::new(Duration::from_secs(60));
        let t = s.begin();
        s.touch(D);
        assert!(!s.install(t, D, names(&[]), 1));
        // Touch keeps an installed state (the caller updates it).
        let t = s.begin();
        assert!(s.install(t, D, names(&[]), 1));
        s.touch(D);
        assert!(s.absent(D, b"x", 1));
    }

    #[test]
    fn a_recall_drops_the_state_and_it_expires() {
        let s = DirStates::new(Duration::from_secs(60));
        let t = s.begin();
        assert!(s.install(t, D, names(&[]), 1));
        s.invalidate(D);
        assert!(!s.absent(D, b"x", 1));

        let s = DirStates::new(Duration::from_millis(20));
        let t = s.begin();
        assert!(s.install(t, D, names(&[]), 1));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!s.absent(D, b"x", 1), "older than the cache timeout");
        assert!(s.want(D, 1));

        let s = DirStates::new(Duration::ZERO);
        assert!(!s.install(s.begin(), D, names(&[]), 1), "caching off");
    }
}
