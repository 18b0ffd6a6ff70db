//! Delegations: what an NFSv4 gateway hands out as read and write delegations, held here as
//! backend leases of a session on a regular file, at the file's chain head.
//!
//! A session takes one with [`Op::Delegate`]: read delegations of several sessions share a
//! file, a write delegation is exclusive. Before an op of *another* session that conflicts
//! runs (a change, for a read delegation; any access of the file, for a write one), the head
//! pushes [`Push::Recall`] to each conflicting holder once and waits, before taking any
//! lock, until they give it back ([`Op::DelegReturn`]: the gateway's NFS client flushed and
//! returned it), their connection closes (a gateway that dies holds nothing), or
//! [`REVOKE_AFTER`] passes, after which the head revokes the delegation itself and the op
//! goes on. A recalled delegation is not granted again to another session until it is
//! gone. The holder's own ops never conflict with its delegation (the gateway sorts out
//! its own clients).

use cairn_proto::msg::{Op, Push};
use cairn_proto::rpc::Session;
use cairn_proto::{Errno, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a conflicting op waits for a recalled delegation before the head revokes it.
/// Longer than an NFS gateway's own revocation (Ganesha revokes a delegation its client
/// does not return within one lease time of a recall it sent, or two of a recall it could
/// not send; 60 s by default), so the gateway revokes first and its client learns of it;
/// this only bounds a gateway that stays connected but never answers.
pub const REVOKE_AFTER: Duration = Duration::from_secs(150);

/// Who holds delegations: a client session ([`Session`] in the daemon).
pub trait Holder: Send + Sync {
    fn session_id(&self) -> u64;
    /// Push a [`Push::Recall`] of `id`; false if the connection is gone.
    fn recall(&self, volume: &str, id: Id) -> bool;
}

impl Holder for Session {
    fn session_id(&self) -> u64 {
        self.id
    }
    fn recall(&self, volume: &str, id: Id) -> bool {
        self.push(&Push::Recall { volume: volume.to_string(), id })
    }
}

struct Deleg<S> {
    write: bool,
    holders: HashMap<u64, Weak<S>>,
    /// A recall was sent: not granted to other sessions until it is gone.
    recalled: bool,
}

pub struct Delegations<S = Session> {
    table: Mutex<HashMap<(String, Id), Deleg<S>>>,
    /// Woken whenever a delegation is given back, revoked or dropped.
    changed: Notify,
}

/// The file an op accesses and whether it changes it, for delegation conflicts; `None` for
/// ops that do not touch a file's data or attributes (namespace ops are keyed by their
/// directory and do not recall a delegation of the file they name).
pub fn access(op: &Op) -> Option<(Id, bool)> {
    match op {
        Op::SetAttr { id, .. }
        | Op::Write { id, .. }
        | Op::Fallocate { id, .. }
        | Op::CompareAndWrite { id, .. }
        | Op::SetXattr { id, .. }
        | Op::RemoveXattr { id, .. }
        // Locks as changes: a delegation's client may hold or test locks locally.
        | Op::SetLock { id, .. }
        | Op::GetLock { id, .. } => Some((*id, true)),
        // A brick-side copy changes its destination (its source is read at its own head).
        Op::CopyRange { dst, .. } => Some((*dst, true)),
        // An open's share reservation: writing or denying conflicts with a read delegation.
        Op::Share { id, access, deny, .. } => {
            Some((*id, access & cairn_proto::msg::share::WRITE != 0 || *deny != 0))
        }
        Op::GetAttr { id }
        | Op::Read { id, .. }
        | Op::Seek { id, .. }
        | Op::Fsync { id, .. }
        | Op::GetXattr { id, .. }
        | Op::ListXattr { id }
        | Op::GetXattrs { id } => Some((*id, false)),
        _ => None,
    }
}

impl<S> Default for Delegations<S> {
    fn default() -> Self {
        Delegations { table: Mutex::default(), changed: Notify::new() }
    }
}

impl<S: Holder> Delegations<S> {
    /// Grant `session` a delegation of `id` (see [`Op::Delegate`]).
    pub fn grant(
        &self,
        volume: &str,
        id: Id,
        write: bool,
        session: &Arc<S>,
    ) -> Result<(), RemoteError> {
        let sid = session.session_id();
        let mut t = self.table.lock();
        let d = t.entry((volume.to_string(), id)).or_insert_with(|| Deleg {
            write,
            holders: HashMap::new(),
            recalled: false,
        });
        d.holders.retain(|_, s| s.strong_count() > 0);
        let others = d.holders.keys().any(|s| *s != sid);
        if others && d.recalled {
            return Err(RemoteError::new(
                Errno::EAGAIN,
                format!("{volume}: delegation of {id} is being recalled"),
            ));
        }
        if others && (write || d.write) {
            return Err(RemoteError::new(
                Errno::EAGAIN,
                format!(
                    "{volume}: {id} has a {} delegation of another session",
                    if d.write { "write" } else { "read" }
                ),
            ));
        }
        if !others {
            d.write = write;
            d.recalled = false;
        }
        d.holders.insert(sid, Arc::downgrade(session));
        Ok(())
    }

    /// `session` gives back its delegation of `id` (nothing if it holds none).
    pub fn give_back(&self, volume: &str, id: Id, session: u64) {
        let mut t = self.table.lock();
        let key = (volume.to_string(), id);
        if let Some(d) = t.get_mut(&key) {
            d.holders.remove(&session);
            if d.holders.is_empty() {
                t.remove(&key);
            }
        }
        drop(t);
        self.changed.notify_waiters();
    }

    /// `session` closed: it holds no delegation any more.
    pub fn drop_session(&self, session: u64) {
        self.table.lock().retain(|_, d| {
            d.holders.remove(&session);
            !d.holders.is_empty()
        });
        self.changed.notify_waiters();
    }

    /// Whether any session holds a delegation of `id` (a rebalance does not move it).
    pub fn held(&self, volume: &str, id: Id) -> bool {
        self.table
            .lock()
            .get(&(volume.to_string(), id))
            .is_some_and(|d| d.holders.values().any(|h| h.strong_count() > 0))
    }

    /// No delegation held (the common case: nothing to check).
    pub fn is_empty(&self) -> bool {
        self.table.lock().is_empty()
    }

    /// Whether `op` of `session` conflicts with a delegation of another session (what
    /// [`settle`](Self::settle) would wait for).
    pub fn conflicts(&self, volume: &str, op: &Op, session: u64) -> bool {
        let Some((id, writes)) = access(op) else { return false };
        let t = self.table.lock();
        if t.is_empty() {
            return false;
        }
        let Some(d) = t.get(&(volume.to_string(), id)) else { return false };
        (writes || d.write) && d.holders.iter().any(|(s, h)| *s != session && h.strong_count() > 0)
    }

    /// Before `op` of `session` runs: recall the delegations of other sessions it
    /// conflicts with and wait until they are gone (or revoke them after [`REVOKE_AFTER`]).
    pub async fn settle(&self, volume: &str, op: &Op, session: u64) {
        self.settle_within(volume, op, session, REVOKE_AFTER).await
    }

    async fn settle_within(&self, volume: &str, op: &Op, session: u64, limit: Duration) {
        let Some((id, writes)) = access(op) else { return };
        // Every data op of the volume passes here: no allocation while nothing is held.
        if self.table.lock().is_empty() {
            return;
        }
        let key = (volume.to_string(), id);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let recall: Vec<Arc<S>> = {
                let mut t = self.table.lock();
                let Some(d) = t.get_mut(&key) else { return };
                d.holders.retain(|_, s| s.strong_count() > 0);
                let others = d.holders.keys().any(|s| *s != session);
                if !others || !(writes || d.write) {
                    if d.holders.is_empty() {
                        t.remove(&key);
                    }
                    return;
                }
                if d.recalled {
                    vec![]
                } else {
                    d.recalled = true;
                    d.holders
                        .iter()
                        .filter(|(s, _)| **s != session)
                        .filter_map(|(_, s)| s.upgrade())
                        .collect()
                }
            };
            for s in recall {
                tracing::debug!(volume, %id, holder = s.session_id(), "recalling delegation");
                s.recall(volume, id);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let mut t = self.table.lock();
                if let Some(d) = t.get_mut(&key) {
                    let gone: Vec<u64> =
                        d.holders.keys().copied().filter(|s| *s != session).collect();
                    tracing::warn!(
                        volume,
                        %id,
                        ?gone,
                        "delegation not returned within {limit:?} of its recall: revoked"
                    );
                    d.holders.retain(|s, _| *s == session);
                    if d.holders.is_empty() {
                        t.remove(&key);
                    }
                }
                drop(t);
                self.changed.notify_waiters();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::msg::share;

    fn read(id: Id) -> Op {
        Op::Read { id, offset: 0, len: 1 }
    }
    fn write(id: Id) -> Op {
        Op::Write { id, offset: 0 }
    }

    #[test]
    fn access_kinds() {
        assert_eq!(access(&read(Id(1))), Some((Id(1), false)));
        assert_eq!(access(&write(Id(1))), Some((Id(1), true)));
        assert_eq!(access(&Op::Unlink { dir: Id(1), name: b"f".to_vec() }), None);
        // A brick-side copy changes its destination.
        let copy = Op::CopyRange { src: Id(1), src_offset: 0, dst: Id(2), dst_offset: 0, len: 9 };
        assert_eq!(access(&copy), Some((Id(2), true)));
        // An open that only reads and denies nothing conflicts only with a write delegation;
        // one that writes or denies is a change (it conflicts with read delegations too).
        let share = |access, deny| Op::Share { id: Id(3), owner: 1, access, deny };
        assert_eq!(access(&share(share::READ, 0)), Some((Id(3), false)));
        assert_eq!(access(&share(share::WRITE, 0)), Some((Id(3), true)));
        assert_eq!(access(&share(share::READ, share::WRITE)), Some((Id(3), true)));
    }

    struct Fake {
        id: u64,
        recalls: Mutex<Vec<Id>>,
    }
    impl Holder for Fake {
        fn session_id(&self) -> u64 {
            self.id
        }
        fn recall(&self, _volume: &str, id: Id) -> bool {
            self.recalls.lock().push(id);
            true
        }
    }
    fn fake(id: u64) -> Arc<Fake> {
        Arc::new(Fake { id, recalls: Mutex::default() })
    }

    /// Read delegations share a file, a write one is exclusive; the holder's own ops
    /// never conflict; a recalled one is not granted to others until it is gone.
    #[test]
    fn grants_share_reads_and_exclude_writes() {
        let d = Delegations::<Fake>::default();
        let (a, b) = (fake(1), fake(2));
        d.grant("v", Id(5), false, &a).unwrap();
        d.grant("v", Id(5), false, &b).unwrap();
        assert_eq!(d.grant("v", Id(5), true, &a).unwrap_err().errno, Errno::EAGAIN);
        d.give_back("v", Id(5), 2);
        d.grant("v", Id(5), true, &a).unwrap();
        assert_eq!(d.grant("v", Id(5), false, &b).unwrap_err().errno, Errno::EAGAIN);
        assert!(!d.conflicts("v", &read(Id(5)), 1), "the holder's own read");
        assert!(d.conflicts("v", &read(Id(5)), 2));
        assert!(!d.conflicts("v", &read(Id(6)), 2), "another file");
        assert!(!d.conflicts("w", &read(Id(5)), 2), "another volume");
    }

    /// A conflicting op recalls each holder once and waits for the return; a read does
    /// not recall a read delegation.
    #[tokio::test]
    async fn a_conflict_recalls_once_and_waits_for_the_return() {
        let d = Arc::new(Delegations::<Fake>::default());
        let (a, b) = (fake(1), fake(2));
        d.grant("v", Id(5), false, &a).unwrap();
        d.settle_within("v", &read(Id(5)), 2, Duration::from_secs(5)).await;
        assert!(a.recalls.lock().is_empty(), "a read does not recall a read delegation");
        let d2 = d.clone();
        let w = tokio::spawn(async move {
            d2.settle_within("v", &write(Id(5)), 2, Duration::from_secs(5)).await
        });
        let d3 = d.clone();
        let w2 = tokio::spawn(async move {
            d3.settle_within("v", &write(Id(5)), 3, Duration::from_secs(5)).await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(*a.recalls.lock(), vec![Id(5)], "recalled once for two waiting ops");
        assert!(!w.is_finished() && !w2.is_finished());
        assert_eq!(d.grant("v", Id(5), false, &b).unwrap_err().errno, Errno::EAGAIN);
        d.give_back("v", Id(5), 1);
        tokio::time::timeout(Duration::from_secs(1), w).await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(1), w2).await.unwrap().unwrap();
        d.grant("v", Id(5), true, &b).unwrap();
    }

    /// A holder that goes away (its session closed) ends the wait at once; one that
    /// never returns is revoked after the limit.
    #[tokio::test]
    async fn a_closed_or_silent_holder_ends_the_wait() {
        let d = Arc::new(Delegations::<Fake>::default());
        let a = fake(1);
        d.grant("v", Id(5), true, &a).unwrap();
        let d2 = d.clone();
        let w = tokio::spawn(async move {
            d2.settle_within("v", &read(Id(5)), 2, Duration::from_secs(30)).await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        d.drop_session(1);
        tokio::time::timeout(Duration::from_secs(1), w).await.unwrap().unwrap();
        d.grant("v", Id(5), true, &a).unwrap();
        let t0 = tokio::time::Instant::now();
        d.settle_within("v", &read(Id(5)), 2, Duration::from_millis(300)).await;
        assert!(t0.elapsed() >= Duration::from_millis(300), "revoked only after the limit");
        assert!(!d.conflicts("v", &read(Id(5)), 2), "revoked");
    }

    /// Without a holder (or for the holder itself) nothing waits.
    #[tokio::test]
    async fn nothing_to_settle_returns_at_once() {
        let d = Delegations::<Fake>::default();
        let op = write(Id(3));
        let t = tokio::time::timeout(Duration::from_millis(100), d.settle("v", &op, 1));
        assert!(t.await.is_ok());
        assert!(!d.conflicts("v", &op, 1));
    }
}
