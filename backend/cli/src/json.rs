//! `--json` output. Every document is an object with one top-level key naming its content,
//! so fields can be added later without breaking `jq` filters. Volume ids are printed as
//! UUID strings (a 128-bit number does not survive JSON parsers that use doubles); brick
//! states and volume status are lowercase / capitalised strings as in the human output.
//!
//! Documents (field names are the stable contract, see `docs/cli.md`):
//! - `volume info`: `{"volumes": [VolumeJson]}`
//! - `volume status`: `{"volumes": [VolumeStatusInfo]}`
//! - `volume list`: `{"volumes": ["name", ...]}`
//! - `peer status` / `pool list`: `{"peers": [PeerInfo]}` (pool list includes this node)
//! - `volume heal NAME info`: `{"volume": "NAME", "bricks": [HealBrickInfo]}`
//! - `volume heal NAME statistics`: `{"volume": "NAME", "bricks": [HealBrickStats]}`
//! - any other command: `{"command", "name", "result": "success"|"failed", "message"}`

use crate::format;
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap, VolumeStatus};
use cairn_proto::mgmt::{HealBrickInfo, HealBrickStats, JoinTokenInfo, PeerInfo, VolumeStatusInfo};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickJson {
    pub index: u32,
    pub node: String,
    pub addr: String,
    pub path: String,
    /// `up`, `healing` or `down`.
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetJson {
    pub id: u32,
    pub bricks: Vec<BrickJson>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeJson {
    pub name: String,
    /// UUID layout, e.g. `01234567-89ab-cdef-0011-223344556677`.
    pub id: String,
    /// `Distribute`, `Replicate` or `Distributed-Replicate`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `Created`, `Started` or `Stopped`.
    pub status: String,
    pub replica: u32,
    pub brick_count: usize,
    pub epoch: u64,
    pub layout_epoch: u64,
    pub rebalancing: bool,
    /// Ids of the sets new names hash over, in ring order (empty: every set).
    #[serde(default)]
    pub layout: Vec<u32>,
    pub sets: Vec<SetJson>,
    pub options: BTreeMap<String, String>,
}

impl From<&VolumeMap> for VolumeJson {
    fn from(v: &VolumeMap) -> Self {
        VolumeJson {
            name: v.name.clone(),
            id: format::volume_id(v.id),
            kind: format::volume_type(v).to_string(),
            status: v.status.to_string(),
            replica: v.replica,
            brick_count: v.sets.iter().map(|s| s.bricks.len()).sum(),
            epoch: v.epoch,
            layout_epoch: v.layout_epoch,
            rebalancing: v.rebalancing,
            layout: v.layout.clone(),
            sets: v
                .sets
                .iter()
                .map(|s| SetJson {
                    id: s.id,
                    bricks: s
                        .bricks
                        .iter()
                        .map(|b| BrickJson {
                            index: b.index,
                            node: b.node.clone(),
                            addr: b.addr.clone(),
                            path: b.path.clone(),
                            state: format::brick_state(b.state).to_string(),
                        })
                        .collect(),
                })
                .collect(),
            options: v.options.clone(),
        }
    }
}

impl TryFrom<&VolumeJson> for VolumeMap {
    type Error = String;

    /// The inverse of `From<&VolumeMap>`, for tools that read `--json` output back.
    fn try_from(v: &VolumeJson) -> Result<Self, String> {
        let id = format::parse_volume_id(&v.id).ok_or_else(|| format!("bad volume id {}", v.id))?;
        let status = match v.status.as_str() {
            "Created" => VolumeStatus::Created,
            "Started" => VolumeStatus::Started,
            "Stopped" => VolumeStatus::Stopped,
            s => return Err(format!("volume {}: bad status {s}", v.name)),
        };
        let state = |s: &str| match s {
            "up" => Ok(BrickState::Up),
            "healing" => Ok(BrickState::Healing),
            "down" => Ok(BrickState::Down),
            s => Err(format!("volume {}: bad brick state {s}", v.name)),
        };
        let mut sets = Vec::with_capacity(v.sets.len());
        for s in &v.sets {
            let mut bricks = Vec::with_capacity(s.bricks.len());
            for b in &s.bricks {
                bricks.push(BrickInfo {
                    index: b.index,
                    node: b.node.clone(),
                    addr: b.addr.clone(),
                    path: b.path.clone(),
                    state: state(&b.state)?,
                });
            }
            sets.push(ReplicaSet { id: s.id, bricks });
        }
        Ok(VolumeMap {
            name: v.name.clone(),
            id,
            epoch: v.epoch,
            layout_epoch: v.layout_epoch,
            rebalancing: v.rebalancing,
            layout: v.layout.clone(),
            status,
            replica: v.replica,
            sets,
            options: v.options.clone(),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeInfoDoc {
    pub volumes: Vec<VolumeJson>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatusDoc {
    pub volumes: Vec<VolumeStatusInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeListDoc {
    pub volumes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeersDoc {
    pub peers: Vec<PeerInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealDoc {
    pub volume: String,
    pub bricks: Vec<HealBrickInfo>,
}

/// `volume rebalance NAME status --json`: one entry per node that ran a rebalance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceDoc {
    pub volume: String,
    pub nodes: Vec<cairn_proto::mgmt::RebalanceNode>,
}

/// `volume remove-brick NAME BRICK... status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveBrickDoc {
    pub volume: String,
    #[serde(flatten)]
    pub status: cairn_proto::mgmt::RemoveBrickStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealStatsDoc {
    pub volume: String,
    pub bricks: Vec<HealBrickStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenDoc {
    /// Shown this once; the cluster keeps only its hash.
    pub token: String,
    #[serde(flatten)]
    pub info: JoinTokenInfo,
    /// The pin of the cluster CA (`cairnd --ca-cert-hash`), with TLS on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert_hash: Option<String>,
    /// The member a new node enrolls through (`cairnd --join`): the node cairn talked to.
    pub join: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokensDoc {
    pub tokens: Vec<JoinTokenInfo>,
}

/// `client certificate list|revoke --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertsDoc {
    pub certificates: Vec<cairn_proto::mgmt::CertInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditDoc {
    pub records: Vec<serde_json::Value>,
}

/// The result of a command that changes state, or of any failed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultDoc {
    pub command: String,
    pub name: Option<String>,
    /// `success` or `failed`.
    pub result: String,
    /// Errno name of a failure reported by cairnd (e.g. `ENOENT`), if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub errno: Option<String>,
    pub message: String,
}

/// Pretty-printed JSON with a trailing newline.
pub fn render<T: Serialize>(doc: &T) -> String {
    let mut s = serde_json::to_string_pretty(doc).expect("plain data always serializes");
    s.push('\n');
    s
}

pub fn volume_info(vols: &[VolumeMap]) -> String {
    render(&VolumeInfoDoc { volumes: vols.iter().map(VolumeJson::from).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::fixtures;
    use serde_json::Value;

    #[test]
    fn volume_info_round_trip() {
        let vols = vec![fixtures::dist_rep(), fixtures::single()];
        let text = volume_info(&vols);
        let doc: VolumeInfoDoc = serde_json::from_str(&text).unwrap();
        let back: Vec<VolumeMap> =
            doc.volumes.iter().map(|v| VolumeMap::try_from(v).unwrap()).collect();
        assert_eq!(back, vols);
    }

    #[test]
    fn volume_info_fields_are_stable() {
        let text = volume_info(&[fixtures::dist_rep()]);
        let v: Value = serde_json::from_str(&text).unwrap();
        let vol = &v["volumes"][0];
        assert_eq!(vol["name"], "vol0");
        assert_eq!(vol["id"], "01234567-89ab-cdef-0011-223344556677");
        assert_eq!(vol["type"], "Distributed-Replicate");
        assert_eq!(vol["status"], "Started");
        assert_eq!(vol["replica"], 2);
        assert_eq!(vol["brick_count"], 4);
        assert_eq!(vol["sets"][0]["bricks"][1]["state"], "healing");
        assert_eq!(vol["sets"][1]["bricks"][0]["path"], "/bricks/b2");
        assert_eq!(vol["options"]["performance.cache-size"], "256MB");
    }

    #[test]
    fn bad_documents_are_refused() {
        let mut j = VolumeJson::from(&fixtures::dist_rep());
        j.id = "nope".into();
        assert!(VolumeMap::try_from(&j).is_err());
        let mut j = VolumeJson::from(&fixtures::dist_rep());
        j.sets[0].bricks[0].state = "sideways".into();
        assert!(VolumeMap::try_from(&j).unwrap_err().contains("sideways"));
    }

    #[test]
    fn status_peers_heal_round_trip() {
        let status = VolumeStatusDoc { volumes: fixtures::status() };
        let back: VolumeStatusDoc = serde_json::from_str(&render(&status)).unwrap();
        assert_eq!(back, status);
        let v: Value = serde_json::from_str(&render(&status)).unwrap();
        let b = &v["volumes"][0]["bricks"][3];
        assert_eq!(b["online"], false);
        assert_eq!(b["port"], 0);
        assert_eq!(v["volumes"][0]["bricks"][0]["pending_heal"], 12);

        let peers = PeersDoc { peers: fixtures::peers() };
        let back: PeersDoc = serde_json::from_str(&render(&peers)).unwrap();
        assert_eq!(back, peers);
        let v: Value = serde_json::from_str(&render(&peers)).unwrap();
        assert_eq!(v["peers"][0]["local"], true);
        assert_eq!(v["peers"][2]["connected"], false);

        let heal = HealDoc { volume: "vol0".into(), bricks: fixtures::heal() };
        let back: HealDoc = serde_json::from_str(&render(&heal)).unwrap();
        assert_eq!(back, heal);

        let stats = HealStatsDoc { volume: "vol0".into(), bricks: fixtures::heal_stats() };
        let back: HealStatsDoc = serde_json::from_str(&render(&stats)).unwrap();
        assert_eq!(back, stats);
        let v: Value = serde_json::from_str(&render(&stats)).unwrap();
        assert_eq!(v["bricks"][0]["in_progress"], true);
        assert_eq!(v["bricks"][0]["crawls"][0]["kind"], "full");
        assert_eq!(v["bricks"][0]["crawls"][0]["ended"], Value::Null);
        assert_eq!(v["bricks"][0]["crawls"][1]["failed"], 1);

        let list = VolumeListDoc { volumes: vec!["a".into()] };
        assert_eq!(render(&list), "{\n  \"volumes\": [\n    \"a\"\n  ]\n}\n");
    }
}
