//! The volume map: what a client needs to route every operation without asking anyone.
//! `cairnd` builds it from the config store and pushes a new one whenever it changes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeStatus {
    Created,
    Started,
    Stopped,
}

impl std::fmt::Display for VolumeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VolumeStatus::Created => "Created",
            VolumeStatus::Started => "Started",
            VolumeStatus::Stopped => "Stopped",
        })
    }
}

/// Liveness of one brick as decided in the config store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BrickState {
    /// Not running, or its node's lease expired.
    Down,
    /// Running and receiving forwarded writes, but still catching up: never serves reads
    /// and is never a chain head.
    Healing,
    /// In sync: may serve reads and head chains.
    Up,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrickInfo {
    /// Index of the brick in the volume, stable for the brick's life.
    pub index: u32,
    /// Node (peer) name that serves it.
    pub node: String,
    /// Address of that node's `cairnd`, `host:port`.
    pub addr: String,
    /// Directory on the node.
    pub path: String,
    pub state: BrickState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSet {
    /// Stable id of the set; the top 32 bits of the inode ids homed on it.
    pub id: u32,
    pub bricks: Vec<BrickInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMap {
    pub name: String,
    /// 128-bit volume id (part of every NFS handle).
    pub id: u128,
    /// Bumped on every change of the map (membership, liveness, options).
    pub epoch: u64,
    /// Bumped when the placement of names changes (add-brick, rebalance). While
    /// `rebalancing` is set, a name missed on its hashed set is looked up everywhere.
    pub layout_epoch: u64,
    pub rebalancing: bool,
    /// Ids of the sets names hash over, in ring order (`cairn_placement::hashed_set`);
    /// empty: every set of `sets`, in order. A set missing from it is *joining* (being
    /// filled with the volume's directories by add-brick) or *draining*: it still holds
    /// and serves what it has and receives directory-wide operations, but takes no new
    /// names.
    pub layout: Vec<u32>,
    pub status: VolumeStatus,
    pub replica: u32,
    pub sets: Vec<ReplicaSet>,
    pub options: BTreeMap<String, String>,
}

impl VolumeMap {
    pub fn set_by_id(&self, id: u32) -> Option<&ReplicaSet> {
        self.sets.iter().find(|s| s.id == id)
    }

    pub fn brick(&self, index: u32) -> Option<(&ReplicaSet, &BrickInfo)> {
        self.sets.iter().find_map(|s| s.bricks.iter().find(|b| b.index == index).map(|b| (s, b)))
    }

    /// The sets names hash over, in ring order (see `layout`).
    pub fn layout_sets(&self) -> Vec<&ReplicaSet> {
        if self.layout.is_empty() {
            return self.sets.iter().collect();
        }
        self.layout.iter().filter_map(|id| self.set_by_id(*id)).collect()
    }

    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key).map(|s| s.as_str())
    }
}
