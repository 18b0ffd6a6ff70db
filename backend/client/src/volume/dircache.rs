//! Directory-cache bookkeeping: what a reply teaches the entry, attribute, kind and
//! complete-directory caches, and the parents' cached attributes after a namespace op.

use super::Inner;
use crate::Result;
use cairn_cache::merge_dir_copy;
use cairn_proto::{Attr, Creds, Errno, FileType, Id};

/// Bound of the file-type memo (cleared wholesale when full, like the other caches).
const KINDS_MAX: usize = 200_000;

/// A namespace op's effect on the cached attributes of the directories it changes: the
/// copies of them each step's reply carried (from the set that ran it), folded into the
/// cached merged attributes at the end with the merge `getattr` uses, so no GETATTR of
/// the directory follows a create or unlink. A step whose effect is not known (no copies
/// in its reply, or an error that may have applied it) drops the directory's cached
/// attributes instead, as does any lease recall or re-fetch of them meanwhile
/// ([`AttrCache::begin_amend`]).
pub(super) struct DirChange {
    amends: Vec<(Id, Option<u64>)>,
    copies: Vec<(u32, Attr)>,
    unknown: Vec<Id>,
}

impl DirChange {
    /// A step of the op on set `set` changing directories `dirs`, and its outcome.
    pub(super) fn step<T>(&mut self, set: u32, dirs: &[Id], r: &Result<(T, Option<Vec<Attr>>)>) {
        match r {
            Ok((_, Some(parents))) => {
                for d in dirs {
                    match parents.iter().find(|a| a.id == *d) {
                        Some(a) => self.copies.push((set, a.clone())),
                        None => self.unknown.push(*d),
                    }
                }
            }
            // The name was not there: nothing changed.
            Err(e) if e.errno == Errno::ENOENT => {}
            _ => self.unknown.extend_from_slice(dirs),
        }
    }

    pub(super) fn finish(self, i: &Inner) {
        for (dir, amend) in self.amends {
            let home = i.home(dir);
            let unknown = self.unknown.contains(&dir);
            i.attrs.amend(dir, amend, |merged| {
                if unknown || merged.kind != FileType::Directory {
                    return false;
                }
                for (set, copy) in self.copies.iter().filter(|(_, a)| a.id == dir) {
                    merge_dir_copy(merged, copy, *set == home);
                }
                true
            });
        }
    }
}

/// The race-guard tokens (`cache/src/guard.rs`) of a request whose reply fills both the
/// entry and the attribute caches ([`Inner::remember`]): taken together, before it leaves.
#[derive(Clone, Copy)]
pub(super) struct Tokens {
    entry: u64,
    attr: u64,
}

impl Inner {
    /// Before a request whose reply will be [`remember`](Self::remember)ed: its tokens.
    pub(super) fn begin_tokens(&self) -> Tokens {
        Tokens { entry: self.entries.begin(), attr: self.attrs.begin() }
    }

    /// What a request begun with `t` (taken before it left) found or made: `name` in
    /// `dir` is `a`. The entry is not cached if a recall of `dir`'s entries, or this
    /// client's change of the name, came since; the attributes are not if a recall of
    /// `a.id`, or this client's change of it, came since (`cache/src/guard.rs`).
    ///
    /// `set` is the replica set whose head of `dir` answered. A non-directory's attributes
    /// are cached only when that brick heads the inode too ([`Inner::read_at_head`]):
    /// another brick's copy has its own ctime, so a cached copy would disagree with what
    /// every getattr (this client's after expiry, another gateway's) reads. New inodes
    /// are made so (`new_id`); older ids and names moved by rename or link between
    /// directories may not be, and their next getattr fetches them.
    pub(super) fn remember(&self, t: Tokens, set: u32, dir: Id, name: &[u8], a: &Attr) {
        self.entries.put(t.entry, dir, name, a.id);
        if a.kind == FileType::Directory || self.read_at_head(set, dir, a.id) {
            self.attrs.put(t.attr, a);
        }
        self.remember_kind(a);
    }

    /// As [`remember`](Self::remember), for an op that changed the existing inode `a` (a
    /// link: its nlink and ctime): its attributes are installed as this client's change
    /// ([`AttrCache::put_change`]), so a fetch of them in flight across it is refused.
    pub(super) fn remember_changed(&self, t: Tokens, set: u32, dir: Id, name: &[u8], a: &Attr) {
        self.entries.put(t.entry, dir, name, a.id);
        if a.kind == FileType::Directory || self.read_at_head(set, dir, a.id) {
            self.attrs.put_change(t.attr, a);
        } else {
            self.attrs.invalidate(a.id);
        }
        self.remember_kind(a);
    }

    /// A name found by a lookup or a listing: as [`remember`](Self::remember), except that
    /// on a volume of several sets a directory's attributes are not cached. They are one
    /// set's copy (the others' may be newer) and only that set leased them, so a change
    /// through another set would recall nothing; the next `getattr` fetches them merged
    /// from every set (and leased by each), and namespace ops amend only those.
    pub(super) fn remember_found(&self, t: Tokens, set: u32, dir: Id, name: &[u8], a: &Attr) {
        if a.kind == FileType::Directory && self.map().sets.len() > 1 {
            self.entries.put(t.entry, dir, name, a.id);
            self.remember_kind(a);
        } else {
            self.remember(t, set, dir, name, a);
        }
    }

    /// After this client's create made `a` in `dir` (the create begun with token `xt` of
    /// the xattr cache): the new inode has no xattrs, which the caches know without a
    /// GETXATTRS, under the lease the create took at its head — unless the directory may
    /// have a default POSIX ACL, which the new inode inherits (the directory's cached
    /// lists must show it has none), or the brick of set `set` that made it does not head
    /// it (then the create's lease is not where the inode changes, as for
    /// [`remember`](Self::remember)). Kept for the caller and for root.
    pub(super) fn seed_xattrs(&self, xt: u64, c: &Creds, set: u32, dir: Id, a: &Attr) {
        if a.kind == FileType::Directory
            || !self.read_at_head(set, dir, a.id)
            || !self.xattrs.lacks(dir, b"system.posix_acl_default")
        {
            return;
        }
        self.xattrs.put(xt, a.id, c, vec![]);
        if c.uid != 0 {
            self.xattrs.put(xt, a.id, &Creds::root(), vec![]);
        }
    }

    pub(super) fn remember_kind(&self, a: &Attr) {
        let mut k = self.kinds.lock();
        if k.len() >= KINDS_MAX {
            k.clear();
        }
        k.insert(a.id, a.kind);
    }

    /// Before a namespace op changing directories `dirs`: see [`DirChange`].
    pub(super) fn begin_dirs(&self, dirs: &[Id]) -> DirChange {
        DirChange {
            amends: dirs.iter().map(|d| (*d, self.attrs.begin_amend(*d))).collect(),
            copies: vec![],
            unknown: vec![],
        }
    }

    /// After this client's op that makes `name` in `dir` (its own changes recall nothing
    /// here): the name exists if the op succeeded or found it there; otherwise what the
    /// directory holds is not known.
    pub(super) fn named<T>(&self, dir: Id, name: &[u8], r: &Result<T>) {
        match r {
            Ok(_) => self.complete.added(dir, name),
            Err(e) if e.errno == Errno::EEXIST => self.complete.added(dir, name),
            Err(_) => self.complete.invalidate(dir),
        }
        self.complete.touch(dir);
    }

    /// After this client's op that removes `name` from `dir`: as [`named`](Self::named).
    pub(super) fn unnamed<T>(&self, dir: Id, name: &[u8], r: &Result<T>) {
        match r {
            Ok(_) => self.complete.removed(dir, name),
            Err(_) => self.complete.invalidate(dir),
        }
        self.complete.touch(dir);
    }

    /// After a read of `id` at its head: the read moved the file's atime there if the
    /// brick's filesystem updates it (relatime, Linux's default: when the atime is not
    /// after the mtime or ctime, or is a day old), so cached attributes that say so are
    /// dropped; otherwise they still equal what a getattr reads (an SMB durable
    /// reconnect compares the atime too). Only the first read after a change costs a
    /// getattr, not every read.
    pub(super) fn after_read(&self, id: Id) {
        if self.attrs.get(id).is_some_and(|a| atime_moves(&a, std::time::SystemTime::now())) {
            self.attrs.invalidate(id);
        }
    }

    pub(super) fn forget_entry(&self, dir: Id, name: &[u8]) {
        self.entries.remove(dir, name);
        self.attrs.invalidate(dir);
    }
}

/// Whether a read at `now` moves `a`'s atime under relatime (Linux `relatime_need_update`).
fn atime_moves(a: &Attr, now: std::time::SystemTime) -> bool {
    let t = |ts: cairn_proto::Timespec| (ts.sec, ts.nsec);
    let day_old = now
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.as_secs() as i64 - a.atime.sec >= 24 * 3600 - 60);
    t(a.mtime) >= t(a.atime) || t(a.ctime) >= t(a.atime) || day_old
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::Timespec;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn relatime_moves_the_atime_once_after_a_change() {
        let ts = |sec| Timespec { sec, nsec: 0 };
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut a = Attr {
            id: Id(1),
            kind: FileType::Regular,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 0,
            blocks: 0,
            rdev: 0,
            atime: ts(999_000),
            mtime: ts(999_000),
            ctime: ts(999_000),
            change: 0,
        };
        assert!(atime_moves(&a, now), "atime not after mtime");
        a.atime = ts(999_500);
        assert!(!atime_moves(&a, now), "atime after mtime and ctime, less than a day old");
        a.ctime = ts(999_600);
        assert!(atime_moves(&a, now), "changed since the last read");
        a.ctime = ts(900_000);
        a.atime = ts(900_001);
        a.mtime = ts(900_000);
        assert!(atime_moves(&a, now), "a day old");
    }
}
