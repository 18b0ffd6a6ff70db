//! The data path of a brick: client operations arrive at the chain head of their inode,
//! which applies them, forwards mutations to the rest of the replica set, records pending
//! heals for bricks that are down, and recalls other clients' leases before answering.

use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_brick::Exec;
use cairn_proto::map::{BrickState, VolumeMap};
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Reply, ReqId, Request};
use cairn_proto::rpc::Session;
use cairn_proto::{Attr, Creds, Errno, FileType, Id, RemoteError};
use cairn_replication::dedupe::Dup;
use cairn_replication::range_lock::{Mode, Range};
use std::sync::Arc;

pub type OpResult = Result<(Reply, Bytes), RemoteError>;

/// The inode whose chain (head, lock, lease) an operation belongs to.
pub fn key_id(op: &Op) -> Id {
    match op {
        Op::Lookup { dir, .. }
        | Op::Create { dir, .. }
        | Op::Mkdir { dir, .. }
        | Op::MkLinkto { dir, .. }
        | Op::Link { dir, .. }
        | Op::Unlink { dir, .. }
        | Op::Rmdir { dir, .. }
        | Op::ReadDir { dir, .. } => *dir,
        Op::Rename { src_dir, .. } => *src_dir,
        Op::GetAttr { id }
        | Op::SetAttr { id, .. }
        | Op::Readlink { id }
        | Op::Open { id }
        | Op::Release { id }
        | Op::Read { id, .. }
        | Op::Write { id, .. }
        | Op::Fsync { id, .. }
        | Op::Fallocate { id, .. }
        | Op::Seek { id, .. }
        | Op::CompareAndWrite { id, .. }
        | Op::GetXattr { id, .. }
        | Op::SetXattr { id, .. }
        | Op::ListXattr { id }
        | Op::RemoveXattr { id, .. }
        | Op::SetLock { id, .. }
        | Op::GetLock { id, .. }
        | Op::Share { id, .. }
        | Op::HealFetch { id }
        | Op::HealSums { id, .. }
        | Op::HealWrite { id, .. }
        | Op::HealSync { id, .. }
        | Op::Delegate { id, .. }
        | Op::DelegReturn { id } => *id,
        Op::CopyRange { dst, .. } => *dst,
        Op::LookupPath { .. }
        | Op::StatFs
        | Op::PendingList { .. }
        | Op::PendingClear { .. }
        | Op::PendingAdd { .. }
        | Op::HealApply { .. } => Id::ROOT,
    }
}

/// Inodes a mutation changes: locked while it runs, and recorded for bricks that miss it.
pub fn changed_ids(op: &Op) -> Vec<Id> {
    match op {
        Op::Create { dir, id, .. } | Op::Mkdir { dir, id, .. } => vec![*dir, *id],
        Op::Link { id, dir, .. } => vec![*dir, *id],
        Op::MkLinkto { dir, .. } | Op::Unlink { dir, .. } | Op::Rmdir { dir, .. } => vec![*dir],
        Op::Rename { src_dir, dst_dir, .. } => {
            if src_dir == dst_dir {
                vec![*src_dir]
            } else {
                vec![*src_dir, *dst_dir]
            }
        }
        Op::SetAttr { id, .. }
        | Op::Write { id, .. }
        | Op::Fallocate { id, .. }
        | Op::CompareAndWrite { id, .. }
        | Op::SetXattr { id, .. }
        | Op::RemoveXattr { id, .. } => vec![*id],
        Op::CopyRange { dst, .. } => vec![*dst],
        _ => vec![],
    }
}

/// What a data write locks at the head instead of its whole inode: the checksummed blocks
/// (`cairn_brick::CSUM_BLOCK`, 4 KiB) it touches, as one range (a 1 MiB write is one lock
/// entry, not 256), so writes into different blocks of one file
/// go down the chain together, and two into one block are ordered alike on every replica
/// (as overlapping ones). A write that extends the file needs nothing more: every
/// replica ends at the largest end, and a read waits for writes at or after its offset.
fn write_range(op: &Op, data: &[u8]) -> Option<(Id, Range)> {
    let block = cairn_brick::CSUM_BLOCK;
    match op {
        Op::Write { id, offset } => Some((*id, Range::blocks(*offset, data.len() as u64, block))),
        // The payload is the compare half then the write half.
        Op::CompareAndWrite { id, offset } => {
            Some((*id, Range::blocks(*offset, data.len() as u64 / 2, block)))
        }
        _ => None,
    }
}

/// What a read at the head locks (shared): a data read everything from its offset on
/// (a write beyond it may extend the file it sees), anything else the whole inode.
fn read_range(op: &Op) -> Range {
    match op {
        Op::Read { offset, .. } => Range::from(*offset),
        _ => Range::WHOLE,
    }
}

/// Leases to recall after a mutation: (id, its directory entries changed).
fn recalls(op: &Op) -> Vec<(Id, bool)> {
    match op {
        Op::Create { dir, .. }
        | Op::Mkdir { dir, .. }
        | Op::MkLinkto { dir, .. }
        | Op::Unlink { dir, .. }
        | Op::Rmdir { dir, .. } => {
            vec![(*dir, true)]
        }
        Op::Link { id, dir, .. } => vec![(*dir, true), (*id, false)],
        Op::Rename { src_dir, dst_dir, .. } => vec![(*src_dir, true), (*dst_dir, true)],
        op => changed_ids(op).into_iter().map(|i| (i, false)).collect(),
    }
}

/// Run one op on a local brick, off the async threads — but for a READ whose data the
/// page cache holds (`Brick::execute_cached`): that one runs right here, since a hop to a
/// blocking thread and back costs more than the read.
pub async fn exec_local(
    slot: &Arc<BrickSlot>,
    creds: Creds,
    op: Op,
    data: Bytes,
    result: Option<Attr>,
    replica: bool,
) -> OpResult {
    if !replica && matches!(op, Op::Read { .. }) {
        if let Some(r) = slot.brick.execute_cached(&creds, &op) {
            return Ok(r);
        }
    }
    let brick = slot.brick.clone();
    let (volume, index) = (slot.volume.clone(), slot.index);
    let name = op.name();
    tokio::task::spawn_blocking(move || {
        let mode = if replica { Exec::Replica { result: result.as_ref() } } else { Exec::Primary };
        brick.execute(&creds, &op, &data, mode)
    })
    .await
    .unwrap_or_else(|e| {
        Err(RemoteError::new(
            Errno::EIO,
            format!("{volume}: brick {index}: {name} task failed: {e}"),
        ))
    })
}

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

fn stale(volume: &str, brick: u32, why: &str) -> RemoteError {
    RemoteError::new(
        Errno::ESTALEMAP,
        format!("{volume}: brick {brick}: {why}; refresh the volume map"),
    )
}

fn result_attr(reply: &Reply) -> Option<Attr> {
    match reply {
        Reply::Attr(a)
        | Reply::Entry { attr: a, linkto: None }
        | Reply::Written { attr: a, .. } => Some(a.clone()),
        _ => None,
    }
}

/// Forward a mutation to brick `target` of the volume (local or remote).
async fn forward(
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

/// How many times a head re-sends a forward the replica refused because its map does not
/// show the head up yet (100 ms, 200 ms, ... apart: 1.5 s in all).
const FORWARD_REFUSED_RETRIES: u32 = 5;

/// Record `ids` as pending for `peer` on this brick, durably, before the client is answered.
async fn mark_pending(slot: &Arc<BrickSlot>, peer: u32, ids: Vec<Id>) {
    let brick = slot.brick.clone();
    let (volume, index) = (slot.volume.clone(), slot.index);
    let r = tokio::task::spawn_blocking(move || -> Result<(), RemoteError> {
        for id in ids {
            brick.pending_add(peer, id)?;
        }
        Ok(())
    })
    .await;
    if !matches!(r, Ok(Ok(()))) {
        tracing::error!(volume, brick = index, peer, "cannot record pending heal entries: {r:?}");
    }
}

/// Record on each brick of `to` that `peer` must re-copy `ids` (so the record survives the
/// brick that made it).
async fn copy_pending(
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

/// An error of the brick's own storage (full, over quota, read-only, failing disk): the same
/// op may well succeed on the set's other bricks, unlike an error of the op itself (EEXIST,
/// ENOENT, EACCES...), which every replica would give.
fn is_storage_error(e: &RemoteError) -> bool {
    matches!(e.errno.0, libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
}

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
async fn mutate(
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

/// Remember that this brick applied request `id` (not acknowledged yet).
fn remember(slot: &BrickSlot, id: Option<ReqId>, reply: &Reply, out: &Bytes) {
    if let Some(id) = id {
        slot.dedupe.lock().record(id, (reply.clone(), out.clone()), false);
    }
}

fn grant_leases(node: &Node, session: &Arc<Session>, volume: &str, op: &Op, reply: &Reply) {
    match (op, reply) {
        (Op::GetAttr { id }, _) => node.leases.grant(volume, *id, session),
        (Op::Lookup { dir, .. }, Reply::Entry { attr, .. }) => {
            node.leases.grant(volume, *dir, session);
            node.leases.grant(volume, attr.id, session);
        }
        (Op::ReadDir { dir, .. }, _) => node.leases.grant(volume, *dir, session),
        // Extended attributes change only by SetXattr/RemoveXattr on `id`, which recall it.
        (Op::GetXattr { id, .. } | Op::ListXattr { id }, _) => {
            node.leases.grant(volume, *id, session)
        }
        (Op::LookupPath { .. }, Reply::Attrs(attrs)) => {
            for a in attrs {
                node.leases.grant(volume, a.id, session);
            }
        }
        _ => {}
    }
}

/// A client's operation on one of this node's bricks. If the brick's copy of the data
/// fails its checksums (`ECORRUPT`), the copy is repaired from a good replica and the
/// operation runs again; the client never gets the bad data, and gets EIO if no replica
/// has a good copy.
pub async fn handle(
    node: &Arc<Node>,
    session: &Arc<Session>,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    let retry = matches!(req.op, Op::Read { .. } | Op::CompareAndWrite { .. })
        .then(|| (req.clone(), data.clone()));
    match serve(node, session, req, data).await {
        Err(e) if e.errno == Errno::ECORRUPT => {
            let Some((req, data)) = retry else {
                return Err(RemoteError::new(Errno::EIO, e.message));
            };
            let id = key_id(&req.op);
            let Some(slot) = node.slot(&req.volume, req.brick) else {
                return Err(RemoteError::new(Errno::EIO, e.message));
            };
            tracing::error!(volume = %req.volume, brick = req.brick, %id, error = %e.message, "corrupt data not served; repairing from a replica");
            if let Err(re) = repair_from_replica(node, &slot, id).await {
                return Err(RemoteError::new(Errno::EIO, format!("{}; {}", e.message, re.message)));
            }
            match serve(node, session, req, data).await {
                Err(e2) if e2.errno == Errno::ECORRUPT => Err(RemoteError::new(
                    Errno::EIO,
                    format!("{} (still after repair)", e2.message),
                )),
                r => r,
            }
        }
        r => r,
    }
}

/// Repair this brick's copy of regular file `id` from an `Up` replica, under this brick's
/// inode lock so no write it heads slips in between. Returns the source brick.
///
/// The replica copies onto this brick the way heal does (`HealSync`, `heal::copy_file`):
/// the checksums of this brick's *data* are compared with the replica's table, and only
/// the blocks that differ are sent, read and verified on the replica in runs of up to
/// 4 MiB. So a flipped bit in a 1 TiB LUN image costs one 4 KiB block, not the file, and
/// a replica whose own copy of a needed block is bad fails the copy (next replica).
pub async fn repair_from_replica(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    id: Id,
) -> Result<u32, RemoteError> {
    let (volume, me) = (slot.volume.clone(), slot.index);
    let map = node
        .map(&volume)
        .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("volume {volume} not found")))?;
    let (set, _) = map
        .brick(me)
        .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("{volume}: no brick {me}")))?;
    let peers: Vec<u32> = set
        .bricks
        .iter()
        .filter(|b| b.index != me && b.state == cairn_proto::map::BrickState::Up)
        .map(|b| b.index)
        .collect();
    let _guard = node.lock_inodes(&volume, me, &[id]).await;
    let mut why = vec![];
    for p in peers {
        // A replica without the file must not be asked to copy: a heal copy of a missing
        // inode removes it on the target.
        let probe = Op::HealSums { id, first: 0, count: 0, from_data: false };
        match crate::heal::brick_call(node, &map, p, probe).await {
            Ok((Reply::Sums(s), _)) if s.kind == Some(FileType::Regular) => {}
            Ok(_) => {
                why.push(format!("brick {p} has no copy"));
                continue;
            }
            Err(e) => {
                why.push(format!("brick {p}: {}", e.message));
                continue;
            }
        }
        match crate::heal::brick_call(node, &map, p, Op::HealSync { id, peer: me }).await {
            Ok(_) => {
                tracing::warn!(volume = %volume, brick = me, %id, source = p, "repaired corrupt data from a replica");
                return Ok(p);
            }
            Err(e) => why.push(format!("brick {p}: {}", e.message)),
        }
    }
    if why.is_empty() {
        why.push("no other brick of the set is up".into());
    }
    Err(RemoteError::new(
        Errno::EIO,
        format!("{volume}: brick {me}: no good copy of {id} to repair from ({})", why.join("; ")),
    ))
}

async fn serve(
    node: &Arc<Node>,
    session: &Arc<Session>,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    // A lookup answers with the file's attributes (and, quick-read, its content) at the
    // directory's head: a file another session holds a write delegation of here is
    // recalled first, and looked up again once it is back (the holder flushed).
    if !matches!(req.op, Op::Lookup { .. }) || node.delegs.is_empty() {
        return serve_op(node, session, req, data).await;
    }
    let again = req.clone();
    let r = serve_op(node, session, req, data).await;
    let found = match &r {
        Ok((Reply::Entry { attr, .. } | Reply::EntryData { attr }, _))
            if attr.kind == cairn_proto::FileType::Regular =>
        {
            attr.id
        }
        _ => return r,
    };
    let getattr = Op::GetAttr { id: found };
    if !node.delegs.conflicts(&again.volume, &getattr, session.id) {
        return r;
    }
    node.delegs.settle(&again.volume, &getattr, session.id).await;
    serve_op(node, session, again, Bytes::new()).await
}

async fn serve_op(
    node: &Arc<Node>,
    session: &Arc<Session>,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    let slot = node.slot(&req.volume, req.brick).ok_or_else(|| {
        stale(&req.volume, req.brick, &format!("not served by node {}", node.name))
    })?;
    // Heal traffic between bricks does not go through the chain.
    match &req.op {
        Op::PendingList { .. }
        | Op::PendingClear { .. }
        | Op::PendingAdd { .. }
        | Op::HealFetch { .. }
        | Op::HealSums { .. } => {
            return exec_local(&slot, Creds::root(), req.op, data, None, false).await;
        }
        Op::HealWrite { .. } => {
            return crate::heal::serve_heal_write(node, &slot, req.op, data).await;
        }
        Op::HealSync { id, peer } => return crate::heal::serve_sync(node, &slot, *id, *peer).await,
        Op::HealApply { .. } => {
            return Err(RemoteError::new(
                Errno::EINVAL,
                "heal_apply is sent as a replicate request",
            ));
        }
        _ => {}
    }
    if slot.healing.load(std::sync::atomic::Ordering::Acquire) {
        return Err(stale(
            &req.volume,
            req.brick,
            "brick is healing and does not serve clients yet",
        ));
    }
    let map = node.map(&req.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not found", req.volume))
    })?;
    if let Op::Open { id } = &req.op {
        node.note_open(session.id, &req.volume, req.brick, *id);
    }
    if let Op::Release { id } = &req.op {
        node.note_release(session.id, &req.volume, req.brick, *id);
    }
    // A conflicting delegation of another session is recalled and given back (or revoked)
    // before the op takes any lock: the holder flushes through this head meanwhile.
    node.delegs.settle(&req.volume, &req.op, session.id).await;
    if req.op.is_mutation() {
        if let Some(r) = req.req {
            node.leases.note_client(r.client, session.id);
        }
        if let Op::CopyRange { .. } = req.op {
            return copy_range(node, session, &slot, &map, req).await;
        }
        return mutate(node, session, &slot, &map, req, data).await;
    }
    let (set, _) = map
        .brick(req.brick)
        .ok_or_else(|| stale(&req.volume, req.brick, "not in the volume map"))?;
    let key = key_id(&req.op);
    if !matches!(req.op, Op::StatFs | Op::LookupPath { .. }) {
        match cairn_placement::head(set, key) {
            Some(h) if h.index == req.brick => {}
            Some(h) => {
                return Err(stale(
                    &req.volume,
                    req.brick,
                    &format!("not the chain head of {key} (brick {} is)", h.index),
                ))
            }
            // As in `mutate`: this brick serves, so the map is behind; retried by clients.
            None => {
                return Err(stale(
                    &req.volume,
                    req.brick,
                    &format!("this node's map has no brick of replica set {} up yet", set.id),
                ))
            }
        }
    }
    match &req.op {
        Op::SetLock { id, lock, wait } => {
            let s = session.clone();
            node.locks
                .set(&req.volume, *id, session.id, lock, *wait, move || s.is_closed())
                .await?;
            Ok((Reply::Unit, Bytes::new()))
        }
        Op::GetLock { id, lock } => {
            Ok((Reply::Lock(node.locks.get(&req.volume, *id, session.id, lock)), Bytes::new()))
        }
        Op::Share { id, owner, access, deny } => {
            node.shares.set(&req.volume, *id, session.id, *owner, *access, *deny)?;
            Ok((Reply::Unit, Bytes::new()))
        }
        Op::Delegate { id, write } => {
            // A write delegation's client may lock locally: none while another session
            // holds a lock of the file (a read one: none while it holds a write lock).
            if node.locks.held_by_others(&req.volume, *id, session.id, !*write) {
                return Err(RemoteError::new(
                    Errno::EAGAIN,
                    format!("{}: {id} is locked by another client: no delegation", req.volume),
                ));
            }
            node.delegs.grant(&req.volume, *id, *write, session)?;
            Ok((Reply::Unit, Bytes::new()))
        }
        Op::DelegReturn { id } => {
            node.delegs.give_back(&req.volume, *id, session.id);
            Ok((Reply::Unit, Bytes::new()))
        }
        _ => {
            let _read = node.read_lock(&req.volume, req.brick, key, read_range(&req.op)).await;
            // Checked again after the wait: a read queued behind a write of a head that
            // was fenced meanwhile must not return what that write left here unacknowledged
            // (the node may even hold a new lease by now, with its bricks catching up).
            if !node.lease_alive() {
                return Err(stale(&req.volume, req.brick, "node is fenced (lease not renewed)"));
            }
            if slot.healing.load(std::sync::atomic::Ordering::Acquire) {
                return Err(stale(&req.volume, req.brick, "catching up with its peers"));
            }
            // Quick-read: the lookup and, if the file is small and its lock free, its
            // content, in one blocking task.
            if let (Op::Lookup { .. }, true) = (&req.op, req.inline > 0) {
                match lookup_inline(node, session, &slot, &req, _read).await {
                    Inline::Done(r) => return r,
                    Inline::Later(id, r) => {
                        if let Some(got) = inline_read(node, session, &slot, &req, id).await {
                            return Ok(got);
                        }
                        return r;
                    }
                }
            }
            let r = exec_local(&slot, req.creds.clone(), req.op.clone(), data, None, false).await;
            match (&r, &req.op) {
                (Ok((reply, _)), op) => grant_leases(node, session, &req.volume, op, reply),
                // "no such attribute" is an answer a client may cache too
                (Err(e), Op::GetXattr { id, .. }) if e.errno == Errno::ENODATA => {
                    node.leases.grant(&req.volume, *id, session)
                }
                _ => {}
            }
            r
        }
    }
}

/// A server-side copy ([`Op::CopyRange`]) at the chain head of `dst`: read `src` on the
/// bricks ([`copy_source`]), then write those bytes to `dst` exactly as a client's `Write`
/// of them would be: range locked, applied here and forwarded down the chain, recorded for
/// the bricks that miss it, deduplicated by the request id. So every replica gets the very
/// bytes the head wrote (a replica re-reading its own copy of `src` could read it at
/// another moment of a concurrent write and end different), and the client none of them.
async fn copy_range(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<BrickSlot>,
    map: &VolumeMap,
    req: BrickRequest,
) -> OpResult {
    let Op::CopyRange { src, src_offset, dst, dst_offset, len } = req.op else {
        return Err(RemoteError::new(Errno::EINVAL, "copy_range: not a copy"));
    };
    let volume = req.volume.clone();
    let what =
        format!("{volume}: copy_range {src} at {src_offset} to {dst} at {dst_offset}, {len} bytes");
    let fits = |off: u64| off.checked_add(len as u64).is_some_and(|e| e <= i64::MAX as u64);
    if !fits(src_offset) {
        return Err(RemoteError::new(
            Errno::EINVAL,
            format!("{what}: past the largest file offset"),
        ));
    }
    if !fits(dst_offset) {
        return Err(RemoteError::new(
            Errno::EFBIG,
            format!("{what}: past the largest file offset"),
        ));
    }
    let (set, _) =
        map.brick(req.brick).ok_or_else(|| stale(&volume, req.brick, "not in the volume map"))?;
    match cairn_placement::head(set, dst) {
        Some(h) if h.index == req.brick => {}
        Some(h) => {
            return Err(stale(
                &volume,
                req.brick,
                &format!("not the chain head of {dst} (brick {} is)", h.index),
            ))
        }
        None => {
            return Err(stale(
                &volume,
                req.brick,
                &format!("this node's map has no brick of replica set {} up yet", set.id),
            ))
        }
    }
    let data = copy_source(node, slot, map, &req.creds, src, src_offset, len, &what).await?;
    if data.is_empty() {
        // At or past the end of `src`: nothing to write (a write of nothing would still
        // change `dst`'s times); `dst`'s attributes, as a write answers.
        let op = Op::GetAttr { id: dst };
        return match exec_local(slot, req.creds.clone(), op, Bytes::new(), None, false).await? {
            (Reply::Attr(attr), _) => Ok((Reply::Written { count: 0, attr }, Bytes::new())),
            (other, _) => Err(RemoteError::new(
                Errno::EIO,
                format!("{what}: unexpected getattr reply {other:?}"),
            )),
        };
    }
    let write = BrickRequest { op: Op::Write { id: dst, offset: dst_offset }, ..req };
    mutate(node, session, slot, map, write, data).await
}

/// How long a copy's head waits for the bytes of a source on another node.
const COPY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The bytes a copy reads from `src`, with the caller's read permission, on the bricks:
///
/// - `src` in the replica set of `dst` (whose head `slot` is): this brick's own copy,
///   under a shared lock of the range. Any brick of the set that is up holds every
///   acknowledged write of `src` (a replica that misses one is marked stale before the
///   writer hears "done"), so this head may read it even where another brick heads `src`.
/// - another replica set: a READ at the chain head of `src`, on this node or over the
///   brick network (a cluster member's request, so it passes `auth.allow`).
///
/// A permission or argument error is the caller's; any other failure (the source's set has
/// no head up, its copy fails its checksums, a timeout, a stale map) is `EXDEV`: the client
/// then copies by READ and WRITE, which refreshes maps, retries and repairs as it reads.
#[allow(clippy::too_many_arguments)]
async fn copy_source(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    map: &VolumeMap,
    creds: &Creds,
    src: Id,
    offset: u64,
    len: u32,
    what: &str,
) -> Result<Bytes, RemoteError> {
    let volume = &map.name;
    let op = Op::Read { id: src, offset, len };
    let own = map.brick(slot.index).map(|(s, _)| s.id);
    let src_set = cairn_placement::home_set(map, src);
    let r = if own == Some(src_set.id) {
        let _read = node.read_lock(volume, slot.index, src, Range::from(offset)).await;
        if !node.lease_alive() {
            return Err(stale(volume, slot.index, "node is fenced (lease not renewed)"));
        }
        if slot.healing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(stale(volume, slot.index, "catching up with its peers"));
        }
        exec_local(slot, creds.clone(), op, Bytes::new(), None, false).await
    } else {
        match cairn_placement::head(src_set, src) {
            None => Err(RemoteError::new(
                Errno::ENOTCONN,
                format!("{volume}: replica set {} has no brick up", src_set.id),
            )),
            Some(h) => match node.slot(volume, h.index) {
                Some(other) => {
                    let _read = node.read_lock(volume, h.index, src, Range::from(offset)).await;
                    if !node.lease_alive()
                        || other.healing.load(std::sync::atomic::Ordering::Acquire)
                    {
                        Err(stale(volume, h.index, "fenced or catching up with its peers"))
                    } else {
                        exec_local(&other, creds.clone(), op, Bytes::new(), None, false).await
                    }
                }
                None => {
                    let req = BrickRequest {
                        volume: volume.clone(),
                        brick: h.index,
                        epoch: map.epoch,
                        creds: creds.clone(),
                        op,
                        req: None,
                        parents: false,
                        inline: 0,
                    };
                    let call =
                        node.peers.call(&h.addr, &node.name, Request::Brick(req), Bytes::new());
                    match tokio::time::timeout(COPY_READ_TIMEOUT, call).await {
                        Ok(r) => r,
                        Err(_) => Err(RemoteError::new(
                            Errno::ETIMEDOUT,
                            format!(
                                "brick {} at {} did not answer within {COPY_READ_TIMEOUT:?}",
                                h.index, h.addr
                            ),
                        )),
                    }
                }
            },
        }
    };
    match r {
        Ok((Reply::Data { .. }, data)) => Ok(data),
        Ok((other, _)) => {
            Err(RemoteError::new(Errno::EIO, format!("{what}: unexpected read reply {other:?}")))
        }
        Err(e)
            if [Errno(libc::EACCES), Errno(libc::EPERM), Errno(libc::EISDIR), Errno::EINVAL]
                .contains(&e.errno) =>
        {
            Err(RemoteError::new(e.errno, format!("{what}: {}", e.message)))
        }
        Err(e) => Err(RemoteError::new(
            Errno::EXDEV,
            format!(
                "{what}: source not read on the bricks ({}); copy by read and write",
                e.message
            ),
        )),
    }
}

/// What [`lookup_inline`] did.
enum Inline {
    /// The answer: the lookup's (with the file's content, if it came inline), or its error.
    Done(OpResult),
    /// Regular file `id` is small enough, but its lock was not free: read it with
    /// [`inline_read`], which waits for the lock (not under the directory's); else answer
    /// the lookup's result.
    Later(Id, OpResult),
}

/// A lookup asked with [`BrickRequest::inline`], holding `dir_lock` (the directory's read
/// lock): the lookup, the leases it grants, and for a small regular file, its attributes
/// and content under the file's read lock — all in one blocking task (one hop off the
/// async threads instead of two). The file's lock is only tried while the directory's is
/// held (a mutation holding the file's lock, rename or unlink, may be waiting for the
/// directory's); the directory's is dropped before the file is read.
async fn lookup_inline(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<BrickSlot>,
    req: &BrickRequest,
    dir_lock: crate::inode_locks::InodeGuard,
) -> Inline {
    let (node2, session2, slot2) = (node.clone(), session.clone(), slot.clone());
    let (volume, creds, op, max) =
        (req.volume.clone(), req.creds.clone(), req.op.clone(), inline_max(req.inline));
    let brick_index = req.brick;
    let name = op.name();
    let got = tokio::task::spawn_blocking(move || {
        let (node, session, slot) = (node2, session2, slot2);
        let brick = &slot.brick;
        let r = brick.execute(&creds, &op, &[], Exec::Primary);
        let attr = match &r {
            Ok((reply, _)) => {
                grant_leases(&node, &session, &volume, &op, reply);
                match reply {
                    Reply::Entry { attr, linkto: None }
                        if attr.kind == FileType::Regular && attr.size <= max =>
                    {
                        attr.clone()
                    }
                    _ => return Inline::Done(r),
                }
            }
            Err(_) => return Inline::Done(r),
        };
        let id = attr.id;
        if let Op::Lookup { dir, name } = &op {
            brick.open_found(*dir, name, id);
        }
        let Some(_file) = node.try_lock_range(&volume, brick_index, id, Range::WHOLE, Mode::Shared)
        else {
            return Inline::Later(id, r);
        };
        drop(dir_lock);
        if !node.lease_alive() || slot.healing.load(std::sync::atomic::Ordering::Acquire) {
            return Inline::Done(r);
        }
        node.leases.grant(&volume, id, &session);
        Inline::Done(Ok(read_whole(brick, &creds, id, max).unwrap_or_else(|| {
            // Grew past the limit, not readable by the caller, or the read failed (a later
            // READ reports or repairs it): the plain lookup answer.
            r.expect("checked Ok above")
        })))
    })
    .await;
    got.unwrap_or_else(|e| {
        Inline::Done(Err(RemoteError::new(
            Errno::EIO,
            format!("{}: brick {}: {name} task failed: {e}", req.volume, req.brick),
        )))
    })
}

/// The attributes and whole content of regular file `id` if it is at most `max` bytes
/// (its read lock held), as a quick-read answer.
fn read_whole(
    brick: &cairn_brick::Brick,
    creds: &Creds,
    id: Id,
    max: u64,
) -> Option<(Reply, Bytes)> {
    let attr = match brick.execute(creds, &Op::GetAttr { id }, &[], Exec::Primary) {
        Ok((Reply::Attr(a), _)) if a.kind == FileType::Regular && a.size <= max => a,
        _ => return None,
    };
    let read = Op::Read { id, offset: 0, len: attr.size as u32 };
    match brick.execute(creds, &read, &[], Exec::Primary) {
        Ok((Reply::Data { .. }, data)) if data.len() as u64 == attr.size => {
            Some((Reply::EntryData { attr }, data))
        }
        _ => None,
    }
}

/// Largest file a lookup sends inline, whatever the client asks ([`BrickRequest::inline`]).
const INLINE_MAX: u32 = 1 << 20;

fn inline_max(asked: u32) -> u64 {
    asked.min(INLINE_MAX) as u64
}

/// Quick-read of file `id` for a lookup asked with [`BrickRequest::inline`]: its attributes
/// and whole content, read together under the inode's read lock (no write of it lands in
/// between) and after granting the caller a lease on it, so a change made after the read
/// recalls what the client caches. `None` (answer the plain lookup) if the file grew past
/// the limit meanwhile, the caller may not read it, or the read fails (a later READ
/// reports or repairs it).
async fn inline_read(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<BrickSlot>,
    req: &BrickRequest,
    id: Id,
) -> Option<(Reply, Bytes)> {
    let _read = node.read_lock(&req.volume, req.brick, id, Range::WHOLE).await;
    if !node.lease_alive() || slot.healing.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    node.leases.grant(&req.volume, id, session);
    let (brick, creds, max) = (slot.brick.clone(), req.creds.clone(), inline_max(req.inline));
    let got = tokio::task::spawn_blocking(move || read_whole(&brick, &creds, id, max)).await;
    got.ok().flatten()
}

/// A mutation forwarded by the head of a chain.
pub async fn replicate(node: &Arc<Node>, req: ReplicateRequest, data: Bytes) -> OpResult {
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
            let is_heal = matches!(req.op, Op::HealApply { .. });
            // What this brick must re-copy if it cannot apply the op: what it changes, and
            // for a rename the inode the head moved.
            let mut owed = touched.clone();
            if let (Op::Rename { .. }, Some(a)) = (&req.op, &req.result) {
                owed.push(a.id);
            }
            let out = match exec_local(&slot, req.creds, req.op, data, req.result, true).await {
                Ok(out) => out,
                Err(e) => {
                    if !is_heal {
                        // Recorded here too, before the head hears of it: a catch-up under
                        // way on this brick then copies these inodes before it comes up.
                        mark_pending(&slot, slot.index, owed).await;
                        crate::heal::missed_forward(node, &slot, &e);
                    }
                    return Err(e);
                }
            };
            remember(&slot, id, &out.0, &out.1);
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
        mark_pending(&slot, peer, ids).await;
    }
    if let Some(dst_dir) = moved_into {
        recall_moved_into(node, &volume, brick, dst_dir, req_id).await;
    }
    Ok(out)
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
        };
        let _ = forward(node, &map, b.index, req, Bytes::new()).await;
    }
}
