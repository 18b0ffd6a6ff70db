//! Lock stripes: changes of the inodes hashed to one stripe are serialized here.

use cairn_proto::Id;
use parking_lot::Mutex;

/// Serializes changes of the inodes hashed to it. `lock()` is the exclusive mode
/// (truncate, fallocate, compare-and-write, heal, scrub, a read's re-check, the dirty-mark
/// tidy): no other change of these inodes runs meanwhile. Writes take `rw` shared, claim
/// the checksum blocks they touch (`claim`: a write waits for writes in flight on any of
/// its blocks), and update the checksum table under `table` before writing their data
/// (see `Brick::op_write`).
#[derive(Default)]
pub(crate) struct Stripe {
    pub(crate) rw: parking_lot::RwLock<()>,
    pub(crate) table: Mutex<()>,
    /// Block ranges `(id, first, last)` claimed by writes in flight.
    claimed: Mutex<Vec<(Id, u64, u64)>>,
    freed: parking_lot::Condvar,
}

impl Stripe {
    /// Exclusive: waits for writes in flight on every inode of the stripe.
    pub(crate) fn lock(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.rw.write()
    }

    pub(crate) fn try_lock(&self) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
        self.rw.try_write()
    }

    /// Claim blocks `first..=last` of `id` (the caller holds `rw` shared), waiting while a
    /// write in flight holds any of them; released when the claim is dropped.
    pub(crate) fn claim(&self, id: Id, first: u64, last: u64) -> Claim<'_> {
        let mut c = self.claimed.lock();
        while c.iter().any(|&(i, a, b)| i == id && a <= last && first <= b) {
            self.freed.wait(&mut c);
        }
        c.push((id, first, last));
        Claim { stripe: self, range: (id, first, last) }
    }
}

pub(crate) struct Claim<'a> {
    stripe: &'a Stripe,
    range: (Id, u64, u64),
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut c = self.stripe.claimed.lock();
        if let Some(at) = c.iter().position(|r| *r == self.range) {
            c.swap_remove(at);
        }
        drop(c);
        self.stripe.freed.notify_all();
    }
}
