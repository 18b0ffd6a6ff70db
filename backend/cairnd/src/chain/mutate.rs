//! A mutation at its chain head: the checks (head, lease, quorum, read-only), the inode or
//! range locks, the retry check (dedupe), then the apply (`apply.rs`) and what its outcome
//! asks for (`settle.rs`).

use super::apply::Write;
use crate::exec::{exec_local, stale, OpResult};
use crate::node::{BrickSlot, Node};
use crate::ops::{changed_ids, key_id, write_range};
use bytes::Bytes;
use cairn_proto::map::{ReplicaSet, VolumeMap};
use cairn_proto::msg::{BrickRequest, Op, ReplicateRequest, Reply};
use cairn_proto::rpc::Session;
use cairn_proto::{Creds, Errno, Id, RemoteError};
use cairn_replication::dedupe::Dup;
use cairn_replication::range_lock::Mode;
use cairn_replication::ChainPlan;
use std::sync::Arc;

/// Apply a mutation at the head and replicate it.
pub(super) async fn mutate(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<BrickSlot>,
    map: &VolumeMap,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    let plan = admit(node, map, &req)?;
    let changed = changed_inodes(slot, &req.op).await;
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
    let rreq = ReplicateRequest {
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
        applied: vec![],
    };
    let mut w = Write { node, slot, map, req: &req, data, rreq, plan, changed };
    let applied = w.apply(done).await;
    w.settle(session, applied, guards).await
}

/// The checks before a mutation takes any lock: this brick heads the key inode in a map
/// with a brick of the set up, its node holds its lease, and the volume's quorum and
/// read-only options allow writes. Returns the chain plan.
fn admit(node: &Node, map: &VolumeMap, req: &BrickRequest) -> Result<ChainPlan, RemoteError> {
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
    routed_by_layout(map, set, req)?;
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
        writable(map, set, &req.volume)?;
    }
    Ok(plan)
}

/// The one layout check of the admission path: an op that puts a name in a directory
/// ([`Op::makes_name`]: create, mknod, symlink, mkdir, link, a linkto, rename's
/// destination) routed by a layout older than this head's is refused (ESTALEMAP), so a
/// client that has not received an add-brick's map yet refreshes it and routes the op
/// again (a mkdir then reaches the new sets, a link's or rename's linkto goes to the set
/// the name hashes to now), instead of putting the name where lookups by the new layout
/// do not look. The name of a `Create` or a linkto must also hash to this set (the check for clients that
/// do not send their layout epoch, and for a head that is ahead of the client's push).
fn routed_by_layout(
    map: &VolumeMap,
    set: &ReplicaSet,
    req: &BrickRequest,
) -> Result<(), RemoteError> {
    if !req.op.makes_name() {
        return Ok(());
    }
    if let Some(e) = req.layout_epoch.filter(|e| *e < map.layout_epoch) {
        return Err(stale(
            &req.volume,
            req.brick,
            &format!(
                "{} routed by layout epoch {e}, the volume's layout is at epoch {}",
                req.op.name(),
                map.layout_epoch
            ),
        ));
    }
    if let Op::Create { dir, name, .. } | Op::MkLinkto { dir, name, .. } = &req.op {
        let hashed = cairn_placement::hashed_set(map, *dir, name).id;
        if hashed != set.id {
            return Err(stale(
                &req.volume,
                req.brick,
                &format!(
                    "{} in {dir} hashes to replica set {hashed} in layout epoch {}, not {}",
                    String::from_utf8_lossy(name),
                    map.layout_epoch,
                    set.id
                ),
            ));
        }
    }
    Ok(())
}

/// The volume's write quorum (`cluster.quorum-type`) and `features.read-only`.
fn writable(map: &VolumeMap, set: &ReplicaSet, volume: &str) -> Result<(), RemoteError> {
    let quorum = cairn_replication::Quorum::from_options(
        map.option("cluster.quorum-type"),
        map.option("cluster.quorum-count"),
    );
    if let Err(why) = quorum.check(set) {
        return Err(RemoteError::new(
            Errno::EROFS,
            format!("{volume}: replica set {}: {why} (cluster.quorum-type)", set.id),
        ));
    }
    if map.option("features.read-only") == Some("on") {
        return Err(RemoteError::new(
            Errno::EROFS,
            format!("{volume}: volume is read-only (features.read-only)"),
        ));
    }
    Ok(())
}

/// The inodes a mutation changes (locked, and recorded for the bricks that miss it): for
/// a rename also the moved inode and a replaced one, so a brick that misses the rename
/// re-copies them, not just the two directories.
async fn changed_inodes(slot: &Arc<BrickSlot>, op: &Op) -> Vec<Id> {
    let mut changed = changed_ids(op);
    if let Op::Rename { src_dir, src_name, dst_dir, dst_name, .. } = op {
        for (dir, name) in [(src_dir, src_name), (dst_dir, dst_name)] {
            let look = Op::Lookup { dir: *dir, name: name.clone() };
            if let Ok((Reply::Entry { attr, .. }, _)) =
                exec_local(slot, Creds::root(), look, Bytes::new(), None, false).await
            {
                changed.push(attr.id);
            }
        }
    }
    changed
}
