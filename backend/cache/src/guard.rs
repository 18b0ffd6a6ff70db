//! The race guard of the caches a reply fills (attributes, quick-read content, complete
//! directories, positive entries): a reply the brick sent before it recalled a lease may be handled
//! here after the recall was, and must not be installed then — it would outlive the
//! recall that was meant to drop it, until the cache timeout.
//!
//! So a request takes a token ([`Guard::begin`]) before it leaves; every invalidation
//! (a recall, or a change by this client) stamps its key with a new sequence number
//! ([`Guard::stamp`]); and a reply is installed only if its key was not stamped after its
//! token ([`Guard::crossed`]). Stamps are kept per slot of keys hashed [`SLOTS`] ways
//! (bounded memory; keys sharing a slot void each other's replies in flight, which are
//! then only not cached).
//!
//! A stamp is an invalidation ([`Guard::stamp`]: a recall, a drop, a change by this
//! client whose result is not cached) or, for the attribute cache, a change by this client
//! whose result is ([`Guard::stamp_change`], see `attr.rs`): both void replies of fetches
//! in flight ([`Guard::crossed`]); only an invalidation voids the replies of this
//! client's other changes in flight ([`Guard::invalidated`]), which are ordered among
//! themselves by the inode's change counter instead.
//!
//! Lock-free, O(1): `begin` is one atomic load, so a request takes no lock for it. A cache
//! stamps before (or in the same critical section as) it drops what the key names, and
//! checks `crossed` in the critical section that installs: then either the install comes
//! first and the drop removes it, or the stamp is seen and the install refused.

use cairn_proto::Id;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Invalidation slots.
const SLOTS: usize = 1024;

pub(crate) struct Guard {
    /// Grows with every stamp.
    seq: AtomicU64,
    /// The `seq` of the last stamp of any kind of any key hashed to the slot.
    slots: Box<[AtomicU64]>,
    /// The `seq` of the last invalidation ([`stamp`](Self::stamp), not
    /// [`stamp_change`](Self::stamp_change)) of any key hashed to the slot.
    drops: Box<[AtomicU64]>,
}

/// The key of an inode (a file's content, a directory's entries).
pub(crate) fn id_key(id: Id) -> u64 {
    (id.0 as u64) ^ ((id.0 >> 64) as u64)
}

/// The key of one name in a directory (FNV-1a over the name, from the directory's key).
pub(crate) fn name_key(dir: Id, name: &[u8]) -> u64 {
    name.iter().fold(id_key(dir) ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn slot(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % SLOTS
}

impl Guard {
    pub(crate) fn new() -> Guard {
        let slots = || (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
        Guard { seq: AtomicU64::new(0), slots: slots(), drops: slots() }
    }

    /// Before a request whose reply may be installed: its token.
    pub(crate) fn begin(&self) -> u64 {
        self.seq.load(SeqCst)
    }

    /// `key` was invalidated: replies in flight for it (by tokens taken before) are void.
    pub(crate) fn stamp(&self, key: u64) {
        let seq = self.seq.fetch_add(1, SeqCst) + 1;
        self.drops[slot(key)].fetch_max(seq, SeqCst);
        self.slots[slot(key)].fetch_max(seq, SeqCst);
    }

    /// This client's change of `key` is done and its result known: replies of fetches in
    /// flight for it (by tokens taken before) are void, those of its other changes in
    /// flight are not ([`invalidated`](Self::invalidated) does not see this stamp).
    pub(crate) fn stamp_change(&self, key: u64) {
        let seq = self.seq.fetch_add(1, SeqCst) + 1;
        self.slots[slot(key)].fetch_max(seq, SeqCst);
    }

    /// Everything was invalidated.
    pub(crate) fn stamp_all(&self) {
        let seq = self.seq.fetch_add(1, SeqCst) + 1;
        for s in self.drops.iter().chain(self.slots.iter()) {
            s.fetch_max(seq, SeqCst);
        }
    }

    /// Whether `key` was stamped (of either kind) since `token` was taken: a fetch's reply
    /// must not be installed.
    pub(crate) fn crossed(&self, token: u64, key: u64) -> bool {
        self.slots[slot(key)].load(SeqCst) > token
    }

    /// Whether `key` was invalidated since `token` was taken: the reply of this client's
    /// own change must not be installed.
    pub(crate) fn invalidated(&self, token: u64, key: u64) -> bool {
        self.drops[slot(key)].load(SeqCst) > token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_voids_earlier_tokens_of_its_slot_only() {
        let g = Guard::new();
        let (a, b) = (id_key(Id(1)), id_key(Id(2)));
        assert_ne!(slot(a), slot(b));
        let t = g.begin();
        assert!(!g.crossed(t, a));
        g.stamp(a);
        assert!(g.crossed(t, a), "stamped after the token");
        assert!(!g.crossed(t, b), "another slot");
        assert!(!g.crossed(g.begin(), a), "a token taken after the stamp");
        let t = g.begin();
        g.stamp_all();
        assert!(g.crossed(t, a) && g.crossed(t, b));
    }

    /// A change's stamp voids fetches in flight but not other changes in flight; an
    /// invalidation voids both; each sees only stamps after its token.
    #[test]
    fn a_change_stamp_voids_fetches_only() {
        let g = Guard::new();
        let (a, b) = (id_key(Id(1)), id_key(Id(2)));
        let t = g.begin();
        g.stamp_change(a);
        assert!(g.crossed(t, a), "a fetch in flight across the change");
        assert!(!g.invalidated(t, a), "another change in flight across it");
        assert!(!g.crossed(t, b) && !g.invalidated(t, b), "another slot");
        let t2 = g.begin();
        assert!(!g.crossed(t2, a), "a token taken after the change's stamp");
        g.stamp(a);
        assert!(g.invalidated(t, a) && g.invalidated(t2, a) && g.crossed(t2, a));
        let t = g.begin();
        g.stamp_all();
        assert!(g.invalidated(t, a) && g.invalidated(t, b));
    }

    #[test]
    fn names_of_one_directory_have_their_own_keys() {
        let d = Id(7);
        assert_ne!(name_key(d, b"a"), name_key(d, b"b"));
        assert_ne!(name_key(d, b"a"), name_key(Id(8), b"a"));
        assert_ne!(name_key(d, b"a"), id_key(d));
    }
}
