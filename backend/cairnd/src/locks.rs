//! POSIX byte-range locks, kept in memory by the chain head of each inode.
//!
//! Owners are scoped by the client session that took them, so two gateways' owners never
//! collide, and every lock of a session is released when its connection closes. Locks are
//! not replicated: when the head changes, clients reclaim (NFS) or re-take them.

use cairn_proto::{Errno, Id, Lock, LockKind, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    session: u64,
    owner: u64,
    pid: u32,
    write: bool,
    start: u64,
    /// Exclusive end; u64::MAX = to end of file.
    end: u64,
}

fn end_of(start: u64, len: u64) -> u64 {
    if len == 0 {
        u64::MAX
    } else {
        start.saturating_add(len)
    }
}

#[derive(Default)]
struct InodeLocks {
    held: Vec<Held>,
    notify: Arc<Notify>,
}

/// Lock table keyed by (volume, inode).
#[derive(Default)]
pub struct LockTable {
    inodes: Mutex<HashMap<(String, Id), InodeLocks>>,
}

impl LockTable {
    /// The first lock held by someone else that conflicts with `want`.
    fn conflict(held: &[Held], session: u64, want: &Lock) -> Option<Lock> {
        let (ws, we) = (want.start, end_of(want.start, want.len));
        let write = want.kind == LockKind::Write;
        held.iter()
            .find(|h| {
                !(h.session == session && h.owner == want.owner)
                    && h.start < we
                    && ws < h.end
                    && (write || h.write)
            })
            .map(|h| Lock {
                kind: if h.write { LockKind::Write } else { LockKind::Read },
                start: h.start,
                len: if h.end == u64::MAX { 0 } else { h.end - h.start },
                owner: h.owner,
                pid: h.pid,
            })
    }

    /// Remove `[start, end)` from the owner's locks, splitting ranges as POSIX does.
    fn carve(held: &mut Vec<Held>, session: u64, owner: u64, start: u64, end: u64) {
        let mut out = Vec::with_capacity(held.len() + 1);
        for h in held.drain(..) {
            if h.session != session || h.owner != owner || h.end <= start || end <= h.start {
                out.push(h);
                continue;
            }
            if h.start < start {
                out.push(Held { end: start, ..h.clone() });
            }
            if end < h.end {
                out.push(Held { start: end, ..h });
            }
        }
        *held = out;
    }

    /// Insert a lock for the owner, merging with adjacent/overlapping locks of the same kind.
    fn insert(held: &mut Vec<Held>, new: Held) {
        Self::carve(held, new.session, new.owner, new.start, new.end);
        let mut merged = new;
        held.retain(|h| {
            let same =
                h.session == merged.session && h.owner == merged.owner && h.write == merged.write;
            if same && h.start <= merged.end && merged.start <= h.end {
                merged.start = merged.start.min(h.start);
                merged.end = merged.end.max(h.end);
                false
            } else {
                true
            }
        });
        held.push(merged);
    }

    /// Whether a session other than `session` holds a lock on `id` (a write lock only,
    /// with `writes_only`): a delegation is not granted then (its holder's client may
    /// lock locally under it).
    pub fn held_by_others(&self, volume: &str, id: Id, session: u64, writes_only: bool) -> bool {
        let map = self.inodes.lock();
        map.get(&(volume.to_string(), id)).is_some_and(|i| {
            i.held.iter().any(|h| h.session != session && (h.write || !writes_only))
        })
    }

    pub fn get(&self, volume: &str, id: Id, session: u64, want: &Lock) -> Option<Lock> {
        let map = self.inodes.lock();
        map.get(&(volume.to_string(), id)).and_then(|i| Self::conflict(&i.held, session, want))
    }

    /// Try once. Ok(true) granted, Ok(false) conflict (with the Notify to wait on).
    fn try_set(&self, volume: &str, id: Id, session: u64, lock: &Lock) -> Result<(), Arc<Notify>> {
        let mut map = self.inodes.lock();
        let key = (volume.to_string(), id);
        let entry = map.entry(key.clone()).or_default();
        let end = end_of(lock.start, lock.len);
        match lock.kind {
            LockKind::Unlock => {
                Self::carve(&mut entry.held, session, lock.owner, lock.start, end);
                entry.notify.notify_waiters();
                if entry.held.is_empty() {
                    map.remove(&key);
                }
                Ok(())
            }
            kind => {
                if Self::conflict(&entry.held, session, lock).is_some() {
                    return Err(entry.notify.clone());
                }
                let write = kind == LockKind::Write;
                Self::insert(
                    &mut entry.held,
                    Held {
                        session,
                        owner: lock.owner,
                        pid: lock.pid,
                        write,
                        start: lock.start,
                        end,
                    },
                );
                // A downgrade (write -> read) may let readers in.
                entry.notify.notify_waiters();
                Ok(())
            }
        }
    }

    /// Set or clear a lock; with `wait`, block until granted (or the session closes).
    pub async fn set(
        &self,
        volume: &str,
        id: Id,
        session: u64,
        lock: &Lock,
        wait: bool,
        closed: impl Fn() -> bool,
    ) -> Result<(), RemoteError> {
        if lock.len != 0 && lock.start.checked_add(lock.len).is_none() {
            return Err(RemoteError::new(Errno::EINVAL, format!("lock range overflows on {id}")));
        }
        loop {
            let notify = match self.try_set(volume, id, session, lock) {
                Ok(()) => return Ok(()),
                Err(n) => n,
            };
            if !wait {
                return Err(RemoteError::new(
                    Errno::EAGAIN,
                    format!("{volume}: {id}: range is locked by another owner"),
                ));
            }
            let notified = notify.notified();
            // Re-check after registering, so an unlock between try and wait is not missed.
            if self.get(volume, id, session, lock).is_none() {
                continue;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
            if closed() {
                return Err(RemoteError::new(
                    Errno::ECANCELED,
                    "session closed while waiting for a lock",
                ));
            }
        }
    }

    /// Drop every lock a session holds (its connection closed).
    pub fn release_session(&self, session: u64) {
        let mut map = self.inodes.lock();
        map.retain(|_, i| {
            let before = i.held.len();
            i.held.retain(|h| h.session != session);
            if i.held.len() != before {
                i.notify.notify_waiters();
            }
            !i.held.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(kind: LockKind, start: u64, len: u64, owner: u64) -> Lock {
        Lock { kind, start, len, owner, pid: 1 }
    }

    #[tokio::test]
    async fn conflicts_split_and_release() {
        let t = LockTable::default();
        let id = Id(9);
        let never = || false;
        t.set("v", id, 1, &lk(LockKind::Write, 0, 100, 1), false, never).await.unwrap();
        // Another session's read over the range conflicts; outside it does not.
        assert!(t.set("v", id, 2, &lk(LockKind::Read, 50, 10, 1), false, never).await.is_err());
        t.set("v", id, 2, &lk(LockKind::Read, 100, 10, 1), false, never).await.unwrap();
        // Same session, other owner: conflicts too.
        assert!(t.get("v", id, 1, &lk(LockKind::Read, 10, 1, 2)).is_some());
        // Unlock the middle: the owner keeps both ends.
        t.set("v", id, 1, &lk(LockKind::Unlock, 40, 20, 1), false, never).await.unwrap();
        assert!(t.get("v", id, 2, &lk(LockKind::Write, 45, 5, 1)).is_none());
        assert!(t.get("v", id, 2, &lk(LockKind::Write, 30, 5, 1)).is_some());
        assert!(t.get("v", id, 2, &lk(LockKind::Write, 70, 5, 1)).is_some());
        // Readers share.
        t.set("v", id, 3, &lk(LockKind::Read, 100, 0, 1), false, never).await.unwrap();
        // Session close releases everything it held.
        t.release_session(1);
        assert!(t.get("v", id, 2, &lk(LockKind::Write, 0, 100, 7)).is_none());
    }

    #[tokio::test]
    async fn waiter_is_granted_on_unlock() {
        let t = Arc::new(LockTable::default());
        let id = Id(3);
        t.set("v", id, 1, &lk(LockKind::Write, 0, 0, 1), false, || false).await.unwrap();
        let t2 = t.clone();
        let w = tokio::spawn(async move {
            t2.set("v", id, 2, &lk(LockKind::Write, 10, 1, 1), true, || false).await
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!w.is_finished());
        t.set("v", id, 1, &lk(LockKind::Unlock, 0, 0, 1), false, || false).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(2), w).await.unwrap().unwrap().unwrap();
    }
}
