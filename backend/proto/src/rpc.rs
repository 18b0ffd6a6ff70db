//! The multiplexed, pipelined RPC connection used by clients, the CLI and `cairnd` itself.
//!
//! One TCP connection carries any number of requests in flight, matched to responses by
//! request id. Whoever sends a frame writes it to the socket itself when nobody else is
//! writing, and queues it for the current writer otherwise ([`crate::outq`]), so a request
//! or a reply costs no hand-off to a writer task. The server side spawns a task per
//! request (pipelining) and answers in completion order. The first request on a connection must be HELLO with a matching major version.

use crate::frame::{self, Frame, FrameError, FrameKind};
use crate::msg::{Hello, PeerKind, Push, Reply, Request, Response, Welcome};
use crate::outq::{OnUnsent, Sender, Writer};
use crate::principal::Principal;
use crate::stream::{self, ReadHalf};
use crate::tls::Transport;
use crate::{Errno, RemoteError, PROTOCOL_VERSION};
use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

type Waiter = oneshot::Sender<Result<(Reply, Bytes), RemoteError>>;

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

/// Turn on TCP keepalive with the timings above (best effort: logged if refused).
fn set_keepalive(stream: &TcpStream, peer: &SocketAddr) {
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
struct RxClock {
    base: tokio::time::Instant,
    last: AtomicU64,
}

impl RxClock {
    fn new() -> RxClock {
        RxClock { base: tokio::time::Instant::now(), last: AtomicU64::new(0) }
    }

    fn now_ms(&self) -> u64 {
        tokio::time::Instant::now().saturating_duration_since(self.base).as_millis() as u64
    }

    fn touch(&self) {
        self.last.store(self.now_ms(), Ordering::Release);
    }

    fn idle_ms(&self) -> u64 {
        self.now_ms().saturating_sub(self.last.load(Ordering::Acquire))
    }
}

/// Client side of a connection.
pub struct Connection {
    writer: Arc<Writer>,
    pending: Arc<Mutex<HashMap<u64, Waiter>>>,
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
                    Transport::Tls(t) => t.client.clone(),
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
                            Errno::EACCES,
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
        let reply = tokio::time::timeout(timeout, fut).await.map_err(|_| {
            RemoteError::new(Errno::ETIMEDOUT, format!("HELLO to {addr} timed out"))
        })??;
        match reply.0 {
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

/// Ids of the watchdog's own PINGs (from the top of the id space, apart from requests').
const PING_ID_BASE: u64 = 1 << 63;

/// Liveness of a client connection: see [`PING_INTERVAL`] and [`PEER_DEAD_AFTER`]. Ends
/// when the connection is dropped or closed.
async fn watchdog(
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
    tx: Sender,
    closed: Arc<AtomicBool>,
    /// Notified by [`Session::close`]: the server stops reading this connection.
    kill: Arc<tokio::sync::Notify>,
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

static SESSION_IDS: AtomicU64 = AtomicU64::new(1);

/// The live sessions of this process's servers (for [`close_sessions`]).
static LIVE: parking_lot::Mutex<Vec<std::sync::Weak<Session>>> =
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

/// Accept connections forever, over the process's default transport
/// ([`crate::tls::default_transport`]; none found: logged, and nothing is served).
pub async fn serve<S: Service>(listener: TcpListener, service: Arc<S>) {
    match crate::tls::default_transport() {
        Ok(t) => serve_with(listener, service, t).await,
        Err(e) => tracing::error!(error = %e, "cannot serve: {e}"),
    }
}

/// Accept connections forever over `transport`.
pub async fn serve_with<S: Service>(listener: TcpListener, service: Arc<S>, transport: Transport) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let service = service.clone();
                let t = transport.clone();
                tokio::spawn(async move { serve_connection_with(stream, peer, service, &t).await });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn error_frame(id: u64, errno: Errno, msg: String) -> Frame {
    let resp: Response = Err(RemoteError::new(errno, msg));
    Frame::new(FrameKind::Response, id, frame::encode(&resp), Bytes::new())
}

/// The frame answering request `id`. A reply over the frame limits, which the peer would
/// refuse by closing the connection (failing every call on it), is answered with EMSGSIZE
/// instead.
fn reply_frame(id: u64, resp: &Response, data: Bytes) -> Frame {
    let header = frame::encode(resp);
    if header.len() > frame::MAX_HEADER as usize || data.len() > frame::MAX_DATA as usize {
        let msg = format!(
            "reply too large for a frame: header {} bytes, data {} bytes (limits {} and {})",
            header.len(),
            data.len(),
            frame::MAX_HEADER,
            frame::MAX_DATA
        );
        tracing::warn!(request = id, "{msg}");
        return error_frame(id, Errno::EMSGSIZE, msg);
    }
    Frame::new(FrameKind::Response, id, header, data)
}

/// Whether a peer with certificate `p` may say HELLO as `kind`: only nodes speak as
/// `Daemon` (plain connections carry no identity and are not checked; a TLS client
/// without a certificate is no node).
fn kind_allowed(kind: &PeerKind, p: Option<&Principal>, unauthenticated: bool) -> bool {
    match (kind, p) {
        (PeerKind::Daemon, Some(p)) => p.role == crate::principal::Role::Node,
        (PeerKind::Daemon, None) => !unauthenticated,
        _ => true,
    }
}

/// Whether a connection without a certificate may make request `r`: enrollment only.
fn allowed_unauthenticated(r: &Request) -> bool {
    matches!(r, Request::Mgmt(crate::mgmt::MgmtRequest::Enroll(_)))
}

/// The refusal of any other request on such a connection.
fn unauthenticated_refusal(r: &Request) -> RemoteError {
    let what = match r {
        Request::Mgmt(m) => format!("{m:?}"),
        other => format!("{other:?}"),
    };
    let what = what.split([' ', '(', '{']).next().unwrap_or_default().to_string();
    RemoteError::new(
        Errno::EACCES,
        format!(
            "permission denied: {what} needs a certificate of the cluster CA; this connection              presented none, and before authentication a node accepts only enrollment (a join              token and a certificate request: cairnd --join)"
        ),
    )
}

/// Longest a TLS handshake may take on the server side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A plaintext Cairn client reached a TLS-only node: answer its HELLO with a clear error
/// (in plaintext, the only thing it reads) and close.
async fn refuse_plaintext(mut stream: TcpStream, peer: SocketAddr) {
    tracing::warn!(%peer, "refused a plaintext connection: this node requires TLS with a cluster certificate");
    let read = tokio::time::timeout(HANDSHAKE_TIMEOUT, frame::read_frame(&mut stream)).await;
    if let Ok(Ok(f)) = read {
        let e = error_frame(
            f.id,
            Errno::EACCES,
            "connection refused: this node accepts only TLS connections authenticated by a \
             certificate of the cluster CA (the client runs with transport = plain)"
                .into(),
        );
        let _ = frame::write_frame(&mut stream, &e).await;
    }
    let _ = stream.shutdown().await;
}

/// Serve one connection over the process's default transport.
pub async fn serve_connection<S: Service>(stream: TcpStream, peer: SocketAddr, service: Arc<S>) {
    match crate::tls::default_transport() {
        Ok(t) => serve_connection_with(stream, peer, service, &t).await,
        Err(e) => tracing::error!(%peer, error = %e, "cannot serve connection: {e}"),
    }
}

/// Serve one connection over `transport` until it closes or misbehaves.
pub async fn serve_connection_with<S: Service>(
    stream: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    transport: &Transport,
) {
    stream.set_nodelay(true).ok();
    set_keepalive(&stream, &peer);
    let (rd, wr, principal, serial) = match transport {
        Transport::Plain => {
            let (rd, wr) = stream::plain(stream);
            (rd, wr, None, None)
        }
        Transport::Enroll(_) => {
            tracing::error!(%peer, "cannot serve: an enrollment transport has no certificate");
            return;
        }
        Transport::Tls(t) => {
            let mut magic = [0u8; 4];
            let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut magic)).await;
            match peeked {
                Ok(Ok(4)) if magic == frame::MAGIC => return refuse_plaintext(stream, peer).await,
                // Closed before sending anything (a port probe).
                Ok(Ok(0)) => return,
                _ => {}
            }
            let hs = tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                stream::tls_server(stream, t.server.clone()),
            );
            match hs.await {
                Ok(Ok((rd, wr, Some((p, serial))))) => (rd, wr, Some(p), Some(serial)),
                Ok(Ok((rd, wr, None))) => (rd, wr, None, None),
                Ok(Err(e)) => {
                    tracing::warn!(%peer, "refused a connection: TLS handshake failed: {}", crate::tls::explain(&e));
                    return;
                }
                Err(_) => {
                    tracing::warn!(%peer, "refused a connection: no TLS handshake within {HANDSHAKE_TIMEOUT:?}");
                    return;
                }
            }
        }
    };
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let closed = Arc::new(AtomicBool::new(false));
    let writer = Writer::new(wr, closed.clone(), peer.to_string(), None);
    // The write half is shut when the last sender goes: this one, the session's, and one
    // per request in flight (so every reply is written first).
    let tx = Sender::new(writer.clone());
    let unauthenticated = transport.is_tls() && principal.is_none();
    let kill = Arc::new(tokio::sync::Notify::new());

    // HELLO first.
    let session = match frame::read_frame(&mut rd).await {
        Ok(f) => match frame::decode::<Request>(&f.header) {
            Ok(Request::Hello(h))
                if h.version == PROTOCOL_VERSION
                    && f.kind == FrameKind::Request
                    && kind_allowed(&h.kind, principal.as_ref(), unauthenticated) =>
            {
                let id = SESSION_IDS.fetch_add(1, Ordering::Relaxed);
                let welcome = service.welcome(id);
                let resp: Response = Ok(Reply::Welcome(welcome));
                let _ = tx.send_now(Frame::new(
                    FrameKind::Response,
                    f.id,
                    frame::encode(&resp),
                    Bytes::new(),
                ));
                let s = Arc::new(Session {
                    id,
                    peer,
                    hello: h,
                    principal: principal.clone(),
                    serial: serial.clone(),
                    unauthenticated,
                    tx: tx.clone(),
                    closed: closed.clone(),
                    kill: kill.clone(),
                });
                {
                    let mut live = LIVE.lock();
                    live.retain(|w| w.strong_count() > 0);
                    live.push(Arc::downgrade(&s));
                }
                s
            }
            Ok(Request::Hello(h))
                if h.version == PROTOCOL_VERSION
                    && !kind_allowed(&h.kind, principal.as_ref(), unauthenticated) =>
            {
                // The certificate says who the peer is: only a node may speak as one.
                let p = principal
                    .as_ref()
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "a client without a certificate".into());
                tracing::warn!(%peer, principal = %p, "refused HELLO: claims to be a cluster node");
                let _ = tx.send_now(error_frame(
                    f.id,
                    Errno::EACCES,
                    format!("HELLO refused: {p} may not connect as a cluster node (kind Daemon needs a node certificate)"),
                ));
                drop(tx);
                writer.finished().await;
                linger(&mut rd).await;
                return;
            }
            Ok(Request::Hello(h)) => {
                let _ = tx.send_now(error_frame(
                    f.id,
                    Errno::EPROTONOSUPPORT,
                    format!(
                        "protocol version {} not supported (this node speaks {PROTOCOL_VERSION})",
                        h.version
                    ),
                ));
                drop(tx);
                writer.finished().await;
                linger(&mut rd).await;
                return;
            }
            _ => {
                let _ = tx.send_now(error_frame(
                    f.id,
                    Errno::EPROTO,
                    "first request must be HELLO".into(),
                ));
                drop(tx);
                writer.finished().await;
                linger(&mut rd).await;
                return;
            }
        },
        Err(e) => {
            if let FrameError::TooLarge { id, .. } = e {
                let _ = tx.send_now(error_frame(id, Errno::EMSGSIZE, e.to_string()));
            }
            tracing::debug!(%peer, error = %e, "connection rejected before HELLO");
            drop(tx);
            writer.finished().await;
            linger(&mut rd).await;
            return;
        }
    };

    loop {
        // A client that sends requests but does not read the replies: stop reading its
        // requests while its reply queue is full.
        if tx.is_full() && tx.room().await.is_err() {
            break;
        }
        let read = tokio::select! {
            r = frame::read_frame(&mut rd) => r,
            _ = kill.notified() => {
                tracing::info!(session = %session.label(), "session closed by the server (fenced gateway or revoked certificate)");
                break;
            }
        };
        let f = match read {
            Ok(f) => f,
            Err(FrameError::Closed) => break,
            Err(e) => {
                let (id, errno) = match &e {
                    FrameError::TooLarge { id, .. } => (*id, Errno::EMSGSIZE),
                    _ => (0, Errno::EPROTO),
                };
                tracing::warn!(session = %session.label(), error = %e, "protocol error; closing connection");
                let _ = tx.send_now(error_frame(id, errno, e.to_string()));
                break;
            }
        };
        if f.kind != FrameKind::Request {
            tracing::warn!(session = %session.label(), "client sent a non-request frame; closing");
            let _ =
                tx.send_now(error_frame(f.id, Errno::EPROTO, "expected a request frame".into()));
            break;
        }
        let req = match frame::decode::<Request>(&f.header) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(session = %session.label(), error = %e, "undecodable request; closing");
                let _ = tx.send_now(error_frame(
                    f.id,
                    Errno::EPROTO,
                    format!("undecodable request: {e}"),
                ));
                break;
            }
        };
        if session.unauthenticated && !allowed_unauthenticated(&req) {
            let e = unauthenticated_refusal(&req);
            tracing::warn!(session = %session.label(), error = %e, "request refused");
            let _ = tx.send_now(error_frame(f.id, e.errno, e.message));
            continue;
        }
        let fut = service.call(session.clone(), req, f.data);
        let tx = tx.clone();
        let id = f.id;
        tokio::spawn(async move {
            let (resp, data) = fut.await;
            let _ = tx.send(reply_frame(id, &resp, data)).await;
        });
    }
    closed.store(true, Ordering::Release);
    service.closed(&session);
    drop(tx);
    drop(session);
    // The write half is shut once every in-flight request task has sent its reply.
    writer.finished().await;
    linger(&mut rd).await;
}

/// Longest a server reads on after its write half is shut.
const LINGER: Duration = Duration::from_secs(2);

/// After the write half is shut: read and drop what the peer still sends, until it closes
/// (at once for a peer that closed first) or for at most [`LINGER`]. Closing a socket with
/// unread bytes resets the connection, and a reset can make the peer's kernel discard the
/// replies and the error frame it has not read yet.
async fn linger<R: tokio::io::AsyncRead + Unpin>(rd: &mut R) {
    let _ = tokio::time::timeout(LINGER, tokio::io::copy(rd, &mut tokio::io::sink())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' servers speak TLS (a test CA's node certificate on both ends), except
    /// those whose peer is a raw socket writing frames ([`serve_plain`]).
    fn serve<S: Service>(l: TcpListener, s: Arc<S>) -> impl std::future::Future<Output = ()> {
        crate::tls::test_ca::use_for_process();
        super::serve(l, s)
    }

    fn serve_plain<S: Service>(l: TcpListener, s: Arc<S>) -> impl std::future::Future<Output = ()> {
        super::serve_with(l, s, Transport::Plain)
    }

    async fn connect_plain(addr: &str) -> Arc<Connection> {
        let t = Transport::Plain;
        Connection::connect_with(addr, None, &t, PeerKind::Cli, "t", None, Duration::from_secs(5))
            .await
            .unwrap()
    }
    use crate::frame::{MAX_DATA, MAX_HEADER};
    use crate::outq::QUEUE_LIMIT;

    /// Answers HELLO, and PING if `pings`; any other request takes 15 s (longer than
    /// PEER_DEAD_AFTER) and is then answered if `pings`, never otherwise.
    struct Quiet {
        pings: bool,
    }

    impl Service for Quiet {
        fn welcome(&self, session: u64) -> Welcome {
            Welcome { version: PROTOCOL_VERSION, session, node: "quiet".into() }
        }
        fn call(
            &self,
            _: Arc<Session>,
            req: Request,
            _: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            let pings = self.pings;
            Box::pin(async move {
                match req {
                    Request::Ping if pings => (Ok(Reply::Pong), Bytes::new()),
                    _ => {
                        tokio::time::sleep(Duration::from_secs(15)).await;
                        if pings {
                            (Ok(Reply::Pong), Bytes::new())
                        } else {
                            futures::future::pending().await
                        }
                    }
                }
            })
        }
    }

    async fn start(pings: bool) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(serve(l, Arc::new(Quiet { pings })));
        addr
    }

    fn slow_request() -> Request {
        Request::GetMap { volume: "v".into() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_is_marked_closed_but_its_requests_keep_waiting() {
        let addr = start(false).await;
        let c = Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5))
            .await
            .unwrap();
        let call = c.call(slow_request(), Bytes::new());
        tokio::pin!(call);
        // Not answered: the call is still pending after PEER_DEAD_AFTER...
        let r = tokio::time::timeout(PEER_DEAD_AFTER + 2 * PING_INTERVAL, &mut call).await;
        assert!(r.is_err(), "a request in flight must not be failed by the watchdog");
        // ...but the connection no longer takes new requests.
        assert!(c.is_closed());
        let e = c.call(slow_request(), Bytes::new()).await.unwrap_err();
        assert_eq!(e.errno, Errno::ENOTCONN, "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_peer_that_answers_pings_is_waited_for() {
        let addr = start(true).await;
        let c = Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5))
            .await
            .unwrap();
        // Idle for a while first: the watchdog's clock starts when the request is sent.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let (r, _) = c.call(slow_request(), Bytes::new()).await.unwrap();
        assert!(matches!(r, Reply::Pong));
        assert!(!c.is_closed());
    }

    /// Answers every request with PONG and the bulk segment it was sent.
    struct Echo;

    impl Service for Echo {
        fn welcome(&self, session: u64) -> Welcome {
            Welcome { version: PROTOCOL_VERSION, session, node: "echo".into() }
        }
        fn call(
            &self,
            _: Arc<Session>,
            _: Request,
            data: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            Box::pin(async move { (Ok(Reply::Pong), data) })
        }
    }

    /// Answers `GetMap` with a bulk segment and `Subscribe` with a header each one byte
    /// over the frame limits, anything else like [`Echo`].
    struct Oversized;

    impl Service for Oversized {
        fn welcome(&self, session: u64) -> Welcome {
            Echo.welcome(session)
        }
        fn call(
            &self,
            session: Arc<Session>,
            req: Request,
            data: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            match req {
                Request::GetMap { .. } => Box::pin(async move {
                    (Ok(Reply::Data { eof: true }), Bytes::from(vec![7; MAX_DATA as usize + 1]))
                }),
                Request::Subscribe { .. } => Box::pin(async move {
                    (Ok(Reply::Bytes(vec![7; MAX_HEADER as usize])), Bytes::new())
                }),
                _ => Echo.call(session, req, data),
            }
        }
    }

    /// A reply over the frame limits (found by cairnd's wire fuzz test: a READ of 4 GiB
    /// from a file past 32 MiB was answered with 64 MiB of data, which the client refused,
    /// closing the connection) is answered with EMSGSIZE, and the connection goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reply_over_the_frame_limits_is_emsgsize_and_the_connection_lives() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(serve(l, Arc::new(Oversized)));
        let c = connect(&addr).await;
        for req in
            [Request::GetMap { volume: "v".into() }, Request::Subscribe { volume: "v".into() }]
        {
            let e = c.call(req.clone(), Bytes::new()).await.unwrap_err();
            assert_eq!(e.errno, Errno::EMSGSIZE, "{req:?}: {e}");
            assert!(e.message.contains("reply too large"), "{e}");
            let (r, back) = c.call(Request::Ping, Bytes::from_static(b"still")).await.unwrap();
            assert!(matches!(r, Reply::Pong));
            assert_eq!(&back[..], b"still");
        }
    }

    /// A peer that sends a bad frame and more bytes after it, and reads only later, still
    /// gets the replies sent before and the error frame, then a clean close (found by
    /// cairnd's wire fuzz test: closing with those bytes unread reset the connection, and
    /// the reset threw away the reply bytes still queued to send). The client's small
    /// receive buffer keeps most of the 16 MiB reply queued on the server when it would
    /// close, so without the linger this fails every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_frame_gets_its_error_and_the_replies_before_it_not_a_reset() {
        use tokio::io::AsyncWriteExt;
        const REPLY: usize = 16 << 20;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve_plain(l, Arc::new(Echo)));
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(64 << 10).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let hello = Request::Hello(Hello {
            version: PROTOCOL_VERSION,
            kind: PeerKind::Client,
            name: "t".into(),
            auth: vec![],
        });
        frame::write_frame(
            &mut s,
            &Frame::new(FrameKind::Request, 1, frame::encode(&hello), Bytes::new()),
        )
        .await
        .unwrap();
        frame::read_frame(&mut s).await.unwrap();
        let ping = Frame::new(
            FrameKind::Request,
            2,
            frame::encode(&Request::Ping),
            Bytes::from(vec![5; REPLY]),
        );
        let mut bytes = ping.encode_prefix().to_vec();
        bytes.extend_from_slice(&ping.header);
        bytes.extend_from_slice(&ping.data);
        // More than the server's read buffer and the socket's take at once: bytes it has
        // not read when it closes.
        bytes.extend_from_slice(&[0xee; 4 << 20]);
        let (mut rd, mut wr) = s.into_split();
        let sending = tokio::spawn(async move {
            let _ = wr.write_all(&bytes).await;
            wr
        });
        // The server answers and closes; read only after it did.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = &mut rd;
        // Both, in completion order.
        let (mut reply, mut error) = (false, false);
        for _ in 0..2 {
            let f = frame::read_frame(s).await.expect("the reply and the error frame");
            match frame::decode::<Response>(&f.header).unwrap() {
                Ok(Reply::Pong) => reply = f.id == 2 && f.data.len() == REPLY,
                Err(e) => error = e.errno == Errno::EPROTO,
                other => panic!("{other:?}"),
            }
        }
        assert!(reply && error, "reply {reply}, error {error}");
        let mut wr = sending.await.unwrap();
        let _ = wr.shutdown().await;
        assert!(matches!(frame::read_frame(s).await, Err(FrameError::Closed)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_frames_small_and_larger_than_the_read_buffer_arrive_intact() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(serve(l, Arc::new(Echo)));
        let c = Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5))
            .await
            .unwrap();
        // Sizes around the read buffer, so both sides read frames that share one recv
        // and bulk segments that bypass the buffer or straddle its end.
        let sizes = [0, 1, 4096, READ_BUFFER - 7, READ_BUFFER, READ_BUFFER + 1, 3 * READ_BUFFER];
        let calls = (0..64).map(|i| {
            let n = sizes[i % sizes.len()];
            let data: Bytes = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
            let c = c.clone();
            async move {
                let (r, back) = c.call(Request::Ping, data.clone()).await.unwrap();
                assert!(matches!(r, Reply::Pong));
                assert_eq!(back, data, "call {i}: {n} bytes echoed wrong");
            }
        });
        futures::future::join_all(calls).await;
    }

    /// Echoes like [`Echo`], and records the (caller, sequence) stamped in the first 16
    /// bytes of each request's data, in the order the requests arrived.
    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<(u64, u64)>>,
    }

    impl Service for Recorder {
        fn welcome(&self, session: u64) -> Welcome {
            Echo.welcome(session)
        }
        fn call(
            &self,
            session: Arc<Session>,
            req: Request,
            data: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            // `call` runs in the connection's reader, in arrival order. The watchdog's
            // pings (on a loaded host) carry no stamp.
            if data.len() >= 16 {
                let stamp =
                    |r: std::ops::Range<usize>| u64::from_le_bytes(data[r].try_into().unwrap());
                self.seen.lock().push((stamp(0..8), stamp(8..16)));
            }
            Echo.call(session, req, data)
        }
    }

    fn stamped(caller: u64, seq: u64, len: usize) -> Bytes {
        let mut v: Vec<u8> = (0..len.max(16))
            .map(|j| (caller as usize * 131 + seq as usize * 7 + j) as u8)
            .collect();
        v[0..8].copy_from_slice(&caller.to_le_bytes());
        v[8..16].copy_from_slice(&seq.to_le_bytes());
        v.into()
    }

    async fn connect(addr: &str) -> Arc<Connection> {
        Connection::connect(addr, PeerKind::Cli, "t", None, Duration::from_secs(5)).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_frames_arrive_intact_and_in_each_callers_order() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let rec = Arc::new(Recorder::default());
        tokio::spawn(serve(l, rec.clone()));
        let c = connect(&addr).await;
        // Sizes from a bare header to more than the queue limit, so callers write their
        // own frames, queue behind one another, wait for room, and hit a full socket.
        let sizes = [16, 100, 4096, 70_000, 1 << 20, QUEUE_LIMIT + 5];
        let callers = (0..8u64).map(|caller| {
            let c = c.clone();
            tokio::spawn(async move {
                // Each caller pipelines its calls: join_all polls them in order, so they
                // are queued in order.
                let calls = (0..20u64).map(|seq| {
                    let n = sizes[((caller + seq * 5) % sizes.len() as u64) as usize];
                    let data = stamped(caller, seq, n);
                    let c = c.clone();
                    async move {
                        let (r, back) = c.call(Request::Ping, data.clone()).await.unwrap();
                        assert!(matches!(r, Reply::Pong));
                        assert!(back == data, "caller {caller} call {seq}: {n} bytes echoed wrong");
                    }
                });
                futures::future::join_all(calls).await;
            })
        });
        for r in futures::future::join_all(callers).await {
            r.unwrap();
        }
        let seen = rec.seen.lock().clone();
        assert_eq!(seen.len(), 8 * 20);
        for caller in 0..8 {
            let seqs: Vec<u64> = seen.iter().filter(|s| s.0 == caller).map(|s| s.1).collect();
            assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "caller {caller}'s frames out of order");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_dropped_mid_send_leave_the_stream_intact() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let rec = Arc::new(Recorder::default());
        tokio::spawn(serve(l, rec.clone()));
        let c = connect(&addr).await;
        let mut kept = vec![];
        for i in 0..40u64 {
            let data = stamped(i, 0, [3 << 20, 100, 1 << 20, 5000][i as usize % 4]);
            if i % 3 == 0 {
                // Polled once (its frame queued, partly written, or waiting for room),
                // then dropped.
                let mut f = Box::pin(c.call(Request::Ping, data));
                let _ = futures::poll!(&mut f);
                drop(f);
            } else {
                let c = c.clone();
                kept.push(tokio::spawn(async move {
                    let (_, back) = c.call(Request::Ping, data.clone()).await.unwrap();
                    assert!(back == data, "call {i} echoed wrong");
                }));
            }
        }
        for k in kept {
            k.await.unwrap();
        }
        // The connection still works, and every frame the server got was whole (a torn
        // one would have been misparsed, closing the connection or failing a stamp).
        let data = stamped(99, 1, 12345);
        let (_, back) = c.call(Request::Ping, data.clone()).await.unwrap();
        assert_eq!(back, data);
        assert!(!c.is_closed());
        let seen = rec.seen.lock().clone();
        assert!(seen
            .iter()
            .all(|&(caller, seq)| caller < 40 && seq == 0 || (caller, seq) == (99, 1)));
    }

    /// A peer that answers HELLO and then never reads again; it closes the connection
    /// when the returned sender is used (or dropped).
    async fn deaf_peer() -> (String, oneshot::Sender<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (hold_tx, hold_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let f = frame::read_frame(&mut s).await.unwrap();
            let welcome: Response = Ok(Reply::Welcome(Welcome {
                version: PROTOCOL_VERSION,
                session: 1,
                node: "x".into(),
            }));
            let w = Frame::new(FrameKind::Response, f.id, frame::encode(&welcome), Bytes::new());
            frame::write_frame(&mut s, &w).await.unwrap();
            let _ = hold_rx.await;
            drop(s);
        });
        (addr, hold_tx)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_stops_reading_makes_senders_wait_and_closing_fails_them() {
        let (addr, hold_tx) = deaf_peer().await;
        let c = connect_plain(&addr).await;
        const CALLS: usize = 64;
        let calls: Vec<_> = (0..CALLS)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    c.call(Request::Ping, stamped(i as u64, 0, 1 << 20)).await.unwrap_err()
                })
            })
            .collect();
        // 64 MiB is more than the socket buffers and the queue hold: the queue fills up...
        while !c.writer.is_full() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // ...and the callers beyond it wait with their frames unqueued.
        let queued = c.pending.lock().len();
        assert!(queued < CALLS, "all {CALLS} frames were queued for a peer that does not read");
        assert!(c.writer.queued() <= QUEUE_LIMIT);
        // Closing fails every caller, queued or waiting.
        c.close();
        for r in calls {
            let e = r.await.unwrap();
            assert_eq!(e.errno, Errno::ENOTCONN, "{e}");
        }
        let _ = hold_tx.send(());
    }

    /// A buffer that counts the live ones of its kind (a stand-in for a lent buffer).
    struct Counted(Vec<u8>, Arc<std::sync::atomic::AtomicUsize>);

    impl Counted {
        fn bytes(len: usize, live: &Arc<std::sync::atomic::AtomicUsize>) -> Bytes {
            live.fetch_add(1, Ordering::SeqCst);
            Bytes::from_owner(Counted(vec![7; len], live.clone()))
        }
    }

    impl AsRef<[u8]> for Counted {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Answers every request with 1 MiB of counted data; records when sessions close.
    #[derive(Default)]
    struct Big {
        live: Arc<std::sync::atomic::AtomicUsize>,
        closed: Mutex<Vec<tokio::time::Instant>>,
    }

    impl Service for Big {
        fn welcome(&self, session: u64) -> Welcome {
            Echo.welcome(session)
        }
        fn call(
            &self,
            _: Arc<Session>,
            _: Request,
            _: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            let data = Counted::bytes(1 << 20, &self.live);
            Box::pin(async move { (Ok(Reply::Pong), data) })
        }
        fn closed(&self, _: &Arc<Session>) {
            self.closed.lock().push(tokio::time::Instant::now());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_is_cut_off_after_the_send_stall_and_others_are_served() {
        use crate::outq::SEND_STALL;
        use tokio::io::AsyncReadExt;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let big = Arc::new(Big::default());
        tokio::spawn(serve_plain(l, big.clone()));
        // A raw client: HELLO and 64 small requests (64 MiB of replies, more than the
        // socket buffers and the reply queue hold), and it never reads.
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let hello = Request::Hello(Hello {
            version: PROTOCOL_VERSION,
            kind: PeerKind::Cli,
            name: "deaf".into(),
            auth: vec![],
        });
        let f = Frame::new(FrameKind::Request, 1, frame::encode(&hello), Bytes::new());
        frame::write_frame(&mut s, &f).await.unwrap();
        for id in 2..66 {
            let f = Frame::new(FrameKind::Request, id, frame::encode(&Request::Ping), Bytes::new());
            frame::write_frame(&mut s, &f).await.unwrap();
        }
        let t0 = tokio::time::Instant::now();
        // Short of the deadline the connection holds on (the server waits for room)...
        tokio::time::sleep(SEND_STALL / 2).await;
        assert!(big.closed.lock().is_empty(), "cut off before the send stall");
        assert!(big.live.load(Ordering::SeqCst) > 0);
        // ...past it, the connection is closed and its queued replies dropped.
        tokio::time::sleep(SEND_STALL).await;
        let closed = big.closed.lock().clone();
        assert_eq!(closed.len(), 1, "the deaf client's connection was not closed");
        let after = closed[0] - t0;
        assert!(after >= SEND_STALL && after < SEND_STALL * 3 / 2, "closed after {after:?}");
        assert_eq!(big.live.load(Ordering::SeqCst), 0, "queued replies still held");
        // The deaf client sees the end of its connection (after the bytes in flight).
        let mut buf = vec![0u8; 1 << 20];
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                let _ = n;
            }
        });
        end.await.expect("the deaf client's connection is still open");
        // Another client is served.
        let c = connect_plain(&addr).await;
        let (r, data) = c.call(Request::Ping, Bytes::new()).await.unwrap();
        assert!(matches!(r, Reply::Pong));
        assert_eq!(data.len(), 1 << 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_stops_reading_fails_unsent_calls_and_gives_their_buffers_back() {
        let (addr, hold_tx) = deaf_peer().await;
        let c = connect_plain(&addr).await;
        let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls: Vec<_> = (0..32)
            .map(|_| {
                let c = c.clone();
                let data = Counted::bytes(1 << 20, &live);
                tokio::spawn(async move { c.call(Request::Ping, data).await })
            })
            .collect();
        while !c.writer.is_full() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(live.load(Ordering::SeqCst) > 0);
        // The watchdog gives the peer up.
        tokio::time::sleep(PEER_DEAD_AFTER + 2 * PING_INTERVAL).await;
        assert!(c.is_closed());
        // Every buffer is back: written ones, queued ones (dropped) and those that
        // waited for room; and the flusher is gone (only the connection holds the writer).
        assert_eq!(live.load(Ordering::SeqCst), 0, "buffers of unsent calls are still held");
        assert_eq!(Arc::strong_count(&c.writer), 1, "the flusher still runs");
        // The calls not sent whole failed, naming the peer and why; those sent whole
        // (into the socket buffers) still wait for their replies.
        let (mut failed, mut not_sent, mut waiting) = (0, 0, 0);
        let mut rest = vec![];
        for h in calls {
            if h.is_finished() {
                let e = h.await.unwrap().unwrap_err();
                assert_eq!(e.errno, Errno::ENOTCONN, "{e}");
                assert!(e.message.contains(&addr), "{e}");
                failed += 1;
                not_sent += e.message.contains("not sent") as usize;
            } else {
                waiting += 1;
                rest.push(h);
            }
        }
        assert!(
            not_sent > 0 && waiting > 0,
            "{failed} failed ({not_sent} not sent), {waiting} waiting"
        );
        let in_flight = c.pending.lock().keys().filter(|&&id| id < PING_ID_BASE).count();
        assert_eq!(in_flight, waiting);
        // When the peer goes, they fail too.
        let _ = hold_tx.send(());
        for h in rest {
            let e = h.await.unwrap().unwrap_err();
            assert_eq!(e.errno, Errno::ENOTCONN, "{e}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_goes_away_fails_callers_waiting_for_room() {
        // As above, but the peer closes the connection instead of the caller.
        let (addr, hold_tx) = deaf_peer().await;
        let c = connect_plain(&addr).await;
        let calls: Vec<_> = (0..64)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    c.call(Request::Ping, stamped(i, 0, 1 << 20)).await.unwrap_err()
                })
            })
            .collect();
        while !c.writer.is_full() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = hold_tx.send(());
        for r in calls {
            let e = r.await.unwrap();
            assert_eq!(e.errno, Errno::ENOTCONN, "{e}");
        }
        assert!(c.is_closed());
    }
}

#[cfg(test)]
mod tls_tests {
    use super::*;
    use crate::principal::Role;
    use crate::tls::test_ca;

    struct Echo;

    impl Service for Echo {
        fn welcome(&self, session: u64) -> Welcome {
            Welcome { version: PROTOCOL_VERSION, session, node: "n".into() }
        }
        fn call(
            &self,
            s: Arc<Session>,
            _: Request,
            d: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            // Echo who the server sees, so the test checks the session's principal.
            let who = s.principal.as_ref().map(|p| p.to_uri()).unwrap_or_default();
            Box::pin(async move {
                let _ = d;
                (Ok(Reply::Pong), Bytes::from(who))
            })
        }
    }

    async fn node_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = test_ca::transport(&Principal::new("n1", Role::Node));
        tokio::spawn(serve_with(l, Arc::new(Echo), t));
        addr
    }

    async fn connect(
        addr: &str,
        t: &Transport,
        kind: PeerKind,
    ) -> Result<Arc<Connection>, RemoteError> {
        Connection::connect_with(addr, None, t, kind, "t", None, Duration::from_secs(5)).await
    }

    #[tokio::test]
    async fn the_session_carries_the_certificates_principal() {
        let addr = node_server().await;
        let p = Principal {
            name: "c1".into(),
            role: Role::Client,
            volumes: Some(vec!["a".into()]),
            read_only: true,
        };
        let c = connect(&addr, &test_ca::transport(&p), PeerKind::Client).await.unwrap();
        let (_, who) = c.call(Request::Ping, Bytes::new()).await.unwrap();
        assert_eq!(&who[..], p.to_uri().as_bytes());
    }

    fn enroll_request() -> Request {
        Request::Mgmt(crate::mgmt::MgmtRequest::Enroll(crate::mgmt::EnrollRequest {
            token: "0123abcd.0123456789abcdef0123456789abcdef".into(),
            csr: String::new(),
            name: "n2".into(),
            addr: "127.0.0.1:7421".into(),
            uuid: "u".into(),
            forwarded: false,
            etcd_csr: None,
        }))
    }

    #[tokio::test]
    async fn a_client_without_certificate_may_only_enroll() {
        let addr = node_server().await;
        let pin = crate::tls::ca_cert_hash(&test_ca::ca().cert_pem()).unwrap();
        let t = crate::tls::enroll_transport(&pin).unwrap();
        let c = connect(&addr, &t, PeerKind::Cli).await.expect("enrollment connection");
        // Enrollment reaches the service, which sees no principal.
        let (_, who) = c.call(enroll_request(), Bytes::new()).await.unwrap();
        assert!(who.is_empty());
        // Anything else is refused before the service, and the connection stays usable.
        for r in [Request::Ping, Request::GetMap { volume: "v".into() }] {
            let e = c.call(r, Bytes::new()).await.expect_err("refused");
            assert_eq!(e.errno, Errno::EACCES, "{e}");
            assert!(e.message.contains("accepts only enrollment"), "{e}");
        }
        let e = c
            .call(Request::Mgmt(crate::mgmt::MgmtRequest::PeerStatus), Bytes::new())
            .await
            .expect_err("refused");
        assert!(e.message.contains("PeerStatus needs a certificate of the cluster CA"), "{e}");
        c.call(enroll_request(), Bytes::new()).await.unwrap();
        // Nor may it speak as a node.
        let e = connect(&addr, &t, PeerKind::Daemon).await.err().expect("refused");
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert!(e.message.contains("without a certificate"), "{e}");
    }

    #[tokio::test]
    async fn enrollment_checks_the_pinned_ca_hash() {
        let addr = node_server().await;
        let other = crate::tls::Ca::create("other").unwrap();
        let pin = crate::tls::ca_cert_hash(&other.cert_pem()).unwrap();
        let t = crate::tls::enroll_transport(&pin).unwrap();
        let e = connect(&addr, &t, PeerKind::Cli).await.err().expect("refused");
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert!(e.message.contains("wrong CA hash"), "{e}");
        assert!(e.message.contains(&pin), "{e}");
        // A server of the right CA whose certificate is not a node's is refused too.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a2 = l.local_addr().unwrap().to_string();
        tokio::spawn(serve_with(
            l,
            Arc::new(Echo),
            test_ca::transport(&Principal::new("c", Role::Client)),
        ));
        let pin = crate::tls::ca_cert_hash(&test_ca::ca().cert_pem()).unwrap();
        let t = crate::tls::enroll_transport(&pin).unwrap();
        let e = connect(&a2, &t, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains("not a node of the cluster"), "{e}");
    }

    #[tokio::test]
    async fn a_revoked_certificate_is_refused_and_its_live_session_closed() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = test_ca::transport(&Principal::new("n1", Role::Node));
        let Transport::Tls(st) = &server else { unreachable!() };
        let revoked = st.revoked.clone();
        tokio::spawn(serve_with(l, Arc::new(Echo), server.clone()));

        let bad = test_ca::credentials(&Principal::new("lost-laptop", Role::Client));
        let good = test_ca::transport(&Principal::new("c2", Role::Client));
        let bad_t = Transport::tls(&bad).unwrap();
        let live = connect(&addr, &bad_t, PeerKind::Client).await.unwrap();
        let other = connect(&addr, &good, PeerKind::Client).await.unwrap();
        live.call(Request::Ping, Bytes::new()).await.unwrap();

        revoked.insert(&bad.serial());
        // New handshakes with the certificate are refused, saying why, on both sides.
        let e = connect(&addr, &bad_t, PeerKind::Client).await.err().expect("revoked: refused");
        assert!(e.message.contains("revoked"), "{e}");
        // The live session of the revoked certificate is closed; the others go on.
        let closed = close_sessions(|s| s.serial.as_deref().is_some_and(|x| revoked.contains(x)));
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert!(closed[0].contains("lost-laptop"), "{closed:?}");
        let t0 = std::time::Instant::now();
        while !live.is_closed() {
            assert!(t0.elapsed() < Duration::from_secs(10), "revoked session still open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(live.call(Request::Ping, Bytes::new()).await.is_err());
        other.call(Request::Ping, Bytes::new()).await.unwrap();
        // A server whose certificate is revoked is refused by a client that knows it.
        let Transport::Tls(gt) = &good else { unreachable!() };
        let srv = test_ca::credentials(&Principal::new("removed-node", Role::Node));
        gt.revoked.insert(&srv.serial());
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr2 = l.local_addr().unwrap().to_string();
        tokio::spawn(serve_with(l, Arc::new(Echo), Transport::tls(&srv).unwrap()));
        let e = connect(&addr2, &good, PeerKind::Client).await.err().expect("revoked server");
        assert!(e.message.contains("revoked"), "{e}");
    }

    #[tokio::test]
    async fn credentials_and_the_ca_rotate_without_a_restart() {
        let old = crate::tls::Ca::create("old").unwrap();
        let new = crate::tls::Ca::create("new").unwrap();
        let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
        let n1 = Principal::new("n1", Role::Node);
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let server = Transport::tls(&old.issue(&n1, 1).unwrap()).unwrap();
        let Transport::Tls(st) = &server else { unreachable!() };
        let st = st.clone();
        tokio::spawn(serve_with(l, Arc::new(Echo), server.clone()));
        let c = Principal::new("c", Role::Client);
        let old_client = Transport::tls(&old.issue(&c, 1).unwrap()).unwrap();
        let live = connect(&addr, &old_client, PeerKind::Client).await.unwrap();

        // 1. The node's certificate is renewed under the same CA: reloaded, no restart.
        let s1 = st.serial();
        st.reload(&old.issue(&n1, 1).unwrap()).unwrap();
        assert_ne!(st.serial(), s1);
        connect(&addr, &old_client, PeerKind::Client).await.unwrap();
        // 2. Trust bundle: the node trusts both CAs, and presents a certificate of the new
        //    one; a client of either CA that trusts both connects.
        let renewed = new.issue(&n1, 1).unwrap().with_cas(&bundle).unwrap();
        st.reload(&renewed).unwrap();
        let old_bundled =
            Transport::tls(&old.issue(&c, 1).unwrap().with_cas(&bundle).unwrap()).unwrap();
        let new_bundled =
            Transport::tls(&new.issue(&c, 1).unwrap().with_cas(&bundle).unwrap()).unwrap();
        connect(&addr, &old_bundled, PeerKind::Client).await.unwrap();
        connect(&addr, &new_bundled, PeerKind::Client).await.unwrap();
        // A client that trusts only the old CA refuses the node's new certificate.
        let e = connect(&addr, &old_client, PeerKind::Client).await.err().expect("old roots");
        assert!(e.message.contains("not signed by"), "{e}");
        // 3. The old CA is retired: its certificates are refused.
        st.reload(&renewed.with_cas(&new.cert_pem()).unwrap()).unwrap();
        let e = connect(&addr, &old_bundled, PeerKind::Client).await.err().expect("retired CA");
        assert!(e.message.contains("not signed by"), "{e}");
        connect(&addr, &new_bundled, PeerKind::Client).await.unwrap();
        // The session opened before all this goes on.
        live.call(Request::Ping, Bytes::new()).await.unwrap();
        // Another holder's credentials are not taken.
        assert!(st.reload(&new.issue(&c, 1).unwrap()).is_err());
    }

    #[tokio::test]
    async fn a_plaintext_client_is_refused_with_a_clear_error() {
        let addr = node_server().await;
        let e = connect(&addr, &Transport::Plain, PeerKind::Cli).await.err().expect("refused");
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert!(e.message.contains("only TLS"), "{e}");
    }

    #[tokio::test]
    async fn a_client_of_another_ca_is_refused() {
        let addr = node_server().await;
        let other = crate::tls::Ca::create("other").unwrap();
        let creds = other.issue(&Principal::new("admin", Role::Admin), 1).unwrap();
        let t = Transport::tls(&creds).unwrap();
        let e = connect(&addr, &t, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains(&format!("TLS handshake with {addr} failed")), "{e}");
        assert!(e.message.contains("not signed by"), "{e}");
    }

    #[tokio::test]
    async fn a_server_of_another_ca_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let other = crate::tls::Ca::create("other").unwrap();
        let t =
            Transport::tls(&other.issue(&Principal::new("n9", Role::Node), 1).unwrap()).unwrap();
        tokio::spawn(serve_with(l, Arc::new(Echo), t));
        let mine = test_ca::transport(&Principal::new("admin", Role::Admin));
        let e = connect(&addr, &mine, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains("certificate not signed by the cluster CA"), "{e}");
    }

    #[tokio::test]
    async fn an_expired_certificate_is_refused() {
        let addr = node_server().await;
        let now = time::OffsetDateTime::now_utc();
        let creds = test_ca::ca()
            .issue_between(
                &Principal::new("old", Role::Admin),
                now - time::Duration::days(10),
                now - time::Duration::days(1),
            )
            .unwrap();
        let t = Transport::tls(&creds).unwrap();
        let e = connect(&addr, &t, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains("expired"), "{e}");
    }

    #[tokio::test]
    async fn a_server_that_is_not_a_node_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = test_ca::transport(&Principal::new("mallory", Role::Client));
        tokio::spawn(serve_with(l, Arc::new(Echo), t));
        let mine = test_ca::transport(&Principal::new("admin", Role::Admin));
        let e = connect(&addr, &mine, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains("not a node of the cluster"), "{e}");
    }

    #[tokio::test]
    async fn only_a_node_certificate_may_say_hello_as_a_daemon() {
        let addr = node_server().await;
        for role in [Role::Client, Role::Gateway, Role::Admin] {
            let t = test_ca::transport(&Principal::new("x", role));
            let e = connect(&addr, &t, PeerKind::Daemon).await.err().expect("refused");
            assert_eq!(e.errno, Errno::EACCES, "{role}: {e}");
        }
        let t = test_ca::transport(&Principal::new("n2", Role::Node));
        connect(&addr, &t, PeerKind::Daemon).await.unwrap();
    }

    #[tokio::test]
    async fn a_tls_client_of_a_plain_server_gets_a_clear_error() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(serve_with(l, Arc::new(Echo), Transport::Plain));
        let mine = test_ca::transport(&Principal::new("admin", Role::Admin));
        let e = connect(&addr, &mine, PeerKind::Cli).await.err().expect("refused");
        assert!(e.message.contains(&format!("TLS handshake with {addr} failed")), "{e}");
    }
}

/// Hostile bytes where the TLS handshake (or a plaintext HELLO) is expected: random
/// bytes, TLS-record-shaped ones, a plaintext frame prefix, and mutations of a real
/// ClientHello. The server must close each connection (no hang, no panic) and still
/// serve a good client afterwards.
#[cfg(test)]
mod handshake_fuzz {
    use super::*;
    use crate::principal::Role;
    use crate::tls::test_ca;
    use tokio::io::AsyncReadExt;

    struct Nop;

    impl Service for Nop {
        fn welcome(&self, session: u64) -> Welcome {
            Welcome { version: PROTOCOL_VERSION, session, node: "n".into() }
        }
        fn call(
            &self,
            _: Arc<Session>,
            _: Request,
            _: Bytes,
        ) -> BoxFuture<'static, (Response, Bytes)> {
            Box::pin(async { (Ok(Reply::Pong), Bytes::new()) })
        }
    }

    fn client_hello() -> Vec<u8> {
        let Transport::Tls(t) = test_ca::transport(&Principal::new("c", Role::Client)) else {
            unreachable!()
        };
        let name = rustls::pki_types::ServerName::try_from("cairn").unwrap();
        let mut c = rustls::ClientConnection::new(t.client.clone(), name).unwrap();
        let mut out = vec![];
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    fn cases(n: usize) -> Vec<Vec<u8>> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let hello = client_hello();
        (0..n)
            .map(|i| {
                let len = (rnd() % 600) as usize;
                let mut v: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
                match i % 4 {
                    0 => {}
                    1 => {
                        let head = [0x16, 0x03, 0x01, (rnd() % 256) as u8, (rnd() % 256) as u8];
                        v.splice(0..0, head);
                    }
                    2 => {
                        v.splice(0..0, *b"CAIR");
                    }
                    _ => {
                        v.clone_from(&hello);
                        for _ in 0..1 + rnd() % 8 {
                            let at = (rnd() as usize) % v.len();
                            match rnd() % 3 {
                                0 => v[at] ^= 1 << (rnd() % 8),
                                1 => v.truncate(at.max(1)),
                                _ => v.insert(at, rnd() as u8),
                            }
                        }
                    }
                };
                v
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hostile_handshakes_are_closed_and_the_server_still_serves() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let t = test_ca::transport(&Principal::new("n1", Role::Node));
        tokio::spawn(serve_with(l, Arc::new(Nop), t));
        let all = cases(256);
        for batch in all.chunks(32) {
            let runs = batch.iter().cloned().map(|bytes| {
                let addr = addr.clone();
                async move {
                    let mut s = TcpStream::connect(&addr).await.unwrap();
                    let _ = s.write_all(&bytes).await;
                    let _ = s.shutdown().await;
                    let mut sink = vec![0u8; 4096];
                    let end =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT + Duration::from_secs(5), async {
                            while let Ok(1..) = s.read(&mut sink).await {}
                        });
                    assert!(
                        end.await.is_ok(),
                        "server kept a hostile handshake open: {bytes:02x?}"
                    );
                }
            });
            futures::future::join_all(runs).await;
        }
        let good = test_ca::transport(&Principal::new("admin", Role::Admin));
        let c = Connection::connect_with(
            &addr,
            None,
            &good,
            PeerKind::Cli,
            "t",
            None,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert!(matches!(c.call(Request::Ping, Bytes::new()).await.unwrap().0, Reply::Pong));
    }
}
