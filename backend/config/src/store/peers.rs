//! Peer records: unique names, uuids and addresses.

use super::check::check_name;
use super::*;
use crate::records::*;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tracing::{debug, info};

impl Store {
    /// Adds (or re-adds, idempotently, or updates the address of) a peer. Refuses a name
    /// already used by another uuid, a uuid already used by another name, and an address
    /// already used by another name.
    pub async fn add_peer(&self, p: PeerRecord) -> Result<(), ConfigError> {
        check_name("peer", &p.name)?;
        if p.addr.is_empty() || p.uuid.is_empty() {
            return Err(ConfigError::Invalid(format!("peer {}: empty address or uuid", p.name)));
        }
        let op = format!("add peer {}", p.name);
        let dir = self.ctx.dir("peers");
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &dir).await?;
            let existing = kvs.iter().map(decode).collect::<Result<Vec<PeerRecord>, _>>()?;
            if peer_conflict(&existing, &p)? {
                return Ok(());
            }
            // Commit only if no peer changed since the snapshot we checked.
            let txn = Txn::new()
                .when([Compare::mod_revision(dir.as_str(), CompareOp::Less, rev + 1).with_prefix()])
                .and_then([TxnOp::put(self.ctx.key("peers", &p.name), encode(&p), None)]);
            if self.ctx.txn(&op, txn).await?.0 {
                info!(peer = p.name, addr = p.addr, "peer added");
                return Ok(());
            }
            debug!(peer = p.name, "peers changed concurrently, retrying");
        }
        Err(ConfigError::Conflict(format!("peer {}: too many concurrent changes to peers", p.name)))
    }

    /// Whether [`Store::add_peer`] would accept `p` now (its name, uuid and address not
    /// used by another peer), without adding it: checked before something that cannot be
    /// undone (an enrollment's join token is used up only for a node that can be added).
    pub async fn check_new_peer(&self, p: &PeerRecord) -> Result<(), ConfigError> {
        check_name("peer", &p.name)?;
        let (kvs, _) =
            self.ctx.range(&format!("check peer {}", p.name), &self.ctx.dir("peers")).await?;
        let existing = kvs.iter().map(decode).collect::<Result<Vec<PeerRecord>, _>>()?;
        peer_conflict(&existing, p).map(|_| ())
    }

    /// Removes a peer. Refused while a volume has a brick on it.
    pub async fn remove_peer(&self, name: &str) -> Result<(), ConfigError> {
        check_name("peer", name)?;
        let op = format!("remove peer {name}");
        let key = self.ctx.key("peers", name);
        let vdir = self.ctx.dir("volumes");
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &vdir).await?;
            for kv in &kvs {
                let v: VolumeRecord = decode(kv)?;
                if let Some(b) = v.sets.iter().flat_map(|s| &s.bricks).find(|b| b.node == name) {
                    return Err(ConfigError::Conflict(format!(
                        "peer {name} still serves brick {}:{} of volume {}",
                        b.node, b.path, v.name
                    )));
                }
            }
            let txn = Txn::new()
                .when([
                    Compare::version(key.as_str(), CompareOp::Greater, 0),
                    Compare::mod_revision(vdir.as_str(), CompareOp::Less, rev + 1).with_prefix(),
                ])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            if self.ctx.txn(&op, txn).await?.0 {
                info!(peer = name, "peer removed");
                return Ok(());
            }
            if self.ctx.get_one(&op, &key).await?.is_none() {
                return Err(ConfigError::NotFound(format!("peer {name} does not exist")));
            }
        }
        Err(ConfigError::Conflict(format!("peer {name}: too many concurrent changes to volumes")))
    }

    pub async fn list_peers(&self) -> Result<Vec<PeerRecord>, ConfigError> {
        let (kvs, _) = self.ctx.range("list peers", &self.ctx.dir("peers")).await?;
        kvs.iter().map(decode).collect()
    }

    pub async fn get_peer(&self, name: &str) -> Result<Option<PeerRecord>, ConfigError> {
        check_name("peer", name)?;
        let op = format!("get peer {name}");
        self.ctx.get_one(&op, &self.ctx.key("peers", name)).await?.as_ref().map(decode).transpose()
    }
}

/// `p` against the peers there are: `Ok(true)` when it is one of them already, `Ok(false)`
/// when it may be added, a `Conflict` saying what it shares with another peer.
fn peer_conflict(existing: &[PeerRecord], p: &PeerRecord) -> Result<bool, ConfigError> {
    for e in existing {
        if e == p {
            return Ok(true);
        }
        if e.name == p.name && e.uuid != p.uuid {
            return Err(ConfigError::Conflict(format!(
                "peer name {} is already used by node {} (not {})",
                p.name, e.uuid, p.uuid
            )));
        }
        if e.name != p.name && e.uuid == p.uuid {
            return Err(ConfigError::Conflict(format!(
                "node {} is already a peer named {} (not {})",
                p.uuid, e.name, p.name
            )));
        }
        if e.name != p.name && e.addr == p.addr {
            return Err(ConfigError::Conflict(format!(
                "peer {}: address {} is already used by peer {}",
                p.name, p.addr, e.name
            )));
        }
    }
    Ok(false)
}
