//! Management requests from the `cairn` CLI, carried out against the config store and
//! the other nodes. Messages follow the `gluster` CLI's wording where one exists.

mod bricks;
mod grow;
mod heal;
mod rebalance;
mod shrink;
mod volume;

use bricks::*;
use grow::*;
use heal::*;
use rebalance::*;
use shrink::*;
use volume::*;

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

pub(crate) use crate::config_error::cfg;

fn fail(errno: Errno, msg: impl Into<String>) -> RemoteError {
    RemoteError::new(errno, msg)
}

/// Volume `name`'s record and its revision in etcd; ENOENT "Volume NAME does not exist"
/// (gluster's words) when there is none.
async fn existing_volume(node: &Node, name: &str) -> Result<(VolumeRecord, u64), RemoteError> {
    node.store
        .get_volume(name)
        .await
        .map_err(cfg)?
        .ok_or_else(|| fail(Errno::ENOENT, format!("Volume {name} does not exist")))
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

/// A volume option `cairn volume set` refuses.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("option {key} does not exist")]
    Unknown { key: String },
    #[error("invalid value '{value}' for option {key} ({help})")]
    Invalid { key: String, value: String, help: &'static str },
    #[error("invalid value '{value}' for option {key}: {why}")]
    Access { key: String, value: String, why: crate::access::AccessError },
}

pub fn validate_option(key: &str, value: &str) -> Result<(), OptionError> {
    if key == crate::access::ALLOW || key == crate::access::REJECT {
        return crate::access::validate(value).map_err(|why| OptionError::Access {
            key: key.to_string(),
            value: value.to_string(),
            why,
        });
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
        _ => return Err(OptionError::Unknown { key: key.to_string() }),
    };
    if ok {
        Ok(())
    } else {
        let help = OPTIONS.iter().find(|(k, _)| *k == key).map(|(_, h)| *h).unwrap_or("");
        Err(OptionError::Invalid { key: key.to_string(), value: value.to_string(), help })
    }
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
        MgmtRequest::CertRecord(_)
        | MgmtRequest::CertList
        | MgmtRequest::CertRevoke { .. }
        | MgmtRequest::CertRenew(_) => {
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
            let (rec, _) = existing_volume(node, &name).await?;
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
                            port: cairn_proto::HostPort::parse(&b.addr, 0)
                                .map(|a| a.port())
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
        MgmtRequest::VolumeAddBrick { name, replica, bricks, force } => {
            let add = add_brick(node, &name, replica, &bricks, force);
            with_layout_lock(node, &name, "add-brick", add).await
        }
        req @ MgmtRequest::BrickAdd { .. } => brick_add(node, req).await,
        // A start checks and launches under the layout lock (the runs themselves are
        // seen by add-brick in their records).
        MgmtRequest::VolumeRebalance { name, action } if action.starts_with("start") => {
            let start = rebalance(node, &name, &action);
            with_layout_lock(node, &name, "rebalance start", start).await
        }
        MgmtRequest::VolumeRebalance { name, action } => rebalance(node, &name, &action).await,
        MgmtRequest::RebalanceLocal { name, action } => rebalance_local(node, &name, &action).await,
        // Every action but status changes the layout or the sets: one at a time.
        MgmtRequest::VolumeRemoveBrick { name, bricks, action, force } if action == "status" => {
            remove_brick(node, &name, &bricks, &action, force).await
        }
        MgmtRequest::VolumeRemoveBrick { name, bricks, action, force } => {
            let what = format!("remove-brick {}", action.split(':').next().unwrap_or_default());
            let f = remove_brick(node, &name, &bricks, &action, force);
            with_layout_lock(node, &name, &what, f).await
        }
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
            .to_string()
            .contains("invalid value"));
        assert!(validate_option("performance.cache-timeout", "11").is_err());
        assert!(validate_option("nfs.disable", "on")
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
        assert!(validate_option("auth.allow", "127.0.0.1,10.1.*,10.0.0.0/24,::1").is_ok());
        assert!(validate_option("auth.reject", "*").is_ok());
        let e = validate_option("auth.allow", "10.0.0.0/40").unwrap_err().to_string();
        assert!(e.contains("auth.allow") && e.contains("10.0.0.0/40"), "{e}");
        assert!(validate_option("auth.reject", "").is_err());
        for (k, _) in OPTIONS {
            assert!(
                !validate_option(k, "")
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default()
                    .contains("does not exist"),
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
