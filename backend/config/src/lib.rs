//! The cluster config store, kept in etcd.
//!
//! Key schema (all under a prefix, `/cairn` by default; values are JSON):
//!
//! ```text
//! /cairn/peers/<name>                      PeerRecord
//! /cairn/volumes/<name>                    VolumeRecord (CAS-updated by mod revision)
//! /cairn/live/<node>                       node address, under the node's lease
//! /cairn/bricks/<volume>/<index>           "up" | "healing", under the serving node's lease
//! ```
//! Only `cairnd` talks to etcd; clients get the volume map from `cairnd`.

mod records;
mod store;

pub use records::{BrickRecord, PeerRecord, SetRecord, VolumeRecord};
pub use store::{build_map, ConfigError, NodeLease, Store};
