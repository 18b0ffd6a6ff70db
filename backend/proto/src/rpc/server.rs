//! The server: the accept loop, and serving one connection (TLS handshake or refusal of a
//! plaintext client, HELLO, then one task per request, answered in completion order).

use crate::frame::{self, Frame, FrameError, FrameKind};
use crate::msg::{Reply, Request, Response};
use crate::outq::{Sender, Writer};
use crate::stream;
use crate::tls::Transport;
use crate::{Errno, RemoteError, PROTOCOL_VERSION};
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::admit::{allowed_unauthenticated, kind_allowed, unauthenticated_refusal};
use super::liveness::set_keepalive;
use super::session::{Service, Session, LIVE, SESSION_IDS};
use super::{HANDSHAKE_TIMEOUT, READ_BUFFER};

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
            Ok(Request::Hello(h)) if h.version != PROTOCOL_VERSION => {
                tracing::warn!(%peer, name = %h.name, theirs = h.version, ours = PROTOCOL_VERSION, "refused HELLO: another protocol version");
                let _ = tx.send_now(error_frame(
                    f.id,
                    Errno::EPROTONOSUPPORT,
                    crate::version_mismatch(h.version),
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
