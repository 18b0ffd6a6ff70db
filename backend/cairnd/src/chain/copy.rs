//! Server-side copy (`Op::CopyRange`) at the destination's chain head.

use super::mutate::mutate;
use crate::exec::{exec_local, stale, OpResult};
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_proto::map::VolumeMap;
use cairn_proto::msg::{BrickRequest, Op, Reply, Request};
use cairn_proto::rpc::Session;
use cairn_proto::{Creds, Errno, Id, RemoteError};
use cairn_replication::range_lock::Range;
use std::sync::Arc;

/// A server-side copy ([`Op::CopyRange`]) at the chain head of `dst`: read `src` on the
/// bricks ([`copy_source`]), then write those bytes to `dst` exactly as a client's `Write`
/// of them would be: range locked, applied here and forwarded down the chain, recorded for
/// the bricks that miss it, deduplicated by the request id. So every replica gets the very
/// bytes the head wrote (a replica re-reading its own copy of `src` could read it at
/// another moment of a concurrent write and end different), and the client none of them.
pub(super) async fn copy_range(
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
                    let req =
                        BrickRequest::new(volume.clone(), h.index, map.epoch, creds.clone(), op);
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
