//! `cairn volume heal`: the local part on each node and the gathering across nodes (info, statistics, full).

use super::*;

/// This node's bricks of `name`: pending entries and crawl statistics; with `full`, first
/// ask each for a full crawl (durable: `.cairn/full-heal`).
pub(super) async fn heal_local(
    node: &Arc<Node>,
    name: &str,
    full: bool,
) -> Result<Vec<HealLocalBrick>, RemoteError> {
    let map = node.map(name);
    let slots: Vec<_> = node.bricks.read().values().filter(|s| s.volume == name).cloned().collect();
    let mut out = vec![];
    for sl in slots {
        if full {
            let b = sl.brick.clone();
            tokio::task::spawn_blocking(move || b.request_full_heal("cairn volume heal full"))
                .await
                .map_err(|e| fail(Errno::EIO, format!("heal full task: {e}")))??;
        }
        let mut ids = std::collections::BTreeSet::new();
        for (peer, _) in sl.brick.pending_counts() {
            let r = crate::exec::exec_local(
                &sl,
                cairn_proto::Creds::root(),
                cairn_proto::msg::Op::PendingList { peer },
                bytes::Bytes::new(),
                None,
                false,
            )
            .await;
            if let Ok((Reply::Pending(v), _)) = r {
                ids.extend(v.into_iter().map(|(i, _)| i.to_hex()));
            }
        }
        let state = map
            .as_ref()
            .and_then(|m| m.brick(sl.index).map(|(_, b)| b.state))
            .unwrap_or(BrickState::Down);
        let (in_progress, crawls) = {
            let st = sl.heal.lock();
            (st.in_progress(), st.crawls())
        };
        out.push(HealLocalBrick {
            index: sl.index,
            stats: HealBrickStats {
                index: sl.index,
                node: node.name.clone(),
                path: sl.brick.root().display().to_string(),
                online: true,
                state: state_name(state).into(),
                in_progress,
                full_pending: sl.brick.full_heal_requested(),
                pending: ids.len() as u64,
                crawls,
            },
            pending: ids.into_iter().collect(),
        });
    }
    Ok(out)
}

pub(super) fn state_name(s: BrickState) -> &'static str {
    match s {
        BrickState::Up => "up",
        BrickState::Healing => "healing",
        BrickState::Down => "down",
    }
}

/// Send a management request to node `to` (answered here if it is this node).
pub(super) async fn call_node(
    node: &Arc<Node>,
    to: &str,
    addr: &str,
    req: MgmtRequest,
) -> Result<MgmtReply, RemoteError> {
    if to == node.name {
        return match req {
            MgmtRequest::HealLocal { name, full } => {
                Ok(MgmtReply::HealLocal(heal_local(node, &name, full).await?))
            }
            req @ MgmtRequest::BrickReset { .. } => brick_reset(node, req).await,
            req @ MgmtRequest::BrickAdd { .. } => brick_add(node, req).await,
            MgmtRequest::RebalanceLocal { name, action } => {
                rebalance_local(node, &name, &action).await
            }
            _ => Err(fail(Errno::EINVAL, "not a node-to-node request")),
        };
    }
    let addr = if addr.is_empty() {
        node.store
            .get_peer(to)
            .await
            .map_err(cfg)?
            .map(|p| p.addr)
            .ok_or_else(|| fail(Errno::ENOENT, format!("{to} is not a peer")))?
    } else {
        addr.to_string()
    };
    let call = node.peers.call(&addr, &node.name, Request::Mgmt(req), bytes::Bytes::new());
    match tokio::time::timeout(Duration::from_secs(10), call).await {
        Ok(Ok((Reply::Mgmt(m), _))) => Ok(m),
        Ok(Ok(_)) => Err(fail(Errno::EPROTO, format!("node {to}: unexpected reply"))),
        Ok(Err(e)) => Err(fail(e.errno, format!("node {to}: {}", e.message))),
        Err(_) => Err(fail(Errno::ETIMEDOUT, format!("node {to} at {addr} did not answer"))),
    }
}

/// Heal reports of every brick of a started volume, from the nodes holding them (a node
/// that does not answer leaves its bricks out).
pub(super) async fn heal_gather(
    node: &Arc<Node>,
    name: &str,
    full: bool,
) -> Result<(cairn_proto::map::VolumeMap, BTreeMap<u32, HealLocalBrick>), RemoteError> {
    let m = maps(node, Some(name)).await?.remove(0);
    if m.status != VolumeStatus::Started {
        return Err(fail(Errno::EINVAL, format!("Volume {name} is not started.")));
    }
    let mut nodes: BTreeMap<String, String> = BTreeMap::new();
    for b in m.sets.iter().flat_map(|s| s.bricks.iter()) {
        nodes.entry(b.node.clone()).or_insert_with(|| b.addr.clone());
    }
    let calls = nodes.iter().map(|(n, addr)| {
        let req = MgmtRequest::HealLocal { name: name.to_string(), full };
        async move { (n.clone(), call_node(node, n, addr, req).await) }
    });
    let mut out = BTreeMap::new();
    for (n, r) in futures::future::join_all(calls).await {
        match r {
            Ok(MgmtReply::HealLocal(v)) => out.extend(v.into_iter().map(|b| (b.index, b))),
            Ok(_) => {}
            Err(e) => tracing::debug!(volume = name, node = %n, error = %e, "no heal report"),
        }
    }
    Ok((m, out))
}

pub(super) async fn heal_info(node: &Arc<Node>, name: &str) -> Result<MgmtReply, RemoteError> {
    let (m, mut reports) = heal_gather(node, name, false).await?;
    let mut out = vec![];
    for b in m.sets.iter().flat_map(|s| s.bricks.iter()) {
        let r = reports.remove(&b.index);
        out.push(HealBrickInfo {
            index: b.index,
            node: b.node.clone(),
            path: b.path.clone(),
            online: r.is_some(),
            pending: r.map(|r| r.pending).unwrap_or_default(),
        });
    }
    Ok(MgmtReply::Heal(out))
}

pub(super) async fn heal_statistics(
    node: &Arc<Node>,
    name: &str,
) -> Result<MgmtReply, RemoteError> {
    let (m, mut reports) = heal_gather(node, name, false).await?;
    let mut out = vec![];
    for b in m.sets.iter().flat_map(|s| s.bricks.iter()) {
        out.push(match reports.remove(&b.index) {
            Some(r) => HealBrickStats { state: state_name(b.state).into(), ..r.stats },
            None => HealBrickStats {
                index: b.index,
                node: b.node.clone(),
                path: b.path.clone(),
                online: false,
                state: state_name(b.state).into(),
                in_progress: false,
                full_pending: false,
                pending: 0,
                crawls: vec![],
            },
        });
    }
    Ok(MgmtReply::HealStats(out))
}

pub(super) async fn heal_full(node: &Arc<Node>, name: &str) -> Result<MgmtReply, RemoteError> {
    let (m, reports) = heal_gather(node, name, true).await?;
    let missed: Vec<String> = m
        .sets
        .iter()
        .flat_map(|s| s.bricks.iter())
        .filter(|b| !reports.contains_key(&b.index))
        .map(|b| format!("{}:{}", b.node, b.path))
        .collect();
    tracing::info!(volume = name, bricks = reports.len(), "full heal requested");
    let mut msg = format!(
        "Launching heal operation to perform full self heal on volume {name} has been \
         successful. Use heal info commands to check status."
    );
    if !missed.is_empty() {
        msg.push_str(&format!(
            " Bricks not reached (down): {}; they catch up from the pending index when they \
             return.",
            missed.join(", ")
        ));
    }
    Ok(done(msg))
}
