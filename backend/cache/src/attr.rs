use crate::guard::{id_key, name_key, Guard};
use cairn_proto::{Attr, Id, Name, Timespec};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Cached entries beyond this are dropped wholesale (a crude but bounded policy).
const MAX_ENTRIES: usize = 200_000;

/// A cached attribute: when it was fetched (it expires then, however often it was
/// amended) and the amend token of its last `put` or `begin_amend` (see
/// [`AttrCache::begin_amend`]).
struct Cached {
    attr: Attr,
    at: Instant,
    amend: u64,
}

#[derive(Default)]
struct Map {
    entries: HashMap<Id, Cached>,
    next_amend: u64,
}

/// Attributes by id, from replies (lookups, path walks, listings, getattrs, this client's
/// own changes) and amended by this client's namespace ops. Two mechanisms, not to be
/// confused:
///
/// - the race guard against lease recalls and this client's own changes (`guard.rs`, as
///   for entries, quick-read and complete directories): [`begin`](Self::begin) before a
///   request leaves, and [`put`](Self::put) refuses a fetch's reply if the inode was
///   invalidated (a recall, or a change by this client) or everything dropped since, or
///   a change by this client was installed ([`put_change`](Self::put_change), which
///   orders this client's changes among themselves) or amended since;
/// - amend tokens ([`begin_amend`](Self::begin_amend) / [`amend`](Self::amend)): this
///   client's change folded into the cached value it was computed from.
pub struct AttrCache {
    ttl: Mutex<Duration>,
    map: Mutex<Map>,
    guard: Guard,
}

/// Fold one replica set's copy of a directory into the directory's merged attributes: a
/// directory exists on every set, its entries are spread over them, so its times and
/// change counter are the latest of any copy; everything else (mode, owner, nlink, size)
/// is its home set's copy. Used both to build the merged attributes from every set's
/// GETATTR and to amend them from the copies a namespace op's replies carry.
pub fn merge_dir_copy(merged: &mut Attr, copy: &Attr, home: bool) {
    let (atime, mtime, ctime, change) = (merged.atime, merged.mtime, merged.ctime, merged.change);
    if home {
        *merged = copy.clone();
    }
    merged.atime = max_ts(atime, copy.atime);
    merged.mtime = max_ts(mtime, copy.mtime);
    merged.ctime = max_ts(ctime, copy.ctime);
    merged.change = change.max(copy.change);
}

fn max_ts(a: Timespec, b: Timespec) -> Timespec {
    if (b.sec, b.nsec) > (a.sec, a.nsec) {
        b
    } else {
        a
    }
}

impl AttrCache {
    pub fn new(ttl: Duration) -> AttrCache {
        AttrCache { ttl: Mutex::new(ttl), map: Mutex::default(), guard: Guard::new() }
    }

    pub fn set_ttl(&self, ttl: Duration) {
        *self.ttl.lock() = ttl;
        if ttl.is_zero() {
            self.map.lock().entries.clear();
        }
    }

    pub fn get(&self, id: Id) -> Option<Attr> {
        let ttl = *self.ttl.lock();
        let m = self.map.lock();
        m.entries.get(&id).filter(|c| c.at.elapsed() < ttl).map(|c| c.attr.clone())
    }

    /// Before sending a request whose reply will be [`put`](Self::put): its race-guard
    /// token (one atomic load, no lock).
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// Cache `a`, as brought by a request begun with `token`, unless `a.id` was
    /// invalidated or everything cleared since. Returns whether it was.
    ///
    /// A refused reply also drops what is cached of the inode if that is older than the
    /// reply (a lower change counter, or the same and a smaller size): a request begun
    /// after the recall may have been served before this one, and if this one is this
    /// client's own change, keeping the older value would hide the change from it.
    pub fn put(&self, token: u64, a: &Attr) -> bool {
        if self.ttl.lock().is_zero() {
            return false;
        }
        let mut m = self.map.lock();
        if self.guard.crossed(token, id_key(a.id)) {
            let cached = m.entries.get(&a.id).map(|c| (c.attr.change, c.attr.size));
            if cached.is_some_and(|c| c < (a.change, a.size)) {
                m.entries.remove(&a.id);
            }
            return false;
        }
        Self::insert(&mut m, a);
        true
    }

    fn insert(m: &mut Map, a: &Attr) {
        if m.entries.len() >= MAX_ENTRIES {
            m.entries.clear();
        }
        m.next_amend += 1;
        let amend = m.next_amend;
        m.entries.insert(a.id, Cached { attr: a.clone(), at: Instant::now(), amend });
    }

    /// Cache `a`, the result this client's own change of `a.id` replied (a setattr, a
    /// write, a link), the change begun with `token` (taken before it was sent); and, in
    /// the same critical section, void every fetch of `a.id` still in flight (a stamp of
    /// the race guard). Returns whether `a` was installed.
    ///
    /// A client's own changes recall nothing from itself, so without that stamp a fetch
    /// (getattr, lookup, readdirplus) served before the change but handled after its reply
    /// would install the older attributes for the cache timeout. The orderings, a fetch F
    /// (token taken before it leaves) against the change C:
    ///
    /// - F handled before C's reply: whatever F installed, C's install replaces (or keeps,
    ///   if strictly newer, see below) — so no stamp is needed when C is sent;
    /// - F sent before C, or while C is in flight, and handled after C's reply: its token
    ///   predates C's stamp, so it is refused (even if the brick served it after C: only
    ///   not cached, then);
    /// - F sent after C's reply was handled: the brick ran it after C; installed.
    ///
    /// Two own changes C1, C2 of one inode in flight together (writes pipelined by
    /// write-behind, a truncate and a chmod from two threads) answer in any order, and do
    /// not void each other: the one handled second sees the first's stamp
    /// ([`Guard::crossed`] but not [`Guard::invalidated`]) and is installed only if its
    /// change counter (the brick's ctime) is strictly newer than what is cached; if what is
    /// cached is strictly newer, that is kept; if they tie (one ctime tick) or nothing is
    /// cached (the first dropped it), neither is trusted and the entry is dropped. So a
    /// later reply is never overwritten by an older one.
    ///
    /// A recall or any invalidation since `token` refuses `a` like [`put`](Self::put),
    /// dropping what is cached unless it is strictly newer; the stamp still voids fetches
    /// begun after that invalidation but served before this change.
    pub fn put_change(&self, token: u64, a: &Attr) -> bool {
        let ttl = *self.ttl.lock();
        let key = id_key(a.id);
        let mut m = self.map.lock();
        let cached = m.entries.get(&a.id).filter(|c| c.at.elapsed() < ttl).map(|c| c.attr.change);
        let install = if ttl.is_zero() || self.guard.invalidated(token, key) {
            false
        } else if self.guard.crossed(token, key) {
            matches!(cached, Some(c) if c < a.change)
        } else {
            cached.is_none_or(|c| c <= a.change)
        };
        if install {
            Self::insert(&mut m, a);
        } else if cached.is_none_or(|c| c <= a.change) {
            m.entries.remove(&a.id);
        }
        self.guard.stamp_change(key);
        install
    }

    /// Before a change of `id` whose result the caller will fold into the cached
    /// attributes with [`amend`](Self::amend): a token naming the cached value, or `None`
    /// if nothing valid is cached. Another `begin_amend`, a `put` or an invalidation (a
    /// lease recall) in between voids the token, so an amend never lands on a value it
    /// was not computed from, and of two overlapping changes neither amends. (Not the
    /// race-guard token of [`begin`](Self::begin).)
    pub fn begin_amend(&self, id: Id) -> Option<u64> {
        let ttl = *self.ttl.lock();
        let mut m = self.map.lock();
        m.next_amend += 1;
        let amend = m.next_amend;
        let c = m.entries.get_mut(&id).filter(|c| c.at.elapsed() < ttl)?;
        c.amend = amend;
        Some(amend)
    }

    /// After the change `token` was taken for: apply `f` to the cached attributes if the
    /// token is still current (keeping when they were fetched, so they expire no later
    /// than the lease that guards them); otherwise drop them. `f` returns false to drop
    /// them too (the change's result is not fully known). Returns whether they were amended.
    /// Either way fetches of `id` in flight are voided, as by [`put_change`](Self::put_change):
    /// one served before the change must not be installed after it.
    pub fn amend(&self, id: Id, token: Option<u64>, f: impl FnOnce(&mut Attr) -> bool) -> bool {
        let ttl = *self.ttl.lock();
        let mut m = self.map.lock();
        let ok = match (m.entries.get_mut(&id), token) {
            (Some(c), Some(t)) if c.amend == t && c.at.elapsed() < ttl => f(&mut c.attr),
            _ => false,
        };
        if !ok {
            m.entries.remove(&id);
        }
        self.guard.stamp_change(id_key(id));
        ok
    }

    /// `id`'s attributes changed (a lease recall, or a change by this client): drop them,
    /// and refuse what requests in flight bring of them.
    pub fn invalidate(&self, id: Id) {
        let mut m = self.map.lock();
        self.guard.stamp(id_key(id));
        m.entries.remove(&id);
    }

    pub fn clear(&self) {
        let mut m = self.map.lock();
        self.guard.stamp_all();
        m.entries.clear();
    }
}

/// Names of one directory: name → (id, when cached).
type DirEntries = HashMap<Name, (Id, Instant)>;

/// Positive entries `(directory, name) → id`, from lookups, path walks, listings and this
/// client's own creates. A lease recall of a directory's entries drops them; and, as for
/// quick-read and complete directories (`guard.rs`), a reply that was in flight across the
/// recall is not installed: [`begin`](Self::begin) before the request leaves, and
/// [`put`](Self::put) refuses the entry if its directory was invalidated, or the name
/// removed here, since.
pub struct EntryCache {
    ttl: Mutex<Duration>,
    dirs: Mutex<HashMap<Id, DirEntries>>,
    guard: Guard,
}

impl EntryCache {
    pub fn new(ttl: Duration) -> EntryCache {
        EntryCache { ttl: Mutex::new(ttl), dirs: Mutex::default(), guard: Guard::new() }
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

    /// Before sending a request whose reply will be [`put`](Self::put): its token (one
    /// atomic load, no lock).
    pub fn begin(&self) -> u64 {
        self.guard.begin()
    }

    /// Cache `name` in `dir` as `id`, as found by a request begun with `token`, unless
    /// `dir`'s entries were invalidated or `name` removed since. Returns whether it was.
    pub fn put(&self, token: u64, dir: Id, name: &[u8], id: Id) -> bool {
        if self.ttl.lock().is_zero() {
            return false;
        }
        let mut d = self.dirs.lock();
        if self.guard.crossed(token, id_key(dir)) || self.guard.crossed(token, name_key(dir, name))
        {
            return false;
        }
        if d.len() >= MAX_ENTRIES {
            d.clear();
        }
        let m = d.entry(dir).or_default();
        if m.len() >= MAX_ENTRIES {
            m.clear();
        }
        m.insert(name.to_vec(), (id, Instant::now()));
        true
    }

    /// This client changed (or found changed) `name` in `dir`: drop it, and refuse what
    /// requests in flight bring of it.
    pub fn remove(&self, dir: Id, name: &[u8]) {
        let mut d = self.dirs.lock();
        self.guard.stamp(name_key(dir, name));
        if let Some(m) = d.get_mut(&dir) {
            m.remove(name);
        }
    }

    /// `dir`'s entries changed (a lease recall): drop them, and refuse what requests in
    /// flight bring of any of them.
    pub fn invalidate_dir(&self, dir: Id) {
        let mut d = self.dirs.lock();
        self.guard.stamp(id_key(dir));
        d.remove(&dir);
    }

    pub fn clear(&self) {
        let mut d = self.dirs.lock();
        self.guard.stamp_all();
        d.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::FileType;

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
        c.put(c.begin(), &attr(5));
        assert!(c.get(Id(5)).is_some());
        c.invalidate(Id(5));
        assert!(c.get(Id(5)).is_none());
        c.put(c.begin(), &attr(6));
        std::thread::sleep(Duration::from_millis(60));
        assert!(c.get(Id(6)).is_none(), "expired");
        c.set_ttl(Duration::ZERO);
        c.put(c.begin(), &attr(7));
        assert!(c.get(Id(7)).is_none(), "ttl 0 disables caching");
    }

    fn ts(sec: i64) -> Timespec {
        Timespec { sec, nsec: 0 }
    }

    #[test]
    fn merge_takes_home_fields_and_latest_times() {
        let mut home = attr(1);
        home.kind = FileType::Directory;
        (home.nlink, home.size, home.perm, home.mtime, home.ctime, home.change) =
            (3, 4096, 0o755, ts(10), ts(10), 7);
        let mut other = home.clone();
        (other.nlink, other.size, other.perm, other.mtime, other.ctime, other.change) =
            (9, 8192, 0o700, ts(20), ts(15), 30);
        // As getattr builds it: home first, then the other sets.
        let mut m = home.clone();
        merge_dir_copy(&mut m, &other, false);
        assert_eq!((m.nlink, m.size, m.perm), (3, 4096, 0o755), "home set's fields");
        assert_eq!((m.mtime, m.ctime, m.change), (ts(20), ts(15), 30), "latest of any copy");
        // An op on the home set: its fields, times still the latest of any copy.
        let mut after = home.clone();
        (after.nlink, after.size, after.mtime, after.ctime, after.change) =
            (4, 4096, ts(12), ts(12), 8);
        let mut m2 = m.clone();
        merge_dir_copy(&mut m2, &after, true);
        assert_eq!((m2.nlink, m2.mtime, m2.ctime, m2.change), (4, ts(20), ts(15), 30));
        // An op on another set that moves its copy past every other one.
        let mut later = other.clone();
        (later.mtime, later.ctime, later.change, later.nlink) = (ts(25), ts(25), 31, 1);
        merge_dir_copy(&mut m2, &later, false);
        assert_eq!((m2.nlink, m2.mtime, m2.ctime, m2.change), (4, ts(25), ts(25), 31));
        // The same result as a fresh getattr of the copies as they now are.
        let mut fresh = after.clone();
        merge_dir_copy(&mut fresh, &later, false);
        assert_eq!(fresh, m2);
    }

    #[test]
    fn amend_only_the_value_the_token_names() {
        let c = AttrCache::new(Duration::from_secs(5));
        assert_eq!(c.begin_amend(Id(1)), None, "nothing cached: nothing to amend");
        assert!(!c.amend(Id(1), None, |_| true));
        assert!(c.get(Id(1)).is_none(), "an amend never creates an entry");
        c.put(c.begin(), &attr(1));
        let t = c.begin_amend(Id(1));
        assert!(c.amend(Id(1), t, |a| {
            a.change = 5;
            true
        }));
        assert_eq!(c.get(Id(1)).unwrap().change, 5);
        // A lease recall (or any invalidation) and a re-fetch in between: dropped.
        let t = c.begin_amend(Id(1));
        c.invalidate(Id(1));
        c.put(c.begin(), &attr(1));
        assert!(!c.amend(Id(1), t, |_| true));
        assert!(c.get(Id(1)).is_none());
        // Two overlapping changes: neither amends.
        c.put(c.begin(), &attr(1));
        let (t1, t2) = (c.begin_amend(Id(1)), c.begin_amend(Id(1)));
        assert!(!c.amend(Id(1), t1, |_| true));
        assert!(!c.amend(Id(1), t2, |_| true));
        assert!(c.get(Id(1)).is_none());
        // A change whose result is not known: dropped.
        c.put(c.begin(), &attr(1));
        let t = c.begin_amend(Id(1));
        assert!(!c.amend(Id(1), t, |_| false));
        assert!(c.get(Id(1)).is_none());
    }

    #[test]
    fn amended_attrs_expire_when_first_fetched() {
        let c = AttrCache::new(Duration::from_millis(50));
        c.put(c.begin(), &attr(2));
        std::thread::sleep(Duration::from_millis(30));
        let t = c.begin_amend(Id(2));
        assert!(c.amend(Id(2), t, |_| true));
        std::thread::sleep(Duration::from_millis(30));
        assert!(c.get(Id(2)).is_none(), "amending does not extend the lease-bound lifetime");
    }

    /// The hole an own change left: a fetch (getattr, lookup, readdirplus) in flight
    /// across this client's own setattr/write is served before the change and handled
    /// after its reply. Nothing recalls it; the change's own install must void it.
    #[test]
    fn a_fetch_crossing_an_own_change_is_not_installed() {
        let c = AttrCache::new(Duration::from_secs(5));
        let at = |change, size| Attr { change, size, ..attr(9) };
        assert!(c.put(c.begin(), &at(1, 100)));
        // Fetch sent before the change, handled after its reply.
        let fetch = c.begin();
        let own = c.begin(); // a truncate leaves
        assert!(c.put_change(own, &at(2, 0)));
        assert!(!c.put(fetch, &at(1, 100)), "the older size was installed");
        assert_eq!(c.get(Id(9)).unwrap().size, 0);
        // Fetch sent while the change is in flight (served before it), handled after.
        let own = c.begin();
        let fetch = c.begin();
        assert!(c.put_change(own, &at(3, 50)));
        assert!(!c.put(fetch, &at(2, 0)));
        assert_eq!(c.get(Id(9)).unwrap().size, 50);
        // Fetch handled before the change's reply: the change's result replaces it.
        let fetch = c.begin();
        let own = c.begin();
        assert!(c.put(fetch, &at(3, 50)));
        assert!(c.put_change(own, &at(4, 10)));
        assert_eq!(c.get(Id(9)).unwrap().size, 10);
        // Fetch sent after the change's reply: installed.
        assert!(c.put(c.begin(), &at(4, 10)));
        // Other inodes' fetches in flight are not voided.
        let fetch = c.begin();
        assert!(c.put_change(c.begin(), &at(5, 0)));
        assert!(c.put(fetch, &attr(2)));
        // Caching off: nothing is installed.
        let off = AttrCache::new(Duration::ZERO);
        assert!(!off.put_change(off.begin(), &attr(1)));
    }

    /// Two own changes of one inode in flight together (pipelined writes, a truncate and a
    /// chmod) answer in any order: they do not void each other, the newer (by change
    /// counter) wins, and a tie is not trusted.
    #[test]
    fn own_changes_in_flight_together_keep_the_newest() {
        let c = AttrCache::new(Duration::from_secs(5));
        let at = |change, size| Attr { change, size, ..attr(9) };
        // Handled in order.
        let (t1, t2) = (c.begin(), c.begin());
        assert!(c.put_change(t1, &at(10, 4096)));
        assert!(c.put_change(t2, &at(11, 8192)));
        assert_eq!(c.get(Id(9)).unwrap().size, 8192);
        // Handled out of order: the older reply does not replace the newer.
        let (t1, t2) = (c.begin(), c.begin());
        assert!(c.put_change(t2, &at(13, 0)));
        assert!(!c.put_change(t1, &at(12, 4096)));
        assert_eq!(c.get(Id(9)).unwrap().size, 0, "an older reply overwrote a newer one");
        // One ctime tick: which came last is not known, so neither is cached...
        let (t1, t2, t3) = (c.begin(), c.begin(), c.begin());
        assert!(c.put_change(t1, &at(14, 100)));
        assert!(!c.put_change(t2, &at(14, 0)));
        assert!(c.get(Id(9)).is_none());
        // ...nor a third whose rival was dropped so.
        assert!(!c.put_change(t3, &at(15, 5)));
        assert!(c.get(Id(9)).is_none());
        // One after the other within one tick (a write, then a truncate): the last wins.
        assert!(c.put_change(c.begin(), &at(16, 8192)));
        assert!(c.put_change(c.begin(), &at(16, 0)));
        assert_eq!(c.get(Id(9)).unwrap().size, 0);
    }

    /// The race guard: attributes whose request crosses a recall of the inode (the
    /// recall was handled while it was in flight) are not installed; those of a request
    /// begun after the recall are.
    #[test]
    fn attrs_whose_request_crosses_a_recall_are_not_installed() {
        let c = AttrCache::new(Duration::from_secs(5));
        let t = c.begin();
        c.invalidate(Id(1)); // the recall is handled before the reply
        assert!(!c.put(t, &attr(1)));
        assert!(c.get(Id(1)).is_none(), "stale attributes were installed");
        // Another inode's request in flight is not affected (it has another slot).
        assert!(c.put(t, &attr(2)));
        assert!(c.put(c.begin(), &attr(1)));
        assert!(c.get(Id(1)).is_some());
        // Nor is a put that came before the recall kept after it.
        assert!(c.put(c.begin(), &attr(3)));
        c.invalidate(Id(3));
        assert!(c.get(Id(3)).is_none());
        // Writes' replies are guarded too.
        let t = c.begin();
        c.invalidate(Id(4));
        assert!(!c.put_change(t, &attr(4)));
        assert!(c.get(Id(4)).is_none());
        // Dropping everything voids everything in flight.
        let t = c.begin();
        c.clear();
        assert!(!c.put(t, &attr(5)));
        assert!(!c.put_change(t, &attr(6)));
        assert!(c.get(Id(5)).is_none() && c.get(Id(6)).is_none());
        // Caching off: nothing is installed.
        let off = AttrCache::new(Duration::ZERO);
        assert!(!off.put(off.begin(), &attr(1)));
    }

    /// A refused reply drops an older value installed meanwhile (a request begun after
    /// the recall but served before this client's own change) and keeps a newer one.
    #[test]
    fn a_refused_reply_drops_older_attrs_and_keeps_newer() {
        let c = AttrCache::new(Duration::from_secs(5));
        let at = |change| Attr { change, ..attr(1) };
        let own = c.begin(); // e.g. a setattr leaves
        c.invalidate(Id(1)); // a recall crosses it
        assert!(c.put(c.begin(), &at(3))); // a getattr served before the setattr
        assert!(!c.put_change(own, &at(4)));
        assert!(c.get(Id(1)).is_none(), "the older value would hide the own change");
        let own = c.begin();
        c.invalidate(Id(1));
        assert!(c.put(c.begin(), &at(6))); // served after the own change
        assert!(!c.put_change(own, &at(5)));
        assert_eq!(c.get(Id(1)).unwrap().change, 6);
        // A fetch begun after the recall but served before the own change, handled after
        // the change's refused reply: refused too.
        let own = c.begin();
        c.invalidate(Id(1));
        let fetch = c.begin();
        assert!(!c.put_change(own, &at(8)));
        assert!(!c.put(fetch, &at(7)));
        assert!(c.get(Id(1)).is_none());
    }

    /// The two mechanisms do not interfere: a guard token does not void an amend token,
    /// nor does taking an amend token void a guard token; a recall voids both. A done
    /// amend (an own change of the inode) voids fetches of it in flight, as
    /// `put_change` does.
    #[test]
    fn guard_and_amend_tokens_are_independent() {
        let c = AttrCache::new(Duration::from_secs(5));
        let t = c.begin();
        assert!(c.put(t, &attr(1)));
        let a = c.begin_amend(Id(1));
        let t2 = c.begin();
        assert!(c.put(t2, &attr(2)), "amend tokens void no guard token");
        assert!(c.amend(Id(1), a, |_| true), "a guard token voids no amend");
        assert!(!c.put(t2, &attr(1)), "a fetch in flight across the amended change");
        assert!(c.put(c.begin(), &attr(1)));
        let a = c.begin_amend(Id(1));
        let t = c.begin();
        c.invalidate(Id(1));
        assert!(!c.amend(Id(1), a, |_| true));
        assert!(!c.put(t, &attr(1)));
    }

    #[test]
    fn entries_by_directory() {
        let c = EntryCache::new(Duration::from_secs(5));
        assert!(c.put(c.begin(), Id(1), b"a", Id(10)));
        assert!(c.put(c.begin(), Id(1), b"b", Id(11)));
        assert!(c.put(c.begin(), Id(2), b"a", Id(12)));
        assert_eq!(c.get(Id(1), b"a"), Some(Id(10)));
        c.remove(Id(1), b"a");
        assert_eq!(c.get(Id(1), b"a"), None);
        c.invalidate_dir(Id(1));
        assert_eq!(c.get(Id(1), b"b"), None);
        assert_eq!(c.get(Id(2), b"a"), Some(Id(12)));
    }

    /// The race guard: a lookup whose reply crosses a recall of its directory (the recall
    /// was handled while it was in flight) does not install its entry; one begun after
    /// the recall does.
    #[test]
    fn an_entry_whose_lookup_crosses_a_recall_is_not_installed() {
        let c = EntryCache::new(Duration::from_secs(5));
        let t = c.begin();
        c.invalidate_dir(Id(1)); // the recall is handled before the lookup's reply
        assert!(!c.put(t, Id(1), b"a", Id(10)));
        assert_eq!(c.get(Id(1), b"a"), None, "a stale entry was installed");
        // Another directory's lookup in flight is not affected (it has another slot).
        assert!(c.put(t, Id(2), b"a", Id(12)));
        let t = c.begin();
        assert!(c.put(t, Id(1), b"a", Id(11)));
        assert_eq!(c.get(Id(1), b"a"), Some(Id(11)));
        // Nor is a put that came before the recall kept after it.
        let t = c.begin();
        assert!(c.put(t, Id(1), b"b", Id(13)));
        c.invalidate_dir(Id(1));
        assert_eq!(c.get(Id(1), b"b"), None);
    }

    /// This client's own change of a name (unlink, rename, create over) voids lookups of
    /// that name in flight, and only of that name.
    #[test]
    fn an_entry_whose_lookup_crosses_an_own_change_of_it_is_not_installed() {
        let c = EntryCache::new(Duration::from_secs(5));
        let t = c.begin();
        c.remove(Id(1), b"a");
        assert!(!c.put(t, Id(1), b"a", Id(10)));
        assert_eq!(c.get(Id(1), b"a"), None);
        assert!(c.put(t, Id(1), b"b", Id(11)), "another name of the directory");
        assert!(c.put(c.begin(), Id(1), b"a", Id(12)));
        // Dropping everything voids everything in flight.
        let t = c.begin();
        c.clear();
        assert!(!c.put(t, Id(3), b"c", Id(14)));
        // Caching off: nothing is installed.
        let off = EntryCache::new(Duration::ZERO);
        assert!(!off.put(off.begin(), Id(1), b"a", Id(10)));
    }
}
