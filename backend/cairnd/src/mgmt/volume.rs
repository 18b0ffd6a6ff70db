//! Volume lifecycle: create (with its checks and the wait for its bricks), start/stop, the maps, option edits.

use super::*;

pub(super) fn valid_volume_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

/// The host of a brick's `HOST:PORT` address as a brick spec names it (an IPv6 literal in
/// brackets); the address itself if it does not parse.
pub(super) fn host_of(addr: &str) -> String {
    match cairn_proto::HostPort::parse(addr, 0) {
        Ok(a) if a.host().contains(':') => format!("[{}]", a.host()),
        Ok(a) => a.host().to_string(),
        Err(_) => addr.to_string(),
    }
}

pub(super) fn new_volume_id() -> String {
    // 128 random bits (Id::new_on_set leaves the top 32 bits for the set: fill them too).
    let (a, b) = (cairn_proto::Id::new_on_set(0).0, cairn_proto::Id::new_on_set(0).0);
    format!("{:032x}", a ^ (b << 32))
}

pub(super) async fn wait_states(
    node: &Node,
    volume: &str,
    want_up: bool,
    bricks: usize,
    limit: Duration,
) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let states = node.store.brick_states(volume).await.unwrap_or_default();
        let lagging: Vec<u32> = (0..bricks as u32)
            .filter(|i| {
                let s = states.get(i).copied().unwrap_or(BrickState::Down);
                if want_up {
                    s != BrickState::Up
                } else {
                    s != BrickState::Down
                }
            })
            .collect();
        if lagging.is_empty() || Instant::now() >= deadline {
            return lagging;
        }
        node.kick.notify_one();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn volume_create(
    node: &Arc<Node>,
    c: VolumeCreate,
) -> Result<MgmtReply, RemoteError> {
    let name = c.name.clone();
    let f = |m: String| fail(Errno::EINVAL, m.to_string());
    if !valid_volume_name(&c.name) {
        return Err(f("volume names are 1-64 characters of letters, digits, '-' and '_'".into()));
    }
    if !(1..=3).contains(&c.replica) {
        return Err(f(format!("replica count {} is not supported (1, 2 or 3)", c.replica)));
    }
    if c.bricks.is_empty() || !c.bricks.len().is_multiple_of(c.replica as usize) {
        return Err(f(format!(
            "number of bricks ({}) is not a multiple of replica count ({})",
            c.bricks.len(),
            c.replica
        )));
    }
    let peers = node.store.list_peers().await.map_err(cfg)?;
    let mut seen = HashSet::new();
    let mut bricks = vec![];
    for (i, spec) in c.bricks.iter().enumerate() {
        let (host, path) = spec
            .split_once(":/")
            .map(|(h, p)| (h, format!("/{p}")))
            .ok_or_else(|| f(format!("brick '{spec}' is not of the form HOST:/ABSOLUTE/PATH")))?;
        let path = path.trim_end_matches('/').to_string();
        let path = if path.is_empty() { "/".to_string() } else { path };
        let peer = peers
            .iter()
            .find(|p| p.name == host || host_of(&p.addr) == host)
            .ok_or_else(|| f(format!("host {host} is not in 'Peer in Cluster' state (probe it with 'cairn peer probe')")))?;
        if path == "/" {
            return Err(f(format!("brick {spec}: the root directory cannot be a brick")));
        }
        if !seen.insert((peer.name.clone(), path.clone())) {
            return Err(f(format!("brick {spec} is given twice")));
        }
        bricks.push(BrickRecord { index: i as u32, node: peer.name.clone(), path });
    }
    let sets: Vec<SetRecord> = bricks
        .chunks(c.replica as usize)
        .enumerate()
        .map(|(i, ch)| SetRecord { id: i as u32 + 1, bricks: ch.to_vec() })
        .collect();
    if !c.force {
        for s in &sets {
            let nodes: HashSet<_> = s.bricks.iter().map(|b| &b.node).collect();
            if nodes.len() < s.bricks.len() {
                return Err(f("Multiple bricks of a replicate volume are present on the same server. This setup is not optimal. Use 'force' at the end of the command if you want to override this behavior.".into()));
            }
        }
    }
    if node.store.get_volume(&c.name).await.map_err(cfg)?.is_some() {
        return Err(fail(Errno::EEXIST, format!("Volume {name} already exists")));
    }
    let id = new_volume_id();
    // Prepare every brick on its node before the volume exists anywhere.
    for b in &bricks {
        let req = MgmtRequest::BrickPrepare {
            volume: c.name.clone(),
            volume_id: u128::from_str_radix(&id, 16).unwrap_or(0),
            index: b.index,
            path: b.path.clone(),
            force: c.force,
        };
        let r = if b.node == node.name {
            brick_prepare(node, req).await
        } else {
            let addr =
                peers.iter().find(|p| p.name == b.node).map(|p| p.addr.clone()).unwrap_or_default();
            match node.peers.call(&addr, &node.name, Request::Mgmt(req), bytes::Bytes::new()).await
            {
                Ok((Reply::Mgmt(m), _)) => Ok(m),
                Ok(_) => Err(fail(Errno::EPROTO, "unexpected reply to brick prepare")),
                Err(e) => Err(e),
            }
        };
        if let Err(e) = r {
            return Err(fail(e.errno, format!("brick {}:{}: {}", b.node, b.path, e.message)));
        }
    }
    let rec = VolumeRecord {
        name: c.name.clone(),
        id,
        status: VolumeStatus::Created,
        replica: c.replica,
        sets,
        options: BTreeMap::new(),
        layout_epoch: 1,
        rebalancing: false,
        layout: vec![],
        reset_bricks: Default::default(),
        removing: None,
        retired: vec![],
    };
    node.store.create_volume(&rec).await.map_err(|e| fail(Errno::EEXIST, format!("{e}")))?;
    node.kick.notify_one();
    Ok(done("please start the volume to access data"))
}

pub(super) async fn set_status(
    node: &Arc<Node>,
    name: &str,
    _verb: &str,
    status: VolumeStatus,
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let (mut rec, rev) = existing_volume(node, name).await?;
    if rec.status == status && !force {
        let what = if status == VolumeStatus::Started {
            "already started"
        } else {
            "is not in the started state"
        };
        return Err(fail(Errno(libc::EALREADY), format!("Volume {name} {what}")));
    }
    rec.status = status;
    node.store.update_volume(&rec, rev).await.map_err(|e| fail(Errno::EAGAIN, format!("{e}")))?;
    node.kick.notify_one();
    let n = rec.sets.iter().map(|s| s.bricks.len()).sum();
    let lagging =
        wait_states(node, name, status == VolumeStatus::Started, n, Duration::from_secs(30)).await;
    if lagging.is_empty() {
        Ok(done(""))
    } else {
        let list: Vec<String> = lagging.iter().map(|i| i.to_string()).collect();
        let state = if status == VolumeStatus::Started { "not up yet" } else { "still running" };
        Ok(done(format!("bricks {} {state}; see 'cairn volume status {name}'", list.join(", "))))
    }
}

pub(super) async fn maps(
    node: &Arc<Node>,
    name: Option<&str>,
) -> Result<Vec<cairn_proto::map::VolumeMap>, RemoteError> {
    let rev = node.store.revision().await.map_err(cfg)?;
    let peers = node.store.list_peers().await.map_err(cfg)?;
    let vols = node.store.list_volumes().await.map_err(cfg)?;
    let mut out = vec![];
    for v in vols.iter().filter(|v| name.map(|n| n == v.name).unwrap_or(true)) {
        let states = node.store.brick_states(&v.name).await.map_err(cfg)?;
        out.push(build_map(v, &peers, &states, rev));
    }
    if let Some(n) = name {
        if out.is_empty() {
            return Err(fail(Errno::ENOENT, format!("Volume {n} does not exist")));
        }
    }
    Ok(out)
}

/// Apply `f` to the volume record (retried on concurrent updates).
pub(super) async fn edit_volume(
    node: &Arc<Node>,
    name: &str,
    f: impl Fn(&mut VolumeRecord) -> Result<(), RemoteError>,
) -> Result<VolumeRecord, RemoteError> {
    for _ in 0..5 {
        let (mut rec, rev) = existing_volume(node, name).await?;
        f(&mut rec)?;
        match node.store.update_volume(&rec, rev).await {
            Ok(_) => {
                node.kick.notify_one();
                return Ok(rec);
            }
            Err(cairn_config::ConfigError::Conflict(_)) => continue,
            Err(e) => return Err(cfg(e)),
        }
    }
    Err(fail(Errno::EAGAIN, "concurrent updates; try again"))
}

pub(super) async fn update_options(
    node: &Arc<Node>,
    name: &str,
    _verb: &str,
    f: impl Fn(&mut BTreeMap<String, String>),
) -> Result<MgmtReply, RemoteError> {
    for _ in 0..5 {
        let (mut rec, rev) = existing_volume(node, name).await?;
        f(&mut rec.options);
        match node.store.update_volume(&rec, rev).await {
            Ok(_) => {
                node.kick.notify_one();
                return Ok(done(""));
            }
            Err(cairn_config::ConfigError::Conflict(_)) => continue,
            Err(e) => return Err(cfg(e)),
        }
    }
    Err(fail(Errno::EAGAIN, "concurrent updates; try again"))
}
