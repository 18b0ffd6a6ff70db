use crate::records::*;
use cairn_proto::map::{BrickState, VolumeMap};
use std::collections::HashMap;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config store unreachable at {endpoints}: {source}")]
    Unreachable { endpoints: String, source: etcd_client::Error },
    #[error("config store: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    #[error("bad record at {key}: {source}")]
    BadRecord { key: String, source: serde_json::Error },
}

pub struct Store {
    _todo: (),
}

/// A node's liveness lease; dropping it stops the keep-alive (the lease then expires).
pub struct NodeLease {
    _todo: (),
}

pub fn build_map(
    v: &VolumeRecord,
    peers: &[PeerRecord],
    states: &HashMap<u32, BrickState>,
    epoch: u64,
) -> VolumeMap {
    let _ = (v, peers, states, epoch);
    todo!()
}

impl Store {
    pub async fn connect(_endpoints: &[String], _prefix: &str) -> Result<Store, ConfigError> {
        todo!()
    }
}
