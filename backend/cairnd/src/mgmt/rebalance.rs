//! `cairn volume rebalance VOL start|status|stop|pause|resume` (docs/rebalance.md): the
//! node asked sends the action to every node with bricks of the volume
//! (`RebalanceLocal`), each of which runs `crate::rebalance` for the files its bricks
//! head and keeps its progress record in etcd (`rebalance/VOL/NODE`). `status` reads
//! those records, so it shows every node's run, a node that is down included. The run
//! that ends last with every record `completed` (nothing skipped or failed, the layout
//! epoch unchanged) clears the volume's `rebalancing` flag (`rebalance/run.rs`).
//!
//! `start` takes an optional throttle after a colon (`start:lazy`, `start:normal`,
//! `start:aggressive`): the action stays one string, so the request keeps its shape.

use super::*;
use cairn_proto::mgmt::RebalanceNode;

pub(super) fn brick_nodes(rec: &VolumeRecord) -> Vec<String> {
    let mut nodes: Vec<String> =
        rec.sets.iter().flat_map(|s| s.bricks.iter().map(|b| b.node.clone())).collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

pub(super) async fn records(node: &Node, name: &str) -> Result<Vec<RebalanceNode>, RemoteError> {
    node.store.rebalance_records(name).await.map_err(|e| {
        fail(Errno::EIO, format!("volume rebalance: {name}: cannot read the progress records: {e}"))
    })
}

/// Send `action` to every node in `nodes`; the nodes that took it.
async fn each(node: &Arc<Node>, name: &str, nodes: &[String], action: &str) -> Vec<String> {
    let mut took = vec![];
    for n in nodes {
        let req = MgmtRequest::RebalanceLocal { name: name.into(), action: action.into() };
        match call_node(node, n, "", req).await {
            Ok(_) => took.push(n.clone()),
            Err(e) => tracing::debug!(volume = name, node = %n, action, error = %e, "rebalance"),
        }
    }
    took
}

pub(super) async fn rebalance(
    node: &Arc<Node>,
    name: &str,
    action: &str,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = existing_volume(node, name).await?;
    let nodes = brick_nodes(&rec);
    let (verb, throttle) = action.split_once(':').unwrap_or((action, ""));
    match verb {
        "start" => {
            let throttle = throttle_of(name, throttle)?;
            if rec.status != VolumeStatus::Started {
                return Err(fail(
                    Errno::EBUSY,
                    format!("volume rebalance: {name}: volume is not started"),
                ));
            }
            if !rec.rebalancing {
                return Err(fail(
                    Errno::EINVAL,
                    format!("volume rebalance: {name}: every file is on the set its name hashes to (no layout change since the last rebalance)"),
                ));
            }
            if let Some(r) =
                records(node, name).await?.iter().find(|r| r.active() && nodes.contains(&r.node))
            {
                return Err(fail(
                    Errno::EBUSY,
                    format!(
                        "volume rebalance: {name}: a rebalance is already {} on {} (stop it first)",
                        r.state, r.node
                    ),
                ));
            }
            let started = launch_runs(node, name, &nodes, throttle).await?;
            Ok(done(format!(
                "Rebalance on {name} has been started successfully on {} node(s) (throttle {}). Use rebalance status command to check status of the rebalance process.",
                started.len(),
                throttle.name()
            )))
        }
        "status" => Ok(MgmtReply::Rebalance(records(node, name).await?)),
        "stop" => {
            let stopped = each(node, name, &nodes, "stop").await;
            // A node that is down keeps a record it would resume from when it comes
            // back: mark it stopped (a node that answered writes its own).
            let mut marked = 0;
            for mut r in records(node, name).await? {
                if r.active() && !stopped.contains(&r.node) {
                    r.state = "stopped".into();
                    if node.store.put_rebalance(name, &r).await.is_ok() {
                        marked += 1;
                    }
                }
            }
            if stopped.is_empty() && marked == 0 {
                return Err(fail(
                    Errno::EINVAL,
                    format!("volume rebalance: {name}: no rebalance is running"),
                ));
            }
            Ok(done(format!(
                "volume rebalance: {name}: stopping on {} node(s); files moved so far stay moved",
                stopped.len() + marked
            )))
        }
        "pause" | "resume" => {
            let took = each(node, name, &nodes, verb).await;
            if took.is_empty() {
                let what = if verb == "pause" { "running" } else { "paused" };
                return Err(fail(
                    Errno::EINVAL,
                    format!("volume rebalance: {name}: no rebalance is {what}"),
                ));
            }
            let did = if verb == "pause" { "pausing" } else { "resuming" };
            Ok(done(format!(
                "volume rebalance: {name}: {did} on {} node(s) ({})",
                took.len(),
                took.join(", ")
            )))
        }
        other => Err(fail(
            Errno::EINVAL,
            format!(
                "volume rebalance: unknown action {other:?} (start, status, stop, pause or resume)"
            ),
        )),
    }
}

/// Start a run on every node of `nodes` (each waits for the volume's current layout
/// first); if one cannot start, those started are stopped: a rebalance runs on every
/// node or on none. The nodes started.
pub(super) async fn launch_runs(
    node: &Arc<Node>,
    name: &str,
    nodes: &[String],
    throttle: crate::rebalance::Throttle,
) -> Result<Vec<String>, RemoteError> {
    let mut started = vec![];
    let local = format!("start:{}", throttle.name());
    for n in nodes {
        let req = MgmtRequest::RebalanceLocal { name: name.into(), action: local.clone() };
        match call_node(node, n, "", req).await {
            Ok(_) => started.push(n.clone()),
            Err(e) => {
                each(node, name, &started, "stop").await;
                return Err(fail(
                    e.errno,
                    format!("volume rebalance: {name}: cannot start on {n}: {}", e.message),
                ));
            }
        }
    }
    Ok(started)
}

/// The throttle of a `start:THROTTLE` action (empty: normal), for the asked node and each
/// node's own run alike.
pub(super) fn throttle_of(
    name: &str,
    throttle: &str,
) -> Result<crate::rebalance::Throttle, RemoteError> {
    crate::rebalance::Throttle::parse(throttle).ok_or_else(|| {
        fail(
            Errno::EINVAL,
            format!(
                "volume rebalance: {name}: unknown throttle {throttle:?} (lazy, normal or aggressive)"
            ),
        )
    })
}

/// Node to node: the action on this node's own run.
pub(super) async fn rebalance_local(
    node: &Arc<Node>,
    name: &str,
    action: &str,
) -> Result<MgmtReply, RemoteError> {
    let (verb, throttle) = action.split_once(':').unwrap_or((action, ""));
    match verb {
        "start" => {
            let throttle = throttle_of(name, throttle)?;
            // The run hashes by this node's map: it must have the layout that asked for
            // it (remove-brick's start changes it just before).
            let (rec, _) = existing_volume(node, name).await?;
            if !wait_map(node, name, |m| m.layout_epoch >= rec.layout_epoch).await {
                return Err(fail(
                    Errno::EAGAIN,
                    format!(
                        "rebalance of {name}: {} has not the volume's layout epoch {} yet",
                        node.name, rec.layout_epoch
                    ),
                ));
            }
            let run = crate::rebalance::start(node, name, throttle).await?;
            tokio::spawn(run);
            Ok(done(format!("rebalance of {name} started on {}", node.name)))
        }
        "status" => Ok(MgmtReply::Rebalance(crate::rebalance::status(name).into_iter().collect())),
        "stop" if crate::rebalance::stop(name) => {
            Ok(done(format!("rebalance of {name} stopping on {}", node.name)))
        }
        "pause" if crate::rebalance::pause(name, true) => {
            Ok(done(format!("rebalance of {name} pausing on {}", node.name)))
        }
        "resume" if crate::rebalance::pause(name, false) => {
            Ok(done(format!("rebalance of {name} resuming on {}", node.name)))
        }
        "stop" | "pause" | "resume" => {
            Err(fail(Errno::EINVAL, format!("no rebalance of {name} on {} to {verb}", node.name)))
        }
        other => Err(fail(Errno::EINVAL, format!("unknown rebalance action {other:?}"))),
    }
}

/// The node on which a rebalance of volume `rec` runs or is paused, if one does: a
/// layout change waits for it (one layout change per volume at a time).
pub(super) async fn rebalance_running(node: &Arc<Node>, rec: &VolumeRecord) -> Option<String> {
    let nodes = brick_nodes(rec);
    let s = records(node, &rec.name).await.ok()?;
    s.into_iter().find(|r| r.active() && nodes.contains(&r.node)).map(|r| r.node)
}

/// Run `f` holding volume `name`'s layout lock in etcd (`layout-lock/NAME`, bound to
/// this node's lease) as `what`: at most one layout change per volume at a time
/// (add-brick, a rebalance's start). EBUSY naming the holder while another holds it.
pub(super) async fn with_layout_lock<T>(
    node: &Arc<Node>,
    name: &str,
    what: &str,
    f: impl std::future::Future<Output = Result<T, RemoteError>>,
) -> Result<T, RemoteError> {
    existing_volume(node, name).await?;
    let holder = format!("{what} on {}", node.name);
    let lease = node.lease().lease_id();
    node.store.take_layout_lock(name, &holder, Some(lease)).await.map_err(|e| match e {
        cairn_config::ConfigError::Conflict(m) => fail(Errno::EBUSY, m),
        e => cfg(e),
    })?;
    let r = f.await;
    if let Err(e) = node.store.release_layout_lock(name, &holder).await {
        tracing::warn!(volume = name, holder, error = %e, "cannot release the layout lock; it goes with this node's lease");
    }
    r
}
