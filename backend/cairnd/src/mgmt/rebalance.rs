//! `cairn volume rebalance VOL start|status|stop` (docs/rebalance.md): this node's run
//! (`crate::rebalance`), and at its end the volume's `rebalancing` flag cleared when every
//! file is where its name hashes.

use super::*;

pub(super) async fn rebalance(
    node: &Arc<Node>,
    name: &str,
    action: &str,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = node
        .store
        .get_volume(name)
        .await
        .map_err(cfg)?
        .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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
            let run = crate::rebalance::start(node, name)?;
            let (node2, vol, epoch) = (node.clone(), name.to_string(), rec.layout_epoch);
            // Only a node that holds every brick of the volume knows, at the end of its
            // own run, that no file is left to move.
            let alone = rec.sets.iter().all(|s| s.bricks.iter().all(|b| b.node == node.name));
            tokio::spawn(async move {
                let s = run.await;
                if alone && s.state == "completed" && s.skipped == 0 {
                    let r = edit_volume(&node2, &vol, |v| {
                        if v.layout_epoch == epoch {
                            v.rebalancing = false;
                        }
                        Ok(())
                    })
                    .await;
                    if let Err(e) = r {
                        tracing::warn!(volume = %vol, error = %e, "rebalance done; cannot clear rebalancing");
                    }
                }
            });
            Ok(done(format!(
                "Rebalance on {name} has been started successfully. Use rebalance status command to check status of the rebalance process."
            )))
        }
        "status" => Ok(MgmtReply::Rebalance(crate::rebalance::status(name).into_iter().collect())),
        "stop" => {
            if crate::rebalance::stop(name) {
                Ok(done(format!(
                    "volume rebalance: {name}: stopping; files moved so far stay moved"
                )))
            } else {
                Err(fail(
                    Errno::EINVAL,
                    format!("volume rebalance: {name}: no rebalance is running"),
                ))
            }
        }
        other => Err(fail(
            Errno::EINVAL,
            format!("volume rebalance: unknown action {other:?} (start, status or stop)"),
        )),
    }
}
