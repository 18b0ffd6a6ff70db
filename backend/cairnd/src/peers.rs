//! Forwarding between bricks: a head's forward of a mutation to a replica (local or on
//! another node), a replica applying one (`replicate`), calls of an op on any brick of a
//! volume, and the records a brick that missed a forward leaves. Depends only on `Node`
//! and the shared brick helpers (`exec`, `ops`).

use crate::exec::{exec_local, mark_pending, stale, OpResult};
use crate::node::{BrickSlot, Node};
use crate::ops::changed_ids;
use bytes::Bytes;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::msg::{AppliedRequest, BrickRequest, Op, ReplicateRequest, Reply, ReqId, Request};
use cairn_proto::{Creds, Errno, Id, RemoteError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Forward a mutation to brick `target` of the volume (local or remote).
pub async fn forward(
    node: &Arc<Node>,
    map: &VolumeMap,
    target: u32,
    req: ReplicateRequest,
    data: Bytes,
) -> Result<(), RemoteError> {
    if node.slot(&req.volume, target).is_some() {
        // A brick of the same set on this node: the same path as a remote one (request
        // ids, confirmations, records of who missed the op).
        return replicate(node, req, data).await.map(|_| ());
    }
    let Some((_, b)) = map.brick(target) else {
        return Err(RemoteError::new(
            Errno::ENOENT,
            format!("{}: brick {target} not in the volume map", req.volume),
        ));
    };
    if b.node == node.name {
        return Err(RemoteError::new(
            Errno::ENOTCONN,
            format!("{}: brick {target} is not open on this node", req.volume),
        ));
    }
    let addr = b.addr.clone();
    let call = node.peers.call(&addr, &node.name, Request::Replicate(req), data);
    match tokio::time::timeout(FORWARD_TIMEOUT, call).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => {
            // A peer that does not answer (partitioned, hung) is treated as having missed
            // the write; drop the connection so the next call re-dials.
            node.peers.forget(&addr);
            Err(RemoteError::new(
                Errno::ETIMEDOUT,
                format!("brick {target} at {addr} did not answer within {FORWARD_TIMEOUT:?}"),
            ))
        }
    }
}

/// How long a head waits for a replica before counting it as having missed the write.
/// Shorter than the clients' retry budget, longer than a loaded brick's worst write.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Record on each brick of `to` that `peer` must re-copy `ids` (so the record survives the
/// brick that made it).
pub async fn copy_pending(
    node: &Arc<Node>,
    map: &VolumeMap,
    rreq: &ReplicateRequest,
    peer: u32,
    ids: &[Id],
    to: &[u32],
) {
    let add = Op::PendingAdd { peer, ids: ids.to_vec() };
    for &t in to {
        let r = ReplicateRequest {
            brick: t,
            op: add.clone(),
            result: None,
            missed: vec![],
            req: None,
            confirm: false,
            ..rreq.clone()
        };
        if let Err(e) = forward(node, map, t, r, Bytes::new()).await {
            tracing::warn!(volume = %rreq.volume, brick = t, error = %e, "could not copy a pending record");
        }
    }
}

/// A mutation forwarded by the head of a chain.
pub async fn replicate(node: &Arc<Node>, mut req: ReplicateRequest, data: Bytes) -> OpResult {
    let applied = std::mem::take(&mut req.applied);
    let slot = node.slot(&req.volume, req.brick).ok_or_else(|| {
        RemoteError::new(
            Errno::ENOTCONN,
            format!("{}: brick {} is not open on node {}", req.volume, req.brick, node.name),
        )
    })?;
    // A forward from a brick that is not Up in our map is from a deposed head (fenced,
    // partitioned, demoted): applying it could resurrect a write nobody acknowledged.
    if req.op.is_mutation() && !matches!(req.op, Op::Release { .. } | Op::Open { .. }) {
        if let Some(map) = node.map(&req.volume) {
            let up = map
                .brick(req.from_brick)
                .map(|(_, b)| b.state == cairn_proto::map::BrickState::Up)
                .unwrap_or(false);
            if !up {
                let why = format!("forward from brick {}, which is not up", req.from_brick);
                return Err(stale(&req.volume, req.brick, &why));
            }
        }
    }
    // Records of who else misses this change: from the head's plan, or carried by a heal.
    let mut records: Vec<(u32, Vec<Id>)> = req
        .missed
        .iter()
        .filter(|&&m| m != req.brick)
        .map(|&m| (m, changed_ids(&req.op)))
        .collect();
    if let Op::HealApply { state } = &req.op {
        if let Some(a) = &state.attr {
            records.extend(
                state.pending_for.iter().filter(|&&p| p != req.brick).map(|&p| (p, vec![a.id])),
            );
        }
    }
    let moved_into = match (&req.op, req.confirm) {
        (Op::Rename { src_dir, dst_dir, .. }, false) if src_dir != dst_dir => Some(*dst_dir),
        _ => None,
    };
    let (volume, brick, req_id) = (req.volume.clone(), req.brick, req.req);
    let is_heal = matches!(req.op, Op::HealApply { .. });
    let out = match (req.req, req.confirm) {
        (Some(id), true) => {
            // The head asks whether this brick applied the op: never apply it now (it
            // would land after newer writes); a brick that missed it is healed instead.
            let done = slot.dedupe.lock().applied(id);
            done.ok_or_else(|| {
                RemoteError::new(
                    Errno::ENOENT,
                    format!(
                        "{}: brick {}: did not apply request {}:{} ({})",
                        req.volume,
                        req.brick,
                        id.client,
                        id.seq,
                        req.op.name()
                    ),
                )
            })?
        }
        (id, _) => {
            // A request id seen before is applied again all the same: a new head that
            // missed it re-applies the client's retry and forwards it, and every copy must
            // end up the same.
            let touched = changed_ids(&req.op);
            let from = req.from_brick;

            // What this brick must re-copy if it cannot apply the op: what it changes, and
            // for a rename the inode the head moved.
            let mut owed = touched.clone();
            if let (Op::Rename { .. }, Some(a)) = (&req.op, &req.result) {
                owed.push(a.id);
            }
            let healed = match &req.op {
                Op::HealApply { state } => state.attr.as_ref().map(|a| a.id),
                _ => None,
            };
            let out = match exec_local(&slot, req.creds, req.op, data, req.result, true).await {
                Ok(out) => out,
                Err(e) => {
                    if !is_heal {
                        // Recorded here too, before the head hears of it: a catch-up under
                        // way on this brick then copies these inodes before it comes up.
                        if let Err(pe) = mark_pending(&slot, slot.index, owed).await {
                            tracing::error!(volume = %slot.volume, brick = slot.index, error = %pe, "cannot flag a missed forward for this brick's own catch-up");
                        }
                        missed_forward(node, &slot, &e);
                    }
                    return Err(e);
                }
            };
            remember(&slot, id, &out.0, &out.1, &owed);
            if let Some(inode) = healed {
                adopt(&slot, inode, applied);
            }
            // A heal copying one of these inodes from another brick must copy it again.
            let mut watch = slot.heal_watch.lock();
            for i in touched {
                if let Some((source, t)) = watch.get_mut(&i) {
                    *t |= *source != from;
                }
            }
            drop(watch);
            out
        }
    };
    for (peer, ids) in records {
        if let Err(e) = mark_pending(&slot, peer, ids).await {
            if is_heal {
                // The copy must carry its source's records (rule 3): the heal tries again.
                return Err(e);
            }
            // The head's own record of the miss gates its acknowledgement; this copy of it
            // only helps when the head is lost.
            tracing::error!(volume, brick, peer, error = %e, "cannot record who missed a forwarded write");
        }
    }
    if let Some(dst_dir) = moved_into {
        recall_moved_into(node, &volume, brick, dst_dir, req_id).await;
    }
    Ok(out)
}

/// Remember that this brick applied request `id` (not acknowledged yet), changing
/// `inodes` (what a heal copying one of them carries).
fn remember(slot: &BrickSlot, id: Option<ReqId>, reply: &Reply, out: &Bytes, inodes: &[Id]) {
    if let Some(id) = id {
        slot.dedupe.lock().record(id, (reply.clone(), out.clone()), false, inodes);
    }
}

/// Take the request-id records a heal copy of `inode` carried (`ReplicateRequest::applied`),
/// once the copy is applied: this brick holds those requests' effects now, so a client's
/// retry of one that it heads is confirmed with the replicas, never applied twice (a
/// rename's source is gone here, its new name taken).
pub fn adopt(slot: &BrickSlot, inode: Id, applied: Vec<AppliedRequest>) {
    if applied.is_empty() {
        return;
    }
    let mut table = slot.dedupe.lock();
    for a in applied {
        table.adopt(a.req, (a.reply, Bytes::from(a.out)), &[inode]);
    }
}

/// The records of the requests that changed `inode` on this brick, for a heal copy of it
/// taken under its inode lock (so the copy holds their effects).
pub fn applied_to(slot: &BrickSlot, inode: Id) -> Vec<AppliedRequest> {
    let records = slot.dedupe.lock().touching(inode);
    records
        .into_iter()
        .map(|(req, (reply, out))| AppliedRequest { req, reply, out: out.to_vec() })
        .collect()
}

/// A rename from another directory into `dst_dir`, applied on replica `brick`: the head
/// that ran it (the source directory's) recalled the leases it holds, but the leases on
/// `dst_dir`'s entries in this set are held where `dst_dir`'s chain heads, which may be
/// this brick's node. Recall them here, before the head hears back, so a client that
/// knows every name of `dst_dir` (`cache/src/dirstate.rs`) drops that knowledge before
/// the rename completes. The renaming client keeps its lease when this node knows its
/// session (from a mutation it sent here), as at the head.
async fn recall_moved_into(node: &Node, volume: &str, brick: u32, dst_dir: Id, req: Option<ReqId>) {
    let Some(map) = node.map(volume) else { return };
    let Some((set, _)) = map.brick(brick) else { return };
    if cairn_placement::head(set, dst_dir).map(|h| h.index) != Some(brick) {
        return;
    }
    let except = req.and_then(|r| node.leases.session_of(r.client)).unwrap_or(0);
    node.leases.recall(volume, &[(dst_dir, true)], except).await;
}

/// Drop an open a closed session still held, on the head and on every replica.
pub async fn release_everywhere(node: &Arc<Node>, volume: &str, brick: u32, id: Id) {
    let Some(slot) = node.slot(volume, brick) else { return };
    let _ = exec_local(&slot, Creds::root(), Op::Release { id }, Bytes::new(), None, false).await;
    let Some(map) = node.map(volume) else { return };
    let Some((set, _)) = map.brick(brick) else { return };
    for b in set.bricks.iter().filter(|b| b.index != brick) {
        let req = ReplicateRequest {
            volume: volume.to_string(),
            brick: b.index,
            epoch: map.epoch,
            from_brick: brick,
            creds: Creds::root(),
            op: Op::Release { id },
            result: None,
            missed: vec![],
            req: None,
            confirm: false,
            applied: vec![],
        };
        let _ = forward(node, &map, b.index, req, Bytes::new()).await;
    }
}

/// This brick could not apply a forwarded mutation (full, read-only, failing disk, or a
/// copy that diverged): its head records the miss and demotes it in the config store, but
/// this brick hears of that only when its map catches up, and meanwhile a client could
/// still pick it as the head of an inode it now holds an old copy of. So it stops serving
/// clients at once, publishes itself healing, and the heal loop takes it from there.
pub fn missed_forward(node: &Arc<Node>, slot: &Arc<BrickSlot>, e: &RemoteError) {
    // Before `healing`: the heal loop checks this after it clears `healing` (see `spawn`).
    slot.missed.store(true, Ordering::Release);
    if slot.healing.swap(true, Ordering::AcqRel) {
        tracing::debug!(volume = %slot.volume, brick = slot.index, error = %e, "missed a forwarded mutation while healing; healing again");
        return;
    }
    tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "missed a forwarded mutation; not serving clients until healed");
    let (node, slot) = (node.clone(), slot.clone());
    tokio::spawn(async move {
        if let Err(e) =
            node.lease().set_brick_state(&slot.volume, slot.index, BrickState::Healing).await
        {
            tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "cannot publish brick state");
        }
        node.kick.notify_one();
    });
}

/// Call an op on brick `index` of the volume, wherever it is served (as root: for calls
/// between bricks).
pub async fn call(node: &Arc<Node>, map: &VolumeMap, index: u32, op: Op, data: Bytes) -> OpResult {
    if let Some(slot) = node.slot(&map.name, index) {
        return exec_local(&slot, Creds::root(), op, data, None, false).await;
    }
    let (_, b) = map.brick(index).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("{}: no brick {index}", map.name))
    })?;
    let req = BrickRequest::new(map.name.clone(), index, map.epoch, Creds::root(), op);
    node.peers.call(&b.addr, &node.name, Request::Brick(req), data).await
}
