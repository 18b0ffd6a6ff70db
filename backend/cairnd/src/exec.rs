//! Running an op on one of this node's bricks, and the small helpers every path that does
//! (the chain head, a replica applying a forward, heal) shares: the blocking-task hop and
//! its failure mapping, the errors a stale map or a failing disk give, and the durable
//! pending records.

use crate::node::BrickSlot;
use bytes::Bytes;
use cairn_brick::Exec;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Attr, Creds, Errno, Id, RemoteError};
use std::sync::Arc;

pub type OpResult = Result<(Reply, Bytes), RemoteError>;

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

pub(crate) fn stale(volume: &str, brick: u32, why: &str) -> RemoteError {
    RemoteError::new(
        Errno::ESTALEMAP,
        format!("{volume}: brick {brick}: {why}; refresh the volume map"),
    )
}

pub(crate) fn result_attr(reply: &Reply) -> Option<Attr> {
    match reply {
        Reply::Attr(a)
        | Reply::Entry { attr: a, linkto: None }
        | Reply::Written { attr: a, .. } => Some(a.clone()),
        _ => None,
    }
}

/// An error of the brick's own storage (full, over quota, read-only, failing disk): the same
/// op may well succeed on the set's other bricks, unlike an error of the op itself (EEXIST,
/// ENOENT, EACCES...), which every replica would give.
pub(crate) fn is_storage_error(e: &RemoteError) -> bool {
    matches!(e.errno.0, libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EIO)
}

/// Record `ids` as pending for `peer` on this brick, durably, before the client is answered.
pub(crate) async fn mark_pending(slot: &Arc<BrickSlot>, peer: u32, ids: Vec<Id>) {
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
