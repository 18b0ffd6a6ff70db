//! The Cairn wire protocol.
//!
//! Every message travels in a frame (see [`frame`]): a fixed 24-byte prefix, a header
//! serialized with `bincode`, and an optional bulk-data segment carried as raw bytes so
//! that file data is never re-encoded. Frames are multiplexed by request id, so a
//! connection carries many requests in flight ([`rpc`]). The message vocabulary lives in
//! [`msg`] (brick operations), [`map`] (the volume map clients route by) and [`mgmt`]
//! (the `cairn` CLI's management calls).

pub mod aligned;
pub mod backoff;
pub mod error;
pub mod frame;
pub mod hostport;
pub mod map;
pub mod mgmt;
pub mod msg;
pub mod outq;
pub mod principal;
pub mod rpc;
pub mod size;
pub mod stream;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
pub mod types;

pub use backoff::Backoff;
pub use error::{Errno, RemoteError};
pub use hostport::{AddrError, HostPort};
pub use size::{Size, SizeError};
pub use types::*;

/// Protocol version spoken by this build. A peer announcing a different version is
/// refused at HELLO with EPROTONOSUPPORT, naming both (docs/wire-protocol.md,
/// "Versioning"). 3: `Enroll` gained `forwarded` and `etcd_csr`, `EnrollReply` `etcd`,
/// and `VolumeMap` `layout`.
pub const PROTOCOL_VERSION: u16 = 3;

/// What a node answers a HELLO of protocol version `theirs`.
pub fn version_mismatch(theirs: u16) -> String {
    format!(
        "protocol version mismatch: the peer speaks Cairn protocol version {theirs}, this \
         node speaks version {PROTOCOL_VERSION}; run the same Cairn release on every node \
         and client (docs/wire-protocol.md, \"Versioning\")"
    )
}
/// Default TCP port of `cairnd` (management and data on one port).
pub const DEFAULT_PORT: u16 = 7420;
