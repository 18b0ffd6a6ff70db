//! The multiplexed, pipelined RPC connection used by clients, the CLI and `cairnd` itself.
//!
//! One TCP connection carries any number of requests in flight, matched to responses by
//! request id. Whoever sends a frame writes it to the socket itself when nobody else is
//! writing, and queues it for the current writer otherwise ([`crate::outq`]), so a request
//! or a reply costs no hand-off to a writer task. The server side spawns a task per
//! request (pipelining) and answers in completion order. The first request on a
//! connection must be HELLO with a matching major version.
//!
//! The module by idea: [`client`] is the calling side ([`Connection`]: connect, call,
//! close, and the reader that matches replies to callers); [`liveness`] how each side
//! notices a peer gone (the client's PING watchdog, the server's TCP keepalive);
//! [`session`] the server's view of one connection ([`Session`], the [`Service`] a server
//! runs, and the process's live sessions); [`admit`] who may say what before and after
//! HELLO; [`server`] the accept loop and the serving of one connection.

mod admit;
mod client;
mod liveness;
mod server;
mod session;

pub use client::{Connection, PushHandler};
pub use server::{serve, serve_connection, serve_connection_with, serve_with};
pub use session::{close_sessions, Service, Session};

use bytes::Bytes;
use std::time::Duration;

/// A caller waiting for its reply.
type Waiter = tokio::sync::oneshot::Sender<Result<(crate::msg::Reply, Bytes), crate::RemoteError>>;

/// While requests are in flight and nothing has arrived for this long, the client sends a
/// PING so a live peer answers something.
pub const PING_INTERVAL: Duration = Duration::from_secs(2);
/// While requests are in flight and nothing has arrived for this long, the peer is declared
/// gone: the connection takes no new requests, and those not yet sent whole fail with
/// ENOTCONN (which callers retry elsewhere). Without this, a request sent to a node cut off
/// by a network partition would wait for TCP to give up (many minutes). A live peer answers PING within this time even
/// when its disk is slow, because every request is served by its own task.
pub const PEER_DEAD_AFTER: Duration = Duration::from_secs(10);
/// Read buffer of each side of a connection: one `recv` takes every frame the peer has
/// sent so far (a frame read from the bare socket costs two or three: prefix, header,
/// data). A bulk segment larger than this is read straight into its own buffer.
const READ_BUFFER: usize = 64 * 1024;

/// Server side: TCP keepalive on every accepted connection (first probe after
/// `KEEPALIVE_IDLE` of silence, then every `KEEPALIVE_INTERVAL`, closed after
/// `KEEPALIVE_PROBES` unanswered), so the session of a client whose host died or was cut
/// off ends within about 25 s instead of never (no FIN or RST ever comes), releasing its
/// locks and share reservations. A live peer's kernel answers the probes.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const KEEPALIVE_PROBES: u32 = 3;

/// Longest a TLS handshake may take on the server side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod handshake_fuzz;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
