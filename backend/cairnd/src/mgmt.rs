//! Management requests from the `cairn` CLI, carried out against the config store and
//! the other nodes. Messages follow the `gluster` CLI's wording where one exists.

use crate::node::Node;
use cairn_brick::{Brick, BrickMarker};
use cairn_config::{build_map, BrickRecord, PeerRecord, SetRecord, VolumeRecord};
use cairn_proto::map::{BrickState, VolumeStatus};
use cairn_proto::mgmt::*;
use cairn_proto::msg::{Reply, Request};
use cairn_proto::{Errno, RemoteError};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fail(errno: Errno, msg: impl Into<String>) -> RemoteError {
    RemoteError::new(errno, msg)
}

pub(crate) fn cfg(e: cairn_config::ConfigError) -> RemoteError {
    use cairn_config::ConfigError as C;
    let errno = match &e {
        C::Conflict(_) => Errno::EEXIST,
        C::NotFound(_) => Errno::ENOENT,
        C::Invalid(_) => Errno::EINVAL,
        C::BadRecord { .. } => Errno::EIO,
        _ => Errno::EHOSTDOWN,
    };
    RemoteError::new(errno, e.to_string())
}

fn done(message: impl Into<String>) -> MgmtReply {
    MgmtReply::Done { message: message.into() }
}

/// Volume options that can be set, with their validators. Only options the code honours
/// are listed; an unknown key is refused.
pub const OPTIONS: &[(&str, &str)] = &[
    ("features.read-only", "on|off: refuse every change with EROFS"),
    ("performance.write-behind", "on|off: clients coalesce small sequential writes"),
    (
        "performance.write-behind-window-size",
        "bytes buffered per file by write-behind (4096..=67108864)",
    ),
    ("performance.cache-timeout", "seconds clients may cache attributes and entries (0..=10)"),
    (
        "cluster.heal-parallelism",
        "inodes a heal crawl copies at a time, per brick (1..=64; default 4)",
    ),
    (
        "cluster.heal-bandwidth",
        "bytes of file data a brick's heal copies per second, with an optional K/M/G suffix (0 = unlimited; default 0)",
    ),
    (
        "cluster.quorum-type",
        "none|auto|fixed: when a replica set accepts writes (default none: while any brick is up; auto: more than half up, or half including the first brick; fixed: cluster.quorum-count up)",
    ),
    ("cluster.quorum-count", "bricks that must be up with cluster.quorum-type fixed (1..=3)"),
    (
        "features.scrub-interval",
        "seconds between scrubs of every brick's file data against its checksums (0 = off; default 86400)",
    ),
    (
        "auth.allow",
        "client addresses that may use the volume, comma-separated: IPv4 with * octets (192.168.1.*), IPv6, CIDR (10.0.0.0/24) or * (default *: every address)",
    ),
    (
        "auth.reject",
        "client addresses refused even if auth.allow lets them in, same patterns (default: none)",
    ),
];

/// For a request that changes who may use a volume (setting or resetting `auth.allow` /
/// `auth.reject`, or every option): the volume and the option. Accepted only from this
/// host or a peer node, so a refused client cannot lift its own refusal.
pub fn changes_access(req: &MgmtRequest) -> Option<(&str, &str)> {
    let access_key = |k: &str| k == crate::access::ALLOW || k == crate::access::REJECT;
    match req {
        MgmtRequest::VolumeSet { name, key, .. } if access_key(key) => Some((name, key)),
        MgmtRequest::VolumeReset { name, key } if key == "all" || access_key(key) => {
            Some((name, key))
        }
        _ => None,
    }
}

pub fn validate_option(key: &str, value: &str) -> Result<(), String> {
    if key == crate::access::ALLOW || key == crate::access::REJECT {
        return crate::access::validate(value)
            .map_err(|e| format!("invalid value '{value}' for option {key}: {e}"));
    }
    let on_off = |v: &str| matches!(v, "on" | "off");
    let ok = match key {
        "features.read-only" | "performance.write-behind" => on_off(value),
        "performance.write-behind-window-size" => {
            value.parse::<u64>().map(|n| (4096..=64 << 20).contains(&n)).unwrap_or(false)
        }
        "performance.cache-timeout" => value.parse::<u64>().map(|n| n <= 10).unwrap_or(false),
        "features.scrub-interval" => value.parse::<u64>().is_ok(),
        "cluster.heal-parallelism" => {
            value.parse::<u32>().map(|n| (1..=64).contains(&n)).unwrap_or(false)
        }
        "cluster.heal-bandwidth" => crate::heal::parse_bandwidth(value).is_some(),
        "cluster.quorum-type" => matches!(value, "none" | "auto" | "fixed"),
        "cluster.quorum-count" => {
            value.parse::<u32>().map(|n| (1..=3).contains(&n)).unwrap_or(false)
        }
        _ => return Err(format!("option {key} does not exist")),
    };
    if ok {
        Ok(())
    } else {
        let help = OPTIONS.iter().find(|(k, _)| *k == key).map(|(_, h)| *h).unwrap_or("");
        Err(format!("invalid value '{value}' for option {key} ({help})"))
    }
}

fn valid_volume_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr)
}

fn new_volume_id() -> String {
    // 128 random bits (Id::new_on_set leaves the top 32 bits for the set: fill them too).
    let (a, b) = (cairn_proto::Id::new_on_set(0).0, cairn_proto::Id::new_on_set(0).0);
    format!("{:032x}", a ^ (b << 32))
}

async fn wait_states(
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

async fn volume_create(node: &Arc<Node>, c: VolumeCreate) -> Result<MgmtReply, RemoteError> {
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
        reset_bricks: Default::default(),
    };
    node.store.create_volume(&rec).await.map_err(|e| fail(Errno::EEXIST, format!("{e}")))?;
    node.kick.notify_one();
    Ok(done("please start the volume to access data"))
}

async fn set_status(
    node: &Arc<Node>,
    name: &str,
    _verb: &str,
    status: VolumeStatus,
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let (mut rec, rev) = node
        .store
        .get_volume(name)
        .await
        .map_err(cfg)?
        .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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

async fn maps(
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

fn token_info(r: cairn_config::JoinTokenRecord) -> JoinTokenInfo {
    JoinTokenInfo {
        id: r.id,
        created: r.created,
        expires: r.expires,
        used_at: r.used_at,
        used_by: r.used_by,
        revoked_at: r.revoked_at,
    }
}

/// A refused join token is EACCES, saying why; a store failure keeps its own errno.
pub fn join_refused(e: cairn_config::JoinTokenError) -> RemoteError {
    match e {
        cairn_config::JoinTokenError::Store(e) => cfg(e),
        e => fail(Errno::EACCES, e.to_string()),
    }
}

/// `peer probe ADDR --token T`: ask the node at `addr` who it is, use up the join token,
/// then add the node to the pool. A node already in the pool needs no token.
async fn peer_probe(
    node: &Arc<Node>,
    addr: String,
    token: Option<String>,
) -> Result<MgmtReply, RemoteError> {
    let addr =
        if addr.contains(':') { addr } else { format!("{addr}:{}", cairn_proto::DEFAULT_PORT) };
    if addr == node.addr {
        return Ok(done("Probe on localhost not needed"));
    }
    let r = node
        .peers
        .call(&addr, &node.name, Request::Mgmt(MgmtRequest::PeerStatus), bytes::Bytes::new())
        .await;
    let peers = match r {
        Ok((Reply::Mgmt(MgmtReply::Peers(p)), _)) => p,
        Ok(_) => return Err(fail(Errno::EPROTO, format!("{addr} answered oddly"))),
        Err(e) => {
            return Err(fail(e.errno, format!("Probe returned with {}: {}", e.errno, e.message)))
        }
    };
    let me = peers
        .into_iter()
        .find(|p| p.local)
        .ok_or_else(|| fail(Errno::EPROTO, format!("{addr} did not name itself")))?;
    let rec = PeerRecord { name: me.name.clone(), addr: addr.clone(), uuid: me.uuid };
    if node.store.get_peer(&rec.name).await.map_err(cfg)?.as_ref() == Some(&rec) {
        return Ok(done(format!("Host {} at {addr} already in peer list", rec.name)));
    }
    let Some(token) = token else {
        return Err(fail(
            Errno::EACCES,
            format!(
                "peer probe {addr}: joining node {} needs a join token: create one with \
                 'cairn peer token create' and pass it with --token",
                rec.name
            ),
        ));
    };
    let grant =
        cairn_config::consume_join_token(&node.store, &token, &format!("{} at {addr}", rec.name))
            .await
            .map_err(|e| {
                let e = join_refused(e);
                fail(e.errno, format!("peer probe {addr}: {}", e.message))
            })?;
    node.store.add_peer(rec).await.map_err(|e| fail(Errno::EEXIST, format!("{e}")))?;
    tracing::info!(peer = me.name, addr, token = grant.token_id, "peer joined with a join token");
    node.kick.notify_one();
    Ok(done(format!("{} at {addr}", me.name)))
}

pub async fn handle(node: &Arc<Node>, req: MgmtRequest) -> Result<MgmtReply, RemoteError> {
    match req {
        MgmtRequest::PeerProbe { addr, token } => peer_probe(node, addr, token).await,
        MgmtRequest::PeerTokenCreate { ttl_secs } => {
            let ttl = if ttl_secs == 0 {
                cairn_config::DEFAULT_JOIN_TOKEN_TTL
            } else {
                Duration::from_secs(ttl_secs)
            };
            let (token, rec) = node.store.create_join_token(ttl).await.map_err(cfg)?;
            Ok(MgmtReply::JoinToken { token, info: token_info(rec) })
        }
        MgmtRequest::PeerTokenList => Ok(MgmtReply::JoinTokens(
            node.store.join_tokens().await.map_err(cfg)?.into_iter().map(token_info).collect(),
        )),
        MgmtRequest::PeerTokenRevoke { id } => {
            let rec = node.store.revoke_join_token(&id).await.map_err(cfg)?;
            Ok(done(format!("join token {} revoked", rec.id)))
        }
        MgmtRequest::AuditLog { .. } | MgmtRequest::Enroll(_) => Err(fail(
            Errno::EINVAL,
            "the audit log and enrollment are handled by the service (enroll.rs), not here",
        )),
        MgmtRequest::CertRecord(_) | MgmtRequest::CertList | MgmtRequest::CertRevoke { .. } => {
            Err(fail(Errno::EINVAL, "certificates are handled by the service (certs.rs), not here"))
        }
        MgmtRequest::PeerDetach { name, force } => {
            if name == node.name {
                return Err(fail(Errno::EINVAL, format!("{name} is localhost")));
            }
            if node.store.get_peer(&name).await.map_err(cfg)?.is_none() {
                return Err(fail(Errno::ENOENT, format!("{name} is not part of cluster")));
            }
            let vols = node.store.list_volumes().await.map_err(cfg)?;
            if vols.iter().any(|v| v.sets.iter().any(|s| s.bricks.iter().any(|b| b.node == name))) {
                return Err(fail(
                    Errno::EBUSY,
                    format!("Brick(s) with the peer {name} exist in cluster"),
                ));
            }
            let _ = force;
            node.store.remove_peer(&name).await.map_err(cfg)?;
            Ok(done(""))
        }
        MgmtRequest::PeerStatus => {
            let mut peers = node.store.list_peers().await.map_err(cfg)?;
            // A node that has not joined yet still names itself, so it can be probed.
            if !peers.iter().any(|p| p.name == node.name) {
                peers.push(PeerRecord {
                    name: node.name.clone(),
                    addr: node.addr.clone(),
                    uuid: node.uuid.clone(),
                });
            }
            let live: HashSet<String> =
                node.store.live_nodes().await.map_err(cfg)?.into_keys().collect();
            Ok(MgmtReply::Peers(
                peers
                    .into_iter()
                    .map(|p| cairn_proto::mgmt::PeerInfo {
                        connected: live.contains(&p.name),
                        local: p.name == node.name,
                        name: p.name,
                        addr: p.addr,
                        uuid: p.uuid,
                    })
                    .collect(),
            ))
        }
        MgmtRequest::VolumeCreate(c) => volume_create(node, c).await,
        MgmtRequest::VolumeStart { name, force } => {
            set_status(node, &name, "start", VolumeStatus::Started, force).await
        }
        MgmtRequest::VolumeStop { name, force } => {
            set_status(node, &name, "stop", VolumeStatus::Stopped, force).await
        }
        MgmtRequest::VolumeDelete { name } => {
            let (rec, _) = node
                .store
                .get_volume(&name)
                .await
                .map_err(cfg)?
                .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
            if rec.status == VolumeStatus::Started {
                return Err(fail(
                    Errno::EBUSY,
                    format!("Volume {name} has been started. Volume needs to be stopped before deletion."),
                ));
            }
            node.store.delete_volume(&name).await.map_err(cfg)?;
            node.kick.notify_one();
            Ok(done(""))
        }
        MgmtRequest::VolumeInfo { name } => {
            Ok(MgmtReply::Volumes(maps(node, name.as_deref()).await?))
        }
        MgmtRequest::VolumeList => {
            Ok(MgmtReply::Names(maps(node, None).await?.into_iter().map(|m| m.name).collect()))
        }
        MgmtRequest::VolumeStatus { name } => {
            let mut out = vec![];
            for m in maps(node, name.as_deref()).await? {
                let mut bricks = vec![];
                for s in &m.sets {
                    for b in &s.bricks {
                        let slot = node.slot(&m.name, b.index);
                        let (pending, total, free) = match &slot {
                            Some(sl) => {
                                let pending: u64 =
                                    sl.brick.pending_counts().iter().map(|(_, n)| n).sum();
                                let st = rustix_statvfs(sl.brick.root());
                                (pending, st.0, st.1)
                            }
                            None => (0, 0, 0),
                        };
                        bricks.push(BrickStatus {
                            index: b.index,
                            node: b.node.clone(),
                            path: b.path.clone(),
                            online: b.state != BrickState::Down,
                            state: format!("{:?}", b.state),
                            port: b
                                .addr
                                .rsplit_once(':')
                                .and_then(|(_, p)| p.parse().ok())
                                .unwrap_or(0),
                            pid: if b.node == node.name && slot.is_some() {
                                std::process::id()
                            } else {
                                0
                            },
                            pending_heal: pending,
                            total_bytes: total,
                            free_bytes: free,
                        });
                    }
                }
                out.push(VolumeStatusInfo {
                    name: m.name.clone(),
                    status: m.status.to_string(),
                    bricks,
                });
            }
            Ok(MgmtReply::Status(out))
        }
        MgmtRequest::VolumeSet { name, key, value } => {
            validate_option(&key, &value).map_err(|m| fail(Errno::EINVAL, m.to_string()))?;
            update_options(node, &name, "set", |o| {
                o.insert(key.clone(), value.clone());
            })
            .await
        }
        MgmtRequest::VolumeReset { name, key } => {
            if key != "all" && !OPTIONS.iter().any(|(k, _)| *k == key) {
                return Err(fail(Errno::EINVAL, format!("option {key} does not exist")));
            }
            update_options(node, &name, "reset", |o| {
                if key == "all" {
                    o.clear();
                } else {
                    o.remove(&key);
                }
            })
            .await
        }
        req @ MgmtRequest::BrickPrepare { .. } => brick_prepare(node, req).await,
        MgmtRequest::HealInfo { name } => heal_info(node, &name).await,
        MgmtRequest::GatewayList { kind } => {
            let (objs, revision) = node.store.gateway_objects(&kind).await.map_err(cfg)?;
            let objects = objs
                .into_iter()
                .map(|(name, doc, revision)| GatewayObject { name, doc, revision })
                .collect();
            Ok(MgmtReply::Gateway { revision, objects })
        }
        MgmtRequest::GatewayPut { kind, name, doc, if_unchanged_since } => {
            if crate::audit::has_masked_secret(&doc) {
                return Err(fail(
                    Errno::EINVAL,
                    format!(
                        "{kind} {name}: the document carries a masked secret ('{}'), as read by \
                         a client that is not a node of the cluster; change it from a node",
                        crate::audit::MASK
                    ),
                ));
            }
            node.store
                .put_gateway_object(&kind, &name, &doc, if_unchanged_since)
                .await
                .map_err(cfg)?;
            Ok(MgmtReply::Done { message: format!("{kind} {name} stored") })
        }
        MgmtRequest::GatewayDelete { kind, name } => {
            node.store.delete_gateway_object(&kind, &name).await.map_err(cfg)?;
            Ok(MgmtReply::Done { message: format!("{kind} {name} deleted") })
        }
        MgmtRequest::HealStatistics { name } => heal_statistics(node, &name).await,
        MgmtRequest::HealFull { name } => heal_full(node, &name).await,
        MgmtRequest::HealLocal { name, full } => {
            Ok(MgmtReply::HealLocal(heal_local(node, &name, full).await?))
        }
        MgmtRequest::ResetBrick { name, brick, commit, force } => {
            reset_brick(node, &name, &brick, commit, force).await
        }
        MgmtRequest::ReplaceBrick { name, old, new } => {
            replace_brick(node, &name, &old, &new).await
        }
        req @ MgmtRequest::BrickReset { .. } => brick_reset(node, req).await,
    }
}

async fn brick_prepare(node: &Arc<Node>, req: MgmtRequest) -> Result<MgmtReply, RemoteError> {
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

/// This node's bricks of `name`: pending entries and crawl statistics; with `full`, first
/// ask each for a full crawl (durable: `.cairn/full-heal`).
async fn heal_local(
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
            let r = crate::chain::exec_local(
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

fn state_name(s: BrickState) -> &'static str {
    match s {
        BrickState::Up => "up",
        BrickState::Healing => "healing",
        BrickState::Down => "down",
    }
}

/// Send a management request to node `to` (answered here if it is this node).
async fn call_node(
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
async fn heal_gather(
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

async fn heal_info(node: &Arc<Node>, name: &str) -> Result<MgmtReply, RemoteError> {
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

async fn heal_statistics(node: &Arc<Node>, name: &str) -> Result<MgmtReply, RemoteError> {
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

async fn heal_full(node: &Arc<Node>, name: &str) -> Result<MgmtReply, RemoteError> {
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

/// Index and node of brick `spec` (`HOST:/PATH`, HOST a node name or address) of `rec`.
async fn find_brick(
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

fn parse_spec(spec: &str) -> Result<(String, String), RemoteError> {
    let (h, p) = spec
        .split_once(":/")
        .ok_or_else(|| fail(Errno::EINVAL, format!("brick '{spec}' is not HOST:/PATH")))?;
    let p = format!("/{}", p.trim_end_matches('/'));
    Ok((h.to_string(), p))
}

/// Apply `f` to the volume record (retried on concurrent updates).
async fn edit_volume(
    node: &Arc<Node>,
    name: &str,
    f: impl Fn(&mut VolumeRecord) -> Result<(), RemoteError>,
) -> Result<VolumeRecord, RemoteError> {
    for _ in 0..5 {
        let (mut rec, rev) = node
            .store
            .get_volume(name)
            .await
            .map_err(cfg)?
            .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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

async fn wait_brick_down(node: &Arc<Node>, name: &str, index: u32, limit: Duration) -> bool {
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
async fn take_out(node: &Arc<Node>, name: &str, index: u32) -> Result<(), RemoteError> {
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
async fn reinit_brick(
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

async fn reset_brick(
    node: &Arc<Node>,
    name: &str,
    spec: &str,
    commit: bool,
    force: bool,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = node
        .store
        .get_volume(name)
        .await
        .map_err(cfg)?
        .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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

async fn replace_brick(
    node: &Arc<Node>,
    name: &str,
    old: &str,
    new: &str,
) -> Result<MgmtReply, RemoteError> {
    let (rec, _) = node
        .store
        .get_volume(name)
        .await
        .map_err(cfg)?
        .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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

async fn brick_reset(node: &Arc<Node>, req: MgmtRequest) -> Result<MgmtReply, RemoteError> {
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

async fn update_options(
    node: &Arc<Node>,
    name: &str,
    _verb: &str,
    f: impl Fn(&mut BTreeMap<String, String>),
) -> Result<MgmtReply, RemoteError> {
    for _ in 0..5 {
        let (mut rec, rev) = node
            .store
            .get_volume(name)
            .await
            .map_err(cfg)?
            .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))?;
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

/// (total, free) bytes of the filesystem holding `path`.
fn rustix_statvfs(path: &Path) -> (u64, u64) {
    match rustix::fs::statvfs(path) {
        Ok(s) => (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize),
        Err(_) => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(validate_option("features.read-only", "on").is_ok());
        assert!(validate_option("features.read-only", "yes")
            .unwrap_err()
            .contains("invalid value"));
        assert!(validate_option("performance.cache-timeout", "11").is_err());
        assert!(validate_option("nfs.disable", "on").unwrap_err().contains("does not exist"));
        assert!(validate_option("auth.allow", "127.0.0.1,10.1.*,10.0.0.0/24,::1").is_ok());
        assert!(validate_option("auth.reject", "*").is_ok());
        let e = validate_option("auth.allow", "10.0.0.0/40").unwrap_err();
        assert!(e.contains("auth.allow") && e.contains("10.0.0.0/40"), "{e}");
        assert!(validate_option("auth.reject", "").is_err());
        for (k, _) in OPTIONS {
            assert!(
                !validate_option(k, "").err().unwrap_or_default().contains("does not exist"),
                "{k}"
            );
        }
    }

    #[test]
    fn access_changes_are_recognised() {
        let set = |key: &str| MgmtRequest::VolumeSet {
            name: "v".into(),
            key: key.into(),
            value: "*".into(),
        };
        let reset = |key: &str| MgmtRequest::VolumeReset { name: "v".into(), key: key.into() };
        assert_eq!(changes_access(&set("auth.allow")), Some(("v", "auth.allow")));
        assert_eq!(changes_access(&set("auth.reject")), Some(("v", "auth.reject")));
        assert_eq!(changes_access(&reset("auth.allow")), Some(("v", "auth.allow")));
        assert_eq!(changes_access(&reset("all")), Some(("v", "all")));
        assert_eq!(changes_access(&set("features.read-only")), None);
        assert_eq!(changes_access(&reset("performance.cache-timeout")), None);
        assert_eq!(changes_access(&MgmtRequest::VolumeInfo { name: None }), None);
    }

    #[test]
    fn volume_names() {
        assert!(valid_volume_name("vol0"));
        assert!(!valid_volume_name("a/b"));
        assert!(!valid_volume_name(""));
    }
}
