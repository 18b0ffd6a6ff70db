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
        etcd_csr: None,
        etcd_member_csr: None,
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
    // An address or a uuid another member has: refused before the token is used up, so
    // the same token then enrolls the node with its own address.
    let n3 = NodeRequest::new("n3").unwrap();
    refused(
        enroll(&c, request(&fresh, &n3, "n3")).await,
        Errno::EEXIST,
        "address 127.0.0.1:7999 is already used by peer n2 (the token is not used up)",
    );
    let r = EnrollRequest {
        uuid: "uuid-n2".into(),
        addr: "127.0.0.1:7998".into(),
        ..request(&fresh, &n3, "n3")
    };
    refused(enroll(&c, r).await, Errno::EEXIST, "already a peer named n2");
    let r = EnrollRequest { addr: "127.0.0.1:7998".into(), ..request(&fresh, &n3, "n3") };
    match enroll(&c, r).await.expect("the token kept enrolls n3") {
        MgmtReply::Enrolled(_) => {}
        other => panic!("{other:?}"),
    }
    assert!(peers(&c).await.contains(&"n3".to_string()));
}

// --- the etcd client certificate in the enrollment answer (docs/security.md, "etcd") ----

/// The etcd CA, server and client certificates `scripts/etcd-tls.sh` makes, in `dir`.
fn etcd_ca(dir: &std::path::Path) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/etcd-tls.sh");
    let ok = std::process::Command::new("bash")
        .args(["-c", ". \"$0\" && etcd_tls_make \"$1\""])
        .arg(&script)
        .arg(dir)
        .status()
        .expect("bash");
    assert!(ok.success(), "etcd_tls_make {}", dir.display());
}

/// A request for an etcd client certificate with common name `cn`, and its key (PEM).
fn etcd_csr(cn: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    (params.serialize_request(&key).unwrap().pem().unwrap(), key.serialize_pem())
}

/// A real etcd with TLS as the appliance runs it: https only, client certificates of the
/// etcd CA required.
struct TlsEtcd {
    child: std::process::Child,
    url: String,
}

impl TlsEtcd {
    fn start(tls: &std::path::Path, data: &std::path::Path) -> TlsEtcd {
        let (cp, pp) = (common::free_port(), common::free_port());
        let url = format!("https://127.0.0.1:{cp}");
        let peer = format!("https://127.0.0.1:{pp}");
        let f = |n: &str| tls.join(n).display().to_string();
        let child = std::process::Command::new("etcd")
            .args(["--name", "e", "--data-dir", &data.display().to_string()])
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("e={peer}")])
            .args(["--cert-file", &f("server.pem"), "--key-file", &f("server-key.pem")])
            .args(["--client-cert-auth", "--trusted-ca-file", &f("ca.pem")])
            .args(["--peer-cert-file", &f("server.pem"), "--peer-key-file", &f("server-key.pem")])
            .args(["--peer-client-cert-auth", "--peer-trusted-ca-file", &f("ca.pem")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn etcd");
        TlsEtcd { child, url }
    }

    async fn connect(&self, sec: &cairn_config::EtcdSecurity) -> Result<(), String> {
        cairn_config::Store::connect_secure(
            std::slice::from_ref(&self.url),
            "/cairn",
            std::time::Duration::from_secs(5),
            sec,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enrollment_brings_the_etcd_client_certificate() {
    let c = Cluster::start();
    let good = token(&c).await;
    let req = NodeRequest::new("n2").unwrap();
    let (csr, key) = etcd_csr("cairn-n2");
    let with_etcd =
        |csr: &str| EnrollRequest { etcd_csr: Some(csr.into()), ..request(&good, &req, "n2") };

    // No etcd CA on the CA node: refused, saying so, and the token is not used up.
    refused(enroll(&c, with_etcd(&csr)).await, Errno::EINVAL, "holds no etcd CA");
    assert_eq!(peers(&c).await, vec!["t1".to_string()]);

    let ca_dir = c.path("ca/etcd-ca");
    etcd_ca(&ca_dir);
    // A request for another etcd user, or garbage: refused, the token kept.
    let (other, _) = etcd_csr("cairn-n3");
    refused(enroll(&c, with_etcd(&other)).await, Errno::EINVAL, "not \"cairn-n2\"");
    refused(enroll(&c, with_etcd("garbage")).await, Errno::EINVAL, "bad etcd certificate request");
    assert_eq!(peers(&c).await, vec!["t1".to_string()]);

    let reply = match enroll(&c, with_etcd(&csr)).await.expect("enroll n2 with an etcd request") {
        MgmtReply::Enrolled(r) => r,
        other => panic!("{other:?}"),
    };
    let creds = req.credentials(&reply.cert, &reply.ca, &pin()).expect("node credentials");
    let etcd = reply.etcd.expect("an etcd client certificate in the answer");
    assert_eq!(etcd.ca, std::fs::read_to_string(ca_dir.join("ca.pem")).unwrap());
    let (_, x) = x509_parser::pem::parse_x509_pem(etcd.cert.as_bytes()).unwrap();
    let x = x.parse_x509().unwrap();
    assert_eq!(x.subject().iter_common_name().next().unwrap().as_str().unwrap(), "cairn-n2");

    // A real etcd over TLS takes it, and refuses a client without a certificate or with
    // only a cluster certificate.
    let d = tempfile::tempdir().unwrap();
    let e = TlsEtcd::start(&ca_dir, &d.path().join("etcd"));
    std::fs::write(d.path().join("ca.pem"), &etcd.ca).unwrap();
    std::fs::write(d.path().join("n2.pem"), &etcd.cert).unwrap();
    cairn_proto::tls::write_private(&d.path().join("n2-key.pem"), key.as_bytes()).unwrap();
    let sec = cairn_config::EtcdSecurity {
        ca: Some(d.path().join("ca.pem")),
        cert: Some(d.path().join("n2.pem")),
        key: Some(d.path().join("n2-key.pem")),
    };
    let mut ok = Err(String::new());
    for _ in 0..60 {
        ok = e.connect(&sec).await;
        if ok.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    ok.expect("etcd over TLS with the enrolled etcd certificate");
    let nocert =
        cairn_config::EtcdSecurity { ca: Some(d.path().join("ca.pem")), ..Default::default() };
    assert!(e.connect(&nocert).await.is_err(), "etcd served a client without a certificate");
    // (node.pem holds the certificate, the cluster CA and the key)
    let node_pem = d.path().join("node.pem");
    creds.save(&node_pem).unwrap();
    let wrong =
        cairn_config::EtcdSecurity { cert: Some(node_pem.clone()), key: Some(node_pem), ..sec };
    assert!(e.connect(&wrong).await.is_err(), "etcd took a certificate of the cluster CA");

    // A request without an etcd request gets none.
    let fresh = token(&c).await;
    let n4 = NodeRequest::new("n4").unwrap();
    let r = EnrollRequest { addr: "127.0.0.1:7998".into(), ..request(&fresh, &n4, "n4") };
    match enroll(&c, r).await.expect("enroll n4") {
        MgmtReply::Enrolled(r) => assert!(r.etcd.is_none()),
        other => panic!("{other:?}"),
    }
}

/// Runs `etcdctl` against `endpoint` as etcd's root (the root certificate beside the etcd
/// CA in `tls`); its stdout, or the failure.
fn etcdctl(tls: &std::path::Path, endpoint: &str, args: &[&str]) -> Result<String, String> {
    let f = |n: &str| tls.join(n).display().to_string();
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "--cacert", &f("ca.pem"), "--cert", &f("root.pem")])
        .args(["--key", &f("root-key.pem"), "--dial-timeout", "3s", "--command-timeout", "5s"])
        .args(args)
        .output()
        .expect("etcdctl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The names (DNS and IP) of a certificate's subjectAltName, and its extended key usage.
fn sans_and_eku(pem: &str) -> (Vec<String>, (bool, bool)) {
    use x509_parser::extensions::GeneralName;
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let x = p.parse_x509().unwrap();
    let names = x.subject_alternative_name().unwrap().expect("a subjectAltName");
    let names = names
        .value
        .general_names
        .iter()
        .map(|g| match g {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(b) => {
                std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).unwrap()).to_string()
            }
            other => format!("{other:?}"),
        })
        .collect();
    let eku = x.extended_key_usage().unwrap().expect("an extended key usage").value;
    (names, (eku.server_auth, eku.client_auth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enrollment_brings_an_etcd_member_certificate_for_the_nodes_address() {
    let c = Cluster::start();
    let good = token(&c).await;
    let req = NodeRequest::new("n2").unwrap();
    let (csr, _) = etcd_csr("cairn-n2");
    // The joining node's member request: its key, and names it is not to get.
    let member_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["evil.example".into()]).unwrap();
    params.subject_alt_names.push(rcgen::SanType::IpAddress("10.9.9.9".parse().unwrap()));
    params.distinguished_name.push(rcgen::DnType::CommonName, "root");
    let member_csr = params.serialize_request(&member_key).unwrap().pem().unwrap();
    let base = EnrollRequest { addr: "127.0.0.2:7999".into(), ..request(&good, &req, "n2") };
    let ca_dir = c.path("ca/etcd-ca");
    etcd_ca(&ca_dir);

    // A member request without a client request, or garbage: refused, the token kept.
    let r = EnrollRequest { etcd_member_csr: Some(member_csr.clone()), ..base.clone() };
    refused(enroll(&c, r).await, Errno::EINVAL, "without an etcd client certificate request");
    let r = EnrollRequest {
        etcd_csr: Some(csr.clone()),
        etcd_member_csr: Some("garbage".into()),
        ..base.clone()
    };
    refused(enroll(&c, r).await, Errno::EINVAL, "bad etcd member certificate request");
    assert_eq!(peers(&c).await, vec!["t1".to_string()]);

    let r = EnrollRequest {
        etcd_csr: Some(csr.clone()),
        etcd_member_csr: Some(member_csr),
        ..base.clone()
    };
    let reply = match enroll(&c, r).await.expect("enroll n2 with an etcd member request") {
        MgmtReply::Enrolled(r) => r,
        other => panic!("{other:?}"),
    };
    let member = reply.etcd_member.expect("an etcd member certificate in the answer");
    let etcd = reply.etcd.expect("an etcd client certificate in the answer");
    let (names, eku) = sans_and_eku(&member);
    assert_eq!(names, ["127.0.0.2", "127.0.0.1", "localhost"], "names of the member certificate");
    assert_eq!(eku, (true, true), "server and client authentication");
    let (_, p) = x509_parser::pem::parse_x509_pem(member.as_bytes()).unwrap();
    let x = p.parse_x509().unwrap();
    assert_eq!(x.subject().iter_common_name().next().unwrap().as_str().unwrap(), "etcd-member-n2");
    let (_, p) = x509_parser::pem::parse_x509_pem(etcd.ca.as_bytes()).unwrap();
    assert_eq!(x.issuer(), p.parse_x509().unwrap().subject(), "issued by the etcd CA");

    // A real two-member etcd: e1 with the CA node's server certificate on 127.0.0.1, e2
    // (the joined node) with its member certificate on 127.0.0.2, peer traffic over TLS
    // with client certificates both ways. A write through e2 is read through e1.
    let d = tempfile::tempdir().unwrap();
    let tls2 = d.path().join("n2");
    std::fs::create_dir(&tls2).unwrap();
    std::fs::write(tls2.join("ca.pem"), &etcd.ca).unwrap();
    std::fs::write(tls2.join("server.pem"), &member).unwrap();
    cairn_proto::tls::write_private(
        &tls2.join("server-key.pem"),
        member_key.serialize_pem().as_bytes(),
    )
    .unwrap();
    let ports = [
        (1, common::free_port(), common::free_port()),
        (2, common::free_port(), common::free_port()),
    ];
    let cluster = ports
        .iter()
        .map(|(i, _, p)| format!("e{i}=https://127.0.0.{i}:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut children = vec![];
    for (i, cp, pp) in ports {
        let tls = if i == 1 { ca_dir.clone() } else { tls2.clone() };
        let f = |n: &str| tls.join(n).display().to_string();
        let (url, peer) =
            (format!("https://127.0.0.{i}:{cp}"), format!("https://127.0.0.{i}:{pp}"));
        let child = std::process::Command::new("etcd")
            .args(["--name", &format!("e{i}")])
            .args(["--data-dir", &d.path().join(format!("e{i}")).display().to_string()])
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster, "--initial-cluster-state", "new"])
            .args(["--cert-file", &f("server.pem"), "--key-file", &f("server-key.pem")])
            .args(["--client-cert-auth", "--trusted-ca-file", &f("ca.pem")])
            .args(["--peer-cert-file", &f("server.pem"), "--peer-key-file", &f("server-key.pem")])
            .args(["--peer-client-cert-auth", "--peer-trusted-ca-file", &f("ca.pem")])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(d.path().join(format!("e{i}.log"))).unwrap())
            .spawn()
            .expect("spawn etcd");
        children.push(KillOnDrop(child));
    }
    let e1 = format!("https://127.0.0.1:{}", ports[0].1);
    let e2 = format!("https://127.0.0.2:{}", ports[1].1);
    let mut put = Err(String::new());
    for _ in 0..60 {
        put = etcdctl(&ca_dir, &e2, &["put", "/joined", "n2"]);
        if put.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let logs = || std::fs::read_to_string(d.path().join("e2.log")).unwrap_or_default();
    put.unwrap_or_else(|e| panic!("put through e2 (the member certificate): {e}\n{}", logs()));
    let got = etcdctl(&ca_dir, &e1, &["get", "--print-value-only", "/joined"]).unwrap();
    assert_eq!(got.trim(), "n2", "e1 reads what e2 took");
    let list = etcdctl(&ca_dir, &e1, &["member", "list"]).unwrap();
    assert_eq!(list.matches(", started, ").count(), 2, "both members started: {list}");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
