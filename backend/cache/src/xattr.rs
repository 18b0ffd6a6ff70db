//! Extended attributes by inode and caller: the complete list (every name with its value,
//! or `None` where the caller may not read it) that a GETXATTRS answered, under the lease
//! that read took at the inode's chain head — the lease that covers the inode's
//! attributes. Kept for at most the attribute cache's timeout and dropped at once by a
//! recall of the inode, as its attributes are; the race guard (`guard.rs`) refuses a list
//! that was in flight across a recall or across this client's own change of the inode.
//!
//! Entries are per caller (uid, gid, groups): which values a caller may read depends on
//! them. This client's own setxattr and removexattr keep the lists current
//! ([`XattrCache::changed`]): the bricks do not recall the session that made a change.

use crate::guard::{id_key, Guard};
use cairn_proto::{Creds, Id, Xattr};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Inodes whose lists are kept beyond this are dropped wholesale (as the other caches).
const MAX_INODES: usize = 50_000;
/// A list larger than this (names and values) is not kept.
const MAX_LIST_BYTES: usize = 64 << 10;

/// One caller's complete list of an inode's xattrs.
pub type XattrList = Arc<Vec<Xattr>>;

struct Entry {
    creds: Creds,
    at: Instant,
    list: XattrList,
}

/// This client's own change of one xattr, for [`XattrCache::changed`].
pub enum XattrChange<'a> {
    /// Set to this value (by the caller given with it).
    Set(&'a [u8]),
    Removed,
}

pub struct XattrCache {
    ttl: Mutex<Duration>,
    map: Mutex<HashMap<Id, Vec<Entry>>>,
    guard: Guard,
}

fn size_of(list: &[Xattr]) -> usize {
    list.iter().map(|x| x.name.len() + x.value.as_ref().map_or(0, |v| v.len()) + 16).sum()
}

impl XattrCache {
    pub fn new(ttl: Duration) -> XattrCache {
        XattrCache { ttl: Mutex::new(ttl), map: Mutex::default(), guard: Guard::new() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.clear();
        }
    }

    /// Whether lists are kept at all (a cache timeout above zero).
    pub fn enabled(&self) -> bool {
        !self.ttl.lock().is_zero()
    }

    /// Before a request whose answer will be [`put`](Self::put): its race-guard token.
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// `c`'s complete list of `id`'s xattrs, if one is cached and still trusted.
    pub fn get(&self, id: Id, c: &Creds) -> Option<XattrList> {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        m.get(&id)?.iter().find(|e| e.creds == *c && e.at.elapsed() < ttl).map(|e| e.list.clone())
    }

    /// A trusted list of `id` for answering `c`: `c`'s own if cached, else root's, else any
    /// caller's, with whose it is. The names are the same for every caller (the bricks
    /// list them as themselves); which values come with them is not.
    pub fn get_any(&self, id: Id, c: &Creds) -> Option<(Creds, XattrList)> {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        let fresh: Vec<&Entry> = m.get(&id)?.iter().filter(|e| e.at.elapsed() < ttl).collect();
        let e = fresh
            .iter()
            .find(|e| e.creds == *c)
            .or_else(|| fresh.iter().find(|e| e.creds.uid == 0))
            .or_else(|| fresh.first())?;
        Some((e.creds.clone(), e.list.clone()))
    }

    /// Whether some caller's trusted list of `id` is cached and none of them names `name`
    /// (the list of names is the same for every caller who may see the name at all).
    pub fn lacks(&self, id: Id, name: &[u8]) -> bool {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        let Some(es) = m.get(&id) else { return false };
        let fresh: Vec<&Entry> = es.iter().filter(|e| e.at.elapsed() < ttl).collect();
        !fresh.is_empty() && fresh.iter().all(|e| e.list.iter().all(|x| x.name != name))
    }

    /// Keep `list` as `c`'s complete list of `id`'s xattrs, as brought by a request begun
    /// with `token` (a GETXATTRS, or a create that made `id` with none), unless `id` was
    /// invalidated or changed by this client since. Returns whether it was kept.
    pub fn put(&self, token: u64, id: Id, c: &Creds, list: Vec<Xattr>) -> bool {
        if !self.enabled() || size_of(&list) > MAX_LIST_BYTES {
            return false;
        }
        let mut m = self.map.lock();
        if self.guard.crossed(token, id_key(id)) {
            return false;
        }
        if m.len() >= MAX_INODES && !m.contains_key(&id) {
            m.clear();
        }
        let es = m.entry(id).or_default();
        es.retain(|e| e.creds != *c);
        es.push(Entry { creds: c.clone(), at: Instant::now(), list: Arc::new(list) });
        true
    }

    /// This client changed xattr `name` of `id` as `c` (the change begun with `token`,
    /// taken before it was sent, and succeeded): the cached lists get the change, keeping
    /// when they were fetched (they expire with the lease that guards them). A recall of
    /// `id` since `token` drops them instead. A set value is kept in `c`'s list and in
    /// root's; another caller's list is dropped (whether that caller may read the new
    /// value is the brick's to say). Fetches of `id` in flight are voided either way.
    pub fn changed(&self, token: u64, id: Id, c: &Creds, name: &[u8], how: XattrChange<'_>) {
        let key = id_key(id);
        let mut m = self.map.lock();
        if self.guard.invalidated(token, key) {
            m.remove(&id);
        } else if let Some(es) = m.get_mut(&id) {
            match how {
                XattrChange::Removed => {
                    for e in es.iter_mut() {
                        Arc::make_mut(&mut e.list).retain(|x| x.name != name);
                    }
                }
                XattrChange::Set(v) => {
                    es.retain(|e| e.creds == *c || e.creds.uid == 0);
                    for e in es.iter_mut() {
                        let l = Arc::make_mut(&mut e.list);
                        let value = Some(serde_bytes::ByteBuf::from(v.to_vec()));
                        match l.iter_mut().find(|x| x.name == name) {
                            Some(x) => x.value = value,
                            None => l.push(Xattr { name: name.to_vec(), value }),
                        }
                    }
                    es.retain(|e| size_of(&e.list) <= MAX_LIST_BYTES);
                }
            }
            if es.is_empty() {
                m.remove(&id);
            }
        }
        self.guard.stamp_change(key);
    }

    /// `id`'s xattrs (or who may read them) changed, or `id` is gone: drop every list of
    /// it, and refuse what requests in flight bring of it.
    pub fn invalidate(&self, id: Id) {
        let mut m = self.map.lock();
        self.guard.stamp(id_key(id));
        m.remove(&id);
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

    fn x(name: &str, v: Option<&str>) -> Xattr {
        Xattr {
            name: name.as_bytes().to_vec(),
            value: v.map(|v| serde_bytes::ByteBuf::from(v.as_bytes().to_vec())),
        }
    }

    fn user(uid: u32) -> Creds {
        Creds { uid, gid: uid, groups: vec![] }
    }

    #[test]
    fn lists_are_per_caller_and_expire() {
        let c = XattrCache::new(Duration::from_millis(200));
        let t = c.begin();
        assert!(c.put(t, Id(1), &user(5), vec![x("user.a", Some("1"))]));
        assert_eq!(c.get(Id(1), &user(5)).unwrap().len(), 1);
        assert!(c.get(Id(1), &user(6)).is_none(), "another caller");
        assert_eq!(c.get_any(Id(1), &user(6)).unwrap().0, user(5), "another caller's list");
        c.put(t, Id(1), &Creds::root(), vec![]);
        assert_eq!(c.get_any(Id(1), &user(6)).unwrap().0, Creds::root(), "root's first");
        assert_eq!(c.get_any(Id(1), &user(5)).unwrap().0, user(5), "one's own first");
        assert!(c.lacks(Id(1), b"user.b") && !c.lacks(Id(1), b"user.a"));
        assert!(!c.lacks(Id(2), b"user.b"), "nothing known of another inode");
        std::thread::sleep(Duration::from_millis(250));
        assert!(c.get(Id(1), &user(5)).is_none(), "expired");
        assert!(!c.lacks(Id(1), b"user.b"));
    }

    #[test]
    fn a_recall_drops_and_voids_lists_in_flight() {
        let c = XattrCache::new(Duration::from_secs(5));
        let t = c.begin();
        c.put(t, Id(1), &user(5), vec![]);
        let in_flight = c.begin();
        c.invalidate(Id(1));
        assert!(c.get(Id(1), &user(5)).is_none());
        assert!(!c.put(in_flight, Id(1), &user(5), vec![]), "fetched across the recall");
        assert!(c.put(c.begin(), Id(1), &user(5), vec![]));
    }

    #[test]
    fn own_changes_update_the_lists() {
        let c = XattrCache::new(Duration::from_secs(5));
        let (u, r) = (user(5), Creds::root());
        c.put(c.begin(), Id(1), &u, vec![x("user.a", Some("1"))]);
        c.put(c.begin(), Id(1), &r, vec![x("user.a", Some("1")), x("security.s", Some("s"))]);
        c.put(c.begin(), Id(1), &user(6), vec![x("user.a", None)]);
        let fetch = c.begin();
        let t = c.begin();
        c.changed(t, Id(1), &u, b"user.b", XattrChange::Set(b"2"));
        assert!(!c.put(fetch, Id(1), &u, vec![]), "a fetch in flight across the change");
        let l = c.get(Id(1), &u).unwrap();
        assert_eq!(l[1], x("user.b", Some("2")));
        assert_eq!(c.get(Id(1), &r).unwrap().len(), 3, "root reads every value");
        assert!(c.get(Id(1), &user(6)).is_none(), "another caller's is dropped");
        c.changed(c.begin(), Id(1), &r, b"user.a", XattrChange::Removed);
        assert_eq!(*c.get(Id(1), &u).unwrap(), vec![x("user.b", Some("2"))]);
        // a recall between a change's start and its reply: the lists are dropped
        let t = c.begin();
        c.invalidate(Id(1));
        c.put(c.begin(), Id(1), &u, vec![]);
        c.changed(t, Id(1), &u, b"user.c", XattrChange::Set(b"3"));
        assert!(c.get(Id(1), &u).is_none());
    }
}
