//! `cairn volume rebalance VOL start|status|stop` (docs/rebalance.md): the node asked
//! sends the action to every node with bricks of the volume (`RebalanceLocal`), each of
//! which runs `crate::rebalance` for the files its bricks head; after a `start` it
//! watches the runs and clears the volume's `rebalancing` flag once every node completed
//! with nothing skipped or failed.

use super::*;
use cairn_proto::mgmt::RebalanceNode;

/// How often the node that started a rebalance asks the others how far they are.
const WATCH_EVERY: Duration = Duration::from_secs(1);

pub(super) async fn rebalance(
    node: &Arc<Node>,
    name: &str,
    action: &str,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = existing_volume(node, name).await?;
    let mut nodes: Vec<String> =
        rec.sets.iter().flat_map(|s| s.bricks.iter().map(|b| b.node.clone())).collect();
    nodes.sort();
    nodes.dedup();
    match action {
        "start" => {
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
            if let Ok(s) = gather(node, name, &nodes).await {
                if let Some(r) = s.iter().find(|r| r.state == "running") {
                    return Err(fail(
                        Errno::EBUSY,
                        format!(
                            "volume rebalance: {name}: a rebalance is already running on {}",
                            r.node
                        ),
                    ));
                }
            }
            let mut started = vec![];
            for n in &nodes {
                let req = MgmtRequest::RebalanceLocal { name: name.into(), action: "start".into() };
                match call_node(node, n, "", req).await {
                    Ok(_) => started.push(n.clone()),
                    Err(e) => {
                        // Stop those started: a rebalance runs on every node or on none.
                        for s in &started {
                            let req = MgmtRequest::RebalanceLocal {
                                name: name.into(),
                                action: "stop".into(),
                            };
                            let _ = call_node(node, s, "", req).await;
                        }
                        return Err(fail(
                            e.errno,
                            format!("volume rebalance: {name}: cannot start on {n}: {}", e.message),
                        ));
                    }
                }
            }
            let (node2, vol, epoch) = (node.clone(), name.to_string(), rec.layout_epoch);
            tokio::spawn(async move { watch(&node2, &vol, &nodes, epoch).await });
            Ok(done(format!(
                "Rebalance on {name} has been started successfully on {} node(s). Use rebalance status command to check status of the rebalance process.",
                started.len()
            )))
        }
        "status" => Ok(MgmtReply::Rebalance(gather(node, name, &nodes).await?)),
        "stop" => {
            let mut stopped = 0;
            for n in &nodes {
                let req = MgmtRequest::RebalanceLocal { name: name.into(), action: "stop".into() };
                if call_node(node, n, "", req).await.is_ok() {
                    stopped += 1;
                }
            }
            if stopped == 0 {
                return Err(fail(
                    Errno::EINVAL,
                    format!("volume rebalance: {name}: no rebalance is running"),
                ));
            }
            Ok(done(format!(
                "volume rebalance: {name}: stopping on {stopped} node(s); files moved so far stay moved"
            )))
        }
        other => Err(fail(
            Errno::EINVAL,
            format!("volume rebalance: unknown action {other:?} (start, status or stop)"),
        )),
    }
}

/// Node to node: the action on this node's own run.
pub(super) async fn rebalance_local(
    node: &Arc<Node>,
    name: &str,
    action: &str,
) -> Result<MgmtReply, RemoteError> {
    match action {
        "start" => {
            let run = crate::rebalance::start(node, name)?;
            tokio::spawn(run);
            Ok(done(format!("rebalance of {name} started on {}", node.name)))
        }
        "status" => Ok(MgmtReply::Rebalance(crate::rebalance::status(name).into_iter().collect())),
        "stop" if crate::rebalance::stop(name) => {
            Ok(done(format!("rebalance of {name} stopping on {}", node.name)))
        }
        "stop" => Err(fail(Errno::EINVAL, format!("no rebalance of {name} runs on {}", node.name))),
        other => Err(fail(Errno::EINVAL, format!("unknown rebalance action {other:?}"))),
    }
}

/// The node on which a rebalance of volume `rec` runs, if one does: a layout change waits
/// for it (one layout change per volume at a time).
pub(super) async fn rebalance_running(node: &Arc<Node>, rec: &VolumeRecord) -> Option<String> {
    let mut nodes: Vec<String> =
        rec.sets.iter().flat_map(|s| s.bricks.iter().map(|b| b.node.clone())).collect();
    nodes.sort();
    nodes.dedup();
    let s = gather(node, &rec.name, &nodes).await.ok()?;
    s.into_iter().find(|r| r.state == "running").map(|r| r.node)
}

/// Every node's run of `name` (a node that has none, or does not answer, is left out).
async fn gather(
    node: &Arc<Node>,
    name: &str,
    nodes: &[String],
) -> Result<Vec<RebalanceNode>, RemoteError> {
    let mut out = vec![];
    for n in nodes {
        let req = MgmtRequest::RebalanceLocal { name: name.into(), action: "status".into() };
        match call_node(node, n, "", req).await {
            Ok(MgmtReply::Rebalance(v)) => out.extend(v),
            Ok(_) => {}
            Err(e) => tracing::debug!(volume = name, node = %n, error = %e, "rebalance status"),
        }
    }
    Ok(out)
}

/// Wait for every node's run to end; clear `rebalancing` if all completed with nothing
/// skipped or failed for layout epoch `epoch` (and the epoch did not move meanwhile).
async fn watch(node: &Arc<Node>, name: &str, nodes: &[String], epoch: u64) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Ok(s) = gather(node, name, nodes).await else { continue };
        if s.iter().any(|r| r.state == "running") {
            continue;
        }
        let clean = s.len() == nodes.len()
            && s.iter().all(|r| {
                r.state == "completed"
                    && r.skipped == 0
                    && r.failures == 0
                    && r.layout_epoch == epoch
            });
        if clean {
            let r = edit_volume(node, name, |v| {
                if v.layout_epoch == epoch {
                    v.rebalancing = false;
                }
                Ok(())
            })
            .await;
            match r {
                Ok(_) => tracing::info!(
                    volume = name,
                    epoch,
                    "rebalance completed on every node; the volume is no longer rebalancing"
                ),
                Err(e) => {
                    tracing::warn!(volume = name, error = %e, "rebalance done; cannot clear rebalancing")
                }
            }
        }
        return;
    }
}
