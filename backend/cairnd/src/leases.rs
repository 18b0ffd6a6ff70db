//! Read leases and their recall (upcalls).
//!
//! A chain head records which client sessions read an inode's attributes or a directory's
//! entries. Before a mutation by another session completes, the head pushes
//! `Push::Invalidate` to each holder and waits (bounded by [`RECALL_WAIT`]) for the ack, so
//! a client never serves its cached copy after the change is acknowledged — unless it
//! failed to answer, in which case its cache expires after at most [`LEASE`]. A holder
//! whose connection closes has no cache left to drop: the wait for its ack ends at once.

use cairn_proto::msg::Push;
use cairn_proto::rpc::Session;
use cairn_proto::Id;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a read grants a lease for; clients never cache longer than this.
pub const LEASE: Duration = Duration::from_secs(10);
/// How long a mutation waits for holders to acknowledge a recall.
pub const RECALL_WAIT: Duration = Duration::from_millis(500);

struct Holder {
    session: Weak<Session>,
    until: Instant,
}

#[derive(Default)]
pub struct Leases {
    holders: Mutex<HashMap<(String, Id), HashMap<u64, Holder>>>,
    /// Recalls awaiting their ack: seq -> (holder session, ack).
    acks: Mutex<HashMap<u64, (u64, oneshot::Sender<()>)>>,
    seq: AtomicU64,
    /// Client instance (`ReqId::client`) -> its session here, learned from its mutations:
    /// a recall made on behalf of a change another node ran can spare the changer.
    clients: Mutex<HashMap<u64, u64>>,
}

impl Leases {
    pub fn grant(&self, volume: &str, id: Id, session: &Arc<Session>) {
        let mut h = self.holders.lock();
        h.entry((volume.to_string(), id)).or_default().insert(
            session.id,
            Holder { session: Arc::downgrade(session), until: Instant::now() + LEASE },
        );
    }

    /// Whether `session` holds an unexpired lease on `id`.
    pub fn holds(&self, volume: &str, id: Id, session: u64) -> bool {
        let h = self.holders.lock();
        h.get(&(volume.to_string(), id))
            .and_then(|m| m.get(&session))
            .is_some_and(|l| l.until > Instant::now())
    }

    /// Client instance `client` talks to this node over `session`.
    pub fn note_client(&self, client: u64, session: u64) {
        let mut c = self.clients.lock();
        if c.get(&client) != Some(&session) {
            c.insert(client, session);
        }
    }

    /// The session of client instance `client` here, if it sent a mutation here.
    pub fn session_of(&self, client: u64) -> Option<u64> {
        self.clients.lock().get(&client).copied()
    }

    pub fn ack(&self, seq: u64) {
        if let Some((_, tx)) = self.acks.lock().remove(&seq) {
            let _ = tx.send(());
        }
    }

    /// Recall the leases on `ids` held by sessions other than `except`; returns once all
    /// acknowledged or [`RECALL_WAIT`] passed. `except` (the session that made the change)
    /// keeps its lease: it knows what it changed and updates its own cache, and a later
    /// change by another session must still reach it.
    pub async fn recall(&self, volume: &str, ids: &[(Id, bool)], except: u64) {
        let now = Instant::now();
        let mut waits = vec![];
        for &(id, entries) in ids {
            let holders = {
                let mut map = self.holders.lock();
                let key = (volume.to_string(), id);
                let Some(mut holders) = map.remove(&key) else { continue };
                if let Some(own) = holders.remove(&except) {
                    if own.until >= now {
                        map.insert(key, HashMap::from([(except, own)]));
                    }
                }
                holders
            };
            for (sid, h) in holders {
                if sid == except || h.until < now {
                    continue;
                }
                let Some(s) = h.session.upgrade() else { continue };
                let (seq, rx) = self.expect(sid);
                // Closed before the ack was expected: `drop_session` may have run already.
                if s.push(&Push::Invalidate { volume: volume.to_string(), id, entries, seq })
                    && !s.is_closed()
                {
                    waits.push((seq, rx));
                } else {
                    self.acks.lock().remove(&seq);
                }
            }
        }
        if waits.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + RECALL_WAIT;
        for (seq, rx) in waits {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(_) => {} // acknowledged, or the holder's connection closed
                Err(_) => {
                    self.acks.lock().remove(&seq);
                    tracing::debug!(volume, seq, "lease recall not acknowledged in time");
                }
            }
        }
    }

    /// A new recall to `session`: its seq, and what resolves on its ack (`Ok`) or when
    /// `session` closes (`Err`).
    fn expect(&self, session: u64) -> (u64, oneshot::Receiver<()>) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.acks.lock().insert(seq, (session, tx));
        (seq, rx)
    }

    /// `session` closed: it holds no lease, and a recall waiting for its ack stops waiting
    /// (a client that exits as a recall reaches it never answers; without this, the change
    /// that recalled would stall for [`RECALL_WAIT`]).
    pub fn drop_session(&self, session: u64) {
        let mut h = self.holders.lock();
        h.retain(|_, m| {
            m.remove(&session);
            !m.is_empty()
        });
        drop(h);
        self.acks.lock().retain(|_, (s, _)| *s != session);
        self.clients.lock().retain(|_, s| *s != session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recall waiting on a session that closes ends at once; one waiting on another
    /// session still waits for its ack.
    #[tokio::test]
    async fn a_closed_holder_ends_the_wait_for_its_ack() {
        let l = Leases::default();
        let (_, gone) = l.expect(7);
        let (seq, alive) = l.expect(8);
        l.drop_session(7);
        let t = tokio::time::Instant::now() + RECALL_WAIT;
        assert!(matches!(tokio::time::timeout_at(t, gone).await, Ok(Err(_))));
        let mut alive = alive;
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut alive).await.is_err());
        l.ack(seq);
        assert!(matches!(alive.await, Ok(())));
    }
}
