//! What an op touches, decided from the op alone: the inode whose chain it belongs to, the
//! inodes a mutation changes, the byte ranges a write or a read locks at the head, and the
//! leases a mutation recalls.

use cairn_proto::msg::Op;
use cairn_proto::Id;
use cairn_replication::range_lock::Range;

/// The inode whose chain (head, lock, lease) an operation belongs to.
pub fn key_id(op: &Op) -> Id {
    match op {
        Op::Lookup { dir, .. }
        | Op::Create { dir, .. }
        | Op::Mkdir { dir, .. }
        | Op::MkLinkto { dir, .. }
        | Op::Link { dir, .. }
        | Op::Unlink { dir, .. }
        | Op::UnlinkLinkto { dir, .. }
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
        | Op::GetXattrs { id }
        | Op::RemoveXattr { id, .. }
        | Op::SetLock { id, .. }
        | Op::GetLock { id, .. }
        | Op::Share { id, .. }
        | Op::HealFetch { id }
        | Op::HealSums { id, .. }
        | Op::HealWrite { id, .. }
        | Op::HealSync { id, .. }
        | Op::Delegate { id, .. }
        | Op::DelegReturn { id }
        | Op::MigrateMark { id, .. }
        | Op::MigrateIn { id, .. }
        | Op::MigrateOut { id, .. }
        | Op::MigrateDrop { id }
        | Op::MigrateStub { id, .. } => *id,
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
        Op::MkLinkto { dir, .. }
        | Op::Unlink { dir, .. }
        | Op::UnlinkLinkto { dir, .. }
        | Op::Rmdir { dir, .. } => vec![*dir],
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
        Op::MigrateMark { id, .. }
        | Op::MigrateIn { id, .. }
        | Op::MigrateDrop { id }
        | Op::MigrateStub { id, .. } => {
            vec![*id]
        }
        Op::MigrateOut { dir, id, .. } => vec![*dir, *id],
        _ => vec![],
    }
}

/// The inode whose attributes (or extended attributes) a mutation's reply tells the
/// session that made it, which that session may cache under a lease of its own
/// (`chain/settle.rs`): the one a create or mkdir made, or a link, setattr, write or
/// xattr change changed. A namespace op's directories are not: their copies in the reply
/// are one set's, and the client holds them under the leases its getattr took.
pub(crate) fn lease_on_change(op: &Op) -> Option<Id> {
    match op {
        Op::Create { id, .. }
        | Op::Mkdir { id, .. }
        | Op::Link { id, .. }
        | Op::SetAttr { id, .. }
        | Op::Write { id, .. }
        | Op::Fallocate { id, .. }
        | Op::CompareAndWrite { id, .. }
        | Op::SetXattr { id, .. }
        | Op::RemoveXattr { id, .. } => Some(*id),
        Op::CopyRange { dst, .. } => Some(*dst),
        _ => None,
    }
}

/// What a data write locks at the head instead of its whole inode: the checksummed blocks
/// (`cairn_brick::CSUM_BLOCK`, 4 KiB) it touches, as one range (a 1 MiB write is one lock
/// entry, not 256), so writes into different blocks of one file
/// go down the chain together, and two into one block are ordered alike on every replica
/// (as overlapping ones). A write that extends the file needs nothing more: every
/// replica ends at the largest end, and a read waits for writes at or after its offset.
pub(crate) fn write_range(op: &Op, data: &[u8]) -> Option<(Id, Range)> {
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
pub(crate) fn read_range(op: &Op) -> Range {
    match op {
        Op::Read { offset, .. } => Range::from(*offset),
        _ => Range::WHOLE,
    }
}

/// Leases to recall after a mutation: (id, its directory entries changed).
pub(crate) fn recalls(op: &Op) -> Vec<(Id, bool)> {
    match op {
        Op::Create { dir, .. }
        | Op::Mkdir { dir, .. }
        | Op::MkLinkto { dir, .. }
        | Op::Unlink { dir, .. }
        | Op::UnlinkLinkto { dir, .. }
        | Op::Rmdir { dir, .. } => {
            vec![(*dir, true)]
        }
        Op::Link { id, dir, .. } => vec![(*dir, true), (*id, false)],
        Op::Rename { src_dir, dst_dir, .. } => vec![(*src_dir, true), (*dst_dir, true)],
        op => changed_ids(op).into_iter().map(|i| (i, false)).collect(),
    }
}
