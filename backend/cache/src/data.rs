//! Quick-read: small files' content that came inline with their lookup
//! (`BrickRequest::inline`), so the open + read that usually follows costs no round trip.
//!
//! The content is trusted exactly as long as the attributes it came with: the brick granted
//! a lease on the inode before reading it, so another client's change recalls it
//! ([`DataCache::invalidate`]), and a read uses it only while the attribute cache still
//! holds a valid copy with the same change counter and size ([`DataCache::get`]), and
//! never after the cache timeout. The client's own changes of a file invalidate it before
//! they are sent and again when answered; a lookup that was in flight across such an
//! invalidation does not store what it got ([`DataCache::begin`], the guard of
//! `guard.rs`).

use crate::guard::{id_key, Guard};
use bytes::Bytes;
use cairn_proto::{Attr, Creds, Id};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// [`DataCache::want`] judges by the last this many files stored...
const RECENT: usize = 32;
/// ...asking again while at least this many of them were read...
const RECENT_USED: usize = 8;
/// ...and otherwise on one lookup in this many (to notice reads coming back).
const PROBE: u64 = 16;

struct Cached {
    data: Bytes,
    change: u64,
    size: u64,
    /// Whose permission the brick checked when it read the content.
    creds: Creds,
    at: Instant,
}

struct State {
    files: HashMap<Id, Cached>,
    bytes: usize,
    /// The last files stored, and whether a read used their content.
    recent: VecDeque<(Id, bool)>,
    /// Lookups judged by [`DataCache::want`] while it said no.
    skipped: u64,
}

pub struct DataCache {
    ttl: Mutex<Duration>,
    max_bytes: usize,
    state: Mutex<State>,
    guard: Guard,
}

impl DataCache {
    /// Content trusted for `ttl` at most, `max_bytes` of it in all.
    pub fn new(ttl: Duration, max_bytes: usize) -> DataCache {
        DataCache {
            ttl: Mutex::new(ttl),
            max_bytes,
            state: Mutex::new(State {
                files: HashMap::new(),
                bytes: 0,
                recent: VecDeque::with_capacity(RECENT + 1),
                skipped: 0,
            }),
            guard: Guard::new(),
        }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.clear();
        }
    }

    /// Whether the next lookup should ask for content: yes until [`RECENT`] files were
    /// stored, then while reads used the content of at least [`RECENT_USED`] of the last
    /// [`RECENT`], else on one lookup in [`PROBE`]. A workload that looks files up without
    /// reading them (`stat`, `ls -l` through LOOKUPs) stops making the bricks read them.
    pub fn want(&self) -> bool {
        if self.ttl.lock().is_zero() {
            return false;
        }
        let mut s = self.state.lock();
        if s.recent.len() < RECENT
            || s.recent.iter().filter(|(_, used)| *used).count() >= RECENT_USED
        {
            return true;
        }
        s.skipped += 1;
        s.skipped.is_multiple_of(PROBE)
    }

    /// Before sending a lookup that may bring content: the token to [`put`](Self::put) it
    /// with.
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// Store the content `data` of the file `attr` describes, as read with `creds` by a
    /// lookup begun with `token`, unless the file was invalidated since. Returns whether
    /// it was stored.
    pub fn put(&self, token: u64, attr: &Attr, creds: &Creds, data: Bytes) -> bool {
        if self.ttl.lock().is_zero()
            || data.len() as u64 != attr.size
            || data.len() > self.max_bytes
        {
            return false;
        }
        let ttl = *self.ttl.lock();
        let mut s = self.state.lock();
        if self.guard.crossed(token, id_key(attr.id)) {
            return false;
        }
        if s.bytes + data.len() > self.max_bytes {
            s.files.retain(|_, c| c.at.elapsed() < ttl);
            s.bytes = s.files.values().map(|c| c.data.len()).sum();
            if s.bytes + data.len() > self.max_bytes {
                s.files.clear();
                s.bytes = 0;
            }
        }
        s.bytes += data.len();
        let c = Cached {
            data,
            change: attr.change,
            size: attr.size,
            creds: creds.clone(),
            at: Instant::now(),
        };
        if let Some(old) = s.files.insert(attr.id, c) {
            s.bytes -= old.data.len();
        }
        s.recent.push_back((attr.id, false));
        if s.recent.len() > RECENT {
            s.recent.pop_front();
        }
        true
    }

    /// The cached content of `current.id`, if it is still what `current` (the attributes
    /// the client holds now, under their lease) describes, was read with `creds`, and is
    /// younger than the timeout.
    pub fn get(&self, current: &Attr, creds: &Creds) -> Option<Bytes> {
        let ttl = *self.ttl.lock();
        let mut s = self.state.lock();
        let c = s.files.get(&current.id)?;
        let fresh = c.at.elapsed() < ttl
            && c.change == current.change
            && c.size == current.size
            && c.creds == *creds;
        if !fresh {
            return None;
        }
        let data = c.data.clone();
        if let Some(r) = s.recent.iter_mut().rev().find(|(id, _)| *id == current.id) {
            r.1 = true;
        }
        Some(data)
    }

    /// `id` changed (a lease recall, or a change by this client): drop its content, and
    /// refuse what lookups in flight bring of it.
    pub fn invalidate(&self, id: Id) {
        let mut s = self.state.lock();
        self.guard.stamp(id_key(id));
        if let Some(old) = s.files.remove(&id) {
            s.bytes -= old.data.len();
        }
    }

    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.files.clear();
        s.bytes = 0;
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.state.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::{FileType, Timespec};

    fn attr(id: u128, size: u64, change: u64) -> Attr {
        let t = Timespec { sec: 1, nsec: 0 };
        Attr {
            id: Id(id),
            kind: FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            blocks: 0,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            change,
        }
    }

    fn data(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn served_only_while_the_attributes_match() {
        let c = DataCache::new(Duration::from_secs(60), 1 << 20);
        let root = Creds::root();
        let a = attr(1, 4, 10);
        assert!(c.put(c.begin(), &a, &root, data(4)));
        assert_eq!(c.get(&a, &root).unwrap().len(), 4);
        // Changed since (the attribute cache holds a newer copy): not served.
        assert!(c.get(&attr(1, 4, 11), &root).is_none());
        assert!(c.get(&attr(1, 5, 10), &root).is_none());
        // Another caller: not served (the brick checked the first one's permission).
        let other = Creds { uid: 1000, gid: 1000, groups: vec![] };
        assert!(c.get(&a, &other).is_none());
        // A size that does not match the content is refused.
        assert!(!c.put(c.begin(), &attr(2, 8, 1), &root, data(4)));
    }

    #[test]
    fn invalidation_drops_it_and_refuses_lookups_in_flight() {
        let c = DataCache::new(Duration::from_secs(60), 1 << 20);
        let root = Creds::root();
        let a = attr(1, 4, 10);
        assert!(c.put(c.begin(), &a, &root, data(4)));
        let token = c.begin();
        c.invalidate(a.id);
        assert!(c.get(&a, &root).is_none());
        assert_eq!(c.bytes(), 0);
        // A lookup sent before the invalidation brings the old content: refused.
        assert!(!c.put(token, &a, &root, data(4)));
        // One sent after it is stored.
        assert!(c.put(c.begin(), &a, &root, data(4)));
        // Other files are not affected by the invalidation of this one (unless they share
        // its slot).
        let b = attr(2, 3, 1);
        let token = c.begin();
        c.invalidate(a.id);
        assert!(c.put(token, &b, &root, data(3)));
    }

    #[test]
    fn asked_for_only_while_reads_use_it() {
        let c = DataCache::new(Duration::from_secs(60), 1 << 20);
        let root = Creds::root();
        // Looked up and read: keeps asking.
        for i in 0..100 {
            assert!(c.want());
            let a = attr(i, 1, 1);
            assert!(c.put(c.begin(), &a, &root, data(1)));
            assert!(c.get(&a, &root).is_some());
        }
        // Looked up only (stat): stops asking once most of the last ones went unread...
        let mut asked = 0;
        for i in 100..1100 {
            if c.want() {
                asked += 1;
                assert!(c.put(c.begin(), &attr(i, 1, 1), &root, data(1)));
            }
        }
        assert!(asked < 100, "asked on {asked} of 1000 lookups whose content went unread");
        // ...and starts again when probes are read.
        let mut i = 2000;
        let mut lookups = 0;
        while lookups < 1000 {
            lookups += 1;
            if c.want() {
                let a = attr(i, 1, 1);
                assert!(c.put(c.begin(), &a, &root, data(1)));
                assert!(c.get(&a, &root).is_some());
                i += 1;
                if c.want() {
                    break;
                }
            }
        }
        assert!(lookups < 1000, "never asked again although the content was read");
        assert!(c.want());
    }

    #[test]
    fn expires_and_is_bounded() {
        let c = DataCache::new(Duration::from_millis(20), 10);
        let root = Creds::root();
        let a = attr(1, 6, 1);
        assert!(c.put(c.begin(), &a, &root, data(6)));
        std::thread::sleep(Duration::from_millis(30));
        assert!(c.get(&a, &root).is_none());
        // Full: the expired one makes room.
        let b = attr(2, 6, 1);
        assert!(c.put(c.begin(), &b, &root, data(6)));
        assert_eq!(c.bytes(), 6);
        // Still full of live content: dropped wholesale.
        let d = attr(3, 6, 1);
        assert!(c.put(c.begin(), &d, &root, data(6)));
        assert_eq!(c.bytes(), 6);
        assert!(c.get(&d, &root).is_some());
        assert!(!c.put(c.begin(), &attr(4, 11, 1), &root, data(11)), "larger than the cache");
        let off = DataCache::new(Duration::ZERO, 10);
        assert!(!off.put(off.begin(), &a, &root, data(6)));
    }
}
