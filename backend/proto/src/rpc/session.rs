//! The server's view of one connection ([`Session`]), the [`Service`] a server runs, and
//! the live sessions of this process (closed from the server side by [`close_sessions`]).

use crate::frame::{self, Frame, FrameKind};
use crate::msg::{Hello, Push, Request, Response, Welcome};
use crate::outq::Sender;
use crate::principal::Principal;
use bytes::Bytes;
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Server-side view of one client connection.
pub struct Session {
    pub id: u64,
    pub peer: SocketAddr,
    pub hello: Hello,
    /// Who the peer is, from its TLS certificate; `None` on a plain (`transport = plain`)
    /// connection, which is not authenticated, and on a TLS connection without a client
    /// certificate (`unauthenticated`).
    pub principal: Option<Principal>,
    /// The serial number of the peer's certificate (hex); `None` on a plain connection.
    pub serial: Option<String>,
    /// A TLS connection whose client presented no certificate: a node joining with a
    /// token. The server answers its `Enroll` request only; every other request is
    /// refused with EACCES before the service sees it.
    pub unauthenticated: bool,
    pub(super) tx: Sender,
    pub(super) closed: Arc<AtomicBool>,
    /// Notified by [`Session::close`]: the server stops reading this connection.
    pub(super) kill: Arc<tokio::sync::Notify>,
}

impl Session {
    /// Send an unsolicited message; false if the connection is gone.
    pub fn push(&self, p: &Push) -> bool {
        self.tx.send_now(Frame::new(FrameKind::Push, 0, frame::encode(p), Bytes::new())).is_ok()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// End this session from the server side (a fenced gateway's, for one): no further
    /// request is read, the requests in flight are answered, then the connection is shut
    /// and [`Service::closed`] runs (its locks and leases go). The peer sees the connection
    /// close and must open a new session.
    pub fn close(&self) {
        self.kill.notify_one();
    }

    pub fn label(&self) -> String {
        match &self.principal {
            Some(p) => format!("{}({})@{}#{}", self.hello.name, p, self.peer, self.id),
            None if self.unauthenticated => {
                format!("{}(no certificate)@{}#{}", self.hello.name, self.peer, self.id)
            }
            None => format!("{}@{}#{}", self.hello.name, self.peer, self.id),
        }
    }
}

/// What a server does with requests. `call` runs concurrently for pipelined requests.
pub trait Service: Send + Sync + 'static {
    fn welcome(&self, session_id: u64) -> Welcome;
    fn call(
        &self,
        session: Arc<Session>,
        req: Request,
        data: Bytes,
    ) -> BoxFuture<'static, (Response, Bytes)>;
    /// The connection closed: drop its locks, leases and subscriptions.
    fn closed(&self, _session: &Arc<Session>) {}
}

pub(super) static SESSION_IDS: AtomicU64 = AtomicU64::new(1);

/// The live sessions of this process's servers (for [`close_sessions`]).
pub(super) static LIVE: parking_lot::Mutex<Vec<std::sync::Weak<Session>>> =
    parking_lot::Mutex::new(Vec::new());

/// Close every live session `pred` selects (e.g. those whose certificate was revoked);
/// returns their labels.
pub fn close_sessions(pred: impl Fn(&Session) -> bool) -> Vec<String> {
    let mut live = LIVE.lock();
    live.retain(|w| w.strong_count() > 0);
    let mut closed = Vec::new();
    for s in live.iter().filter_map(|w| w.upgrade()) {
        if !s.is_closed() && pred(&s) {
            s.close();
            closed.push(s.label());
        }
    }
    closed
}
