//! TLS identities and roles against a real `cairnd` (docs/security.md): what a certificate
//! of each role may do, and that a refused request changes nothing.

mod common;

use bytes::Bytes;
use cairn_client::{Creds, Errno, Id};
use cairn_proto::map::VolumeStatus;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use cairn_proto::msg::{BrickRequest, Op, PeerKind, ReplicateRequest, Reply, Request};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::rpc::Connection;
use cairn_proto::tls::Transport;
use cairn_proto::RemoteError;
use common::{transport, Cluster};
use std::sync::Arc;

fn client(name: &str, volumes: Option<&[&str]>, read_only: bool) -> Transport {
    transport(&Principal {
        name: name.into(),
        role: Role::Client,
        volumes: volumes.map(|v| v.iter().map(|s| s.to_string()).collect()),
        read_only,
    })
}

async fn call(conn: &Arc<Connection>, req: Request, data: Bytes) -> Result<Reply, RemoteError> {
    conn.call(req, data).await.map(|(r, _)| r)
}

async fn status(c: &Cluster, vol: &str) -> VolumeStatus {
    match c.mgmt(MgmtRequest::VolumeInfo { name: Some(vol.into()) }).await.unwrap() {
        MgmtReply::Volumes(v) => v[0].status,
        other => panic!("volume info: {other:?}"),
    }
}

fn write(vol: &str, epoch: u64, id: Id) -> BrickRequest {
    BrickRequest {
        volume: vol.into(),
        brick: 0,
        epoch,
        creds: Creds::root(),
        op: Op::Write { id, offset: 0 },
        req: None,
        parents: false,
        inline: 0,
        layout_epoch: None,
        sync: false,
        locks: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_hold_each_role_to_what_it_may_do() {
    let c = Cluster::start();
    c.volume("a", 1, &[&c.path("ba")]).await;
    c.volume("b", 1, &[&c.path("bb")]).await;
    let admin = c.mount("a").await.unwrap();
    let root = Creds::root();
    let f = admin.create(&root, Id::ROOT, b"f", 0o666, true).await.unwrap();
    admin.write(&root, f.id, 0, Bytes::from_static(b"original")).await.unwrap();
    admin.fsync(&root, f.id, false).await.unwrap();
    let epoch = admin.map().epoch;

    // A client limited to volume a: its map and its data, not b's.
    let only_a =
        c.connect_as(&client("only-a", Some(&["a"]), false), PeerKind::Client).await.unwrap();
    assert!(matches!(
        call(&only_a, Request::GetMap { volume: "a".into() }, Bytes::new()).await,
        Ok(Reply::Map(_))
    ));
    for req in [Request::GetMap { volume: "b".into() }, Request::Subscribe { volume: "b".into() }] {
        let e = call(&only_a, req, Bytes::new()).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert!(e.message.contains("volume b") && e.message.contains("client only-a"), "{e}");
    }
    // Nor management: not even reading the volume list.
    let e = call(&only_a, Request::Mgmt(MgmtRequest::VolumeList), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");

    // A read-only client reads, and cannot write (EROFS); the file is unchanged.
    let ro = c.connect_as(&client("reader", None, true), PeerKind::Client).await.unwrap();
    let read =
        BrickRequest { op: Op::Read { id: f.id, offset: 0, len: 8 }, ..write("a", epoch, f.id) };
    call(&ro, Request::Brick(read), Bytes::new()).await.unwrap();
    let e = call(&ro, Request::Brick(write("a", epoch, f.id)), Bytes::from_static(b"CHANGED!"))
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EROFS, "{e}");
    assert!(e.message.contains("client reader") && e.message.contains("volume a"), "{e}");

    // A client (or gateway, or node) cannot stop a volume: it stays started.
    for role in [Role::Client, Role::Gateway, Role::Node] {
        let t = transport(&Principal::new("someone", role));
        let conn = c.connect_as(&t, PeerKind::Cli).await.unwrap();
        let stop = Request::Mgmt(MgmtRequest::VolumeStop { name: "a".into(), force: true });
        let e = call(&conn, stop, Bytes::new()).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{role}: {e}");
        assert!(e.message.contains("VolumeStop"), "{e}");
    }
    assert_eq!(status(&c, "a").await, VolumeStatus::Started);

    // A client cannot forward a chain write, whatever it claims to be.
    let rw = c.connect_as(&client("writer", None, false), PeerKind::Client).await.unwrap();
    let fwd = Request::Replicate(ReplicateRequest {
        volume: "a".into(),
        brick: 0,
        epoch,
        from_brick: 0,
        creds: Creds::root(),
        op: Op::Write { id: f.id, offset: 0 },
        result: None,
        missed: vec![],
        req: None,
        confirm: false,
        applied: vec![],
    });
    let e = call(&rw, fwd, Bytes::from_static(b"FORGED!!")).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    assert!(e.message.contains("only cluster nodes forward"), "{e}");
    let e = c.connect_as(&client("writer", None, false), PeerKind::Daemon).await.err().unwrap();
    assert_eq!(e.errno, Errno::EACCES, "{e}");

    // Nothing changed the file; a read-write client may write it.
    let (data, _) = admin.read(&root, f.id, 0, 8).await.unwrap();
    assert_eq!(&data[..], b"original");
    call(&rw, Request::Brick(write("a", epoch, f.id)), Bytes::from_static(b"written!"))
        .await
        .unwrap();

    // A plaintext connection is refused with a clear error.
    let e = c.connect_as(&Transport::Plain, PeerKind::Cli).await.err().unwrap();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    assert!(e.message.contains("only TLS"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_gateways_renew_their_own_certificates_only() {
    use cairn_proto::mgmt::RenewRequest;
    use cairn_proto::tls::NodeRequest;
    let c = Cluster::start();
    let renew = |csr: &str, on_behalf: Option<(&str, &str)>| {
        Request::Mgmt(MgmtRequest::CertRenew(RenewRequest {
            csr: csr.into(),
            on_behalf: on_behalf.map(|(n, u)| (n.into(), u.into())),
        }))
    };
    // A gateway held to volume a gets a certificate for its new key, with the same limits.
    let gw = Principal {
        name: "gw1".into(),
        role: Role::Gateway,
        volumes: Some(vec!["a".into()]),
        read_only: false,
    };
    let conn = c.connect_as(&transport(&gw), PeerKind::Cli).await.unwrap();
    let req = NodeRequest::for_principal(&gw).unwrap();
    let reply = match call(&conn, renew(&req.csr_pem, None), Bytes::new()).await {
        Ok(Reply::Mgmt(MgmtReply::Renewed(r))) => r,
        other => panic!("renewal of gw1: {other:?}"),
    };
    let creds = req.renewed(&reply.cert, &reply.cas).unwrap();
    assert_eq!(creds.principal, gw);
    // Recorded, so it can be listed and revoked.
    let serial = creds.serial();
    match c.mgmt(MgmtRequest::CertList).await.unwrap() {
        MgmtReply::Certs(v) => assert!(v.iter().any(|r| r.serial == serial && r.name == "gw1")),
        other => panic!("cert list: {other:?}"),
    }
    // Only the trust: no certificate.
    match call(&conn, renew("", None), Bytes::new()).await {
        Ok(Reply::Mgmt(MgmtReply::Renewed(r))) => {
            assert!(r.cert.is_empty() && r.cas.contains("BEGIN CERTIFICATE"), "{r:?}")
        }
        other => panic!("trust of gw1: {other:?}"),
    }
    // Not for another identity: a request for admin, or for the gateway without limits.
    for p in [Principal::new("admin", Role::Admin), Principal::new("gw1", Role::Gateway)] {
        let other = NodeRequest::for_principal(&p).unwrap();
        let e = call(&conn, renew(&other.csr_pem, None), Bytes::new()).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{p}: {e}");
        assert!(e.message.contains("not the holder's identity"), "{e}");
    }
    // A gateway cannot speak for another holder; only a node passes a request on.
    let e =
        call(&conn, renew("", Some(("n9", "cairn:role=node"))), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    // A client (or admin) certificate is re-issued by an admin, not renewed by its holder.
    let cl = c.connect_as(&client("c1", None, false), PeerKind::Cli).await.unwrap();
    let e = call(&cl, renew("", None), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    let node = c.as_node().await;
    let e =
        call(&node, renew("", Some(("root", "cairn:role=admin"))), Bytes::new()).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    assert!(e.message.contains("not renewed by its holder"), "{e}");
}
