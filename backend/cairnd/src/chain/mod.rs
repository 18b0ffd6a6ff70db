//! The data path of a brick: client operations arrive at the chain head of their inode,
//! which applies them, forwards mutations to the rest of the replica set, records pending
//! heals for bricks that are down, and recalls other clients' leases before answering.

mod apply;
mod copy;
mod inline;
mod mutate;
mod settle;

use crate::exec::{exec_local, stale, OpResult};
use crate::node::Node;
use crate::ops::{key_id, read_range};
use bytes::Bytes;
use cairn_proto::map::ReplicaSet;
use cairn_proto::msg::{BrickRequest, Op, Reply};
use cairn_proto::rpc::Session;
use cairn_proto::{Creds, Errno, RemoteError};
use copy::copy_range;
use inline::{inline_read, lookup_inline, Inline};
use mutate::mutate;
use std::sync::Arc;

pub(super) fn grant_leases(
    node: &Node,
    session: &Arc<Session>,
    volume: &str,
    op: &Op,
    reply: &Reply,
) {
    match (op, reply) {
        (Op::GetAttr { id }, _) => node.leases.grant(volume, *id, session),
        (Op::Lookup { dir, .. }, Reply::Entry { attr, .. }) => {
            node.leases.grant(volume, *dir, session);
            node.leases.grant(volume, attr.id, session);
        }
        (Op::ReadDir { dir, .. }, _) => node.leases.grant(volume, *dir, session),
        // Extended attributes change only by SetXattr/RemoveXattr on `id`, which recall it.
        (Op::GetXattr { id, .. } | Op::ListXattr { id } | Op::GetXattrs { id }, _) => {
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

/// A listing with attributes (readdirplus), served at the head of its directory on
/// `set`: a lease on each entry this brick heads too (homed on `set` with the directory's
/// chain order there: new inodes are made so, `cairn_placement::new_id_like`), whose
/// attributes the client may then cache; other entries' copies here are not the ones
/// their heads keep, and the client fetches those by getattr.
fn grant_listed(
    node: &Node,
    session: &Arc<Session>,
    volume: &str,
    set: &ReplicaSet,
    op: &Op,
    reply: &Reply,
) {
    let (Op::ReadDir { dir, plus: true, .. }, Reply::Dir { entries, .. }) = (op, reply) else {
        return;
    };
    for e in entries {
        if e.attr.is_some()
            && e.id.home_set() == set.id
            && cairn_placement::same_chain(set, e.id, *dir)
        {
            node.leases.grant(volume, e.id, session);
        }
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
    let lock_state = req.locks.then(|| (req.volume.clone(), req.brick, lock_state_of(&req.op)));
    let r = serve_checked(node, session, req, data, retry).await;
    match (r, lock_state) {
        (Ok((reply, out)), Some((volume, brick, Some(id))))
            if unlocked_here(node, session, &volume, brick, id) =>
        {
            Ok((Reply::Unlocked { id, reply: Box::new(reply) }, out))
        }
        (r, _) => r,
    }
}

/// The file whose lease an op's reply may carry lock state for ([`BrickRequest::locks`]):
/// the inode a getattr or an xattr read leases, or the one the session's own change leaves
/// leased to it (`settle.rs`, `grant_own`).
fn lock_state_of(op: &Op) -> Option<cairn_proto::Id> {
    match op {
        Op::GetAttr { id }
        | Op::GetXattr { id, .. }
        | Op::ListXattr { id }
        | Op::GetXattrs { id } => Some(*id),
        op => crate::ops::lease_on_change(op),
    }
}

/// Whether `session` holds a lease on `id` at this brick, which keeps `id`'s byte-range
/// locks (the head of `id` on its home set: where `Op::SetLock` goes), and no other
/// session holds a lock on it. Checked after the lease was granted: a lock another session
/// takes after this check recalls that lease before it is granted (`Op::SetLock` below),
/// one taken before is seen here.
fn unlocked_here(
    node: &Node,
    session: &Session,
    volume: &str,
    brick: u32,
    id: cairn_proto::Id,
) -> bool {
    let Some(map) = node.map(volume) else { return false };
    let Some((set, _)) = map.brick(brick) else { return false };
    set.id == id.home_set()
        && cairn_placement::head(set, id).map(|h| h.index) == Some(brick)
        && node.leases.holds(volume, id, session.id)
        && !node.locks.held_by_others(volume, id, session.id, false)
}

async fn serve_checked(
    node: &Arc<Node>,
    session: &Arc<Session>,
    req: BrickRequest,
    data: Bytes,
    retry: Option<(BrickRequest, Bytes)>,
) -> OpResult {
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
            if let Err(re) = crate::heal::repair_from_replica(node, &slot, id).await {
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
    crate::rebalance::admit(node, &slot, &req)?;
    if req.op.is_mutation() {
        if let Some(r) = req.req {
            node.leases.note_client(r.client, session.id);
        }
        if let Op::CopyRange { .. } = req.op {
            return copy_range(node, session, &slot, &map, req).await;
        }
        if let (Op::Write { id, .. }, true) = (&req.op, req.sync) {
            return write_sync(node, session, &slot, &map, *id, req, data).await;
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
            // Leases of the file carry its lock state to their holders (`unlocked_here`):
            // another session's lock recalls them before it is granted.
            if lock.kind != cairn_proto::LockKind::Unlock {
                node.leases.recall(&req.volume, &[(*id, false)], session.id).await;
            }
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
                (Ok((reply, _)), op) => {
                    grant_leases(node, session, &req.volume, op, reply);
                    grant_listed(node, session, &req.volume, set, op, reply);
                }
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

/// A `Write` asked with [`BrickRequest::sync`]: the write, then an `Fsync` of the file
/// (metadata included) through the chain as a client's would run, answered together as
/// [`Reply::Synced`] once both are done: one round trip for the client instead of two. A
/// retry of it is answered the write's first result (dedupe) and fsyncs again.
async fn write_sync(
    node: &Arc<Node>,
    session: &Arc<Session>,
    slot: &Arc<crate::node::BrickSlot>,
    map: &cairn_proto::map::VolumeMap,
    id: cairn_proto::Id,
    req: BrickRequest,
    data: Bytes,
) -> OpResult {
    let fsync = BrickRequest {
        op: Op::Fsync { id, datasync: false },
        req: None,
        sync: false,
        ..req.clone()
    };
    let (reply, out) = mutate(node, session, slot, map, req, data).await?;
    mutate(node, session, slot, map, fsync, Bytes::new()).await?;
    Ok((Reply::Synced(Box::new(reply)), out))
}
