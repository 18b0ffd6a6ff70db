//! FUSE inode numbers ↔ Cairn ids.
//!
//! The kernel names inodes by 64-bit numbers; Cairn by 128-bit [`Id`]s. The number is
//! `Id::ino()` (the same fold NFS and `stat` see through the other gateways), except for
//! the mount root, which is always 1, and the astronomically rare fold collision, which is
//! resolved by probing to the next free number. Every reply that hands the kernel an entry
//! (lookup, create, mkdir, mknod, symlink, link, each readdirplus entry) adds one lookup
//! reference; `forget` drops them, and a number with none left is forgotten.
//!
//! For cache coherence the table also remembers, per directory, the names the kernel was
//! given, so a lease recall on a directory's entries can invalidate exactly those dentries.

use cairn_proto::Id;
use std::collections::{HashMap, HashSet};

pub const ROOT_INO: u64 = 1;

#[derive(Debug)]
struct Node {
    id: Id,
    nlookup: u64,
    /// Names handed to the kernel under this directory (for entry invalidation).
    children: HashSet<Vec<u8>>,
    /// Last (parent ino, name) this inode was handed out under.
    parent: Option<(u64, Vec<u8>)>,
    /// FUSE generation: bumped to make the kernel drop a stale inode (writeback cache).
    generation: u64,
    /// Regular files under the writeback cache: the (size, mtime) the kernel holds, as far
    /// as we can tell (it keeps its own and ignores ours once the inode exists).
    seen: Option<Seen>,
    /// Unlinked by this mount while it had no other name: the kernel's late SETATTR of its
    /// times (it flushes the ctime it moved at unlink) needs no brick.
    gone: bool,
}

/// Size and mtime (seconds, nanoseconds) of a regular file as the kernel knows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub size: u64,
    pub mtime: (i64, u32),
}

#[derive(Debug)]
pub struct InodeTable {
    by_ino: HashMap<u64, Node>,
    by_id: HashMap<Id, u64>,
}

impl Node {
    /// A node looked up once, with no names or kernel state recorded yet.
    fn new(id: Id) -> Node {
        Node {
            id,
            nlookup: 1,
            children: HashSet::new(),
            parent: None,
            generation: 0,
            seen: None,
            gone: false,
        }
    }
}

impl InodeTable {
    /// A table whose root (ino 1) is `root` (the volume root or the mounted sub-directory).
    pub fn new(root: Id) -> InodeTable {
        let mut t = InodeTable { by_ino: HashMap::new(), by_id: HashMap::new() };
        t.by_ino.insert(ROOT_INO, Node::new(root));
        t.by_id.insert(root, ROOT_INO);
        t
    }

    pub fn id(&self, ino: u64) -> Option<Id> {
        self.by_ino.get(&ino).map(|n| n.id)
    }

    /// The number the kernel knows `id` by, if it knows it.
    pub fn ino_of(&self, id: Id) -> Option<u64> {
        self.by_id.get(&id).copied()
    }

    /// Record that the kernel was given `id` as `name` in directory `parent`; returns the
    /// inode number to reply with. Adds one lookup reference.
    pub fn add_entry(&mut self, parent: u64, name: &[u8], id: Id) -> u64 {
        let ino = self.reference(id);
        if let Some(n) = self.by_ino.get_mut(&ino) {
            n.parent = Some((parent, name.to_vec()));
        }
        if let Some(p) = self.by_ino.get_mut(&parent) {
            p.children.insert(name.to_vec());
        }
        ino
    }

    /// Add one lookup reference to `id`, allocating its number if new.
    pub fn reference(&mut self, id: Id) -> u64 {
        if let Some(&ino) = self.by_id.get(&id) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                n.nlookup += 1;
            }
            return ino;
        }
        let mut ino = id.ino();
        while ino <= ROOT_INO || self.by_ino.contains_key(&ino) {
            tracing::warn!(%id, ino, "inode number fold collision, probing");
            ino = ino.wrapping_add(1);
        }
        self.by_ino.insert(ino, Node::new(id));
        self.by_id.insert(id, ino);
        ino
    }

    /// Drop `n` lookup references (FUSE FORGET). The root is never forgotten.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let Some(node) = self.by_ino.get_mut(&ino) else { return };
        node.nlookup = node.nlookup.saturating_sub(n);
        if node.nlookup == 0 {
            let node = self.by_ino.remove(&ino).expect("present");
            self.by_id.remove(&node.id);
            if let Some((p, name)) = node.parent {
                if let Some(pn) = self.by_ino.get_mut(&p) {
                    pn.children.remove(&name);
                }
            }
        }
    }

    /// A name disappeared from a directory (unlink, rmdir, rename source).
    pub fn remove_name(&mut self, parent: u64, name: &[u8]) {
        if let Some(p) = self.by_ino.get_mut(&parent) {
            p.children.remove(name);
        }
    }

    /// A name appeared in a directory without a new lookup reference (rename target).
    pub fn add_name(&mut self, parent: u64, name: &[u8]) {
        if let Some(p) = self.by_ino.get_mut(&parent) {
            p.children.insert(name.to_vec());
        }
    }

    /// A regular file's entry reply under the writeback cache: `now` is what the bricks
    /// say. The first time, it becomes what the kernel holds. Later the kernel keeps its own
    /// size and mtime, so if ours differ (another client changed the file) and `refresh`
    /// (nothing has the file open here, so the kernel holds no dirty pages), the generation
    /// is bumped: the kernel then drops its inode and builds a new one from this reply.
    /// Returns the generation to reply with.
    pub fn entry_attr(&mut self, ino: u64, now: Seen, refresh: bool) -> u64 {
        let Some(n) = self.by_ino.get_mut(&ino) else { return 0 };
        match n.seen {
            None => n.seen = Some(now),
            Some(s) if s != now && refresh => {
                n.generation += 1;
                n.seen = Some(now);
            }
            Some(_) => {}
        }
        n.generation
    }

    /// `ino` lost its last name through this mount (see `Node::gone`).
    pub fn mark_gone(&mut self, ino: u64) {
        if let Some(n) = self.by_ino.get_mut(&ino) {
            n.gone = true;
        }
    }

    pub fn is_gone(&self, ino: u64) -> bool {
        self.by_ino.get(&ino).map(|n| n.gone).unwrap_or(false)
    }

    /// The generation of `ino` (0 unless a stale inode was ever replaced).
    pub fn generation(&self, ino: u64) -> u64 {
        self.by_ino.get(&ino).map(|n| n.generation).unwrap_or(0)
    }

    /// The kernel's size or mtime of a tracked regular file changed by our own hand: a
    /// WRITE reached `end`, a SETATTR set `size` / `mtime`.
    pub fn local_change(
        &mut self,
        ino: u64,
        end: Option<u64>,
        size: Option<u64>,
        mtime: Option<(i64, u32)>,
    ) {
        let Some(s) = self.by_ino.get_mut(&ino).and_then(|n| n.seen.as_mut()) else { return };
        if let Some(e) = end {
            s.size = s.size.max(e);
        }
        if let Some(z) = size {
            s.size = z;
        }
        if let Some(m) = mtime {
            s.mtime = m;
        }
    }

    /// Where a tracked regular file was last handed out (to drop that dentry on a recall).
    pub fn tracked_name(&self, ino: u64) -> Option<(u64, Vec<u8>)> {
        let n = self.by_ino.get(&ino)?;
        n.seen.as_ref()?;
        n.parent.clone()
    }

    /// Names the kernel may have cached under directory `ino`.
    pub fn children(&self, ino: u64) -> Vec<Vec<u8>> {
        self.by_ino.get(&ino).map(|n| n.children.iter().cloned().collect()).unwrap_or_default()
    }

    #[cfg(test)]
    pub fn lookups(&self, ino: u64) -> u64 {
        self.by_ino.get(&ino).map(|n| n.nlookup).unwrap_or(0)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_ino.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_lasts_as_long_as_the_inode() {
        let mut t = InodeTable::new(Id::ROOT);
        let id = Id::new_on_set(1);
        let ino = t.add_entry(ROOT_INO, b"f", id);
        assert!(!t.is_gone(ino));
        t.mark_gone(ino);
        assert!(t.is_gone(ino));
        t.forget(ino, 1);
        assert!(!t.is_gone(ino));
        let again = t.add_entry(ROOT_INO, b"f", id);
        assert!(!t.is_gone(again), "a new reference starts fresh");
    }

    #[test]
    fn root_is_one_and_never_forgotten() {
        let mut t = InodeTable::new(Id::ROOT);
        assert_eq!(t.id(1), Some(Id::ROOT));
        t.forget(1, 100);
        assert_eq!(t.id(1), Some(Id::ROOT));
        let sub = Id::new_on_set(3);
        let t = InodeTable::new(sub);
        assert_eq!(t.id(1), Some(sub));
        assert_eq!(t.ino_of(sub), Some(1));
    }

    #[test]
    fn lookup_counts_and_forget() {
        let mut t = InodeTable::new(Id::ROOT);
        let id = Id::new_on_set(7);
        let ino = t.add_entry(1, b"a", id);
        assert_eq!(ino, id.ino());
        assert_eq!(t.add_entry(1, b"a", id), ino);
        assert_eq!(t.reference(id), ino);
        assert_eq!(t.lookups(ino), 3);
        assert_eq!(t.children(1), vec![b"a".to_vec()]);
        t.forget(ino, 2);
        assert_eq!(t.id(ino), Some(id));
        t.forget(ino, 1);
        assert_eq!(t.id(ino), None);
        assert_eq!(t.ino_of(id), None);
        assert!(t.children(1).is_empty(), "forgotten child leaves its parent's name set");
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn fold_collision_probes() {
        let mut t = InodeTable::new(Id::ROOT);
        // Two ids with the same 64-bit fold: a ^ rotl(b,17) equal.
        let a = Id((5u128 << 64) | 0x1234);
        let b_hi: u64 = 6;
        let b_lo = 0x1234u64 ^ 5u64.rotate_left(17) ^ b_hi.rotate_left(17);
        let b = Id(((b_hi as u128) << 64) | b_lo as u128);
        assert_eq!(a.ino(), b.ino());
        let ia = t.reference(a);
        let ib = t.reference(b);
        assert_ne!(ia, ib);
        assert_eq!(t.id(ia), Some(a));
        assert_eq!(t.id(ib), Some(b));
    }

    #[test]
    fn stale_regular_files_get_a_new_generation() {
        let mut t = InodeTable::new(Id::ROOT);
        let id = Id::new_on_set(4);
        let ino = t.add_entry(1, b"f", id);
        let s = |size, sec| Seen { size, mtime: (sec, 0) };
        assert_eq!(t.entry_attr(ino, s(5, 1), true), 0, "first sight: what the kernel holds");
        assert_eq!(t.entry_attr(ino, s(5, 1), true), 0, "unchanged");
        // Our own write and mtime update are what the kernel has too.
        t.local_change(ino, Some(10), None, Some((2, 0)));
        assert_eq!(t.entry_attr(ino, s(10, 2), true), 0);
        // Changed elsewhere while open here: not now, but later.
        assert_eq!(t.entry_attr(ino, s(20, 3), false), 0);
        assert_eq!(t.entry_attr(ino, s(20, 3), true), 1);
        assert_eq!(t.entry_attr(ino, s(20, 3), true), 1);
        assert_eq!(t.generation(ino), 1);
        assert_eq!(t.tracked_name(ino), Some((1, b"f".to_vec())));
        let d = t.add_entry(1, b"d", Id::new_on_set(5));
        assert_eq!(t.tracked_name(d), None, "untracked (not a regular file)");
    }

    #[test]
    fn names_follow_renames() {
        let mut t = InodeTable::new(Id::ROOT);
        let d = t.add_entry(1, b"d", Id::new_on_set(1));
        t.add_entry(d, b"x", Id::new_on_set(1));
        t.remove_name(d, b"x");
        t.add_name(1, b"y");
        assert!(t.children(d).is_empty());
        let mut c = t.children(1);
        c.sort();
        assert_eq!(c, vec![b"d".to_vec(), b"y".to_vec()]);
    }
}
