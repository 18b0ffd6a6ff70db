//! What a head does after the apply of a mutation: it executes the actions
//! `cairn_replication::ack::AfterWrite` decides (the rules are there, simulated with the
//! same function), each against the brick, the replicas or the config store, and answers
//! the client with the acknowledgement or the failure it ends with.

use super::apply::{Applied, Write};
use crate::exec::{mark_pending, stale, OpResult};
use crate::inode_locks::InodeGuard;
use crate::ops::{lease_on_change, recalls};
use crate::peers::copy_pending;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::msg::Reply;
use cairn_proto::rpc::Session;
use cairn_proto::{Errno, RemoteError};
use cairn_replication::ack::{Action, AfterWrite, Failure, Forward, Input, Local};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How many times a head re-sends a forward the replica refused because its map does not
/// show the head up yet (100 ms, 200 ms, ... apart: 1.5 s in all). Such a replica's map is
/// behind (this brick just came up; maps converge within milliseconds) or this head is
/// deposed; while it is still up in its own current map with its lease held, it asks
/// again: failing the write instead would make the client retry a write this head
/// already applied (and may have let a reader see), which could land after a newer one.
const FORWARD_REFUSED_RETRIES: u32 = 5;

/// How many times a head sends a forward again on a new connection when the connection
/// dropped before the replica answered (a TCP reset, a peer session closed by a
/// certificate reload or revocation): at once, each time, since both nodes may be alive.
/// Still dropped, the replica counts as having missed the write.
const FORWARD_DROPPED_REDIALS: u32 = 2;

fn forward_result(r: &Result<(), RemoteError>) -> Forward {
    match r {
        Ok(()) => Forward::Applied,
        Err(e) if e.errno == Errno::ESTALEMAP => Forward::Refused,
        // The connection was lost or closed with the request in flight, or it could not be
        // sent on it (`cairn_proto::rpc`: ENOTCONN); a peer that cannot be dialled gives
        // ECONNREFUSED or a handshake error, and one that does not answer ETIMEDOUT.
        Err(e) if e.errno == Errno::ENOTCONN => Forward::Dropped,
        Err(_) => Forward::Missed,
    }
}

impl Write<'_> {
    /// Execute what the outcome of the apply asks for, then answer.
    pub async fn settle(
        &self,
        session: &Arc<Session>,
        applied: Applied,
        guards: Vec<InodeGuard>,
    ) -> OpResult {
        let (node, slot, req) = (self.node, self.slot, self.req);
        let (volume, me) = (&req.volume, req.brick);
        let Applied { head, parents, results, takers } = applied;
        let (local, head_err) = match &head {
            Ok(_) => (Local::Applied, None),
            Err((l, e)) => (*l, Some(e.clone())),
        };
        let mut errors: BTreeMap<u32, RemoteError> = BTreeMap::new();
        let mut forwards = vec![];
        for (t, r) in results {
            forwards.push((t, self.classify(&r).await));
            if let Err(e) = r {
                errors.insert(t, e);
            }
        }
        let mut after = AfterWrite::new(Input {
            head: me,
            local,
            forwards,
            down: self.plan.pending.clone(),
            takers,
            resends: FORWARD_REFUSED_RETRIES,
            redials: FORWARD_DROPPED_REDIALS,
        });
        let mut backoff = cairn_proto::Backoff::linear(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_millis(100 * FORWARD_REFUSED_RETRIES as u64),
        );
        // Why an action failed, for the answer.
        let mut why: BTreeMap<(&str, u32), String> = BTreeMap::new();
        let changed = &self.changed;
        loop {
            let ok = match after.next_action() {
                Action::Resend(to) => match self.current_map_if_up() {
                    None => false,
                    Some(current) => {
                        backoff.wait().await;
                        for (t, r) in self.send(&to, current.as_deref().unwrap_or(self.map)).await {
                            after.resent(t, self.classify(&r).await);
                            match r {
                                Ok(()) => errors.remove(&t),
                                Err(e) => errors.insert(t, e),
                            };
                        }
                        true
                    }
                },
                Action::Redial(to) => {
                    for (t, r) in self.redial(&to).await {
                        let f = self.classify(&r).await;
                        tracing::info!(volume = %volume, brick = me, peer = t, op = req.op.name(), result = ?f, "forward sent again on a new connection after its connection dropped");
                        after.resent(t, f);
                        match r {
                            Ok(()) => errors.remove(&t),
                            Err(e) => errors.insert(t, e),
                        };
                    }
                    true
                }
                Action::MarkPending { peer } => {
                    match mark_pending(slot, peer, changed.clone()).await {
                        Ok(()) => true,
                        Err(e) => {
                            tracing::error!(volume = %volume, brick = me, peer, op = req.op.name(), error = %e, "cannot record pending heal entries");
                            why.insert(("pending", peer), e.message);
                            false
                        }
                    }
                }
                Action::CopyPending { peer, to } => {
                    copy_pending(node, self.map, &self.rreq, peer, changed, &to).await;
                    true
                }
                Action::MarkStale { brick, by } => match node.mark_stale(volume, brick, by).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(volume = %volume, brick, by, op = req.op.name(), error = %e, "cannot mark a brick stale");
                        why.insert(("stale", brick), e.to_string());
                        false
                    }
                },
                Action::CheckServing => node.lease_alive() && !slot.healing.load(Ordering::Acquire),
                Action::Acknowledge => break,
                Action::Fail(f) => {
                    drop(guards);
                    return Err(self.failure(f, head_err, &errors, &why));
                }
            };
            after.done(ok);
        }
        for (t, e) in &errors {
            tracing::warn!(volume = %volume, brick = me, peer = t, op = req.op.name(), error = %e, "replica missed a mutation; recorded for heal");
        }
        let (reply, out) = head.expect("acknowledged: the head applied it");
        // Only an acknowledged result is remembered by the head: a write it applied but
        // could not acknowledge is re-copied by this brick, never answered from here.
        if let Some(id) = req.req {
            slot.dedupe.lock().record(id, (reply.clone(), out.clone()), true, &self.changed);
        }
        drop(guards);
        node.leases.recall(volume, &recalls(&req.op), session.id).await;
        self.grant_own(session);
        if parents.is_empty() {
            return Ok((reply, out));
        }
        Ok((Reply::WithParents { reply: Box::new(reply), parents }, out))
    }

    /// A forward's result for the rules. A replica that refused this node's certificate as
    /// revoked did not miss the write: if the config store confirms the revocation, this
    /// node leaves service (`certs::own_revoked`: its bricks stop serving and are marked
    /// stale) and nobody is demoted for it.
    async fn classify(&self, r: &Result<(), RemoteError>) -> Forward {
        match r {
            Err(e)
                if cairn_proto::tls::refused_as_revoked(&e.message)
                    && crate::certs::own_revoked(self.node).await =>
            {
                Forward::Distrusted
            }
            r => forward_result(r),
        }
    }

    /// The session that made the change gets (or renews) a lease on the inode whose
    /// attributes the reply carries, when this brick heads that inode, so the client may
    /// cache them: what a create or mkdir made (ordered at the directory's head, which
    /// heads the new inode when its id was drawn with `cairn_placement::new_id_like`),
    /// what a link, setattr, write or xattr change left. Another session's later change
    /// recalls it here before it completes. Without it a create's reply was leased
    /// nowhere, and an own change renewed nothing.
    fn grant_own(&self, session: &Arc<Session>) {
        let (node, req) = (self.node, self.req);
        let Some(id) = lease_on_change(&req.op) else { return };
        let Some((set, _)) = self.map.brick(req.brick) else { return };
        if cairn_placement::head(set, id).map(|h| h.index) == Some(req.brick) {
            node.leases.grant(&req.volume, id, session);
        }
    }

    /// `Some(current map)` while this brick is still up in this node's current map, with
    /// its lease held and not healing: it may ask a refusing replica again.
    fn current_map_if_up(&self) -> Option<Option<Arc<VolumeMap>>> {
        let (node, slot, req) = (self.node, self.slot, self.req);
        let current = node.map(&req.volume);
        let up = node.lease_alive()
            && !slot.healing.load(Ordering::Acquire)
            && current
                .as_ref()
                .and_then(|m| m.brick(req.brick))
                .is_some_and(|(_, b)| b.state == BrickState::Up);
        up.then_some(current)
    }

    /// The error a failed write answers with.
    fn failure(
        &self,
        f: Failure,
        head_err: Option<RemoteError>,
        errors: &BTreeMap<u32, RemoteError>,
        why: &BTreeMap<(&str, u32), String>,
    ) -> RemoteError {
        let (volume, me, node) = (&self.req.volume, self.req.brick, &self.node.name);
        let op = self.req.op.name();
        let said = |k: &str, b: u32| why.get(&(k, b)).cloned().unwrap_or_default();
        let head_err = || {
            head_err.clone().unwrap_or_else(|| {
                RemoteError::new(Errno::EIO, format!("{volume}: brick {me}: {op} failed"))
            })
        };
        match f {
            Failure::Head => head_err(),
            Failure::SteppedAside { by } => {
                let e = head_err();
                tracing::warn!(volume = %volume, brick = me, replica = by, op, error = %e, "brick storage failed; stepped aside as head, the set goes on without it until it heals");
                stale(
                    volume,
                    me,
                    &format!("{}; taken out of its replica set, brick {by} takes over", e.message),
                )
            }
            Failure::Refused { brick } => {
                let e = errors.get(&brick).cloned().unwrap_or_else(|| {
                    stale(volume, brick, &format!("refused a forward from brick {me}"))
                });
                let took: Vec<&u32> = errors.keys().collect();
                tracing::warn!(volume = %volume, brick = me, op, error = %e, replicas_that_failed = ?took, "a replica refused this head's forward; write not acknowledged");
                e
            }
            Failure::NotRecorded { brick } => RemoteError::new(
                Errno::EIO,
                format!(
                    "{volume}: brick {brick} missed a write and brick {me} could not record it as pending ({}); not acknowledged",
                    said("pending", brick)
                ),
            ),
            Failure::NotDemoted { brick } => RemoteError::new(
                Errno::EIO,
                format!(
                    "{volume}: brick {brick} missed a write and that could not be recorded in the config store: {}",
                    said("stale", brick)
                ),
            ),
            Failure::Distrusted { brick } => {
                tracing::warn!(volume = %volume, brick = me, replica = brick, op, "a replica refused this node's revoked certificate; write not acknowledged, this node's bricks left service");
                stale(
                    volume,
                    me,
                    &format!(
                        "node {node}'s certificate is revoked (brick {brick} refused it); this brick left service, the other bricks of its set take over"
                    ),
                )
            }
            Failure::Fenced => RemoteError::new(
                Errno::EHOSTDOWN,
                format!(
                    "{volume}: brick {me}: node {node} lost its lease during the write; not acknowledged"
                ),
            ),
        }
    }
}
