use cairn_proto::map::VolumeStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRecord {
    pub name: String,
    /// `host:port` of the node's cairnd.
    pub addr: String,
    pub uuid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickRecord {
    pub index: u32,
    pub node: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRecord {
    pub id: u32,
    pub bricks: Vec<BrickRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub name: String,
    /// 32 hex digits.
    pub id: String,
    pub status: VolumeStatus,
    pub replica: u32,
    pub sets: Vec<SetRecord>,
    pub options: BTreeMap<String, String>,
    pub layout_epoch: u64,
    pub rebalancing: bool,
    /// Ids of the sets names hash over, in ring order; empty: every set in `sets` order.
    /// A set not in it takes no new names (add-brick's new sets until their directories
    /// are made, `cairn_placement::grow_layout`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layout: Vec<u32>,
    /// Bricks taken out of service by `reset-brick start`: their node closes them (they
    /// show `Down`) until `reset-brick commit`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub reset_bricks: std::collections::BTreeSet<u32>,
    /// A `remove-brick start` under way: the sets being drained (out of the layout, still
    /// serving what they hold) and the layout before it (what `stop` puts back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removing: Option<Removal>,
    /// Sets dropped by `remove-brick commit`: their set ids and brick indexes are never
    /// given again (ids homed on them route to the volume's first set, which holds their
    /// stubs; docs/rebalance.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<SetRecord>,
}

/// `VolumeRecord::removing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    /// Ids of the sets being drained.
    pub sets: Vec<u32>,
    /// The layout before `remove-brick start` (every set id, in ring order).
    pub layout: Vec<u32>,
}
