//! Scrub: every `features.scrub-interval` seconds (default a day, 0 = off) each node reads
//! every regular file of its `Up` bricks and checks it against its checksums, so corruption
//! in copies no client reads (a replica that is not the chain head) is found too. A copy
//! that fails is repaired at once: from a replica when this brick heads the inode
//! (`heal::repair_from_replica`), else by asking the head to copy its (verified) state
//! here (`HEAL_SYNC`). Throttled to about `SCRUB_RATE` bytes per second per brick; one line
//! per pass is logged (files, bytes, corrupt, repaired).

use crate::heal::{brick_call, repair_from_replica};
use crate::node::{BrickSlot, Node};
use cairn_proto::msg::Op;
use cairn_proto::{Errno, Id, RemoteError};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const OPTION: &str = "features.scrub-interval";
const DEFAULT_INTERVAL: u64 = 86_400;
const SCRUB_RATE: u64 = 64 << 20;

fn interval(node: &Node, volume: &str) -> Option<Duration> {
    let map = node.map(volume)?;
    let secs = match map.option(OPTION) {
        Some(v) => v.parse::<u64>().ok()?,
        None => DEFAULT_INTERVAL,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

pub async fn run_scrubber(node: Arc<Node>) {
    // When each brick was last scrubbed (or first seen).
    let mut last: HashMap<(String, u32), Instant> = HashMap::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let slots: Vec<Arc<BrickSlot>> = node.bricks.read().values().cloned().collect();
        for slot in slots {
            let key = (slot.volume.clone(), slot.index);
            let seen = *last.entry(key.clone()).or_insert_with(Instant::now);
            let Some(every) = interval(&node, &slot.volume) else { continue };
            if seen.elapsed() < every
                || slot.healing.load(Ordering::Acquire)
                || slot.stopped.load(Ordering::Acquire)
            {
                continue;
            }
            scrub_brick(&node, &slot).await;
            last.insert(key, Instant::now());
        }
    }
}

/// Repair this brick's copy of `id`. Returns the brick it was copied from.
async fn repair(node: &Arc<Node>, slot: &Arc<BrickSlot>, id: Id) -> Result<u32, RemoteError> {
    let map = node.map(&slot.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not found", slot.volume))
    })?;
    let (set, _) = map.brick(slot.index).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("{}: no brick {}", slot.volume, slot.index))
    })?;
    match cairn_placement::head(set, id).map(|b| b.index) {
        Some(h) if h == slot.index => repair_from_replica(node, slot, id).await,
        Some(h) => {
            brick_call(node, &map, h, Op::HealSync { id, peer: slot.index }).await?;
            Ok(h)
        }
        None => Err(RemoteError::new(
            Errno::EIO,
            format!("{}: replica set {} has no brick up", slot.volume, set.id),
        )),
    }
}

async fn scrub_brick(node: &Arc<Node>, slot: &Arc<BrickSlot>) {
    let (volume, index) = (slot.volume.clone(), slot.index);
    let started = Instant::now();
    let brick = slot.brick.clone();
    let ids = match tokio::task::spawn_blocking(move || brick.scrub_ids()).await {
        Ok(Ok(ids)) => ids,
        other => {
            tracing::warn!(volume, brick = index, "scrub: cannot list files: {other:?}");
            return;
        }
    };
    tracing::info!(volume, brick = index, files = ids.len(), "scrub pass started");
    let (mut files, mut bytes, mut corrupt, mut repaired) = (0u64, 0u64, 0u64, 0u64);
    for (n, id) in ids.into_iter().enumerate() {
        if slot.stopped.load(Ordering::Acquire) || slot.healing.load(Ordering::Acquire) {
            break;
        }
        let brick = slot.brick.clone();
        let r = tokio::task::spawn_blocking(move || brick.scrub_file(id)).await;
        match r {
            Ok(Ok(b)) => {
                files += 1;
                bytes += b;
                tokio::time::sleep(Duration::from_micros(b * 1_000_000 / SCRUB_RATE)).await;
            }
            Ok(Err(e)) if e.errno == Errno::ECORRUPT => {
                corrupt += 1;
                match repair(node, slot, id).await {
                    Ok(src) => {
                        repaired += 1;
                        tracing::warn!(volume, brick = index, %id, source = src, "scrub: repaired corrupt data");
                    }
                    Err(re) => {
                        tracing::error!(volume, brick = index, %id, error = %re, "scrub: cannot repair corrupt data")
                    }
                }
            }
            Ok(Err(e)) if e.errno == Errno::ESTALE => {} // removed meanwhile
            Ok(Err(e)) => tracing::debug!(volume, brick = index, %id, error = %e, "scrub: skipped"),
            Err(e) => tracing::warn!(volume, brick = index, "scrub task failed: {e}"),
        }
        if (n + 1) % 10_000 == 0 {
            tracing::info!(volume, brick = index, done = n + 1, "scrub progress");
        }
    }
    tracing::info!(
        volume,
        brick = index,
        files,
        bytes,
        corrupt,
        repaired,
        secs = started.elapsed().as_secs_f64(),
        "scrub pass done"
    );
}
