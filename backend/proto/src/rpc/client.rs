//! The calling side of a connection: [`Connection`] (connect and HELLO, call, close) and
//! the reader task that hands each reply to its caller and each push to the handler.

use crate::frame::{self, Frame, FrameError, FrameKind};
use crate::msg::{Hello, PeerKind, Push, Reply, Request, Response, Welcome};
use crate::outq::{OnUnsent, Writer};
use crate::stream::{self, ReadHalf};
use crate::tls::Transport;
use crate::{Errno, RemoteError, PROTOCOL_VERSION};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::liveness::{watchdog, RxClock, PING_ID_BASE};
use super::{Waiter, READ_BUFFER};

/// Client side of a connection.
pub struct Connection {
    pub(super) writer: Arc<Writer>,
    pub(super) pending: Arc<Mutex<HashMap<u64, Waiter>>>,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    last_rx: Arc<RxClock>,
    pub peer: String,
    pub welcome: Welcome,
}

/// Called for every push frame received on a client connection.
pub type PushHandler = Arc<dyn Fn(Push) + Send + Sync>;

impl Connection {
    /// Connect, say HELLO, and return the established connection.
    pub async fn connect(
        addr: &str,
        kind: PeerKind,
        name: &str,
        on_push: Option<PushHandler>,
        timeout: Duration,
    ) -> Result<Arc<Connection>, RemoteError> {
        Self::connect_from(addr, None, kind, name, on_push, timeout).await
    }

    /// [`Self::connect`] from source address `local` (any port) when given.
    pub async fn connect_from(
        addr: &str,
        local: Option<std::net::IpAddr>,
        kind: PeerKind,
        name: &str,
        on_push: Option<PushHandler>,
        timeout: Duration,
    ) -> Result<Arc<Connection>, RemoteError> {
        let transport = match crate::tls::default_transport() {
            Ok(t) => t,
            Err(e) => {
                // No credentials: say so, unless nothing is there to use them with.
                let dialed = tokio::time::timeout(timeout, dial(addr, local)).await;
                if let Ok(Err(d)) = dialed {
                    return Err(RemoteError::new(
                        Errno::from_io(&d),
                        format!("connect to {addr}: {d}"),
                    ));
                }
                return Err(e);
            }
        };
        Self::connect_with(addr, local, &transport, kind, name, on_push, timeout).await
    }

    /// [`Self::connect_from`] over `transport` (TLS with given credentials, or plain).
    pub async fn connect_with(
        addr: &str,
        local: Option<std::net::IpAddr>,
        transport: &Transport,
        kind: PeerKind,
        name: &str,
        on_push: Option<PushHandler>,
        timeout: Duration,
    ) -> Result<Arc<Connection>, RemoteError> {
        let stream = tokio::time::timeout(timeout, dial(addr, local))
            .await
            .map_err(|_| {
                RemoteError::new(Errno::ETIMEDOUT, format!("connect to {addr} timed out"))
            })?
            .map_err(|e| RemoteError::new(Errno::from_io(&e), format!("connect to {addr}: {e}")))?;
        stream.set_nodelay(true).ok();
        let (rd, wr) = match transport {
            Transport::Plain => stream::plain(stream),
            Transport::Tls(_) | Transport::Enroll(_) => {
                let cfg = match transport {
                    Transport::Tls(t) => {
                        // A client's credentials file re-issued since: this connection
                        // and the later ones use the new one.
                        t.refresh();
                        t.client.clone()
                    }
                    Transport::Enroll(c) => c.clone(),
                    Transport::Plain => unreachable!(),
                };
                let hs = stream::tls_client(stream, cfg);
                let (rd, wr, _server) = tokio::time::timeout(timeout, hs)
                    .await
                    .map_err(|_| {
                        RemoteError::new(
                            Errno::ETIMEDOUT,
                            format!("TLS handshake with {addr} timed out"),
                        )
                    })?
                    .map_err(|e| {
                        RemoteError::new(
                            handshake_errno(&e),
                            format!(
                                "TLS handshake with {addr} failed: {}",
                                crate::tls::explain(&e)
                            ),
                        )
                    })?;
                (rd, wr)
            }
        };
        let pending: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let last_rx = Arc::new(RxClock::new());
        // Calls whose frames were dropped unsent (the peer given up on) fail now: the peer
        // never got them, so they are safe to retry elsewhere.
        let on_unsent: OnUnsent = {
            let pending = pending.clone();
            Box::new(move |ids: &[u64], why: &str| {
                let waiters: Vec<_> = {
                    let mut p = pending.lock();
                    ids.iter().filter_map(|id| p.remove(id)).collect()
                };
                for w in waiters {
                    let _ = w.send(Err(RemoteError::new(
                        Errno::ENOTCONN,
                        format!("request not sent: {why}"),
                    )));
                }
            })
        };
        let writer = Writer::new(wr, closed.clone(), addr.to_string(), Some(on_unsent));
        tokio::spawn(client_reader(
            rd,
            Arc::downgrade(&writer),
            pending.clone(),
            closed.clone(),
            last_rx.clone(),
            on_push,
            addr.to_string(),
        ));
        tokio::spawn(watchdog(
            Arc::downgrade(&writer),
            pending.clone(),
            closed.clone(),
            last_rx.clone(),
            addr.to_string(),
        ));
        let mut conn = Connection {
            writer,
            pending,
            next_id: AtomicU64::new(1),
            closed,
            last_rx,
            peer: addr.to_string(),
            welcome: Welcome { version: 0, session: 0, node: String::new() },
        };
        let hello = Request::Hello(Hello {
            version: PROTOCOL_VERSION,
            kind,
            name: name.to_string(),
            auth: vec![],
        });
        let fut = conn.call(hello, Bytes::new());
        let reply = tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| RemoteError::new(Errno::ETIMEDOUT, format!("HELLO to {addr} timed out")))?
            .map_err(|e| match e.errno {
                Errno::EPROTONOSUPPORT => {
                    RemoteError::new(e.errno, format!("{addr} refused HELLO: {}", e.message))
                }
                _ => e,
            })?;
        match reply.0 {
            Reply::Welcome(w) if w.version != PROTOCOL_VERSION => {
                return Err(RemoteError::new(
                    Errno::EPROTONOSUPPORT,
                    format!(
                        "{addr}: protocol version mismatch: node {} speaks Cairn protocol \
                         version {}, this client speaks version {PROTOCOL_VERSION}; run the \
                         same Cairn release on every node and client",
                        w.node, w.version
                    ),
                ))
            }
            Reply::Welcome(w) => conn.welcome = w,
            other => {
                return Err(RemoteError::new(
                    Errno::EPROTO,
                    format!("{addr}: unexpected HELLO reply {other:?}"),
                ))
            }
        }
        Ok(Arc::new(conn))
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Send a request with an optional bulk segment and await its reply.
    pub async fn call(&self, req: Request, data: Bytes) -> Result<(Reply, Bytes), RemoteError> {
        if self.is_closed() {
            return Err(self.gone("is closed"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = Frame::new(FrameKind::Request, id, frame::encode(&req), data);
        // Wait for room in the send queue first (the only wait before the frame is
        // queued; a caller dropped here has sent nothing and left no waiter behind).
        let charge = self.writer.reserve(&frame).await.map_err(|_| self.gone("is closed"))?;
        let (wtx, wrx) = oneshot::channel();
        {
            let mut pending = self.pending.lock();
            if !pending.keys().any(|&i| i < PING_ID_BASE) {
                self.last_rx.touch();
            }
            pending.insert(id, wtx);
        }
        // Queued (and most often written) right here, with no await: the frame goes out
        // whole even if this future is dropped later.
        if self.writer.queue(frame, charge).is_err() {
            self.pending.lock().remove(&id);
            return Err(self.gone("is closed"));
        }
        match wrx.await {
            Ok(r) => r,
            Err(_) => Err(self.gone("lost")),
        }
    }

    /// ENOTCONN for this connection, with why it was given up on if it was.
    fn gone(&self, what: &str) -> RemoteError {
        gone(&self.peer, what, &self.writer)
    }

    /// Close the connection; requests in flight fail with ENOTCONN.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiters: Vec<_> = self.pending.lock().drain().collect();
        for (_, w) in waiters {
            let _ = w.send(Err(RemoteError::new(
                Errno::ENOTCONN,
                format!("connection to {} closed", self.peer),
            )));
        }
        // Queued frames are still written; then the write half is shut. Senders waiting
        // for room in the queue fail.
        self.writer.shut();
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        self.writer.shut();
    }
}

/// ENOTCONN: "connection to PEER WHAT", and the writer's reason if it was given up on.
fn gone(peer: &str, what: &str, writer: &Writer) -> RemoteError {
    let msg = match writer.reason() {
        Some(why) => format!("connection to {peer} {what}: {why}"),
        None => format!("connection to {peer} {what}"),
    };
    RemoteError::new(Errno::ENOTCONN, msg)
}

async fn client_reader(
    rd: ReadHalf,
    writer: std::sync::Weak<Writer>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
    closed: Arc<AtomicBool>,
    last_rx: Arc<RxClock>,
    on_push: Option<PushHandler>,
    peer: String,
) {
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    // Why the connection ended, when it says more than "lost" (a TLS alert: the server
    // refused our certificate after the handshake, as TLS 1.3 servers do).
    let mut why = None;
    loop {
        let f = match frame::read_frame(&mut rd).await {
            Ok(f) => {
                last_rx.touch();
                f
            }
            Err(e) => {
                if !matches!(e, FrameError::Closed) {
                    tracing::debug!(peer = %peer, error = %e, "connection read failed");
                }
                if let FrameError::Io(io) = &e {
                    why = crate::tls::tls_reason(io);
                }
                break;
            }
        };
        match f.kind {
            FrameKind::Response => {
                let Some(w) = pending.lock().remove(&f.id) else { continue };
                let r = match frame::decode::<Response>(&f.header) {
                    Ok(Ok(reply)) => Ok((reply, f.data)),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(RemoteError::new(
                        Errno::EPROTO,
                        format!("{peer}: undecodable response: {e}"),
                    )),
                };
                let _ = w.send(r);
            }
            FrameKind::Push => {
                if let (Some(h), Ok(p)) = (&on_push, frame::decode::<Push>(&f.header)) {
                    h(p);
                }
            }
            FrameKind::Request => {
                tracing::warn!(peer = %peer, "server sent a request frame; closing");
                break;
            }
        }
    }
    closed.store(true, Ordering::Release);
    // Senders waiting for room in the send queue fail too.
    let writer = writer.upgrade();
    if let Some(w) = &writer {
        w.shut();
    }
    let waiters: Vec<_> = pending.lock().drain().collect();
    for (_, w) in waiters {
        let _ = w.send(Err(match &writer {
            _ if why.is_some() => RemoteError::new(
                Errno::ENOTCONN,
                format!("connection to {peer} lost: {}", why.as_deref().unwrap_or_default()),
            ),
            Some(wr) => gone(&peer, "lost", wr),
            None => RemoteError::new(Errno::ENOTCONN, format!("connection to {peer} lost")),
        }));
    }
}

/// Open a TCP connection to `addr`, from source address `local` if given.
async fn dial(addr: &str, local: Option<std::net::IpAddr>) -> std::io::Result<TcpStream> {
    let Some(local) = local else { return TcpStream::connect(addr).await };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for to in tokio::net::lookup_host(addr).await?.filter(|a| a.is_ipv4() == local.is_ipv4()) {
        let sock = if to.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        sock.bind(std::net::SocketAddr::new(local, 0))?;
        match sock.connect(to).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The errno of a failed TLS handshake: what TLS refused (a certificate, an alert, a peer
/// that does not speak TLS) is EACCES, final; the connection ending under it (the peer
/// killed or restarting: reset, end of file, broken pipe) is a transport failure the
/// caller retries like a refused connect (a brick restart must read as "busy", not as a
/// permission error: iSCSI turned it into a MEDIUM ERROR).
fn handshake_errno(e: &std::io::Error) -> Errno {
    use std::io::ErrorKind as K;
    if crate::tls::tls_reason(e).is_some() {
        return Errno::EACCES;
    }
    match e.kind() {
        K::ConnectionReset | K::UnexpectedEof | K::ConnectionAborted => Errno(libc::ECONNRESET),
        K::BrokenPipe => Errno(libc::EPIPE),
        _ => match e.raw_os_error() {
            Some(n) => Errno(n),
            None => Errno::EACCES,
        },
    }
}
