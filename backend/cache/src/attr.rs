use cairn_proto::{Attr, Id, Name};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Cached entries beyond this are dropped wholesale (a crude but bounded policy).
const MAX_ENTRIES: usize = 200_000;

pub struct AttrCache {
    ttl: Mutex<Duration>,
    map: Mutex<HashMap<Id, (Attr, Instant)>>,
}

impl AttrCache {
    pub fn new(ttl: Duration) -> AttrCache {
        AttrCache { ttl: Mutex::new(ttl), map: Mutex::default() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.map.lock().clear();
        }
    }

    pub fn get(&self, id: Id) -> Option<Attr> {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        m.get(&id).filter(|(_, t)| t.elapsed() < ttl).map(|(a, _)| a.clone())
    }

    pub fn put(&self, a: &Attr) {
        if self.ttl.lock().is_zero() {
            return;
        }
        let mut m = self.map.lock();
        if m.len() >= MAX_ENTRIES {
            m.clear();
        }
        m.insert(a.id, (a.clone(), Instant::now()));
    }

    /// Like `put`, but keep a cached entry that is newer (a later change, or the same
    /// change and a larger size): replies of writes in flight together arrive in any order.
    pub fn put_newer(&self, a: &Attr) {
        if let Some((old, _)) = self.map.lock().get(&a.id) {
            if (old.change, old.size) > (a.change, a.size) {
                return;
            }
        }
        self.put(a);
    }

    pub fn invalidate(&self, id: Id) {
        self.map.lock().remove(&id);
    }

    pub fn clear(&self) {
        self.map.lock().clear();
    }
}

/// Names of one directory: name → (id, when cached).
type DirEntries = HashMap<Name, (Id, Instant)>;

pub struct EntryCache {
    ttl: Mutex<Duration>,
    dirs: Mutex<HashMap<Id, DirEntries>>,
}

impl EntryCache {
    pub fn new(ttl: Duration) -> EntryCache {
        EntryCache { ttl: Mutex::new(ttl), dirs: Mutex::default() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.dirs.lock().clear();
        }
    }

    pub fn get(&self, dir: Id, name: &[u8]) -> Option<Id> {
        let ttl = *self.ttl.lock();
        let d = self.dirs.lock();
        d.get(&dir).and_then(|m| m.get(name)).filter(|(_, t)| t.elapsed() < ttl).map(|(id, _)| *id)
    }

    pub fn put(&self, dir: Id, name: &[u8], id: Id) {
        if self.ttl.lock().is_zero() {
            return;
        }
        let mut d = self.dirs.lock();
        if d.len() >= MAX_ENTRIES {
            d.clear();
        }
        let m = d.entry(dir).or_default();
        if m.len() >= MAX_ENTRIES {
            m.clear();
        }
        m.insert(name.to_vec(), (id, Instant::now()));
    }

    pub fn remove(&self, dir: Id, name: &[u8]) {
        if let Some(m) = self.dirs.lock().get_mut(&dir) {
            m.remove(name);
        }
    }

    pub fn invalidate_dir(&self, dir: Id) {
        self.dirs.lock().remove(&dir);
    }

    pub fn clear(&self) {
        self.dirs.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::{FileType, Timespec};

    fn attr(id: u128) -> Attr {
        Attr {
            id: Id(id),
            kind: FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 0,
            blocks: 0,
            rdev: 0,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            change: 0,
        }
    }

    #[test]
    fn attrs_expire_and_invalidate() {
        let c = AttrCache::new(Duration::from_millis(50));
        c.put(&attr(5));
        assert!(c.get(Id(5)).is_some());
        c.invalidate(Id(5));
        assert!(c.get(Id(5)).is_none());
        c.put(&attr(6));
        std::thread::sleep(Duration::from_millis(60));
        assert!(c.get(Id(6)).is_none(), "expired");
        c.set_ttl(Duration::ZERO);
        c.put(&attr(7));
        assert!(c.get(Id(7)).is_none(), "ttl 0 disables caching");
    }

    #[test]
    fn put_newer_keeps_the_later_reply() {
        let c = AttrCache::new(Duration::from_secs(5));
        let at = |change, size| Attr { change, size, ..attr(9) };
        c.put_newer(&at(10, 8192));
        c.put_newer(&at(10, 4096)); // same tick, smaller: an earlier write's reply
        assert_eq!(c.get(Id(9)).unwrap().size, 8192);
        c.put_newer(&at(9, 12288));
        assert_eq!(c.get(Id(9)).unwrap().change, 10);
        c.put_newer(&at(11, 4096)); // truncated later
        assert_eq!(c.get(Id(9)).unwrap().size, 4096);
    }

    #[test]
    fn entries_by_directory() {
        let c = EntryCache::new(Duration::from_secs(5));
        c.put(Id(1), b"a", Id(10));
        c.put(Id(1), b"b", Id(11));
        c.put(Id(2), b"a", Id(12));
        assert_eq!(c.get(Id(1), b"a"), Some(Id(10)));
        c.remove(Id(1), b"a");
        assert_eq!(c.get(Id(1), b"a"), None);
        c.invalidate_dir(Id(1));
        assert_eq!(c.get(Id(1), b"b"), None);
        assert_eq!(c.get(Id(2), b"a"), Some(Id(12)));
    }
}
