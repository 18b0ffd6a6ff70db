//! Backend-enforced fencing of gateways against a real `cairnd` (docs/ha.md, "Fencing";
//! `cairnd/src/fence.rs`): a fence record closes the fenced gateway's sessions, releases
//! its locks, and refuses its requests (EACCES) until it is unfenced; other gateways are
//! not touched.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::mgmt::MgmtRequest;
use cairn_proto::msg::{BrickRequest, Op, PeerKind, Reply, Request};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::rpc::Connection;
use cairn_proto::types::{Lock, LockKind};
use cairn_proto::RemoteError;
use common::{transport, Cluster};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn brick(vol: &str, epoch: u64, op: Op) -> Request {
    Request::Brick(BrickRequest {
        volume: vol.into(),
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

fn lock(id: Id, owner: u64) -> Op {
    Op::SetLock {
        id,
        lock: Lock { kind: LockKind::Write, start: 0, len: 0, owner, pid: 1 },
        wait: false,
    }
}

async fn call(
    conn: &Arc<Connection>,
    req: Request,
    data: &'static [u8],
) -> Result<Reply, RemoteError> {
    conn.call(req, Bytes::from_static(data)).await.map(|(r, _)| r)
}

async fn gateway(c: &Cluster, name: &str) -> Arc<Connection> {
    c.connect_as(&transport(&Principal::new(name, Role::Gateway)), PeerKind::Client).await.unwrap()
}

async fn set_fence(c: &Cluster, gw: &str, fenced: bool, generation: u64) {
    let doc = format!(
        r#"{{"gateway":"{gw}","fenced":{fenced},"generation":{generation},"at":1,"reason":"test"}}"#
    );
    c.mgmt(MgmtRequest::GatewayPut {
        kind: "fence".into(),
        name: gw.into(),
        doc,
        if_unchanged_since: None,
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_gateway_is_cut_off_until_unfenced() {
    let c = Cluster::start();
    c.volume("v", 1, &[&c.path("b0")]).await;
    let admin = c.mount("v").await.unwrap();
    let root = Creds::root();
    let f = admin.create(&root, Id::ROOT, b"f", 0o666, true).await.unwrap();
    admin.write(&root, f.id, 0, Bytes::from_static(b"original")).await.unwrap();
    admin.fsync(&root, f.id, false).await.unwrap();
    let epoch = admin.map().epoch;
    let write = || brick("v", epoch, Op::Write { id: f.id, offset: 0 });

    // gw1 writes and holds a lock; gw2 cannot take it.
    let gw1 = gateway(&c, "gw1").await;
    let gw2 = gateway(&c, "gw2").await;
    call(&gw1, write(), b"gw1-ok!!").await.unwrap();
    call(&gw1, brick("v", epoch, lock(f.id, 1)), b"").await.unwrap();
    assert!(call(&gw2, brick("v", epoch, lock(f.id, 2)), b"").await.is_err());

    // Fenced: gw1's session is closed by the server, and with it its lock.
    set_fence(&c, "gw1", true, 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw1.is_closed() {
        assert!(Instant::now() < deadline, "gw1's session was not closed: {}", c.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call(&gw2, brick("v", epoch, lock(f.id, 2)), b"").await.unwrap();
    call(
        &gw2,
        brick(
            "v",
            epoch,
            Op::SetLock {
                id: f.id,
                lock: Lock { kind: LockKind::Unlock, start: 0, len: 0, owner: 2, pid: 1 },
                wait: false,
            },
        ),
        b"",
    )
    .await
    .unwrap();

    // A new session of gw1 (a frozen gateway that resumed): every request refused, reads
    // too; the file keeps what was acknowledged.
    let late = gateway(&c, "gw1").await;
    let e = call(&late, write(), b"LATE!!!!").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    assert!(e.message.contains("gateway gw1 is fenced (generation 1, test)"), "{e}");
    assert!(e.message.contains("cairn gateway unfence gw1"), "{e}");
    let e = call(&late, brick("v", epoch, Op::Read { id: f.id, offset: 0, len: 8 }), b"")
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    let e = call(&late, Request::GetMap { volume: "v".into() }, b"").await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    let (data, _) = admin.read(&root, f.id, 0, 8).await.unwrap();
    assert_eq!(&data[..], b"gw1-ok!!");
    // Another gateway is not touched.
    call(&gw2, write(), b"gw2-ok!!").await.unwrap();
    assert!(c.log().contains("gateway fenced"), "{}", c.log());

    // Unfenced (it rejoined its cluster): new sessions are served again.
    set_fence(&c, "gw1", false, 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = gateway(&c, "gw1").await;
    loop {
        match call(&back, write(), b"back-ok!").await {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e.errno, Errno::EACCES, "{e}");
                assert!(Instant::now() < deadline, "gw1 still refused after unfence: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let (data, _) = admin.read(&root, f.id, 0, 8).await.unwrap();
    assert_eq!(&data[..], b"back-ok!");
}
