//! This node's rebalance walk of a volume: every directory of each replica set one of
//! its bricks belongs to, moving each regular file whose chain head on that set is a
//! brick of this node and whose name hashes to another set (`migrate_file`). So the
//! work splits over nodes with no coordination, as heal's full crawl does.
//!
//! The walk keeps its place in the run's record (`RebalancePosition`): the sets done,
//! and a stack of directories, each with the readdir cookie of the last entry done and
//! the subdirectories listed but not walked yet. A run resumed from its record re-reads
//! from those cookies: at most the files of one batch (the throttle's files in flight)
//! are looked at again.

use super::run::{Run, Throttle};
use super::{migrate_file, on_head, Outcome};
use crate::node::Node;
use cairn_proto::mgmt::RebalanceFrame;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{DirEntry, Errno, FileType, Id, RemoteError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Entries asked per readdir.
const PAGE: u32 = 256;

/// The sets of `vol` with a brick on this node, in the map's order, sets outside the
/// layout (draining for a remove-brick) first.
fn local_sets(node: &Node, vol: &str) -> Result<Vec<u32>, RemoteError> {
    let map =
        node.map(vol).ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("no map of {vol}")))?;
    let mut sets: Vec<u32> = map
        .sets
        .iter()
        .filter(|s| s.bricks.iter().any(|b| node.slot(vol, b.index).is_some()))
        .map(|s| s.id)
        .collect();
    if !map.layout.is_empty() {
        sets.sort_by_key(|s| map.layout.contains(s));
    }
    Ok(sets)
}

/// One page of `dir` on `set` after `cookie`; `None` if the directory is gone.
async fn page(
    node: &Arc<Node>,
    vol: &str,
    set: u32,
    dir: Id,
    cookie: u64,
) -> Result<Option<(Vec<DirEntry>, bool)>, RemoteError> {
    let op = Op::ReadDir { dir, cookie, max: PAGE, plus: false };
    match on_head(node, vol, set, dir, op).await {
        Ok(Reply::Dir { entries, eof }) => Ok(Some((entries, eof))),
        // Removed meanwhile.
        Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => Ok(None),
        Ok(other) => Err(RemoteError::new(
            Errno::EPROTO,
            format!("{vol}: readdir of {dir} on set {set}: unexpected {other:?}"),
        )),
        Err(e) => Err(RemoteError::new(
            e.errno,
            format!("{vol}: readdir of {dir} on set {set}: {}", e.message),
        )),
    }
}

/// The entries (other than directories) on this node's sets: the run's estimate.
pub(super) async fn count(node: &Arc<Node>, vol: &str) -> Result<u64, RemoteError> {
    let mut n = 0;
    for set in local_sets(node, vol)? {
        let mut stack = vec![Id::ROOT];
        while let Some(dir) = stack.pop() {
            let mut cookie = 0;
            while let Some((entries, eof)) = page(node, vol, set, dir, cookie).await? {
                cookie = entries.last().map(|e| e.cookie).unwrap_or(cookie);
                for e in &entries {
                    match e.kind {
                        FileType::Directory => stack.push(e.id),
                        _ => n += 1,
                    }
                }
                if eof || entries.is_empty() {
                    break;
                }
            }
        }
    }
    Ok(n)
}

/// Walk from the run's position to the end (or until stopped).
pub(super) async fn walk(node: &Arc<Node>, vol: &str, run: &Run) -> Result<(), RemoteError> {
    for set in local_sets(node, vol)? {
        {
            let mut s = run.status.lock();
            let p = &mut s.position;
            if p.sets_done.contains(&set) {
                continue;
            }
            if p.set != Some(set) || p.stack.is_empty() {
                p.set = Some(set);
                p.stack = vec![RebalanceFrame { dir: Id::ROOT, ..Default::default() }];
            }
        }
        if !walk_set(node, vol, run, set).await? {
            return Ok(());
        }
        let mut s = run.status.lock();
        s.position.sets_done.push(set);
        s.position.set = None;
        s.position.stack.clear();
    }
    Ok(())
}

/// Walk set `set` from the position's stack; false when stopped.
async fn walk_set(node: &Arc<Node>, vol: &str, run: &Run, set: u32) -> Result<bool, RemoteError> {
    loop {
        if run.checkpoint(node, vol).await {
            return Ok(false);
        }
        let top = {
            let mut s = run.status.lock();
            let stack = &mut s.position.stack;
            let Some(top) = stack.last_mut() else { return Ok(true) };
            if let Some(sub) = top.pending.pop() {
                stack.push(RebalanceFrame { dir: sub, ..Default::default() });
                continue;
            }
            if top.eof {
                stack.pop();
                continue;
            }
            top.clone()
        };
        let Some((entries, eof)) = page(node, vol, set, top.dir, top.cookie).await? else {
            run.status.lock().position.stack.pop();
            continue;
        };
        let n = entries.len();
        for batch in entries.chunks(run.throttle.in_flight()) {
            if run.checkpoint(node, vol).await {
                return Ok(false);
            }
            let started = Instant::now();
            let moves = batch
                .iter()
                .filter(|e| e.kind != FileType::Directory)
                .map(|e| file(node, vol, run, set, top.dir, &e.name, e.id));
            let tried = futures::future::join_all(moves).await;
            // The batch is done: the position moves past it.
            {
                let mut s = run.status.lock();
                let Some(f) = s.position.stack.last_mut() else { return Ok(true) };
                f.pending
                    .extend(batch.iter().filter(|e| e.kind == FileType::Directory).map(|e| e.id));
                f.cookie = batch.last().map(|e| e.cookie).unwrap_or(f.cookie);
            }
            if run.throttle == Throttle::Lazy && tried.contains(&true) {
                tokio::time::sleep(started.elapsed().max(Duration::from_millis(50))).await;
            }
        }
        if eof || n == 0 {
            if let Some(f) = run.status.lock().position.stack.last_mut() {
                f.eof = true;
            }
        }
    }
}

/// One entry of a listing of set `set`: moved if its name hashes elsewhere and this node
/// heads it. True if a move was tried.
async fn file(
    node: &Arc<Node>,
    vol: &str,
    run: &Run,
    set: u32,
    dir: Id,
    name: &[u8],
    id: Id,
) -> bool {
    run.status.lock().scanned += 1;
    let Some(map) = node.map(vol) else { return false };
    let to = cairn_placement::hashed_set(&map, dir, name).id;
    let here = map.set_by_id(set).and_then(|s| cairn_placement::head(s, id));
    if to == set || here.is_none_or(|b| node.slot(vol, b.index).is_none()) {
        return false;
    }
    let flying = run.flying.fetch_add(1, Ordering::AcqRel) + 1;
    {
        let mut s = run.status.lock();
        s.in_flight_max = s.in_flight_max.max(flying);
    }
    let r = migrate_file(node, vol, dir, name, id, set, to).await;
    run.flying.fetch_sub(1, Ordering::AcqRel);
    let mut s = run.status.lock();
    match r {
        Ok(Outcome::Moved(bytes)) => {
            s.moved += 1;
            s.bytes += bytes;
        }
        Ok(Outcome::Skipped(why)) => {
            tracing::info!(volume = vol, %id, name = %String::from_utf8_lossy(name), why, "rebalance skipped a file");
            s.skipped += 1;
        }
        Err(e) => {
            tracing::warn!(volume = vol, %id, error = %e, "rebalance could not move a file");
            s.failures += 1;
            s.last_error = Some(e.to_string());
        }
    }
    true
}
