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

// `ConfigError` carries `etcd_client::Error` (~180 bytes) inline, as the API contract says;
// every fallible call here is an etcd round trip, so the size of the error does not matter.
#![allow(clippy::result_large_err)]

mod records;
mod store;
#[doc(hidden)]
pub mod testing;

pub use records::{BrickRecord, PeerRecord, SetRecord, VolumeRecord};
pub use store::{build_map, ConfigError, NodeLease, Store, DEFAULT_CONNECT_TIMEOUT};
