//! The source side of a heal copy: serving `HealSync` (a whole inode, or a regular file in
//! ranges) and the target side's `HealWrite` with its bandwidth accounting.

use super::bandwidth;
use crate::exec::{blocking, exec_local, OpResult};
use crate::node::{BrickSlot, Node};
use crate::peers::{adopt, applied_to};
use bytes::Bytes;
use cairn_brick::{heal_diff, CSUM_BLOCK as BLOCK};
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::{
    AppliedRequest, HealState, HealSums, Op, ReplicateRequest, Reply, Request, HEAL_SUMS_MAX,
};
use cairn_proto::{Creds, Errno, FileType, Id, RemoteError};
use std::sync::Arc;
use std::time::Duration;

/// Serve a HEAL_SYNC: copy `id` from this brick (its chain head) onto brick `peer`.
///
/// A regular file is copied in ranges (`copy_file`); anything else whole, in one
/// `HealApply` taken under the inode lock.
pub async fn serve_sync(node: &Arc<Node>, slot: &Arc<BrickSlot>, id: Id, peer: u32) -> OpResult {
    let map = node.map(&slot.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not found", slot.volume))
    })?;
    let guard = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let mut state = match meta(slot, id).await {
        Ok(s) => s,
        // Gone here too: the directory heal removes its names.
        Err(e) if e.errno == Errno::ENOENT => return Ok((Reply::Unit, Bytes::new())),
        Err(e) => return Err(e),
    };
    let Some(attr) = state.attr.clone() else {
        // Gone: the directory heal removes its names.
        return apply(node, &map, slot, peer, state, Bytes::new(), vec![]).await;
    };
    if attr.nlink == 0 {
        // Open but unlinked here: it has no name to heal under and lives only until its
        // last release.
        return Ok((Reply::Unit, Bytes::new()));
    }
    if attr.kind == FileType::Regular {
        drop(guard);
        return copy_file(node, &map, slot, id, peer).await;
    }
    state.pending_for = slot.brick.pending_peers(id).into_iter().filter(|&p| p != peer).collect();
    let applied = applied_to(slot, id);
    apply(node, &map, slot, peer, state, Bytes::new(), applied).await
}

/// Checksum blocks (4 KiB) a `HealWrite` carries at most (4 MiB, well under a frame's
/// data).
const RANGE_BLOCKS: u64 = (4 << 20) / BLOCK;

/// Copy regular file `id` from this brick onto brick `peer`, in ranges:
/// 1. under the inode lock, a `HealApply` without data gives the target the inode's kind,
///    size and metadata;
/// 2. without the lock, the two checksum tables are compared (`HealSums`, 256 MiB of file
///    at a time, skipping what is a hole on both sides) and the blocks that differ (or are
///    unknown on either side) listed;
/// 3. each run of them (up to 4 MiB) is copied under the inode lock, from the source as
///    it is *then* (entries read again: a block of zeros is punched, not sent), by a
///    `HealWrite`; the lock is released (and the pause `cluster.heal-bandwidth` asks for
///    taken) between runs;
/// 4. under the lock, a last `HealApply` without data sets the size and metadata (and
///    the pending records the source holds for others).
///
/// Why that is enough: every write the source heads locks a range of the same inode (the
/// heal's whole-inode lock waits for it and keeps it out) and is forwarded to the target (a healing brick gets forwards) before the lock is released.
/// A write that lands after a run was copied reaches the target by its forward; one that
/// lands before is in the data the run reads. A block compared equal and then written is
/// written on both. So no run can carry data older than what the target already has.
/// A crash anywhere leaves the pending record (cleared only after this returns) or the
/// full-heal request, so the copy is done again.
async fn copy_file(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    id: Id,
    peer: u32,
) -> OpResult {
    let size = {
        let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
        let mut state = meta(slot, id).await?;
        if state.attr.is_none() {
            return apply(node, map, slot, peer, state, Bytes::new(), vec![]).await;
        }
        state.pending_for = vec![];
        let size = state.data_len;
        apply(node, map, slot, peer, state, Bytes::new(), vec![]).await?;
        size
    };
    let nb = size.div_ceil(BLOCK);
    let mut first = 0;
    let mut wait = Duration::ZERO;
    while first < nb {
        let count = (nb - first).min(HEAL_SUMS_MAX as u64) as u32;
        // Ours from the table (our data is verified as each range is read); the target's
        // from its data, so a block that rotted there differs.
        let op = Op::HealSums { id, first, count, from_data: false };
        let mine = sums(exec_local(slot, Creds::root(), op, Bytes::new(), None, false).await)?;
        let op = Op::HealSums { id, first, count, from_data: true };
        let theirs = sums(target_call(node, map, slot, peer, op, Bytes::new()).await)?;
        if theirs.kind != Some(FileType::Regular) {
            return Err(RemoteError::new(
                Errno::EAGAIN,
                format!("{}: brick {peer}: {id} is no longer a regular file there", map.name),
            ));
        }
        let runs = heal_diff(first, &mine.entries, &theirs.entries, RANGE_BLOCKS);
        for (a, b) in runs {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            wait = copy_range(node, map, slot, id, peer, a, b).await?;
        }
        first += count as u64;
        // Blocks that are holes on both sides are zeros on both: skip to the next data
        // either side has (a write landing there meanwhile is forwarded, as above).
        if let (Some(a), Some(b)) = (mine.next, theirs.next) {
            first = first.max(a.min(b));
        }
    }
    let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let mut state = meta(slot, id).await?;
    state.pending_for = slot.brick.pending_peers(id).into_iter().filter(|&p| p != peer).collect();
    let applied = applied_to(slot, id);
    let r = apply(node, map, slot, peer, state, Bytes::new(), applied).await;
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    r
}

/// Copy blocks `[a, b)` of `id` onto brick `peer` under the inode lock, as they are now.
/// Returns the pause the target asks for.
async fn copy_range(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    id: Id,
    peer: u32,
    a: u64,
    b: u64,
) -> Result<Duration, RemoteError> {
    let _g = node.lock_inodes(&slot.volume, slot.index, &[id]).await;
    let brick = slot.brick.clone();
    let (extents, data) =
        blocking(slot, "heal_extents", move || brick.heal_extents(id, a, b)).await?;
    if extents.is_empty() {
        return Ok(Duration::ZERO);
    }
    let op = Op::HealWrite { id, extents };
    match target_call(node, map, slot, peer, op, Bytes::from(data)).await? {
        (Reply::HealWritten { wait_ms, .. }, _) => Ok(Duration::from_millis(wait_ms)),
        (other, _) => Err(RemoteError::new(
            Errno::EPROTO,
            format!("{}: brick {peer}: heal_write {id}: unexpected reply {other:?}", map.name),
        )),
    }
}

/// The state of `id` on this brick (regular file data left out), as `HealFetch` gives it.
async fn meta(slot: &Arc<BrickSlot>, id: Id) -> Result<Box<HealState>, RemoteError> {
    let brick = slot.brick.clone();
    blocking(slot, "heal_meta", move || brick.heal_meta(id).map(Box::new)).await
}

fn sums(r: OpResult) -> Result<Box<HealSums>, RemoteError> {
    match r? {
        (Reply::Sums(s), _) => Ok(s),
        (other, _) => {
            Err(RemoteError::new(Errno::EPROTO, format!("heal_sums: unexpected reply {other:?}")))
        }
    }
}

/// Send a heal op (not a HealApply) to brick `peer`, local or remote.
async fn target_call(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    peer: u32,
    op: Op,
    data: Bytes,
) -> OpResult {
    if let (Some(target), Op::HealWrite { .. }) = (node.slot(&slot.volume, peer), &op) {
        return serve_heal_write(node, &target, op, data).await;
    }
    crate::peers::call(node, map, peer, op, data).await
}

/// Send a HealApply of `state` (and whole `data`) to brick `peer`: as a replicate request
/// when remote, so the pending records it carries are taken there, with `applied`, the
/// request-id records of what the copy holds (`peers::applied_to`, read under the same
/// inode lock as `state`): the target takes them once the copy is applied.
async fn apply(
    node: &Arc<Node>,
    map: &VolumeMap,
    slot: &Arc<BrickSlot>,
    peer: u32,
    state: Box<HealState>,
    data: Bytes,
    applied: Vec<AppliedRequest>,
) -> OpResult {
    let inode = state.attr.as_ref().map(|a| a.id);
    let req = ReplicateRequest {
        volume: slot.volume.clone(),
        brick: peer,
        epoch: map.epoch,
        from_brick: slot.index,
        creds: Creds::root(),
        op: Op::HealApply { state },
        result: None,
        missed: vec![],
        req: None,
        confirm: false,
        applied,
    };
    if let Some(target) = node.slot(&slot.volume, peer) {
        exec_local(&target, Creds::root(), req.op, data, None, true).await?;
        if let Some(inode) = inode {
            adopt(&target, inode, req.applied);
        }
    } else {
        let (_, b) = map.brick(peer).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("{}: no brick {peer}", map.name))
        })?;
        node.peers.call(&b.addr.clone(), &node.name, Request::Replicate(req), data).await?;
    }
    Ok((Reply::Unit, Bytes::new()))
}

/// Serve a HEAL_WRITE on this brick (the target of a chunked copy): apply it, count the
/// bytes in the running crawl's statistics and charge them to `cluster.heal-bandwidth`;
/// the reply tells the source how long to pause (it pauses with the inode lock released).
pub async fn serve_heal_write(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    op: Op,
    data: Bytes,
) -> OpResult {
    let bytes = match exec_local(slot, Creds::root(), op, data, None, false).await? {
        (Reply::HealWritten { bytes, .. }, _) => bytes,
        (other, _) => {
            return Err(RemoteError::new(
                Errno::EIO,
                format!(
                    "volume {} brick {}: heal write answered {other:?}, not HealWritten",
                    slot.volume, slot.index
                ),
            ))
        }
    };
    let rate = node.map(&slot.volume).map(|m| bandwidth(&m)).unwrap_or(0);
    let wait = {
        let mut st = slot.heal.lock();
        let (wait, added) =
            if rate == 0 || bytes == 0 { Default::default() } else { st.take(rate, bytes) };
        if let Some(c) = st.current.as_mut() {
            c.bytes += bytes;
            c.bandwidth = rate;
            c.throttled_ms += added.as_millis() as u64;
        }
        wait
    };
    Ok((Reply::HealWritten { bytes, wait_ms: wait.as_millis() as u64 }, Bytes::new()))
}
