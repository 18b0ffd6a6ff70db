//! The two halves of a connection's byte stream: plain TCP, or TLS over TCP.
//!
//! The write side ([`crate::outq`]) writes synchronously and without blocking (a sender
//! writes its own frame when nobody else is writing), so TLS cannot go through an async
//! stream adapter. After the handshake (tokio-rustls), the rustls connection state is
//! shared by the two halves under a mutex held only for the non-blocking calls: the
//! writer hands plaintext to rustls (`write_vectored`, encrypted into records) and pushes
//! the records with `try_write`; the reader pulls records with `try_read` and hands out
//! plaintext. Records that could not be pushed wait in rustls (at most its 64 KiB buffer
//! limit) until the socket is writable again: [`WriteHalf::try_flush`] says when they do,
//! and the writer's flusher waits for the socket as for plain TCP.

use crate::principal::Principal;
use parking_lot::Mutex;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

pub struct TlsShared {
    tcp: TcpStream,
    conn: Mutex<rustls::Connection>,
    /// Ciphertext read from the socket and not yet handed to rustls (the reader's only;
    /// taken before `conn`). rustls reads 4 KiB per `read_tls`; reading the socket in
    /// large chunks here and feeding rustls from memory costs one system call per
    /// [`TLS_READ_CHUNK`] instead of one per 4 KiB.
    staged: Mutex<Staged>,
}

/// Bytes read from the socket per system call on a TLS connection.
const TLS_READ_CHUNK: usize = 256 << 10;

struct Staged {
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
}

pub enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(Arc<TlsShared>),
}

pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(Arc<TlsShared>),
}

/// `std::io` over the non-blocking calls of a tokio socket (for rustls).
struct Sock<'a>(&'a TcpStream);

impl Read for Sock<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(b)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        send_vectored(self.0, &[IoSlice::new(b)])
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> io::Result<usize> {
        send_vectored(self.0, b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `writev` without SIGPIPE, and without blocking. libcairn lives inside Ganesha, smbd and
/// tcmu-runner: a write to a peer that went away must be EPIPE, not a signal that kills
/// the host process (writev has no MSG_NOSIGNAL; sendmsg has).
fn send_vectored(tcp: &TcpStream, iov: &[IoSlice<'_>]) -> io::Result<usize> {
    tcp.try_io(tokio::io::Interest::WRITABLE, || {
        // SAFETY: a zeroed msghdr is valid; IoSlice is ABI-compatible with iovec on Unix,
        // and `iov` outlives the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = iov.len() as _;
        let n = unsafe {
            libc::sendmsg(tcp.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
}

pub fn plain(tcp: TcpStream) -> (ReadHalf, WriteHalf) {
    let (r, w) = tcp.into_split();
    (ReadHalf::Plain(r), WriteHalf::Plain(w))
}

fn shared(tcp: TcpStream, conn: rustls::Connection) -> (ReadHalf, WriteHalf) {
    let staged = Staged { buf: vec![0u8; TLS_READ_CHUNK].into_boxed_slice(), pos: 0, len: 0 };
    let s = Arc::new(TlsShared { tcp, conn: Mutex::new(conn), staged: Mutex::new(staged) });
    (ReadHalf::Tls(s.clone()), WriteHalf::Tls(s))
}

fn peer_principal(conn: &rustls::CommonState) -> io::Result<Principal> {
    let cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| io::Error::new(io::ErrorKind::PermissionDenied, "no peer certificate"))?;
    crate::tls::principal_of(cert).map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e))
}

/// TLS handshake as the client; returns the halves and the server's identity.
pub async fn tls_client(
    tcp: TcpStream,
    cfg: Arc<rustls::ClientConfig>,
) -> io::Result<(ReadHalf, WriteHalf, Principal)> {
    // The name is not checked (see tls::NodeVerifier); it is not sent either (no SNI).
    let name = rustls::pki_types::ServerName::try_from("cairn").expect("valid name");
    let s = tokio_rustls::TlsConnector::from(cfg).connect(name, tcp).await?;
    let (tcp, conn) = s.into_inner();
    let p = peer_principal(&conn)?;
    let (r, w) = shared(tcp, conn.into());
    Ok((r, w, p))
}

/// TLS handshake as the server; returns the halves, the client's identity and its
/// certificate's serial number (hex, [`crate::tls::serial_of`]), `None` for a client that
/// presented no certificate (it may only enroll: `rpc::Session`).
pub async fn tls_server(
    tcp: TcpStream,
    cfg: Arc<rustls::ServerConfig>,
) -> io::Result<(ReadHalf, WriteHalf, Option<(Principal, String)>)> {
    let s = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await?;
    let (tcp, conn) = s.into_inner();
    let p = match conn.peer_certificates().and_then(|c| c.first()) {
        Some(cert) => {
            Some((peer_principal(&conn)?, crate::tls::serial_of(cert).unwrap_or_default()))
        }
        None => None,
    };
    let (r, w) = shared(tcp, conn.into());
    Ok((r, w, p))
}

/// Push the records rustls holds; Ok(false) if the socket is full before they are all out.
fn push(conn: &mut rustls::Connection, tcp: &TcpStream) -> io::Result<bool> {
    while conn.wants_write() {
        match conn.write_tls(&mut Sock(tcp)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl WriteHalf {
    /// Write without blocking (`WouldBlock` when the socket is full).
    pub fn try_write_vectored(&self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            WriteHalf::Plain(w) => send_vectored(w.as_ref(), iov),
            WriteHalf::Tls(s) => {
                let mut c = s.conn.lock();
                push(&mut c, &s.tcp)?;
                let n = c.writer().write_vectored(iov)?;
                push(&mut c, &s.tcp)?;
                if n == 0 && iov.iter().any(|b| !b.is_empty()) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            }
        }
    }

    /// Push out whatever was accepted but not yet handed to the socket (TLS records);
    /// Ok(false) if the socket is full first.
    pub fn try_flush(&self) -> io::Result<bool> {
        match self {
            WriteHalf::Plain(_) => Ok(true),
            WriteHalf::Tls(s) => push(&mut s.conn.lock(), &s.tcp),
        }
    }

    /// Wait until the socket may take bytes.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            WriteHalf::Plain(w) => w.writable().await,
            WriteHalf::Tls(s) => s.tcp.writable().await,
        }
    }

    /// Before shutting the write side: tell a TLS peer this is a clean end (best effort).
    pub fn close_notify(&self) {
        if let WriteHalf::Tls(s) = self {
            let mut c = s.conn.lock();
            c.send_close_notify();
            let _ = push(&mut c, &s.tcp);
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        match self {
            WriteHalf::Plain(w) => w.as_ref().as_raw_fd(),
            WriteHalf::Tls(s) => s.tcp.as_raw_fd(),
        }
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let s = match self.get_mut() {
            ReadHalf::Plain(r) => return Pin::new(r).poll_read(cx, buf),
            ReadHalf::Tls(s) => s.clone(),
        };
        let mut st = s.staged.lock();
        loop {
            {
                let mut c = s.conn.lock();
                // Hand rustls the staged ciphertext while it takes it (it stops taking
                // when 16 KiB of plaintext wait to be read), decrypting as it goes.
                let mut fed = false;
                while st.pos < st.len {
                    let mut r = &st.buf[st.pos..st.len];
                    match c.read_tls(&mut r) {
                        Ok(0) => break,
                        Ok(n) => {
                            st.pos += n;
                            fed = true;
                        }
                        Err(_) => break, // plaintext buffer full: read it out first
                    }
                    if let Err(e) = c.process_new_packets() {
                        // Send the alert, then fail.
                        let _ = push(&mut c, &s.tcp);
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                }
                if fed {
                    // Post-handshake messages may need an answer (best effort; the writer
                    // pushes what is left with its next frame).
                    let _ = push(&mut c, &s.tcp);
                }
                match c.reader().read(buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
                if st.pos < st.len {
                    continue; // more staged ciphertext for the record rustls waits on
                }
            }
            ready!(s.tcp.poll_read_ready(cx))?;
            st.pos = 0;
            st.len = 0;
            match s.tcp.try_read(&mut st.buf) {
                Ok(0) => {
                    // End of stream: rustls decides whether it was a clean close.
                    let mut c = s.conn.lock();
                    let _ = c.read_tls(&mut io::empty());
                    if let Err(e) = c.process_new_packets() {
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                    return match c.reader().read(buf.initialize_unfilled()) {
                        Ok(n) => {
                            buf.advance(n);
                            Poll::Ready(Ok(()))
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Ready(Err(
                            io::Error::new(io::ErrorKind::UnexpectedEof, "TLS stream ended"),
                        )),
                        Err(e) => Poll::Ready(Err(e)),
                    };
                }
                Ok(n) => st.len = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}
