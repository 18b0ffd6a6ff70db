//! The rebalance: moving files to the replica set their names hash to after a layout
//! change (docs/rebalance.md). `migrate.rs` moves one file, `crawl.rs` walks a volume
//! for the files this node's bricks head, `run.rs` keeps each run and its progress
//! record in etcd (resumed when `cairnd` starts again); here are the checks every brick request passes
//! while files move ([`admit`], [`fenced`]) and the way the rebalancer sends ops
//! ([`on_head`]).

mod crawl;
mod migrate;
mod run;

pub(crate) use migrate::{migrate_file, Outcome};
pub(crate) use run::{pause, resume_all, start, status, stop, Throttle};

use crate::exec::stale;
use crate::node::{BrickSlot, Node};
use crate::ops::{changed_ids, key_id};
use bytes::Bytes;
use cairn_proto::msg::{BrickRequest, Op, Reply, Request};
use cairn_proto::{Creds, Errno, Id, RemoteError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one op of the rebalancer (or of add-brick) keeps retrying while the map
/// settles.
const OP_RETRY: Duration = Duration::from_secs(20);

fn is_migrate(op: &Op) -> bool {
    matches!(
        op,
        Op::MigrateMark { .. }
            | Op::MigrateIn { .. }
            | Op::MigrateOut { .. }
            | Op::MigrateDrop { .. }
            | Op::MigrateStub { .. }
    )
}

/// Before a brick request at this node takes any lock:
/// - locks, share reservations and delegations live at the chain head by id, without the
///   brick: for an id moved off this set they answer EMOVED (as the brick does for every
///   other op), and while the file is fenced for its move they are retried (ESTALEMAP);
/// - a move is not started (`MigrateMark`) or switched (`MigrateOut`) while a session
///   holds a lock, share reservation or delegation of the file (EBUSY: the rebalancer
///   skips it).
pub(crate) fn admit(node: &Node, slot: &BrickSlot, req: &BrickRequest) -> Result<(), RemoteError> {
    match &req.op {
        Op::SetLock { id, .. }
        | Op::GetLock { id, .. }
        | Op::Share { id, .. }
        | Op::Delegate { id, .. } => {
            if let Some(set) = slot.brick.moved(*id) {
                return Err(RemoteError::moved(id, set));
            }
            if let Some(to) = slot.brick.migrating(*id) {
                return Err(stale(
                    &req.volume,
                    req.brick,
                    &format!("{id} is being moved to replica set {to}"),
                ));
            }
        }
        Op::MigrateMark { id, to: Some(_) } | Op::MigrateOut { id, .. } => {
            let v = &req.volume;
            if node.locks.held_by_others(v, *id, u64::MAX, false)
                || node.shares.any(v, *id)
                || node.delegs.held(v, *id)
            {
                return Err(RemoteError::new(
                    Errno::EBUSY,
                    format!("{v}: {id} holds locks, share reservations or delegations: not moved"),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// At the chain head, under the mutation's inode locks: a mutation of a file fenced for
/// its move (`Op::MigrateMark`) is refused with ESTALEMAP, which clients retry, so no
/// write lands behind the copy; after the switch the brick answers EMOVED and the client
/// resends to the new set (a data write is answered EMOVED here).
pub(crate) fn fenced(slot: &BrickSlot, req: &BrickRequest) -> Result<(), RemoteError> {
    if is_migrate(&req.op) {
        return Ok(());
    }
    // A data write goes to the replicas while the head writes (`chain/apply.rs`): one of
    // an id moved off this set is answered here, before the replicas take it for a
    // forward they missed.
    if let Op::Write { id, .. } | Op::CopyRange { dst: id, .. } = &req.op {
        if slot.brick.file_cached(*id).is_none() {
            if let Some(set) = slot.brick.moved(*id) {
                return Err(RemoteError::moved(id, set));
            }
        }
    }
    let mut ids = changed_ids(&req.op);
    ids.push(key_id(&req.op));
    for id in ids {
        if let Some(to) = slot.brick.migrating(id) {
            return Err(stale(
                &req.volume,
                req.brick,
                &format!("{id} is being moved to replica set {to}; retry"),
            ));
        }
    }
    Ok(())
}

/// `op` as root at the chain head of `key` in set `set`, retrying while the map moves
/// (a head that changed, a brick that is still opening).
pub(crate) async fn on_head(
    node: &Arc<Node>,
    name: &str,
    set: u32,
    key: Id,
    op: Op,
) -> Result<Reply, RemoteError> {
    on_head_data(node, name, set, key, op, Bytes::new()).await.map(|(r, _)| r)
}

/// [`on_head`] with a bulk segment each way (a WRITE's data, a READ's answer).
pub(crate) async fn on_head_data(
    node: &Arc<Node>,
    name: &str,
    set: u32,
    key: Id,
    op: Op,
    data: Bytes,
) -> Result<(Reply, Bytes), RemoteError> {
    let deadline = Instant::now() + OP_RETRY;
    loop {
        let map = node
            .map(name)
            .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("no map of {name}")))?;
        let r = match map.set_by_id(set).and_then(|s| cairn_placement::head(s, key)) {
            // Through the head's service even when the head is a brick of this node
            // (`peers::call` would apply a local op on the brick alone, unreplicated).
            Some(b) => {
                let req = BrickRequest::new(
                    name.to_string(),
                    b.index,
                    map.epoch,
                    Creds::root(),
                    op.clone(),
                );
                node.peers.call(&b.addr, &node.name, Request::Brick(req), data.clone()).await
            }
            None => Err(RemoteError::new(
                Errno::EHOSTDOWN,
                format!("{name}: no brick of replica set {set} is up"),
            )),
        };
        match r {
            Err(e)
                if matches!(
                    e.errno.0,
                    libc::EREMCHG
                        | libc::EHOSTDOWN
                        | libc::ENOTCONN
                        | libc::ECONNREFUSED
                        | libc::ECONNRESET
                ) && Instant::now() < deadline =>
            {
                node.kick.notify_one();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}
