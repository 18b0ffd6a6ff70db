//! A mutation at its chain head: checks, locks, dedupe, the head's apply and the forwards,
//! then what the outcome asks for.

use crate::exec::{exec_local, is_storage_error, mark_pending, result_attr, stale, OpResult};
use crate::node::{BrickSlot, Node};
use crate::ops::{changed_ids, key_id, recalls, write_range};
use crate::peers::{copy_pending, forward};
use bytes::Bytes;
use cairn_brick::Exec;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Reply};
use cairn_proto::rpc::Session;
use cairn_proto::{Attr, Creds, Errno, Id, RemoteError};
use cairn_replication::dedupe::Dup;
use cairn_replication::range_lock::Mode;
use std::sync::Arc;

/// Run a client's op on the local brick as chain head, then (in the same blocking task,
/// under the caller's inode locks) read this brick's attributes of directories `dirs`.
/// The attributes are all or nothing: empty if any could not be read.
async fn exec_head(
    slot: &Arc<BrickSlot>,
    creds: Creds,
    op: Op,
    data: Bytes,
    dirs: Vec<Id>,
) -> Result<(Reply, Bytes, Vec<Attr>), RemoteError> {
    if dirs.is_empty() {
        return exec_local(slot, creds, op, data, None, false).await.map(|(r, o)| (r, o, vec![]));
    }
    let brick = slot.brick.clone();
    let (volume, index) = (slot.volume.clone(), slot.index);
    let name = op.name();
    tokio::task::spawn_blocking(move || {
        let (reply, out) = brick.execute(&creds, &op, &data, Exec::Primary)?;
        let attrs: Vec<Attr> = dirs
            .iter()
            .map_while(|&id| {
                match brick.execute(&Creds::root(), &Op::GetAttr { id }, &[], Exec::Primary) {
                    Ok((Reply::Attr(a), _)) => Some(a),
                    _ => None,
                }
            })
            .collect();
        let attrs = if attrs.len() == dirs.len() { attrs } else { vec![] };
        Ok((reply, out, attrs))
    })
    .await
    .unwrap_or_else(|e| {
        Err(RemoteError::new(
            Errno::EIO,
            format!("{volume}: brick {index}: {name} task failed: {e}"),
        ))
    })
}

/// How many times a head re-sends a forward the replica refused because its map does not
/// show the head up yet (100 ms, 200 ms, ... apart: 1.5 s in all).
const FORWARD_REFUSED_RETRIES: u32 = 5;

/// The head's own storage failed (`e`) on a mutation of `changed` that a replica of the set
/// can take: one of `candidates` (up; for a data write, those that already applied it).
/// Step aside instead of failing the op, as Gluster's AFR goes on with the bricks that
/// have room: record on this brick and on the candidates that this brick must re-copy
/// `changed`, have the config store mark this brick stale (so a candidate heads the set and
/// this brick heals, once it can, before it serves again), and answer ESTALEMAP so the
/// client refreshes its map and retries at the new head. A data write the candidates
/// already applied is applied again there, the same bytes at the same offset, while this
/// head still holds the write's range locked against other writers of it.
///
/// None when no candidate could vouch for the demotion (none up, or the config store said
/// no): the caller fails the op as before.
async fn step_aside(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    map: &VolumeMap,
    rreq: &ReplicateRequest,
    candidates: &[u32],
    changed: &[Id],
    e: &RemoteError,
) -> Option<RemoteError> {
    let (volume, me) = (&rreq.volume, rreq.from_brick);
    for &by in candidates {
        if let Err(se) = node.mark_stale(volume, me, by).await {
            tracing::warn!(volume = %volume, brick = me, by, error = %se, "cannot step aside for a replica");
            continue;
        }
        mark_pending(slot, me, changed.to_vec()).await;
        copy_pending(node, map, rreq, me, changed, candidates).await;
        tracing::warn!(volume = %volume, brick = me, replica = by, op = rreq.op.name(), error = %e, "brick storage failed; stepped aside as head, the set goes on without it until it heals");
        return Some(stale(
            volume,
            me,
            &format!("{}; taken out of its replica set, brick {by} takes over", e.message),
        ));
    }
    None
}

/// Apply a mutation at the head and replicate it.
pub(super) async fn mutate(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<BrickSlot>,
    map: &VolumeMap,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    let (set, _) = map
        .brick(req.brick)
        .ok_or_else(|| stale(&req.volume, req.brick, "not in the volume map"))?;
    let key = key_id(&req.op);
    // This brick serves (it is open and not healing), so a map in which no brick of its set
    // is up is behind: the brick published its own "up" and the watch has not brought it
    // back yet (both nodes of a set restarting at once). A map change the client retries
    // (ESTALEMAP), not an I/O error it would pass on to applications and initiators.
    let plan = cairn_replication::plan(set, key).ok_or_else(|| {
        stale(
            &req.volume,
            req.brick,
            &format!("this node's map has no brick of replica set {} up yet", set.id),
        )
    })?;
    if plan.head != req.brick {
        return Err(stale(
            &req.volume,
            req.brick,
            &format!("not the chain head of {key} (brick {} is)", plan.head),
        ));
    }
    if !node.lease_alive() {
        // Self-fencing: the config store may already have declared this node dead and
        // promoted another head; accepting the write could fork the replica set.
        return Err(RemoteError::new(
            Errno::EHOSTDOWN,
            format!(
                "{}: brick {}: node {} cannot renew its lease; refusing writes",
                req.volume, req.brick, node.name
            ),
        ));
    }
    if !matches!(req.op, Op::Fsync { .. } | Op::Open { .. } | Op::Release { .. }) {
        let quorum = cairn_replication::Quorum::from_options(
            map.option("cluster.quorum-type"),
            map.option("cluster.quorum-count"),
        );
        if let Err(why) = quorum.check(set) {
            return Err(RemoteError::new(
                Errno::EROFS,
                format!("{}: replica set {}: {why} (cluster.quorum-type)", req.volume, set.id),
            ));
        }
    }
    if !matches!(req.op, Op::Fsync { .. } | Op::Open { .. } | Op::Release { .. })
        && map.option("features.read-only") == Some("on")
    {
        return Err(RemoteError::new(
            Errno::EROFS,
            format!("{}: volume is read-only (features.read-only)", req.volume),
        ));
    }
    let mut changed = changed_ids(&req.op);
    if let Op::Rename { src_dir, src_name, dst_dir, dst_name, .. } = &req.op {
        // The moved inode (and a replaced one) change too: a brick that misses the rename
        // must re-copy them, not just the two directories.
        for (dir, name) in [(src_dir, src_name), (dst_dir, dst_name)] {
            let look = Op::Lookup { dir: *dir, name: name.clone() };
            if let Ok((Reply::Entry { attr, .. }, _)) =
                exec_local(slot, Creds::root(), look, Bytes::new(), None, false).await
            {
                changed.push(attr.id);
            }
        }
    }
    let guards = match write_range(&req.op, &data) {
        Some((id, range)) => {
            vec![node.lock_range(&req.volume, req.brick, id, range, Mode::Exclusive).await]
        }
        None => node.lock_inodes(&req.volume, req.brick, &changed).await,
    };
    // A retry of a mutation this brick already applied (checked under the inode locks, so
    // a retry racing its original, which locks the same range, waits for it): never
    // applied twice.
    let done = match req.req.map(|id| slot.dedupe.lock().check(id)) {
        Some(Dup::Answer(r)) => {
            tracing::debug!(volume = %req.volume, brick = req.brick, op = req.op.name(), req = ?req.req, "retried request answered with its first result");
            return Ok(r);
        }
        Some(Dup::Confirm(r)) => Some(r),
        Some(Dup::New) | None => None,
    };
    let mut rreq = ReplicateRequest {
        volume: req.volume.clone(),
        brick: 0,
        epoch: map.epoch,
        from_brick: req.brick,
        creds: req.creds.clone(),
        op: req.op.clone(),
        result: None,
        missed: plan.pending.clone(),
        req: req.req,
        confirm: done.is_some(),
    };
    let fwd_data = data.clone();
    let send_all = |rreq: ReplicateRequest| {
        let fwd_data = fwd_data.clone();
        let sends = plan.forward.iter().map(move |&t| {
            let r = ReplicateRequest { brick: t, ..rreq.clone() };
            let data = fwd_data.clone();
            async move { (t, forward(node, map, t, r, data).await) }
        });
        futures::future::join_all(sends)
    };
    // Applied here as a replica (its head did not answer the client): answered from here
    // only if every replica applied it too; otherwise forwarded again as a new request
    // (the replicas that had it find it applied), so every copy ends the same.
    let mut confirmed = None;
    let mut applied_here = None;
    if let Some((reply, out)) = done {
        let results = send_all(rreq.clone()).await;
        if results.iter().all(|(_, r)| r.is_ok()) {
            tracing::debug!(volume = %req.volume, brick = req.brick, op = req.op.name(), req = ?req.req, "retried request applied here and on every replica before; answered");
            confirmed = Some((reply, out, results));
        } else {
            tracing::debug!(volume = %req.volume, brick = req.brick, op = req.op.name(), req = ?req.req, "retried request applied here, not on every replica; forwarded again");
            rreq.confirm = false;
            applied_here = Some((reply, out));
        }
    }
    // Attributes of this brick's copies of the parent directories right after the op,
    // for a client that asked (it updates its cached directory attributes from them).
    let mut parents = vec![];
    let (reply, out, results) = if let Some(c) = confirmed {
        c
    } else if let Some((reply, out)) = applied_here {
        // Applied here (as a replica) but not on every replica: not applied here again (a
        // rename's source is gone now, an exclusive create's name taken), but forwarded
        // again, as a replica applies it: the replicas that missed it apply it, those that
        // have it find it applied. A rename's moved inode is at its destination by now.
        if let Op::Rename { dst_dir, dst_name, .. } = &req.op {
            let look = Op::Lookup { dir: *dst_dir, name: dst_name.clone() };
            if let Ok((Reply::Entry { attr, .. }, _)) =
                exec_local(slot, Creds::root(), look, Bytes::new(), None, false).await
            {
                rreq.result = Some(attr);
            }
        } else {
            rreq.result = result_attr(&reply);
        }
        let results = send_all(rreq.clone()).await;
        (reply, out, results)
    } else if matches!(req.op, Op::Write { .. }) {
        // Data writes go to the replicas while the head writes its own copy, so a replicated
        // write costs one disk write of latency, not two. If the head's copy fails, the
        // replicas that took it hold bytes nobody acknowledged: demote them, and they
        // re-copy this inode from the head when they catch up.
        let local = exec_local(slot, req.creds.clone(), req.op.clone(), data.clone(), None, false);
        let (local, results) = tokio::join!(local, send_all(rreq.clone()));
        match local {
            Ok((reply, out)) => (reply, out, results),
            Err(e) if is_storage_error(&e) => {
                let took: Vec<u32> =
                    results.iter().filter(|(_, r)| r.is_ok()).map(|(t, _)| *t).collect();
                if let Some(err) = step_aside(node, slot, map, &rreq, &took, &changed, &e).await {
                    drop(guards);
                    return Err(err);
                }
                // Could not step aside: the replicas that took the write are demoted.
                for t in took {
                    mark_pending(slot, t, changed.clone()).await;
                    if let Err(se) = node.mark_stale(&req.volume, t, req.brick).await {
                        tracing::warn!(volume = %req.volume, brick = t, error = %se, "cannot demote a replica holding an unacknowledged write");
                    }
                }
                return Err(e);
            }
            Err(e) => {
                for (t, r) in results {
                    if r.is_ok() {
                        mark_pending(slot, t, changed.clone()).await;
                        if let Err(se) = node.mark_stale(&req.volume, t, req.brick).await {
                            tracing::warn!(volume = %req.volume, brick = t, error = %se, "cannot demote a replica holding an unacknowledged write");
                        }
                    }
                }
                return Err(e);
            }
        }
    } else {
        // A rename's replicas are told which inode the head moved (looked up under the
        // locks, just before it moves), so that one lacking it reports the miss instead of
        // skipping the rename (see the brick store's `replica_rename_done`).
        let moved = match &req.op {
            Op::Rename { src_dir, src_name, .. } => {
                let look = Op::Lookup { dir: *src_dir, name: src_name.clone() };
                match exec_local(slot, Creds::root(), look, Bytes::new(), None, false).await {
                    Ok((Reply::Entry { attr, .. }, _)) => Some(attr),
                    _ => None,
                }
            }
            _ => None,
        };
        let dirs = if req.parents { req.op.parent_dirs() } else { vec![] };
        let local = exec_head(slot, req.creds.clone(), req.op.clone(), data.clone(), dirs).await;
        let (reply, out) = match local {
            Ok((reply, out, p)) => {
                parents = p;
                (reply, out)
            }
            Err(e) if is_storage_error(&e) => {
                // Nothing was forwarded: any replica that is up can take the op instead.
                let up: Vec<u32> = plan
                    .forward
                    .iter()
                    .copied()
                    .filter(|&t| map.brick(t).is_some_and(|(_, b)| b.state == BrickState::Up))
                    .collect();
                let err = step_aside(node, slot, map, &rreq, &up, &changed, &e).await;
                drop(guards);
                return Err(err.unwrap_or(e));
            }
            Err(e) => return Err(e),
        };
        rreq.result = moved.or_else(|| result_attr(&reply));
        let results = send_all(rreq.clone()).await;
        (reply, out, results)
    };
    // A replica that refuses the forward because this brick is not up in its map: either
    // the replica's map is behind (this brick just came up; maps converge within
    // milliseconds) or this head is deposed (its node lost its lease, or it is catching
    // up, and acts on an old map). While this brick is still up in its own current map
    // with its lease held, try that replica again for a moment: failing the write instead
    // would make the client retry a write this head already applied (and may have let a
    // reader see), which could land after a newer one.
    let mut results = results;
    let mut backoff = cairn_proto::Backoff::linear(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_millis(100 * FORWARD_REFUSED_RETRIES as u64),
    );
    for _ in 1..=FORWARD_REFUSED_RETRIES {
        let refused: Vec<u32> = results
            .iter()
            .filter(|(_, r)| matches!(r, Err(e) if e.errno == Errno::ESTALEMAP))
            .map(|(t, _)| *t)
            .collect();
        if refused.is_empty() {
            break;
        }
        let current = node.map(&req.volume);
        let still_up = node.lease_alive()
            && !slot.healing.load(std::sync::atomic::Ordering::Acquire)
            && current
                .as_ref()
                .and_then(|m| m.brick(req.brick))
                .map(|(_, b)| b.state == cairn_proto::map::BrickState::Up)
                .unwrap_or(false);
        if !still_up {
            break;
        }
        backoff.wait().await;
        let m: &VolumeMap = current.as_deref().unwrap_or(map);
        for (t, r) in results.iter_mut().filter(|(t, _)| refused.contains(t)) {
            let again = ReplicateRequest { brick: *t, ..rreq.clone() };
            *r = forward(node, m, *t, again, fwd_data.clone()).await;
        }
    }
    // Still refused: the write is not acknowledged, and nobody is demoted for it: the
    // client refreshes its map and retries at the current head. This brick applied it,
    // so it re-copies these inodes when it catches up.
    if let Some(e) = results.iter().find_map(|(_, r)| match r {
        Err(e) if e.errno == Errno::ESTALEMAP => Some(e.clone()),
        _ => None,
    }) {
        let took: Vec<u32> = results.iter().filter(|(_, r)| r.is_ok()).map(|(t, _)| *t).collect();
        tracing::warn!(volume = %req.volume, brick = req.brick, op = req.op.name(), error = %e, replicas_that_applied = ?took, "a replica refused this head's forward; write not acknowledged");
        mark_pending(slot, req.brick, changed.clone()).await;
        drop(guards);
        return Err(e);
    }
    let mut applied = vec![];
    let mut failed = vec![];
    for (t, r) in results {
        match r {
            Ok(()) => applied.push(t),
            Err(e) => {
                tracing::warn!(volume = %req.volume, brick = req.brick, peer = t, op = req.op.name(), error = %e, "replica missed a mutation; marking for heal");
                failed.push(t);
            }
        }
    }
    // Who missed it is recorded by the head and by every replica that applied it, so the
    // record survives the head (replicas recorded `plan.pending` as they applied).
    for &peer in plan.pending.iter().chain(failed.iter()) {
        mark_pending(slot, peer, changed.clone()).await;
    }
    for &peer in &failed {
        copy_pending(node, map, &rreq, peer, &changed, &applied).await;
    }
    // A brick that missed the write must stop being a candidate head before the client
    // hears "done", or a later head change could serve the old data.
    for &peer in plan.pending.iter().chain(failed.iter()) {
        if let Err(e) = node.mark_stale(&req.volume, peer, req.brick).await {
            // Not acknowledged, but applied here: flag it so this brick re-copies these
            // inodes from whoever heads them when it catches up.
            mark_pending(slot, req.brick, changed.clone()).await;
            drop(guards);
            return Err(RemoteError::new(
                Errno::EIO,
                format!("{}: brick {peer} missed a write and that could not be recorded in the config store: {e}", req.volume),
            ));
        }
    }
    if !node.lease_alive() || slot.healing.load(std::sync::atomic::Ordering::Acquire) {
        // Fenced while the write was in flight (the node may already hold a new lease, its
        // bricks catching up): it may not be acknowledged (another brick may already head
        // this inode). Flag it for re-copy when this brick catches up.
        mark_pending(slot, req.brick, changed.clone()).await;
        drop(guards);
        return Err(RemoteError::new(
            Errno::EHOSTDOWN,
            format!(
                "{}: brick {}: node {} lost its lease during the write; not acknowledged",
                req.volume, req.brick, node.name
            ),
        ));
    }
    // Only an acknowledged result is remembered by the head: a write it applied but could
    // not acknowledge is re-copied by this brick, never answered from here.
    if let Some(id) = req.req {
        slot.dedupe.lock().record(id, (reply.clone(), out.clone()), true);
    }
    drop(guards);
    node.leases.recall(&req.volume, &recalls(&req.op), session.id).await;
    if parents.is_empty() {
        return Ok((reply, out));
    }
    Ok((Reply::WithParents { reply: Box::new(reply), parents }, out))
}
