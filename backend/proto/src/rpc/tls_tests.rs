use super::*;
use crate::msg::{PeerKind, Reply, Request, Response, Welcome};
use crate::principal::Principal;
use crate::principal::Role;
use crate::tls::test_ca;
use crate::tls::Transport;
use crate::{Errno, RemoteError, PROTOCOL_VERSION};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

struct Echo;

impl Service for Echo {
    fn welcome(&self, session: u64) -> Welcome {
        Welcome { version: PROTOCOL_VERSION, session, node: "n".into() }
    }
    fn call(&self, s: Arc<Session>, _: Request, d: Bytes) -> BoxFuture<'static, (Response, Bytes)> {
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
        etcd_member_csr: None,
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
        // One sentence, not one with the source's indentation in it.
        assert!(!e.message.contains("  "), "{e}");
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
async fn a_clients_credentials_file_is_reloaded_before_a_new_connection() {
    let old = crate::tls::Ca::create("old").unwrap();
    let new = crate::tls::Ca::create("new").unwrap();
    let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
    let n1 = Principal::new("n1", Role::Node);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let server = Transport::tls(&old.issue(&n1, 1).unwrap().with_cas(&bundle).unwrap()).unwrap();
    let Transport::Tls(st) = &server else { unreachable!() };
    let st = st.clone();
    tokio::spawn(serve_with(l, Arc::new(Echo), server.clone()));
    // A client process (mount.cairn, libcairn) with a credentials file of the old CA.
    let dir = std::env::temp_dir().join(format!("cairn-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.pem");
    let c = Principal::new("c", Role::Client);
    old.issue(&c, 1).unwrap().save(&path).unwrap();
    let client = Transport::tls_file(&path).unwrap();
    let live = connect(&addr, &client, PeerKind::Client).await.unwrap();
    let who = |conn: Arc<Connection>| async move {
        conn.call(Request::Ping, Bytes::new()).await.unwrap();
    };
    who(live.clone()).await;
    // The CA is rotated and the client's file re-issued under the new CA (trusting both);
    // then the old CA is retired: the node presents and trusts the new CA only.
    let reissued = new.issue(&c, 1).unwrap().with_cas(&bundle).unwrap();
    reissued.save(&path).unwrap();
    st.reload(&new.issue(&n1, 1).unwrap().with_cas(&new.cert_pem()).unwrap()).unwrap();
    // A new connection of the same process uses the new file (the old one would present
    // a certificate of the retired CA and distrust the node's).
    let c2 = connect(&addr, &client, PeerKind::Client).await.unwrap();
    who(c2).await;
    let Transport::Tls(ct) = &client else { unreachable!() };
    assert_eq!(ct.serial(), reissued.serial());
    // The connection opened before goes on.
    who(live).await;
    // A file for another holder, or a broken one, is not taken: the current one stays.
    new.issue(&Principal::new("other", Role::Client), 1).unwrap().save(&path).unwrap();
    connect(&addr, &client, PeerKind::Client).await.unwrap();
    assert_eq!(ct.serial(), reissued.serial());
    std::fs::write(&path, "not a credential").unwrap();
    connect(&addr, &client, PeerKind::Client).await.unwrap();
    assert_eq!(ct.serial(), reissued.serial());
    std::fs::remove_dir_all(&dir).unwrap();
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
    let t = Transport::tls(&other.issue(&Principal::new("n9", Role::Node), 1).unwrap()).unwrap();
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

#[tokio::test]
async fn a_peer_that_dies_in_the_handshake_is_a_retryable_transport_error() {
    // A node killed or restarting closes the connection under the handshake: the caller
    // must see a transport failure it retries (ECONNRESET), not EACCES (final: an iSCSI
    // write turned it into a MEDIUM ERROR during a brick restart).
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    let mine = test_ca::transport(&Principal::new("admin", Role::Admin));
    let e = connect(&addr, &mine, PeerKind::Cli).await.err().expect("refused");
    assert!(e.message.contains(&format!("TLS handshake with {addr} failed")), "{e}");
    assert_eq!(e.errno, Errno(libc::ECONNRESET), "{e}");
}
