//! Management calls: what the `cairn` CLI asks of the local `cairnd`, which carries them
//! out against the config store and the other nodes. Replies are plain data so the CLI can
//! print them as tables or as `--json`.

use crate::map::VolumeMap;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgmtRequest {
    /// Add the node whose `cairnd` listens at `addr` to the cluster.
    PeerProbe {
        addr: String,
    },
    PeerDetach {
        name: String,
        force: bool,
    },
    PeerStatus,
    VolumeCreate(VolumeCreate),
    VolumeStart {
        name: String,
        force: bool,
    },
    VolumeStop {
        name: String,
        force: bool,
    },
    VolumeDelete {
        name: String,
    },
    /// `None`: every volume.
    VolumeInfo {
        name: Option<String>,
    },
    VolumeStatus {
        name: Option<String>,
    },
    VolumeList,
    VolumeSet {
        name: String,
        key: String,
        value: String,
    },
    VolumeReset {
        name: String,
        key: String,
    },
    /// Prepare (`create == true`) or check a brick directory on this node; sent by the
    /// node that runs `volume create` to each node that holds one of its bricks.
    BrickPrepare {
        volume: String,
        volume_id: u128,
        index: u32,
        path: String,
        force: bool,
    },
    HealInfo {
        name: String,
    },
    /// Gateway objects (NFS exports, SMB shares, iSCSI LUNs and targets) of one `kind`,
    /// kept in the config store as JSON documents whose schema is `cairn-gateway`'s.
    GatewayList {
        kind: String,
    },
    /// Store object `name` of `kind`; with `if_unchanged_since`, only if no object of that
    /// kind changed after that revision (EAGAIN otherwise: re-read, re-check, retry).
    GatewayPut {
        kind: String,
        name: String,
        doc: String,
        if_unchanged_since: Option<u64>,
    },
    GatewayDelete {
        kind: String,
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeCreate {
    pub name: String,
    pub replica: u32,
    /// `host:/path` brick specs in order; consecutive groups of `replica` form a set.
    pub bricks: Vec<String>,
    /// Allow bricks of one set on the same node, and non-empty brick directories.
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub name: String,
    pub addr: String,
    pub uuid: String,
    pub connected: bool,
    /// True for the node that answered.
    pub local: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickStatus {
    pub index: u32,
    pub node: String,
    pub path: String,
    pub online: bool,
    pub state: String,
    pub port: u16,
    pub pid: u32,
    pub pending_heal: u64,
    pub total_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeStatusInfo {
    pub name: String,
    pub status: String,
    pub bricks: Vec<BrickStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealBrickInfo {
    pub index: u32,
    pub node: String,
    pub path: String,
    pub online: bool,
    /// Ids this brick holds for peers that were away.
    pub pending: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgmtReply {
    Done { message: String },
    Peers(Vec<PeerInfo>),
    Volumes(Vec<VolumeMap>),
    Names(Vec<String>),
    Status(Vec<VolumeStatusInfo>),
    Heal(Vec<HealBrickInfo>),
    /// Gateway objects of one kind and the store revision they were read at.
    Gateway { revision: u64, objects: Vec<GatewayObject> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayObject {
    pub name: String,
    /// JSON document (schema: the cairn-gateway crate).
    pub doc: String,
    /// Store revision of its last change.
    pub revision: u64,
}
