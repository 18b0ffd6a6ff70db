//! How each side notices that its peer is gone: the client's watchdog (PING while requests
//! wait, give the peer up after [`PEER_DEAD_AFTER`] of silence) and the server's TCP
//! keepalive on accepted connections.

use crate::frame::{self, Frame, FrameKind};
use crate::msg::Request;
use crate::outq::Writer;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::{
    Waiter, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES, PEER_DEAD_AFTER, PING_INTERVAL,
};

/// Turn on TCP keepalive with the timings above (best effort: logged if refused).
pub(super) fn set_keepalive(stream: &TcpStream, peer: &SocketAddr) {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let opts = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE.as_secs() as libc::c_int),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, KEEPALIVE_INTERVAL.as_secs() as libc::c_int),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES as libc::c_int),
    ];
    for (level, name, value) in opts {
        // SAFETY: fd is the stream's open socket; value lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                &value as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!(peer = %peer, error = %e, "cannot set TCP keepalive option {name}");
            return;
        }
    }
}

/// The watchdog's clock: when the peer last sent a frame, or when we started waiting on it
/// after an idle period. Milliseconds on tokio's clock since the connection was opened
/// (monotonic; follows a paused clock in tests). The base is the connection's own: paused
/// clocks of different runtimes (tests) do not agree.
pub(super) struct RxClock {
    base: tokio::time::Instant,
    last: AtomicU64,
}

impl RxClock {
    pub(super) fn new() -> RxClock {
        RxClock { base: tokio::time::Instant::now(), last: AtomicU64::new(0) }
    }

    fn now_ms(&self) -> u64 {
        tokio::time::Instant::now().saturating_duration_since(self.base).as_millis() as u64
    }

    pub(super) fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Release);
    }

    pub(super) fn idle_ms(&self) -> u64 {
        self.now_ms().saturating_sub(self.last.load(Ordering::Acquire))
    }
}

/// Ids of the watchdog's own PINGs (from the top of the id space, apart from requests').
pub(super) const PING_ID_BASE: u64 = 1 << 63;

/// Liveness of a client connection: see [`PING_INTERVAL`] and [`PEER_DEAD_AFTER`]. Ends
/// when the connection is dropped or closed.
pub(super) async fn watchdog(
    writer: std::sync::Weak<Writer>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
    closed: Arc<AtomicBool>,
    last_rx: Arc<RxClock>,
    peer: String,
) {
    let mut ping_id = PING_ID_BASE;
    loop {
        tokio::time::sleep(PING_INTERVAL).await;
        let Some(writer) = writer.upgrade() else { return };
        if closed.load(Ordering::Acquire) {
            return;
        }
        let waiting = pending.lock().keys().any(|&id| id < PING_ID_BASE);
        if !waiting {
            continue;
        }
        let idle = last_rx.idle_ms();
        if idle >= PEER_DEAD_AFTER.as_millis() as u64 {
            // New requests go to a new connection (callers see `is_closed`), but the
            // requests sent in full keep waiting for their own replies: failing them would
            // make callers retry writes the peer may already have applied, which could
            // then land after newer ones. TCP delivers those replies when the path heals.
            closed.store(true, Ordering::Release);
            // Requests not yet sent whole never reached the peer: their frames are dropped
            // (giving their buffers back) and they fail now, as do callers still waiting
            // for room in the send queue; they retry elsewhere. The write half is shut.
            let dropped = writer.release(&format!("no answer from {peer} for {idle} ms"));
            tracing::warn!(peer = %peer, idle_ms = idle, unsent_bytes = dropped, "no answer from peer; new requests use a new connection");
            return;
        }
        if idle >= PING_INTERVAL.as_millis() as u64 {
            ping_id += 1;
            let (w, _) = oneshot::channel();
            pending.lock().insert(ping_id, w);
            let _ = writer.send_now(Frame::new(
                FrameKind::Request,
                ping_id,
                frame::encode(&Request::Ping),
                Bytes::new(),
            ));
        }
    }
}
