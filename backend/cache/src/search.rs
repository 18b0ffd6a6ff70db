//! Who may search which directory, as the bricks said: a caller whose lookup in a
//! directory the brick answered (found, or no such entry: not EACCES) may search it until
//! the directory's mode, owner or ACL changes. Those are changes of the directory's
//! attributes or xattrs, which recall this session's lease on it (`Push::Invalidate`) or
//! are this client's own (the client drops the entry then). So the client's name caches
//! answer a caller from memory only when this says yes, or the cached attributes alone
//! decide (`Volume::may_search` in the client): a name cached by one caller's lookup is
//! never handed to another whom the directory refuses.
//!
//! Keyed by directory and the caller's uid, gid and groups; a reply in flight across a
//! recall is not installed (`guard.rs`); trusted for the cache timeout at most.

use crate::guard::{id_key, Guard};
use cairn_proto::{Creds, Id};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Directories tracked at most (dropped wholesale beyond, like the other caches).
const MAX_DIRS: usize = 4096;

pub struct Searchers {
    ttl: Mutex<Duration>,
    map: Mutex<HashMap<Id, Vec<(Creds, Instant)>>>,
    guard: Guard,
}

impl Searchers {
    pub fn new(ttl: Duration) -> Searchers {
        Searchers { ttl: Mutex::new(ttl), map: Mutex::default(), guard: Guard::new() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.map.lock().clear();
        }
    }

    /// Before a lookup whose answer may [`put`](Self::put): its token.
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// The brick let `c` search `dir` (a lookup begun with `token`): remembered unless a
    /// recall or change of `dir` came since.
    pub fn put(&self, token: u64, dir: Id, c: &Creds) -> bool {
        let ttl = *self.ttl.lock();
        let mut m = self.map.lock();
        if ttl.is_zero() || self.guard.crossed(token, id_key(dir)) {
            return false;
        }
        if m.len() >= MAX_DIRS && !m.contains_key(&dir) {
            m.clear();
        }
        let now = Instant::now();
        let v = m.entry(dir).or_default();
        v.retain(|(k, at)| k != c && at.elapsed() < ttl);
        v.push((c.clone(), now));
        true
    }

    /// Whether the brick let `c` search `dir` lately, with no change of `dir` since.
    pub fn may(&self, dir: Id, c: &Creds) -> bool {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        m.get(&dir).is_some_and(|v| v.iter().any(|(k, at)| k == c && at.elapsed() < ttl))
    }

    /// `dir`'s attributes or xattrs changed (a recall, or this client's change).
    pub fn invalidate(&self, dir: Id) {
        let mut m = self.map.lock();
        self.guard.stamp(id_key(dir));
        m.remove(&dir);
    }

    pub fn clear(&self) {
        let mut m = self.map.lock();
        self.guard.stamp_all();
        m.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_searched_until_the_directory_changes() {
        let s = Searchers::new(Duration::from_secs(5));
        let (u, v) =
            (Creds { uid: 5, gid: 5, groups: vec![] }, Creds { uid: 6, gid: 5, groups: vec![] });
        let d = Id(9);
        assert!(s.put(s.begin(), d, &u));
        assert!(s.may(d, &u) && !s.may(d, &v), "per caller");
        assert!(!s.may(Id(10), &u), "per directory");
        s.invalidate(d);
        assert!(!s.may(d, &u), "changed");
        let t = s.begin();
        s.invalidate(d);
        assert!(!s.put(t, d, &u), "a lookup in flight across the change");
        assert!(s.put(s.begin(), d, &u));
        s.clear();
        assert!(!s.may(d, &u));
    }
}
