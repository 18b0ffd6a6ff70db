//! The inode locks of the chains this node heads: `cairn_replication::range_lock` with
//! waiting tasks. A mutation holds the range it changes (a data write its 4 KiB blocks,
//! anything else the whole inode) exclusively until every replica applied it; a read at the
//! head holds what it may see shared. See `chain::mutate`.

use cairn_proto::Id;
use cairn_replication::range_lock::{Mode, Range, Table, Ticket};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::oneshot;

/// (volume, brick, inode).
pub type LockKey = (String, u32, Id);

#[derive(Default)]
pub struct InodeLocks {
    table: Arc<Mutex<Table<LockKey, oneshot::Sender<()>>>>,
}

/// A held range lock of one inode (or, while its task waits, the request for it); released
/// on drop, also when the waiting task is cancelled.
pub struct InodeGuard {
    table: Arc<Mutex<Table<LockKey, oneshot::Sender<()>>>>,
    key: LockKey,
    ticket: Ticket,
}

impl Drop for InodeGuard {
    fn drop(&mut self) {
        let granted = self.table.lock().release(&self.key, self.ticket);
        for w in granted {
            // A waiter whose task is gone released its own request already.
            let _ = w.send(());
        }
    }
}

impl InodeLocks {
    /// Lock `range` of `key` in `mode`, after the conflicting requests made before.
    pub async fn lock(&self, key: LockKey, range: Range, mode: Mode) -> InodeGuard {
        let (tx, rx) = oneshot::channel();
        let (ticket, granted) = self.table.lock().acquire(key.clone(), range, mode, tx);
        let guard = InodeGuard { table: self.table.clone(), key, ticket };
        if !granted {
            // The sender stays in the table until it grants this request (the guard, alive
            // here, is the only one that could withdraw it).
            let _ = rx.await;
        }
        guard
    }

    /// Lock `range` of `key` in `mode` if that needs no wait (nothing conflicting held or
    /// asked before); `None`, leaving nothing behind, otherwise. Never blocks: for a task
    /// that holds another inode's lock and must not wait in the wrong order.
    pub fn try_lock(&self, key: LockKey, range: Range, mode: Mode) -> Option<InodeGuard> {
        let (tx, _rx) = oneshot::channel();
        let (ticket, granted) = self.table.lock().acquire(key.clone(), range, mode, tx);
        let guard = InodeGuard { table: self.table.clone(), key, ticket };
        // Not granted: dropping the guard withdraws the request.
        granted.then_some(guard)
    }

    /// Inodes with a lock held or requested.
    #[cfg(test)]
    fn busy(&self) -> usize {
        self.table.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(id: u128) -> LockKey {
        ("v".into(), 0, Id(id))
    }

    #[tokio::test]
    async fn disjoint_writes_run_together_and_a_whole_inode_lock_waits_for_them() {
        let l = Arc::new(InodeLocks::default());
        let w1 = l.lock(key(1), Range::new(0, 65536), Mode::Exclusive).await;
        let w2 = l.lock(key(1), Range::new(65536, 131072), Mode::Exclusive).await;
        let l2 = l.clone();
        let mut truncate = tokio::spawn(async move {
            let _g = l2.lock(key(1), Range::WHOLE, Mode::Exclusive).await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!truncate.is_finished(), "whole-inode lock granted while writes hold ranges");
        drop(w1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!truncate.is_finished(), "granted with one write still held");
        drop(w2);
        tokio::time::timeout(Duration::from_secs(5), &mut truncate).await.unwrap().unwrap();
        assert_eq!(l.busy(), 0);
    }

    #[tokio::test]
    async fn try_lock_takes_only_what_is_free_and_leaves_nothing_when_refused() {
        let l = InodeLocks::default();
        let r1 = l.try_lock(key(1), Range::WHOLE, Mode::Shared).expect("free inode");
        let r2 = l.try_lock(key(1), Range::WHOLE, Mode::Shared).expect("shared with a reader");
        assert!(l.try_lock(key(1), Range::new(0, 10), Mode::Exclusive).is_none());
        drop((r1, r2));
        assert_eq!(l.busy(), 0, "a refused try_lock left its request behind");
        let w = l.lock(key(1), Range::WHOLE, Mode::Exclusive).await;
        assert!(l.try_lock(key(1), Range::WHOLE, Mode::Shared).is_none());
        drop(w);
        assert!(l.try_lock(key(1), Range::WHOLE, Mode::Shared).is_some());
        assert_eq!(l.busy(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_nothing_behind() {
        let l = Arc::new(InodeLocks::default());
        let held = l.lock(key(1), Range::WHOLE, Mode::Exclusive).await;
        let l2 = l.clone();
        let waiter = tokio::spawn(async move {
            let _g = l2.lock(key(1), Range::new(0, 10), Mode::Exclusive).await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiter.abort();
        let _ = waiter.await;
        drop(held);
        let _g = tokio::time::timeout(
            Duration::from_secs(5),
            l.lock(key(1), Range::new(0, 10), Mode::Exclusive),
        )
        .await
        .expect("the aborted waiter still blocks the range");
        drop(_g);
        assert_eq!(l.busy(), 0);
    }
}
