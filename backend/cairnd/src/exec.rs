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
    blocking(slot, op.name(), move || {
        let mode = if replica { Exec::Replica { result: result.as_ref() } } else { Exec::Primary };
        brick.execute(&creds, &op, &data, mode)
    })
    .await
}

/// Run `f` (brick I/O) on a blocking thread. A task that panicked or was cancelled is
/// `EIO` naming the volume, the brick and `what`: the one mapping of a failed blocking
/// task in cairnd.
pub async fn blocking<T, F>(slot: &BrickSlot, what: &str, f: F) -> Result<T, RemoteError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, RemoteError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(RemoteError::new(
            Errno::EIO,
            format!("{}: brick {}: {what} task failed: {e}", slot.volume, slot.index),
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

/// Record `ids` as pending for `peer` on this brick, durably (fsynced), before the client
/// is answered. An error names the brick, the peer and the id (the brick store's
/// context): the caller decides (a head does not acknowledge the write, see
/// `cairn_replication::ack`; a replica logs it, the head's record being the one that
/// counts).
pub(crate) async fn mark_pending(
    slot: &Arc<BrickSlot>,
    peer: u32,
    ids: Vec<Id>,
) -> Result<(), RemoteError> {
    let brick = slot.brick.clone();
    blocking(slot, "pending_add", move || {
        ids.into_iter().try_for_each(|id| brick.pending_add(peer, id))
    })
    .await
}
