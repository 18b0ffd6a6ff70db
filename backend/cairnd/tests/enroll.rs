//! Enrollment against a real `cairnd` (docs/security.md, "Joining a node"): a connection
//! without a certificate may enroll and do nothing else; a join token with a node's
//! certificate request yields a node certificate of the cluster CA and membership, once;
//! a request for another role, another name, a wrong token is refused saying which.

mod common;

use bytes::Bytes;
use cairn_proto::map::VolumeStatus;
use cairn_proto::mgmt::{EnrollRequest, MgmtReply, MgmtRequest};
use cairn_proto::msg::{PeerKind, Reply, Request};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::tls::{self, NodeRequest, Transport};
use cairn_proto::{Errno, RemoteError};
use common::Cluster;

async fn token(c: &Cluster) -> String {
    match c.mgmt(MgmtRequest::PeerTokenCreate { ttl_secs: 600 }).await.unwrap() {
        MgmtReply::JoinToken { token, .. } => token,
        other => panic!("token create: {other:?}"),
    }
}

fn pin() -> String {
    tls::ca_cert_hash(&tls::test_ca::ca().cert_pem()).unwrap()
}

async fn enroll(c: &Cluster, r: EnrollRequest) -> Result<MgmtReply, RemoteError> {
    let t = tls::enroll_transport(&pin()).unwrap();
    let conn = c.connect_as(&t, PeerKind::Cli).await.expect("enrollment connection");
    match conn.call(Request::Mgmt(MgmtRequest::Enroll(r)), Bytes::new()).await {
        Ok((Reply::Mgmt(m), _)) => Ok(m),
        Ok((other, _)) => panic!("enroll: {other:?}"),
        Err(e) => Err(e),
    }
}

fn request(token: &str, req: &NodeRequest, name: &str) -> EnrollRequest {
    EnrollRequest {
        token: token.into(),
        csr: req.csr_pem.clone(),
        name: name.into(),
        addr: "127.0.0.1:7999".into(),
        uuid: format!("uuid-{name}"),
        forwarded: false,
    }
}

async fn peers(c: &Cluster) -> Vec<String> {
    match c.mgmt(MgmtRequest::PeerStatus).await.unwrap() {
        MgmtReply::Peers(p) => p.into_iter().map(|p| p.name).collect(),
        other => panic!("peer status: {other:?}"),
    }
}

fn refused(r: Result<MgmtReply, RemoteError>, errno: Errno, why: &str) {
    match r {
        Err(e) => {
            assert_eq!(e.errno, errno, "{e}");
            assert!(e.message.contains(why), "expected '{why}' in: {e}");
        }
        Ok(m) => panic!("expected a refusal ({why}), got {m:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_enrolls_with_a_token_alone() {
    let c = Cluster::start();
    c.volume("a", 1, &[&c.path("ba")]).await;

    // Without a certificate: management and data are refused, and nothing changes.
    let t = tls::enroll_transport(&pin()).unwrap();
    let anon = c.connect_as(&t, PeerKind::Cli).await.unwrap();
    for req in [
        Request::Mgmt(MgmtRequest::VolumeStop { name: "a".into(), force: true }),
        Request::Mgmt(MgmtRequest::PeerTokenCreate { ttl_secs: 60 }),
        Request::Mgmt(MgmtRequest::PeerStatus),
        Request::GetMap { volume: "a".into() },
    ] {
        let e = anon.call(req, Bytes::new()).await.unwrap_err();
        assert_eq!(e.errno, Errno::EACCES, "{e}");
        assert!(e.message.contains("accepts only enrollment"), "{e}");
    }
    match c.mgmt(MgmtRequest::VolumeInfo { name: Some("a".into()) }).await.unwrap() {
        MgmtReply::Volumes(v) => assert_eq!(v[0].status, VolumeStatus::Started),
        other => panic!("{other:?}"),
    }
    // Nor may it say HELLO as a node.
    let e = c.connect_as(&t, PeerKind::Daemon).await.err().expect("refused");
    assert_eq!(e.errno, Errno::EACCES, "{e}");

    let good = token(&c).await;
    // A request for the admin role, or for another name: refused, the token kept.
    let adm = NodeRequest::for_principal(&Principal::new("n2", Role::Admin)).unwrap();
    refused(enroll(&c, request(&good, &adm, "n2")).await, Errno::EACCES, "asks for admin");
    let other = NodeRequest::new("n9").unwrap();
    refused(enroll(&c, request(&good, &other, "n2")).await, Errno::EACCES, "is for \"n9\"");
    refused(
        enroll(&c, EnrollRequest { csr: "garbage".into(), ..request(&good, &other, "n9") }).await,
        Errno::EINVAL,
        "bad certificate request",
    );
    assert_eq!(peers(&c).await, vec!["t1".to_string()]);

    // The good request: a node certificate of the cluster CA, and membership.
    let req = NodeRequest::new("n2").unwrap();
    let reply = match enroll(&c, request(&good, &req, "n2")).await.expect("enroll n2") {
        MgmtReply::Enrolled(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(reply.by, "t1");
    let creds = req.credentials(&reply.cert, &reply.ca, &pin()).expect("credentials");
    assert_eq!(creds.principal, Principal::new("n2", Role::Node));
    let mut names = peers(&c).await;
    names.sort();
    assert_eq!(names, vec!["n2".to_string(), "t1".into()]);
    // Its certificate works: it may speak as a node.
    let n2 = c.connect_as(&Transport::tls(&creds).unwrap(), PeerKind::Daemon).await.unwrap();
    n2.call(Request::Ping, Bytes::new()).await.unwrap();

    // The token worked once.
    let again = NodeRequest::new("n3").unwrap();
    refused(enroll(&c, request(&good, &again, "n3")).await, Errno::EACCES, "already used");
    // Revoked and malformed tokens say so.
    let revoked = token(&c).await;
    c.mgmt(MgmtRequest::PeerTokenRevoke { id: revoked[..8].into() }).await.unwrap();
    refused(enroll(&c, request(&revoked, &again, "n3")).await, Errno::EACCES, "revoked");
    refused(enroll(&c, request("nope", &again, "n3")).await, Errno::EACCES, "malformed");
    // A name already taken by another member.
    let fresh = token(&c).await;
    let dup = NodeRequest::new("n2").unwrap();
    let r = EnrollRequest { uuid: "another".into(), ..request(&fresh, &dup, "n2") };
    refused(enroll(&c, r).await, Errno::EEXIST, "already used by member");
    assert!(!peers(&c).await.contains(&"n3".to_string()));
}
