//! This node's rebalance runs, one per volume, and their progress records in etcd
//! (`rebalance/VOLUME/NODE`, docs/rebalance.md): written about once a second and at every
//! change of state, read by `status` on any node, and read back when `cairnd` starts:
//! a run that was `running` or `paused` picks up from the position it recorded
//! ([`resume_all`]), never from the start. The walk itself is `crawl.rs`.

use super::crawl::{count, walk};
use crate::node::Node;
use cairn_proto::mgmt::{RebalanceNode, RebalancePosition};
use cairn_proto::{Errno, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a running walk writes its record.
const RECORD_EVERY: Duration = Duration::from_secs(1);
/// How long a starting `cairnd` waits for its bricks of a volume before resuming anyway.
const RESUME_WAIT: Duration = Duration::from_secs(600);

/// How many files a run moves at a time, and whether it pauses between files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Throttle {
    /// One file at a time, then a pause as long as the move took (at least 50 ms).
    Lazy,
    /// 4 files in flight.
    Normal,
    /// 16 files in flight.
    Aggressive,
}

impl Throttle {
    pub(crate) fn parse(s: &str) -> Option<Throttle> {
        match s {
            "lazy" => Some(Throttle::Lazy),
            "" | "normal" => Some(Throttle::Normal),
            "aggressive" => Some(Throttle::Aggressive),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Throttle::Lazy => "lazy",
            Throttle::Normal => "normal",
            Throttle::Aggressive => "aggressive",
        }
    }

    /// Files moved at a time.
    pub(crate) fn in_flight(self) -> usize {
        match self {
            Throttle::Lazy => 1,
            Throttle::Normal => 4,
            Throttle::Aggressive => 16,
        }
    }
}

pub(crate) struct Run {
    pub(super) status: Mutex<RebalanceNode>,
    pub(super) throttle: Throttle,
    /// Files being moved now.
    pub(super) flying: std::sync::atomic::AtomicU32,
    stop: AtomicBool,
    pause: AtomicBool,
    wake: tokio::sync::Notify,
    /// Running time of earlier sessions and pauses, and since when this one runs.
    clock: Mutex<(Duration, Option<Instant>)>,
    saved: Mutex<Instant>,
}

/// This node's runs, by volume.
static RUNS: LazyLock<Mutex<HashMap<String, Arc<Run>>>> = LazyLock::new(Mutex::default);

pub(super) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Run {
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Running time stops counting (paused, or the run ended).
    fn stop_clock(&self) {
        let mut c = self.clock.lock();
        let since = c.1.take().map(|t| t.elapsed()).unwrap_or_default();
        c.0 += since;
    }

    /// The record as of now: running time, rate and ETA brought up to date.
    fn snapshot(&self) -> RebalanceNode {
        let elapsed = {
            let c = self.clock.lock();
            c.0 + c.1.map(|t| t.elapsed()).unwrap_or_default()
        };
        let mut s = self.status.lock();
        s.elapsed = elapsed.as_secs();
        s.updated = now();
        let ms = elapsed.as_millis() as u64;
        if let Some(rate) = s.bytes.saturating_mul(1000).checked_div(ms) {
            s.rate = rate;
        }
        if s.scanned > 0 && s.estimate > 0 {
            let left = s.estimate.saturating_sub(s.scanned);
            s.eta = Some(left.saturating_mul(ms) / s.scanned / 1000);
        }
        s.clone()
    }

    /// Write the record to etcd (a failure is logged: the run goes on, the next write
    /// catches up).
    pub(super) async fn save(&self, node: &Node, vol: &str) {
        *self.saved.lock() = Instant::now();
        let r = self.snapshot();
        if let Err(e) = node.store.put_rebalance(vol, &r).await {
            tracing::warn!(volume = vol, error = %e, "cannot store the rebalance record");
        }
    }

    /// Between files: the record written if it is due; while paused, wait here. True
    /// when the run must stop.
    pub(super) async fn checkpoint(&self, node: &Node, vol: &str) -> bool {
        if self.stopping() {
            return true;
        }
        if self.pause.load(Ordering::Acquire) {
            self.stop_clock();
            self.status.lock().state = "paused".into();
            self.save(node, vol).await;
            tracing::info!(volume = vol, "rebalance paused");
            while self.pause.load(Ordering::Acquire) && !self.stopping() {
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
            if self.stopping() {
                return true;
            }
            self.clock.lock().1 = Some(Instant::now());
            self.status.lock().state = "running".into();
            self.save(node, vol).await;
            tracing::info!(volume = vol, "rebalance resumed");
        } else if self.saved.lock().elapsed() >= RECORD_EVERY {
            self.save(node, vol).await;
        }
        false
    }
}

/// Start a new run of volume `vol` on this node (from the start); refused while one
/// runs or is paused. The returned future is the run.
pub(crate) async fn start(
    node: &Arc<Node>,
    vol: &str,
    throttle: Throttle,
) -> Result<impl std::future::Future<Output = RebalanceNode>, RemoteError> {
    let map = node
        .map(vol)
        .ok_or_else(|| RemoteError::new(Errno::ENOENT, format!("Volume {vol} does not exist")))?;
    let status = RebalanceNode {
        node: node.name.clone(),
        state: "running".into(),
        layout_epoch: map.layout_epoch,
        started: now(),
        updated: now(),
        throttle: throttle.name().into(),
        ..Default::default()
    };
    let (run, fut) = launch(node, vol, status, throttle, false)?;
    // Recorded before `start` answers: a `status` right after it shows the run.
    run.save(node, vol).await;
    Ok(fut)
}

fn launch(
    node: &Arc<Node>,
    vol: &str,
    status: RebalanceNode,
    throttle: Throttle,
    paused: bool,
) -> Result<(Arc<Run>, impl std::future::Future<Output = RebalanceNode>), RemoteError> {
    let run = {
        let mut runs = RUNS.lock();
        if runs.get(vol).is_some_and(|r| r.status.lock().active()) {
            return Err(RemoteError::new(
                Errno::EBUSY,
                format!("volume rebalance: {vol}: a rebalance is already running on {}", node.name),
            ));
        }
        let run = Arc::new(Run {
            clock: Mutex::new((Duration::from_secs(status.elapsed), Some(Instant::now()))),
            status: Mutex::new(status),
            throttle,
            flying: Default::default(),
            stop: AtomicBool::new(false),
            pause: AtomicBool::new(paused),
            wake: tokio::sync::Notify::new(),
            saved: Mutex::new(Instant::now()),
        });
        runs.insert(vol.to_string(), run.clone());
        run
    };
    let (node, vol, r) = (node.clone(), vol.to_string(), run.clone());
    Ok((r, async move {
        run.save(&node, &vol).await;
        let counted = run.status.lock().estimate > 0;
        let mut r = Ok(());
        if !counted {
            match count(&node, &vol).await {
                Ok(n) => run.status.lock().estimate = n.max(1),
                Err(e) => r = Err(e),
            }
        }
        if r.is_ok() {
            r = walk(&node, &vol, &run).await;
        }
        let state = {
            let mut s = run.status.lock();
            if let Err(e) = r {
                s.failures += 1;
                s.last_error = Some(e.to_string());
            }
            s.state = if run.stopping() {
                "stopped"
            } else if s.failures > 0 {
                "failed"
            } else {
                "completed"
            }
            .into();
            s.state.clone()
        };
        run.stop_clock();
        run.save(&node, &vol).await;
        let s = run.snapshot();
        tracing::info!(volume = %vol, state, scanned = s.scanned, moved = s.moved, bytes = s.bytes, skipped = s.skipped, failures = s.failures, resumes = s.resumes, "rebalance run ended");
        if state == "completed" {
            finished(&node, &vol).await;
        }
        s
    }))
}

/// This node's run of `vol` in memory, if it had one since `cairnd` started.
pub(crate) fn status(vol: &str) -> Option<RebalanceNode> {
    RUNS.lock().get(vol).map(|r| r.snapshot())
}

fn active(vol: &str) -> Option<Arc<Run>> {
    RUNS.lock().get(vol).filter(|r| r.status.lock().active()).cloned()
}

/// Ask this node's run of `vol` to stop after the files it is moving; false if none runs.
pub(crate) fn stop(vol: &str) -> bool {
    let Some(r) = active(vol) else { return false };
    r.stop.store(true, Ordering::Release);
    r.wake.notify_one();
    true
}

/// Pause (`true`) or resume this node's run of `vol` after the files it is moving;
/// false if none runs (or it is already in that state).
pub(crate) fn pause(vol: &str, on: bool) -> bool {
    let Some(r) = active(vol) else { return false };
    let was = r.pause.swap(on, Ordering::AcqRel);
    r.wake.notify_one();
    was != on
}

/// At `cairnd`'s start: every run of this node that its record shows `running` or
/// `paused` goes on from the recorded position, once this node's bricks of the volume
/// serve again.
pub(crate) async fn resume_all(node: Arc<Node>) {
    let mut backoff = cairn_proto::Backoff::constant(Duration::from_secs(2));
    let records = loop {
        match node.store.rebalance_records_of(&node.name).await {
            Ok(r) => break r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this node's rebalance records; retrying");
                backoff.wait().await;
            }
        }
    };
    for (vol, rec) in records.into_iter().filter(|(_, r)| r.active()) {
        let node = node.clone();
        tokio::spawn(async move { resume(node, vol, rec).await });
    }
}

async fn resume(node: Arc<Node>, vol: String, mut rec: RebalanceNode) {
    let deadline = Instant::now() + RESUME_WAIT;
    loop {
        let ready = node.map(&vol).is_some_and(|m| {
            m.sets.iter().flat_map(|s| &s.bricks).filter(|b| b.node == node.name).all(|b| {
                node.slot(&vol, b.index).is_some_and(|s| !s.healing.load(Ordering::Acquire))
            })
        });
        if ready || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Some(map) = node.map(&vol) else {
        tracing::warn!(volume = %vol, "rebalance record of a volume this node has no map of; not resumed");
        return;
    };
    if map.layout_epoch != rec.layout_epoch {
        // The layout changed under the run: its position means nothing for the new one.
        tracing::warn!(volume = %vol, recorded = rec.layout_epoch, now = map.layout_epoch, "the layout changed since the rebalance record; walking from the start");
        rec.position = RebalancePosition::default();
        rec.layout_epoch = map.layout_epoch;
        rec.estimate = 0;
    }
    let paused = rec.state == "paused";
    let throttle = Throttle::parse(&rec.throttle).unwrap_or(Throttle::Normal);
    rec.resumes += 1;
    rec.in_flight_max = 0;
    rec.throttle = throttle.name().into();
    tracing::info!(volume = %vol, scanned = rec.scanned, moved = rec.moved, paused, "rebalance resumes from its record");
    match launch(&node, &vol, rec, throttle, paused) {
        Ok((_, run)) => {
            run.await;
        }
        Err(e) => tracing::warn!(volume = %vol, error = %e, "rebalance not resumed"),
    }
}

/// A run of `vol` on this node completed: if every node with bricks of the volume has a
/// `completed` record with nothing skipped or failed for the volume's layout epoch,
/// clear `rebalancing` (compare-and-swap of the volume record). Each node writes its
/// final record before it reads the others', so the last to finish sees them all.
async fn finished(node: &Node, vol: &str) {
    for _ in 0..5 {
        let (mut rec, rev) = match node.store.get_volume(vol).await {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(volume = vol, error = %e, "rebalance done; cannot read the volume");
                return;
            }
        };
        let records = match node.store.rebalance_records(vol).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(volume = vol, error = %e, "rebalance done; cannot read the records");
                return;
            }
        };
        let epoch = rec.layout_epoch;
        let clean = rec.sets.iter().flat_map(|s| &s.bricks).all(|b| {
            records.iter().any(|r| {
                r.node == b.node
                    && r.state == "completed"
                    && r.skipped == 0
                    && r.failures == 0
                    && r.layout_epoch == epoch
            })
        });
        if !clean || !rec.rebalancing {
            return;
        }
        rec.rebalancing = false;
        match node.store.update_volume(&rec, rev).await {
            Ok(_) => {
                node.kick.notify_one();
                tracing::info!(
                    volume = vol,
                    epoch,
                    "rebalance completed on every node; the volume is no longer rebalancing"
                );
                return;
            }
            Err(cairn_config::ConfigError::Conflict(_)) => continue,
            Err(e) => {
                tracing::warn!(volume = vol, error = %e, "rebalance done; cannot clear rebalancing");
                return;
            }
        }
    }
}
