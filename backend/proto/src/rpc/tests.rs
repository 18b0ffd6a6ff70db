use super::liveness::PING_ID_BASE;
use super::*;
use crate::frame::{self, Frame, FrameError, FrameKind};
use crate::msg::{Hello, PeerKind, Reply, Request, Response, Welcome};
use crate::tls::Transport;
use crate::{Errno, PROTOCOL_VERSION};
use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

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
    let c =
        Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5)).await.unwrap();
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
    let c =
        Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5)).await.unwrap();
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
            Request::Subscribe { .. } => {
                Box::pin(
                    async move { (Ok(Reply::Bytes(vec![7; MAX_HEADER as usize])), Bytes::new()) },
                )
            }
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
    for req in [Request::GetMap { volume: "v".into() }, Request::Subscribe { volume: "v".into() }] {
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
    let c =
        Connection::connect(&addr, PeerKind::Cli, "t", None, Duration::from_secs(5)).await.unwrap();
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
            let stamp = |r: std::ops::Range<usize>| u64::from_le_bytes(data[r].try_into().unwrap());
            self.seen.lock().push((stamp(0..8), stamp(8..16)));
        }
        Echo.call(session, req, data)
    }
}

fn stamped(caller: u64, seq: u64, len: usize) -> Bytes {
    let mut v: Vec<u8> =
        (0..len.max(16)).map(|j| (caller as usize * 131 + seq as usize * 7 + j) as u8).collect();
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
    assert!(seen.iter().all(|&(caller, seq)| caller < 40 && seq == 0 || (caller, seq) == (99, 1)));
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
        let welcome: Response =
            Ok(Reply::Welcome(Welcome { version: PROTOCOL_VERSION, session: 1, node: "x".into() }));
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
    fn call(&self, _: Arc<Session>, _: Request, _: Bytes) -> BoxFuture<'static, (Response, Bytes)> {
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
            tokio::spawn(
                async move { c.call(Request::Ping, stamped(i, 0, 1 << 20)).await.unwrap_err() },
            )
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

/// A node of the previous protocol version: its WELCOME says so.
struct OldNode;

impl Service for OldNode {
    fn welcome(&self, session: u64) -> Welcome {
        Welcome { version: PROTOCOL_VERSION - 1, session, node: "old".into() }
    }
    fn call(
        &self,
        s: Arc<Session>,
        r: Request,
        data: Bytes,
    ) -> BoxFuture<'static, (Response, Bytes)> {
        Echo.call(s, r, data)
    }
}

/// Peers of different protocol versions refuse each other at HELLO, and the error names
/// both versions, on both sides: a client of another version gets EPROTONOSUPPORT from
/// the node, and a client reaching a node of another version refuses its WELCOME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_of_another_protocol_version_is_refused_naming_both() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve_plain(l, Arc::new(Echo)));
    let mut s = TcpStream::connect(addr).await.unwrap();
    let old = PROTOCOL_VERSION - 1;
    let hello =
        Request::Hello(Hello { version: old, kind: PeerKind::Cli, name: "t".into(), auth: vec![] });
    frame::write_frame(
        &mut s,
        &Frame::new(FrameKind::Request, 1, frame::encode(&hello), Bytes::new()),
    )
    .await
    .unwrap();
    let f = frame::read_frame(&mut s).await.unwrap();
    let e = match frame::decode::<Response>(&f.header).unwrap() {
        Err(e) => e,
        Ok(r) => panic!("a HELLO of version {old} was accepted: {r:?}"),
    };
    assert_eq!(e.errno, Errno::EPROTONOSUPPORT, "{e}");
    for want in [format!("protocol version {old}"), format!("speaks version {PROTOCOL_VERSION}")] {
        assert!(e.message.contains(&want), "expected '{want}' in: {e}");
    }

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(serve_plain(l, Arc::new(OldNode)));
    let t = Transport::Plain;
    let e =
        Connection::connect_with(&addr, None, &t, PeerKind::Cli, "t", None, Duration::from_secs(5))
            .await
            .err()
            .expect("a node of another version: refused");
    assert_eq!(e.errno, Errno::EPROTONOSUPPORT, "{e}");
    for want in [
        format!("node old speaks Cairn protocol version {old}"),
        format!("speaks version {PROTOCOL_VERSION}"),
    ] {
        assert!(e.message.contains(&want), "expected '{want}' in: {e}");
    }
}
