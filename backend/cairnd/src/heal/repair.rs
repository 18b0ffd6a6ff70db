//! Repair of a corrupt copy from a replica (a read that failed its checksums, the scrubber).

use super::brick_call;
use crate::node::{BrickSlot, Node};
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Errno, FileType, Id, RemoteError};
use std::sync::Arc;

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
        match brick_call(node, &map, p, probe).await {
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
        match brick_call(node, &map, p, Op::HealSync { id, peer: me }).await {
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
