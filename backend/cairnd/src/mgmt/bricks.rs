//! Brick changes: prepare, reset-brick, replace-brick, and the helpers they share.

use super::*;

pub(super) async fn brick_prepare(
    node: &Arc<Node>,
    req: MgmtRequest,
) -> Result<MgmtReply, RemoteError> {
    match req {
        MgmtRequest::BrickPrepare { volume, volume_id, index, path, force } => {
            let marker = BrickMarker {
                format: 1,
                volume: volume.clone(),
                volume_id: format!("{volume_id:032x}"),
                index,
            };
            let p = path.clone();
            tokio::task::spawn_blocking(move || Brick::prepare(Path::new(&p), &marker, force))
                .await
                .map_err(|e| fail(Errno::EIO, format!("brick prepare task: {e}")))??;
            Ok(done(format!("brick {}:{path} prepared for {volume}", node.name)))
        }
        _ => Err(fail(Errno::EINVAL, "not a brick prepare request")),
    }
}

/// Index and node of brick `spec` (`HOST:/PATH`, HOST a node name or address) of `rec`.
pub(super) async fn find_brick(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    spec: &str,
) -> Result<(u32, String, String), RemoteError> {
    let (host, path) = parse_spec(spec)?;
    let peers = node.store.list_peers().await.map_err(cfg)?;
    let peer = peers
        .iter()
        .find(|p| p.name == host || host_of(&p.addr) == host)
        .ok_or_else(|| fail(Errno::ENOENT, format!("host {host} is not in the pool")))?;
    rec.sets
        .iter()
        .flat_map(|s| s.bricks.iter())
        .find(|b| b.node == peer.name && b.path == path)
        .map(|b| (b.index, b.node.clone(), b.path.clone()))
        .ok_or_else(|| {
            fail(Errno::ENOENT, format!("brick {spec} is not a brick of volume {}", rec.name))
        })
}

pub(super) fn parse_spec(spec: &str) -> Result<(String, String), RemoteError> {
    let (h, p) = spec
        .split_once(":/")
        .ok_or_else(|| fail(Errno::EINVAL, format!("brick '{spec}' is not HOST:/PATH")))?;
    let p = format!("/{}", p.trim_end_matches('/'));
    Ok((h.to_string(), p))
}

pub(super) async fn wait_brick_down(
    node: &Arc<Node>,
    name: &str,
    index: u32,
    limit: Duration,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let states = node.store.brick_states(name).await.unwrap_or_default();
        if !states.contains_key(&index) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        node.kick.notify_one();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Take brick `index` out of service (its node closes it; it shows Down).
pub(super) async fn take_out(node: &Arc<Node>, name: &str, index: u32) -> Result<(), RemoteError> {
    edit_volume(node, name, |r| {
        r.reset_bricks.insert(index);
        Ok(())
    })
    .await?;
    if !wait_brick_down(node, name, index, Duration::from_secs(20)).await {
        return Err(fail(
            Errno::ETIMEDOUT,
            format!("brick {index} of {name} is still running 20 s after it was taken out"),
        ));
    }
    Ok(())
}

/// Make `path` on `brick_node` brick `index` again, empty and flagged for a full heal, and
/// stale in the config store so it serves nothing until that heal is done.
pub(super) async fn reinit_brick(
    node: &Arc<Node>,
    rec: &VolumeRecord,
    index: u32,
    brick_node: &str,
    path: &str,
    force: bool,
) -> Result<(), RemoteError> {
    // Stale first: if anything below fails, the brick still cannot come up unhealed.
    // (Conflict: it is stale already.)
    match node.store.mark_stale(&rec.name, index, index).await {
        Ok(()) | Err(cairn_config::ConfigError::Conflict(_)) => {}
        Err(e) => return Err(cfg(e)),
    }
    let req = MgmtRequest::BrickReset {
        volume: rec.name.clone(),
        volume_id: u128::from_str_radix(&rec.id, 16).unwrap_or(0),
        index,
        path: path.to_string(),
        force,
    };
    call_node(node, brick_node, "", req)
        .await
        .map_err(|e| fail(e.errno, format!("brick {brick_node}:{path}: {}", e.message)))?;
    Ok(())
}

pub(super) async fn reset_brick(
    node: &Arc<Node>,
    name: &str,
    spec: &str,
    commit: bool,
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = existing_volume(node, name).await?;
    if rec.status != VolumeStatus::Started {
        return Err(fail(Errno::EINVAL, format!("Volume {name} is not started.")));
    }
    let (index, brick_node, path) = find_brick(node, &rec, spec).await?;
    if !commit {
        take_out(node, name, index).await?;
        tracing::info!(volume = name, brick = index, "reset-brick start: brick taken out");
        return Ok(done("reset-brick start operation successful"));
    }
    let states = node.store.brick_states(name).await.map_err(cfg)?;
    if states.contains_key(&index) && !rec.reset_bricks.contains(&index) {
        return Err(fail(
            Errno::EBUSY,
            format!(
                "brick {spec} is online; run 'cairn volume reset-brick {name} {spec} start' first"
            ),
        ));
    }
    reinit_brick(node, &rec, index, &brick_node, &path, force).await?;
    edit_volume(node, name, |r| {
        r.reset_bricks.remove(&index);
        Ok(())
    })
    .await?;
    tracing::info!(
        volume = name,
        brick = index,
        "reset-brick commit: brick re-initialised, full heal owed"
    );
    Ok(done(format!(
        "reset-brick commit{} operation successful; the brick serves again once a full heal \
         rebuilt it from its replicas (see 'cairn volume heal {name} statistics')",
        if force { " force" } else { "" }
    )))
}

pub(super) async fn replace_brick(
    node: &Arc<Node>,
    name: &str,
    old: &str,
    new: &str,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = existing_volume(node, name).await?;
    if rec.status != VolumeStatus::Started {
        return Err(fail(Errno::EINVAL, format!("Volume {name} is not started.")));
    }
    let (index, _, _) = find_brick(node, &rec, old).await?;
    let (host, path) = parse_spec(new)?;
    let peers = node.store.list_peers().await.map_err(cfg)?;
    let peer = peers
        .iter()
        .find(|p| p.name == host || host_of(&p.addr) == host)
        .ok_or_else(|| fail(Errno::ENOENT, format!("host {host} is not in the pool")))?
        .name
        .clone();
    for v in node.store.list_volumes().await.map_err(cfg)? {
        if v.sets.iter().flat_map(|s| s.bricks.iter()).any(|b| b.node == peer && b.path == path) {
            return Err(fail(
                Errno::EEXIST,
                format!("{new} is already a brick of volume {}", v.name),
            ));
        }
    }
    // The old brick stops before the new one opens (both publish the same brick key).
    take_out(node, name, index).await?;
    reinit_brick(node, &rec, index, &peer, &path, false).await?;
    edit_volume(node, name, |r| {
        for b in r.sets.iter_mut().flat_map(|s| s.bricks.iter_mut()) {
            if b.index == index {
                b.node = peer.clone();
                b.path = path.clone();
            }
        }
        r.reset_bricks.remove(&index);
        Ok(())
    })
    .await?;
    tracing::info!(volume = name, brick = index, new, "replace-brick: brick moved, full heal owed");
    Ok(done(format!(
        "replace-brick commit force operation successful; {new} serves once a full heal \
         rebuilt it (see 'cairn volume heal {name} statistics')"
    )))
}

pub(super) async fn brick_reset(
    node: &Arc<Node>,
    req: MgmtRequest,
) -> Result<MgmtReply, RemoteError> {
    let MgmtRequest::BrickReset { volume, volume_id, index, path, force } = req else {
        return Err(fail(Errno::EINVAL, "not a brick reset request"));
    };
    if node.slot(&volume, index).is_some_and(|s| s.brick.root() == Path::new(&path)) {
        return Err(fail(
            Errno::EBUSY,
            format!("brick {}:{path} is open; take it out with reset-brick start first", node.name),
        ));
    }
    let marker = BrickMarker {
        format: 1,
        volume: volume.clone(),
        volume_id: format!("{volume_id:032x}"),
        index,
    };
    let p = path.clone();
    tokio::task::spawn_blocking(move || Brick::reset(Path::new(&p), &marker, force))
        .await
        .map_err(|e| fail(Errno::EIO, format!("brick reset task: {e}")))??;
    tracing::info!(volume = %volume, brick = index, path = %path, "brick re-initialised for a full heal");
    Ok(done(format!("brick {}:{path} re-initialised for {volume}", node.name)))
}

/// (total, free) bytes of the filesystem holding `path`.
pub(super) fn rustix_statvfs(path: &Path) -> (u64, u64) {
    match rustix::fs::statvfs(path) {
        Ok(s) => (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize),
        Err(_) => (0, 0),
    }
}
