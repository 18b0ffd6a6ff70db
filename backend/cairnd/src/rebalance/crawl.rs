//! This node's rebalance run of a volume: a walk of every directory of each replica set
//! one of its bricks belongs to, moving each regular file whose chain head on that set
//! is a brick of this node and whose name hashes to another set (`migrate_file`). So the
//! work splits over nodes with no coordination, as heal's full crawl does. Progress is
//! kept in memory ([`status`]); a run does not survive a restart of `cairnd` (started
//! again, it walks from the start, skipping what is in place).

use super::{migrate_file, on_head, Outcome};
use crate::node::Node;
use cairn_proto::mgmt::RebalanceNode;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Errno, FileType, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// What `status` of a run answers.
type RunStatus = RebalanceNode;

struct Run {
    status: Mutex<RunStatus>,
    stop: AtomicBool,
}

/// This node's runs, by volume.
static RUNS: LazyLock<Mutex<HashMap<String, Arc<Run>>>> = LazyLock::new(Mutex::default);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Start a run of volume `vol` on this node; refused while one runs. The returned future
/// is the run: it ends with its final status.
pub(crate) fn start(
    node: &Arc<Node>,
    vol: &str,
) -> Result<impl std::future::Future<Output = RunStatus>, RemoteError> {
    let map = node
        .map(vol)
        .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("Volume {vol} does not exist")))?;
    let run = {
        let mut runs = RUNS.lock();
        if runs.get(vol).is_some_and(|r| r.status.lock().state == "running") {
            return Err(RemoteError::new(
                Errno::EBUSY,
                format!("volume rebalance: {vol}: a rebalance is already running on {}", node.name),
            ));
        }
        let run = Arc::new(Run {
            status: Mutex::new(RunStatus {
                node: node.name.clone(),
                state: "running".into(),
                layout_epoch: map.layout_epoch,
                started: now(),
                updated: now(),
                ..Default::default()
            }),
            stop: AtomicBool::new(false),
        });
        runs.insert(vol.to_string(), run.clone());
        run
    };
    let (node, vol) = (node.clone(), vol.to_string());
    Ok(async move {
        let r = walk(&node, &vol, &run).await;
        let mut s = run.status.lock();
        if let Err(e) = r {
            s.failures += 1;
            s.last_error = Some(e.to_string());
        }
        s.state = if run.stop.load(Ordering::Acquire) {
            "stopped"
        } else if s.failures > 0 {
            "failed"
        } else {
            "completed"
        }
        .into();
        s.updated = now();
        tracing::info!(volume = %vol, state = %s.state, scanned = s.scanned, moved = s.moved, bytes = s.bytes, skipped = s.skipped, failures = s.failures, "rebalance run ended");
        s.clone()
    })
}

/// This node's run of `vol`, if it had one since it started.
pub(crate) fn status(vol: &str) -> Option<RunStatus> {
    RUNS.lock().get(vol).map(|r| r.status.lock().clone())
}

/// Ask this node's run of `vol` to stop after the file it is moving; false if none runs.
pub(crate) fn stop(vol: &str) -> bool {
    match RUNS.lock().get(vol) {
        Some(r) if r.status.lock().state == "running" => {
            r.stop.store(true, Ordering::Release);
            true
        }
        _ => false,
    }
}

async fn walk(node: &Arc<Node>, vol: &str, run: &Run) -> Result<(), RemoteError> {
    let map =
        node.map(vol).ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("no map of {vol}")))?;
    let sets: Vec<u32> = map
        .sets
        .iter()
        .filter(|s| s.bricks.iter().any(|b| node.slot(vol, b.index).is_some()))
        .map(|s| s.id)
        .collect();
    for set in sets {
        let mut stack = vec![Id::ROOT];
        while let Some(dir) = stack.pop() {
            let mut cookie = 0;
            loop {
                if run.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                let op = Op::ReadDir { dir, cookie, max: 256, plus: false };
                let (entries, eof) = match on_head(node, vol, set, dir, op).await {
                    Ok(Reply::Dir { entries, eof }) => (entries, eof),
                    // Removed meanwhile.
                    Err(e) if e.errno == Errno::ENOENT || e.errno == Errno::ESTALE => break,
                    Ok(other) => {
                        return Err(RemoteError::new(
                            Errno::EPROTO,
                            format!("readdir of {dir}: unexpected {other:?}"),
                        ))
                    }
                    Err(e) => return Err(e),
                };
                cookie = entries.last().map(|e| e.cookie).unwrap_or(cookie);
                let n = entries.len();
                for e in entries {
                    match e.kind {
                        FileType::Directory => stack.push(e.id),
                        _ => file(node, vol, run, set, dir, &e.name, e.id).await,
                    }
                }
                if eof || n == 0 {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// One entry of a listing of set `set`: moved if its name hashes elsewhere and this node
/// heads it.
async fn file(node: &Arc<Node>, vol: &str, run: &Run, set: u32, dir: Id, name: &[u8], id: Id) {
    run.status.lock().scanned += 1;
    let Some(map) = node.map(vol) else { return };
    let to = cairn_placement::hashed_set(&map, dir, name).id;
    let here = map.set_by_id(set).and_then(|s| cairn_placement::head(s, id));
    if to == set || here.is_none_or(|b| node.slot(vol, b.index).is_none()) {
        return;
    }
    let r = migrate_file(node, vol, dir, name, id, set, to).await;
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
    s.updated = now();
}
