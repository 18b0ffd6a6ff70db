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

/// Protocol version spoken by this build. A peer announcing a different major version is
/// refused at HELLO with EPROTONOSUPPORT.
pub const PROTOCOL_VERSION: u16 = 2;
/// Default TCP port of `cairnd` (management and data on one port).
pub const DEFAULT_PORT: u16 = 7420;
