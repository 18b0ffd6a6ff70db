//! The full crawl: the whole tree, top-down, copied from each inode's chain head.

use super::catch_up::{clear, sync_one};
use super::{crawl_begin, crawl_count, crawl_end, parallelism};
use crate::exec::exec_local;
use crate::node::{BrickSlot, Node};
use bytes::Bytes;
use cairn_proto::mgmt::CrawlInfo;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Errno, FileType, Id, RemoteError};
use futures::StreamExt;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a full crawl is: saved on the brick so that a crawl cut by a restart continues.
#[derive(serde::Serialize, serde::Deserialize)]
struct Position {
    /// Directories discovered and not walked yet (hex ids), in crawl order.
    queue: Vec<String>,
    dirs_done: u64,
    scanned: u64,
    healed: u64,
    bytes: u64,
}

/// How often a full crawl saves its position.
const SAVE_EVERY: Duration = Duration::from_secs(1);

async fn save_position(slot: &Arc<BrickSlot>, queue: &VecDeque<Id>, dirs_done: u64) {
    let (scanned, healed, bytes) = match slot.heal.lock().current.as_ref() {
        Some(c) => (c.scanned, c.healed, c.bytes),
        None => (0, 0, 0),
    };
    let pos = Position {
        queue: queue.iter().map(|id| id.to_hex()).collect(),
        dirs_done,
        scanned,
        healed,
        bytes,
    };
    let body = serde_json::to_vec(&pos).expect("position serializes");
    let brick = slot.brick.clone();
    match tokio::task::spawn_blocking(move || brick.save_full_heal_position(&body)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "full heal: position not saved")
        }
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, "full heal: saving the position failed: {e}")
        }
    }
}

/// The queue and directory count to start a full crawl from: the saved position (its
/// counters restored into the running crawl's statistics), else the root.
fn start_position(slot: &BrickSlot) -> (VecDeque<Id>, u64) {
    let saved = slot.brick.full_heal_position().and_then(|b| {
        let p: Position = serde_json::from_slice(&b).ok()?;
        let q: Option<VecDeque<Id>> = p.queue.iter().map(|h| Id::from_hex(h)).collect();
        Some((p, q?))
    });
    match saved {
        Some((p, queue)) if !queue.is_empty() => {
            tracing::info!(volume = %slot.volume, brick = slot.index, dirs_done = p.dirs_done, dirs_left = queue.len(), "full heal: continuing from the saved position");
            if let Some(c) = slot.heal.lock().current.as_mut() {
                c.scanned = p.scanned;
                c.healed = p.healed;
                c.bytes = p.bytes;
                c.dirs_done = p.dirs_done;
                c.dirs_left = queue.len() as u64;
                c.resumed_after = p.dirs_done;
            }
            (queue, p.dirs_done)
        }
        _ => (VecDeque::from([Id::ROOT]), 0),
    }
}

/// Walk the whole tree top-down and copy every inode onto this brick from its chain head.
/// Returns the number of inodes copied; fails if any could not be (the request stays, the
/// next crawl starts again from the last position saved before the first failure).
async fn full_crawl(node: &Arc<Node>, slot: &Arc<BrickSlot>) -> Result<u64, RemoteError> {
    let me = slot.index;
    let (mut queue, mut dirs_done) = start_position(slot);
    let (mut healed, mut failed) = (0u64, 0u64);
    let mut saved = Instant::now();
    while let Some(&dir) = queue.front() {
        if slot.stopped.load(Ordering::Acquire) {
            return Err(RemoteError::new(
                Errno::ECANCELED,
                format!("{}: brick {me} closed during its full heal", slot.volume),
            ));
        }
        let (h, f, subdirs) = crawl_dir(node, slot, dir).await?;
        queue.pop_front();
        queue.extend(subdirs);
        healed += h;
        failed += f;
        dirs_done += 1;
        if let Some(c) = slot.heal.lock().current.as_mut() {
            c.dirs_done = dirs_done;
            c.dirs_left = queue.len() as u64;
        }
        // A failure dropped a subtree from the queue: from then on the saved position (the
        // last one before it) is the one to continue from.
        if failed == 0 && saved.elapsed() >= SAVE_EVERY {
            save_position(slot, &queue, dirs_done).await;
            saved = Instant::now();
        }
    }
    if failed > 0 {
        return Err(RemoteError::new(
            Errno::EAGAIN,
            format!(
                "{}: brick {me}: full heal copied {healed} inodes, {failed} failed; starting over",
                slot.volume
            ),
        ));
    }
    Ok(healed)
}

/// One directory of a full crawl: the directory, then its non-directory entries, copied
/// from their heads. Returns (copied, failed, its subdirectories).
async fn crawl_dir(
    node: &Arc<Node>,
    slot: &Arc<BrickSlot>,
    dir: Id,
) -> Result<(u64, u64, Vec<Id>), RemoteError> {
    let me = slot.index;
    let map = node.map(&slot.volume).ok_or_else(|| {
        RemoteError::new(Errno::ENOENT, format!("volume {} not in map", slot.volume))
    })?;
    let Some((set, _)) = map.brick(me) else {
        return Err(RemoteError::new(
            Errno::ENOENT,
            format!("{}: brick {me} not in the map", slot.volume),
        ));
    };
    let mut healed = 0;
    // The directory first: it creates (placeholders of) its entries here.
    match sync_one(node, &map, set, dir, me).await {
        Ok(copied) => healed += copied as u64,
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = me, id = %dir, error = %e, "full heal: directory not copied; its subtree is retried by the next crawl");
            crawl_count(slot, 1, 0, 1);
            return Ok((0, 1, vec![]));
        }
    }
    // Its entries as they now are here (identical to the head's at the copy).
    let state =
        match exec_local(slot, Creds::root(), Op::HealFetch { id: dir }, Bytes::new(), None, false)
            .await
        {
            Ok((Reply::Heal(s), _)) => s,
            Ok(_) => return Ok((healed, 0, vec![])),
            // Removed at the source meanwhile: its parent's copy dropped it.
            Err(e) if matches!(e.errno, Errno::ENOENT | Errno::ESTALE) => {
                return Ok((healed, 0, vec![]))
            }
            Err(e) => return Err(e),
        };
    if state.attr.is_none() {
        return Ok((healed, 0, vec![]));
    }
    // This brick's own records (placeholders the directory copy flagged), read before the
    // copies: a copy clears only the record it answers.
    let gens: HashMap<(Id, u32), u64> =
        slot.brick.pending_list(me).into_iter().map(|(id, g)| ((id, me), g)).collect();
    let (mut files, mut subdirs) = (vec![], vec![]);
    for (_, id, kind, linkto) in &state.entries {
        match (linkto, kind) {
            (Some(_), _) => {}
            (None, FileType::Directory) => subdirs.push(*id),
            (None, _) => files.push(*id),
        }
    }
    crawl_count(slot, 1 + files.len() as u64, 0, 0);
    let mut copies = futures::stream::iter(files)
        .map(|id| {
            let map = &map;
            async move { (id, sync_one(node, map, set, id, me).await) }
        })
        .buffer_unordered(parallelism(&map));
    let mut failed = 0;
    while let Some((id, r)) = copies.next().await {
        match r {
            Ok(copied) => {
                healed += copied as u64;
                crawl_count(slot, 0, copied as u64, 0);
                if copied {
                    // Copied from its head: a placeholder the directory copy flagged for
                    // this brick is filled.
                    clear(node, &map, &[me], me, id, &gens).await;
                }
            }
            Err(e) => {
                tracing::warn!(volume = %slot.volume, brick = me, %id, error = %e, "full heal: inode not copied; retried by the next crawl");
                failed += 1;
                crawl_count(slot, 0, 0, 1);
            }
        }
    }
    Ok((healed, failed, subdirs))
}

/// Run a full crawl with statistics and start/end log lines; clear the request when it
/// completed. True on success.
pub(super) async fn run_full_crawl(node: &Arc<Node>, slot: &Arc<BrickSlot>) -> bool {
    crawl_begin(node, slot, "full");
    tracing::info!(volume = %slot.volume, brick = slot.index, kind = "full", "heal crawl started");
    let r = full_crawl(node, slot).await;
    let c =
        crawl_end(slot).unwrap_or_else(|| CrawlInfo { kind: "full".into(), ..Default::default() });
    match r {
        Ok(_) => match slot.brick.clear_full_heal() {
            Ok(()) => {
                tracing::info!(volume = %slot.volume, brick = slot.index, kind = "full", scanned = c.scanned, healed = c.healed, failed = c.failed, secs = c.ended.unwrap_or(0).saturating_sub(c.started), "heal crawl finished");
                true
            }
            Err(e) => {
                tracing::warn!(volume = %slot.volume, brick = slot.index, error = %e, "full heal done but its request could not be cleared");
                false
            }
        },
        Err(e) => {
            tracing::warn!(volume = %slot.volume, brick = slot.index, kind = "full", scanned = c.scanned, healed = c.healed, failed = c.failed, error = %e, "heal crawl incomplete; retrying");
            false
        }
    }
}
