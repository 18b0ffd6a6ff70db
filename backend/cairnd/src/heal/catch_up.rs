//! A catch-up pass: pull every inode the peers recorded as pending for this brick.

use super::run::PEER_WAIT;
use super::{brick_call, crawl_count, parallelism, peer_online};
use crate::exec::{blocking, exec_local};
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_proto::map::{BrickState, ReplicaSet, VolumeMap};
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Errno, Id, RemoteError};
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pull every pending entry recorded for this brick (`stale`: the bricks marked stale in
/// the config store, read before). Returns how many were copied and how many `Up` peers
/// answered the final (empty) round.
pub(super) async fn catch_up(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    wait_for_peers: bool,
    stale: &BTreeSet<u32>,
) -> Result<(usize, usize), RemoteError> {
    let started = Instant::now();
    let mut copied = 0;
    for pass in 0..20 {
        let map = node.map(&slot.volume).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("volume {} not in map", slot.volume))
        })?;
        let (set, _) = map.brick(slot.index).ok_or_else(|| {
            RemoteError::new(Errno::ENOENT, format!("brick {} not in map", slot.index))
        })?;
        let peers: Vec<u32> =
            set.bricks.iter().map(|b| b.index).filter(|&i| i != slot.index).collect();
        if wait_for_peers && pass == 0 {
            // Peers restarted with this one show up in later maps.
            while started.elapsed() < PEER_WAIT
                && !node
                    .map(&slot.volume)
                    .map(|m| peers.iter().all(|&p| peer_online(node, &m, p)))
                    .unwrap_or(false)
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            continue;
        }
        // Collect what each peer recorded for us, and what we flagged ourselves (writes we
        // applied but could not get acknowledged).
        let mut recorded: BTreeMap<Id, Vec<u32>> = BTreeMap::new();
        // The generation of each record (id, recorder), read before the copy: the clear
        // after the copy keeps a record that a write re-added meanwhile.
        let mut gens: HashMap<(Id, u32), u64> = HashMap::new();
        let mut up_heard = 0;
        if let Ok((Reply::Pending(ids), _)) = exec_local(
            slot,
            Creds::root(),
            Op::PendingList { peer: slot.index },
            Bytes::new(),
            None,
            false,
        )
        .await
        {
            for (id, gen) in ids {
                recorded.entry(id).or_default().push(slot.index);
                gens.insert((id, slot.index), gen);
            }
        }
        for &p in &peers {
            if !peer_online(node, &map, p) {
                continue;
            }
            match brick_call(node, &map, p, Op::PendingList { peer: slot.index }).await {
                Ok((Reply::Pending(ids), _)) => {
                    if map.brick(p).map(|(_, b)| b.state == BrickState::Up).unwrap_or(false) {
                        up_heard += 1;
                    }
                    for (id, gen) in ids {
                        recorded.entry(id).or_default().push(p);
                        gens.insert((id, p), gen);
                    }
                }
                Ok(_) => {}
                // This node's certificate is revoked: no peer will answer; the heal loop
                // waits for a new one (`certs::own_revoked`) instead of retrying.
                Err(e) if cairn_proto::tls::refused_as_revoked(&e.message) => return Err(e),
                Err(e) => {
                    tracing::debug!(volume = %slot.volume, brick = slot.index, peer = p, error = %e, "pending list unavailable")
                }
            }
        }
        if recorded.is_empty() {
            return Ok((copied, up_heard));
        }
        let total = recorded.len();
        let steps =
            cairn_replication::heal_plan(set, slot.index, &recorded, stale).map_err(|id| {
                RemoteError::new(
                    Errno::EAGAIN,
                    format!(
                        "{}: brick {}: no up brick to copy {id} from; staying out of service",
                        slot.volume, slot.index
                    ),
                )
            })?;
        let par = parallelism(&map);
        crawl_count(slot, total as u64, 0, 0);
        let mut copies = futures::stream::iter(steps)
            .map(|step| {
                let (map, gens) = (&map, &gens);
                async move {
                    let r = if step.source == slot.index {
                        // No up brick, and none newer than this one: keep this copy, and
                        // the others re-copy it from here.
                        let others =
                            set.bricks.iter().map(|b| b.index).filter(|&b| b != slot.index);
                        keep_own(slot, others.collect(), step.id).await
                    } else {
                        sync_from(node, map, step.source, step.id, slot.index).await
                    };
                    if r.is_ok() {
                        clear(node, map, &step.clear, slot.index, step.id, gens).await;
                    }
                    (step.id, r)
                }
            })
            .buffer_unordered(par);
        let mut failed = 0;
        let mut refused_us = None;
        while let Some((id, r)) = copies.next().await {
            match r {
                Ok(()) => {
                    copied += 1;
                    crawl_count(slot, 0, 1, 0);
                }
                Err(e) if cairn_proto::tls::refused_as_revoked(&e.message) => {
                    failed += 1;
                    crawl_count(slot, 0, 0, 1);
                    refused_us.get_or_insert(e);
                }
                Err(e) => {
                    tracing::warn!(volume = %slot.volume, brick = slot.index, %id, error = %e, "heal failed; will retry");
                    failed += 1;
                    crawl_count(slot, 0, 0, 1);
                }
            }
        }
        drop(copies);
        if let Some(e) = refused_us {
            return Err(e);
        }
        tracing::debug!(volume = %slot.volume, brick = slot.index, pass, total, failed, "heal pass done");
        if failed > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Err(RemoteError::new(
        Errno::EAGAIN,
        format!("{}: brick {}: heal did not converge in 20 passes", slot.volume, slot.index),
    ))
}

/// Copy `id` onto brick `me` from its chain head. False when `me` heads it (nothing to
/// copy: this brick is the source others copy from).
pub(super) async fn sync_one(
    node: &Arc<Node>,
    map: &VolumeMap,
    set: &ReplicaSet,
    id: Id,
    me: u32,
) -> Result<bool, RemoteError> {
    let chain = cairn_placement::chain(set, id);
    match chain.iter().find(|b| b.state == BrickState::Up) {
        Some(h) if h.index == me => {
            // Head only because the bricks before this one in the chain are not up: their
            // copies are the reference once they are back, and nothing recorded how they
            // differ (a full heal looks for what no record says). Compared when they are.
            match chain.first() {
                Some(b) if b.index != me => Err(RemoteError::new(
                    Errno::EAGAIN,
                    format!(
                        "{}: brick {}, which heads {id}, is {:?}; compared when it is up",
                        map.name, b.index, b.state
                    ),
                )),
                _ => Ok(false),
            }
        }
        Some(h) => sync_from(node, map, h.index, id, me).await.map(|()| true),
        None => Err(RemoteError::new(
            Errno::EAGAIN,
            format!("{}: no up brick heads {id} in replica set {}", map.name, set.id),
        )),
    }
}

async fn sync_from(
    node: &Arc<Node>,
    map: &VolumeMap,
    source: u32,
    id: Id,
    me: u32,
) -> Result<(), RemoteError> {
    // The copy is taken under the source's inode lock, so no write the source heads can
    // slip between the copy and the forwarded stream. A rename headed by another brick
    // (its source directory's head) changes this inode too, and reaches this brick and
    // the source in either order: if one lands here while the copy is under way, the copy
    // may undo it (or miss it). Then copy again.
    let slot = node.slot(&map.name, me);
    if let Some(s) = &slot {
        s.heal_watch.lock().insert(id, (source, false));
    }
    let r = brick_call(node, map, source, Op::HealSync { id, peer: me }).await.map(|_| ());
    let touched = slot.and_then(|s| s.heal_watch.lock().remove(&id)).is_some_and(|(_, t)| t);
    if r.is_ok() && touched {
        return Err(RemoteError::new(
            Errno::EAGAIN,
            format!(
                "{}: brick {me}: {id} was changed by another brick's forward during its copy from brick {source}; copying again",
                map.name
            ),
        ));
    }
    r
}

/// Record `id` on this brick as pending for each of `peers`, durably.
async fn keep_own(slot: &Arc<BrickSlot>, peers: Vec<u32>, id: Id) -> Result<(), RemoteError> {
    let brick = slot.brick.clone();
    blocking(slot, "pending_add", move || {
        peers.into_iter().try_for_each(|p| brick.pending_add(p, id))
    })
    .await
}

/// Clear the records of `id` for brick `me` held by `recorders`, each only if it still has
/// the generation read before the copy (`gens`).
pub(super) async fn clear(
    node: &Arc<Node>,
    map: &VolumeMap,
    recorders: &[u32],
    me: u32,
    id: Id,
    gens: &HashMap<(Id, u32), u64>,
) {
    for &r in recorders {
        let Some(&gen) = gens.get(&(id, r)) else {
            // Not listed by that brick before the copy: nothing this copy answers.
            continue;
        };
        let op = Op::PendingClear { peer: me, ids: vec![(id, gen)] };
        if let Err(e) = brick_call(node, map, r, op).await {
            tracing::debug!(volume = %map.name, brick = r, %id, error = %e, "pending clear failed");
        }
    }
}
