//! Volume maps: brick states, stale marks, live nodes, and the maps built from one
//! consistent read.

use super::check::check_name;
use super::*;
use crate::records::*;
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::collections::{BTreeMap, HashMap};
use tracing::warn;

pub fn build_map(
    v: &VolumeRecord,
    peers: &[PeerRecord],
    states: &HashMap<u32, BrickState>,
    epoch: u64,
) -> VolumeMap {
    let addrs: HashMap<&str, &str> =
        peers.iter().map(|p| (p.name.as_str(), p.addr.as_str())).collect();
    let sets = v
        .sets
        .iter()
        .map(|s| ReplicaSet {
            id: s.id,
            bricks: s
                .bricks
                .iter()
                .map(|b| {
                    let (addr, state) = match addrs.get(b.node.as_str()) {
                        Some(addr) => (
                            addr.to_string(),
                            states.get(&b.index).copied().unwrap_or(BrickState::Down),
                        ),
                        None => (String::new(), BrickState::Down),
                    };
                    BrickInfo {
                        index: b.index,
                        node: b.node.clone(),
                        addr,
                        path: b.path.clone(),
                        state,
                    }
                })
                .collect(),
        })
        .collect();
    VolumeMap {
        name: v.name.clone(),
        // Checked to be 32 hex digits when the record is stored.
        id: u128::from_str_radix(&v.id, 16).unwrap_or_else(|_| {
            warn!(volume = v.name, id = v.id, "volume id is not hex");
            0
        }),
        epoch,
        layout_epoch: v.layout_epoch,
        rebalancing: v.rebalancing,
        layout: v.layout.clone(),
        status: v.status,
        replica: v.replica,
        sets,
        options: v.options.clone(),
    }
}

impl Store {
    /// Brick states of a volume by brick index; a missing index means Down.
    pub async fn brick_states(
        &self,
        volume: &str,
    ) -> Result<HashMap<u32, BrickState>, ConfigError> {
        check_name("volume", volume)?;
        let dir = format!("{}/bricks/{}/", self.ctx.prefix, volume);
        let (kvs, _) = self.ctx.range(&format!("brick states of {volume}"), &dir).await?;
        let mut out = HashMap::new();
        for kv in kvs {
            let key = String::from_utf8_lossy(kv.key());
            let index = key[dir.len()..].parse::<u32>();
            let state = match kv.value() {
                b"up" => Some(BrickState::Up),
                b"healing" => Some(BrickState::Healing),
                _ => None,
            };
            match (index, state) {
                (Ok(i), Some(s)) => {
                    out.insert(i, s);
                }
                _ => {
                    warn!(key = %key, value = %String::from_utf8_lossy(kv.value()), "ignoring bad brick state")
                }
            }
        }
        for (i, _) in self.stale_bricks(volume).await? {
            if let Some(s) = out.get_mut(&i) {
                if *s == BrickState::Up {
                    *s = BrickState::Healing;
                }
            }
        }
        Ok(out)
    }

    /// Demote brick `index` of `volume`: it missed a write that brick `by` applied. Until
    /// the brick heals and clears the marker, maps show it Healing (never a chain head,
    /// never read from). The marker is not under any lease: it outlives both nodes.
    ///
    /// Refused (`Conflict`) when `by` is itself stale (of two bricks that lost each other,
    /// only one may demote the other, or neither could ever come back up), and when `by`
    /// is not published as up (a head whose node lost its lease, or that is catching up,
    /// acts on an old map: it must not demote the bricks that are the current replicas).
    pub async fn mark_stale(&self, volume: &str, index: u32, by: u32) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let key = format!("{}/stale/{}/{}", self.ctx.prefix, volume, index);
        let mine = format!("{}/stale/{}/{}", self.ctx.prefix, volume, by);
        let by_state = self.ctx.brick_key(volume, by);
        let txn = Txn::new()
            .when([
                Compare::version(mine.as_str(), CompareOp::Equal, 0),
                Compare::value(by_state.as_str(), CompareOp::Equal, "up"),
            ])
            .and_then([TxnOp::put(
                key.as_str(),
                format!("missed a write applied by brick {by}"),
                None,
            )])
            .or_else([TxnOp::get(mine.as_str(), None)]);
        let op = format!("mark brick {index} of {volume} stale");
        let mut kv = self.ctx.client.kv_client();
        let resp = self.ctx.call(&op, kv.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(());
        }
        let by_is_stale = resp.op_responses().into_iter().any(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => !g.kvs().is_empty(),
            _ => false,
        });
        Err(ConfigError::Conflict(if by_is_stale {
            format!("brick {by} of {volume} is stale itself and cannot demote brick {index}")
        } else {
            format!("brick {by} of {volume} is not up and cannot demote brick {index}")
        }))
    }

    /// Brick `index` of `volume` takes itself out of service: marked stale, with `why`, so
    /// that it heals before it serves again (its node's certificate was revoked: it can no
    /// longer reach the replicas it would heal from or forward to). Kept as it is when
    /// already marked.
    pub async fn mark_self_stale(
        &self,
        volume: &str,
        index: u32,
        why: &str,
    ) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let key = format!("{}/stale/{}/{}", self.ctx.prefix, volume, index);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), why, None)]);
        self.ctx.txn(&format!("mark brick {index} of {volume} stale"), txn).await?;
        Ok(())
    }

    /// Stale markers of a volume: brick index and the marker's mod revision.
    pub async fn stale_bricks(&self, volume: &str) -> Result<Vec<(u32, i64)>, ConfigError> {
        check_name("volume", volume)?;
        let dir = format!("{}/stale/{}/", self.ctx.prefix, volume);
        let (kvs, _) = self.ctx.range(&format!("stale markers of {volume}"), &dir).await?;
        Ok(kvs
            .iter()
            .filter_map(|kv| {
                let key = String::from_utf8_lossy(kv.key());
                key[dir.len()..].parse::<u32>().ok().map(|i| (i, kv.mod_revision()))
            })
            .collect())
    }

    /// Clear a brick's stale marker if it is still the one seen (mod revision `seen`) when
    /// the heal that answers it started; false if it was set again meanwhile.
    pub async fn clear_stale(
        &self,
        volume: &str,
        index: u32,
        seen: i64,
    ) -> Result<bool, ConfigError> {
        check_name("volume", volume)?;
        let key = format!("{}/stale/{}/{}", self.ctx.prefix, volume, index);
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, seen)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        Ok(self.ctx.txn(&format!("clear stale marker of brick {index} of {volume}"), txn).await?.0)
    }

    /// Nodes holding a live lease: name -> address.
    pub async fn live_nodes(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        let dir = self.ctx.dir("live");
        let (kvs, _) = self.ctx.range("list live nodes", &dir).await?;
        Ok(kvs
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key()[dir.len()..]).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect())
    }

    /// Maps of all volumes from one consistent read of the whole store; the epoch of every
    /// map is the etcd revision of that read (so epochs only grow, and equal the revision
    /// `watch()` reported for the last change they include).
    pub async fn volume_maps(&self) -> Result<(u64, Vec<VolumeMap>), ConfigError> {
        let root = format!("{}/", self.ctx.prefix);
        let (kvs, rev) = self.ctx.range("read volume maps", &root).await?;
        let (pdir, vdir, bdir) =
            (self.ctx.dir("peers"), self.ctx.dir("volumes"), self.ctx.dir("bricks"));
        let sdir = self.ctx.dir("stale");
        let mut peers = Vec::new();
        let mut volumes = Vec::new();
        let mut states: HashMap<String, HashMap<u32, BrickState>> = HashMap::new();
        let mut stale: Vec<(String, u32)> = Vec::new();
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(rest) = key.strip_prefix(&sdir) {
                if let Some((vol, idx)) = rest.split_once('/') {
                    if let Ok(i) = idx.parse::<u32>() {
                        stale.push((vol.to_string(), i));
                    }
                }
            } else if key.starts_with(&pdir) {
                peers.push(decode::<PeerRecord>(kv)?);
            } else if key.starts_with(&vdir) {
                volumes.push(decode::<VolumeRecord>(kv)?);
            } else if let Some(rest) = key.strip_prefix(&bdir) {
                let state = match kv.value() {
                    b"up" => BrickState::Up,
                    b"healing" => BrickState::Healing,
                    _ => continue,
                };
                if let Some((vol, idx)) = rest.split_once('/') {
                    if let Ok(i) = idx.parse::<u32>() {
                        states.entry(vol.to_string()).or_default().insert(i, state);
                    }
                }
            }
        }
        for (vol, i) in stale {
            if let Some(s) = states.get_mut(&vol).and_then(|m| m.get_mut(&i)) {
                if *s == BrickState::Up {
                    *s = BrickState::Healing;
                }
            }
        }
        let empty = HashMap::new();
        let maps = volumes
            .iter()
            .map(|v| build_map(v, &peers, states.get(&v.name).unwrap_or(&empty), rev as u64))
            .collect();
        Ok((rev as u64, maps))
    }
}
