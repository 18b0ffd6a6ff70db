//! The cluster config store, kept in etcd.
//!
//! Key schema (all under a prefix, `/cairn` by default; values are JSON):
//!
//! ```text
//! /cairn/peers/<name>                      PeerRecord
//! /cairn/volumes/<name>                    VolumeRecord (CAS-updated by mod revision)
//! /cairn/live/<node>                       node address, under the node's lease
//! /cairn/bricks/<volume>/<index>           "up" | "healing", under the serving node's lease
//! /cairn/join-tokens/<id>                JoinTokenRecord: a join token's hash, expiry, use
//! /cairn/certs/<serial>                    CertRecord: an issued certificate; revoked or not
//! /cairn/gateway/<kind>/<name>             a gateway object (NFS export, SMB share, iSCSI
//!                                          LUN/target): JSON of the cairn-gateway crate
//! ```
//! Only `cairnd` talks to etcd; clients get the volume map from `cairnd`.
//!
//! How `cairnd` uses it:
//! - `Store::connect` (bounded; `ConfigError::Unreachable` names the endpoints).
//! - `register_node` once at start; keep the `NodeLease`, publish brick states through it
//!   (`set_brick_state`), and check `is_alive()` before accepting a write: it turns false
//!   when the lease could not be renewed for half its TTL (the node is fenced; the lease
//!   itself expires at the full TTL and the node's keys vanish). Once etcd reports the
//!   lease gone it never comes back: register again.
//! - `watch()` yields a revision after every change under the prefix; on each, call
//!   `volume_maps()` (one consistent read; map epoch = that read's revision) and push maps
//!   whose content changed.
//!
//! Writes that must be unique (peer names/addresses, volume names, brick `node:path`) read a
//! snapshot, check it and commit in a transaction that fails if anything in that key range
//! changed since the snapshot (then retry), so concurrent writers cannot both win.
//! Volume updates are compare-and-swap on the record's mod revision.
//!
//! `testing::Etcd` starts a throwaway etcd for tests.

// `ConfigError` carries `etcd_client::Error` (~180 bytes) inline, as the API contract says;
// every fallible call here is an etcd round trip, so the size of the error does not matter.
#![allow(clippy::result_large_err)]

mod certs;
mod records;
mod store;
#[doc(hidden)]
pub mod testing;
mod tokens;

pub use certs::{valid_serial, CertRecord};
pub use records::{BrickRecord, PeerRecord, Removal, SetRecord, VolumeRecord};
pub use store::{
    build_map, ensure_etcd_node_user, ConfigError, EtcdSecurity, NodeLease, RecordError, Store,
    DEFAULT_CONNECT_TIMEOUT, ETCD_NODE_ROLE,
};
pub use tokens::{
    check_join_token, consume_join_token, token_id, JoinGrant, JoinTokenError, JoinTokenRecord,
    DEFAULT_TTL as DEFAULT_JOIN_TOKEN_TTL, MAX_TTL as MAX_JOIN_TOKEN_TTL,
};
