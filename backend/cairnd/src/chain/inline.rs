//! Quick-read: a lookup that also brings a small file's content (`BrickRequest::inline`).

use super::grant_leases;
use crate::exec::OpResult;
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_brick::Exec;
use cairn_proto::msg::{BrickRequest, Op, Reply};
use cairn_proto::rpc::Session;
use cairn_proto::{Creds, Errno, FileType, Id, RemoteError};
use cairn_replication::range_lock::{Mode, Range};
use std::sync::Arc;

/// What [`lookup_inline`] did.
pub(super) enum Inline {
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
pub(super) async fn lookup_inline(
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
pub(super) async fn inline_read(
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
