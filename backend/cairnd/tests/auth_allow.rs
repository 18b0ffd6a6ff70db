//! `auth.allow` / `auth.reject` against a real `cairnd`: a client whose connection comes
//! from 127.0.0.2 is refused (map, subscription, raw brick requests, forwarded mutations,
//! also when it claims to be a daemon) once the options exclude it, at its next call on a
//! connection it already had; a client from 127.0.0.1 keeps working; resetting the option
//! lets the refused one in again.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::msg::{BrickRequest, Op, PeerKind, ReplicateRequest, Reply, Request};
use cairn_proto::rpc::Connection;
use cairn_proto::RemoteError;
use common::Cluster;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FAR: &str = "127.0.0.2";

async fn connect_from(c: &Cluster, ip: &str, kind: PeerKind) -> Arc<Connection> {
    Connection::connect_from(
        &c.addr,
        Some(ip.parse().unwrap()),
        kind,
        "auth-test",
        None,
        Duration::from_secs(5),
    )
    .await
    .unwrap()
}

fn brick(epoch: u64, op: Op) -> Request {
    Request::Brick(BrickRequest {
        volume: "vol0".into(),
        brick: 0,
        epoch,
        creds: Creds::root(),
        op,
        req: None,
        parents: false,
        inline: 0,
        layout_epoch: None,
        sync: false,
        locks: false,
    })
}

/// The answer to a GETATTR of the root from `conn` (Ok: it was let in).
async fn getattr(conn: &Connection, epoch: u64) -> Result<Reply, RemoteError> {
    conn.call(brick(epoch, Op::GetAttr { id: Id::ROOT }), Bytes::new()).await.map(|r| r.0)
}

fn assert_refused(r: Result<impl std::fmt::Debug, RemoteError>, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.errno, Errno::EACCES, "{what}: {e}");
    assert_eq!(
        e.message, "volume vol0: client 127.0.0.2 is not allowed (auth.allow / auth.reject)",
        "{what}"
    );
}

/// Wait until the option change reached the daemon (it applies it from the config store).
async fn until_refused(c: &Cluster, conn: &Connection, epoch: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match getattr(conn, epoch).await {
            Err(e) if e.errno == Errno::EACCES => return,
            r => assert!(Instant::now() < deadline, "still let in: {r:?}\n{}", c.log()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn until_allowed(c: &Cluster, conn: &Connection, epoch: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match getattr(conn, epoch).await {
            Ok(_) => return,
            r => assert!(Instant::now() < deadline, "still refused: {r:?}\n{}", c.log()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn set(c: &Cluster, key: &str, value: &str) -> Result<(), RemoteError> {
    c.mgmt(MgmtRequest::VolumeSet { name: "vol0".into(), key: key.into(), value: value.into() })
        .await
        .map(|_| ())
}

async fn reset(c: &Cluster, key: &str) {
    c.mgmt(MgmtRequest::VolumeReset { name: "vol0".into(), key: key.into() }).await.unwrap();
}

/// Everything a refused connection could ask about the volume is refused.
async fn all_refused(conn: &Connection, epoch: u64, file: Id) {
    let get_map = Request::GetMap { volume: "vol0".into() };
    assert_refused(conn.call(get_map, Bytes::new()).await, "GetMap");
    let sub = Request::Subscribe { volume: "vol0".into() };
    assert_refused(conn.call(sub, Bytes::new()).await, "Subscribe");
    for op in [
        Op::GetAttr { id: Id::ROOT },
        Op::Lookup { dir: Id::ROOT, name: b"f".to_vec() },
        Op::Read { id: file, offset: 0, len: 4096 },
        Op::ReadDir { dir: Id::ROOT, cookie: 0, max: 100, plus: true },
        Op::ListXattr { id: file },
        Op::StatFs,
        Op::Unlink { dir: Id::ROOT, name: b"f".to_vec() },
    ] {
        let name = op.name();
        assert_refused(conn.call(brick(epoch, op), Bytes::new()).await, name);
    }
    assert_refused(
        conn.call(brick(epoch, Op::Write { id: file, offset: 0 }), Bytes::from_static(b"x")).await,
        "write",
    );
    // A forwarded mutation, as a chain head would send it.
    let rep = forward(epoch);
    let e = conn.call(rep, Bytes::new()).await.expect_err("replicate");
    assert_eq!(e.errno, Errno::EACCES, "replicate: {e}");
}

/// A forwarded mutation (what a chain head sends) from `conn`.
fn forward(epoch: u64) -> Request {
    Request::Replicate(ReplicateRequest {
        volume: "vol0".into(),
        brick: 0,
        epoch,
        from_brick: 0,
        creds: Creds::root(),
        op: Op::Unlink { dir: Id::ROOT, name: b"f".to_vec() },
        result: None,
        missed: vec![],
        req: None,
        confirm: false,
        applied: vec![],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_allow_and_reject_refuse_a_client_by_its_address() {
    let c = Cluster::start_plain();
    c.volume("vol0", 1, &[&c.path("b1")]).await;
    let near = c.mount("vol0").await.unwrap();
    let root = Creds::root();
    let file = near.create(&root, Id::ROOT, b"f", 0o644, true).await.unwrap().id;
    near.write(&root, file, 0, Bytes::from_static(b"hello")).await.unwrap();
    near.fsync(&root, file, false).await.unwrap();

    // A client on 127.0.0.2, subscribed to the volume while it is open to every address.
    let far = connect_from(&c, FAR, PeerKind::Client).await;
    let epoch = match far.call(Request::Subscribe { volume: "vol0".into() }, Bytes::new()).await {
        Ok((Reply::Map(m), _)) => m.epoch,
        r => panic!("subscribe: {r:?}"),
    };
    getattr(&far, epoch).await.unwrap();

    // Allowed to use the volume, but not a node of the cluster: a forwarded mutation is
    // refused, also when the connection claims to be a daemon, and applies nothing.
    for kind in [PeerKind::Client, PeerKind::Daemon] {
        let conn = connect_from(&c, FAR, kind.clone()).await;
        let e = conn.call(forward(epoch), Bytes::new()).await.expect_err("forward from a client");
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert_eq!(
            e.message,
            "volume vol0: client 127.0.0.2 is not a node of the cluster; only nodes forward replicated changes"
        );
    }
    assert_eq!(near.lookup(&root, Id::ROOT, b"f").await.unwrap().id, file);

    // A malformed pattern is refused with the reason, and changes nothing.
    let e = set(&c, "auth.allow", "127.0.0.1,10.0.0.0/33").await.unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL);
    assert!(e.message.contains("10.0.0.0/33") && e.message.contains("auth.allow"), "{e}");
    getattr(&far, epoch).await.unwrap();

    // auth.allow 127.0.0.1: the connected client is refused at its next call, whatever it
    // asks; a new connection too, also one claiming to be a daemon or the CLI.
    set(&c, "auth.allow", "127.0.0.1").await.unwrap();
    until_refused(&c, &far, epoch).await;
    all_refused(&far, epoch, file).await;
    for kind in [PeerKind::Client, PeerKind::Daemon, PeerKind::Cli] {
        let conn = connect_from(&c, FAR, kind.clone()).await;
        all_refused(&conn, epoch, file).await;
    }
    // The client from 127.0.0.1 keeps working (new and connected).
    let a = near.lookup(&root, Id::ROOT, b"f").await.unwrap();
    assert_eq!(a.id, file);
    assert_eq!(&near.read(&root, file, 0, 5).await.unwrap().0[..], b"hello");
    let from_near = connect_from(&c, "127.0.0.1", PeerKind::Client).await;
    getattr(&from_near, epoch).await.unwrap();
    // Every refusal was logged, once, naming the volume and the address.
    let log = c.log();
    let lines: Vec<_> = log.lines().filter(|l| l.contains("client refused")).collect();
    assert_eq!(lines.len(), 1, "log:\n{log}");
    assert!(lines[0].contains("vol0") && lines[0].contains(FAR), "{}", lines[0]);

    // Reset: let in again, on the same connection.
    reset(&c, "auth.allow").await;
    until_allowed(&c, &far, epoch).await;
    far.call(Request::GetMap { volume: "vol0".into() }, Bytes::new()).await.unwrap();

    // auth.reject 127.0.0.2 (with auth.allow *, reject wins); 127.0.0.1 unaffected.
    set(&c, "auth.allow", "*").await.unwrap();
    set(&c, "auth.reject", "127.0.0.2").await.unwrap();
    until_refused(&c, &far, epoch).await;
    all_refused(&far, epoch, file).await;
    near.lookup(&root, Id::ROOT, b"f").await.unwrap();
    getattr(&from_near, epoch).await.unwrap();
    reset(&c, "auth.reject").await;
    until_allowed(&c, &far, epoch).await;

    // The options show like the others.
    match c.mgmt(MgmtRequest::VolumeInfo { name: Some("vol0".into()) }).await.unwrap() {
        cairn_proto::mgmt::MgmtReply::Volumes(v) => {
            assert_eq!(v[0].option("auth.allow"), Some("*"));
            assert_eq!(v[0].option("auth.reject"), None);
        }
        r => panic!("volume info: {r:?}"),
    }
}
