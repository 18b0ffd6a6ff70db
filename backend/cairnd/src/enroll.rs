//! Joining a node with a token alone (docs/security.md, "Joining a node"), the way
//! `kubeadm join --token T --discovery-token-ca-cert-hash sha256:H` does.
//!
//! The joining node ([`join`]) makes its key and a certificate request, connects to a
//! member without a certificate, trusting it only if the member's chain carries a CA of the
//! pinned hash, and sends `Enroll { token, csr, name, addr, uuid }`. The member
//! ([`handle`]) checks the request, uses up the token (single use, expiry, revocation:
//! `cairn_config::consume_join_token`), signs a node certificate with the cluster CA, and
//! adds the node to the pool in the same step; it answers the certificate and the CA's.
//! The joining node checks both against its key and its pin, stores `node.pem` (0600) and
//! `ca.pem`, and starts as a member.
//!
//! With `--etcd-cert` (an etcd that requires client certificates) the request also
//! carries a request for the node's etcd client certificate, which the member holding the
//! etcd CA (`CA_DIR/etcd-ca`) signs in the same step (`etcd_cert.rs`).
//!
//! The CA key stays on the node(s) holding `ca.key` in their CA dir (the first node): a
//! member without it passes the request on ([`forward`]) to the other members over its
//! node connections, and the one that holds the key answers; the key never travels.

use crate::node::Node;
use anyhow::Context;
use cairn_config::PeerRecord;
use cairn_proto::mgmt::{EnrollReply, EnrollRequest, EtcdClientCert, MgmtReply, MgmtRequest};
use cairn_proto::msg::{PeerKind, Reply, Request};
use cairn_proto::principal::Role;
use cairn_proto::rpc::{Connection, Session};
use cairn_proto::tls::{self, Ca, Credentials, NodeRequest};
use cairn_proto::{Errno, RemoteError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn fail(errno: Errno, msg: impl Into<String>) -> RemoteError {
    RemoteError::new(errno, msg.into())
}

/// A node name as brick specs use it: 1 to 63 of `A-Za-z0-9-._`.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && n.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
}

/// The member's side: checks the request, uses up the token, issues the certificate and
/// adds the node to the pool. `ca_dir` holds the cluster CA when this node has it.
pub async fn handle(
    node: &Arc<Node>,
    ca_dir: Option<&Path>,
    session: &Session,
    r: EnrollRequest,
) -> Result<MgmtReply, RemoteError> {
    let name = r.name.clone();
    let what = |m: String| format!("enrollment of node {name}: {m}");
    if !valid_name(&r.name) {
        return Err(fail(
            Errno::EINVAL,
            format!("enrollment: bad node name {:?} (1 to 63 of A-Z a-z 0-9 - . _)", r.name),
        ));
    }
    if cairn_proto::HostPort::parse(&r.addr, cairn_proto::DEFAULT_PORT).is_err()
        || r.uuid.is_empty()
        || r.uuid.len() > 64
    {
        return Err(fail(
            Errno::EINVAL,
            what(format!("bad address {:?} or uuid {:?}", r.addr, r.uuid)),
        ));
    }
    let Some(ca_dir) = ca_dir else {
        return Err(fail(
            Errno::EINVAL,
            what("this node runs with transport = plain: it issues no certificates".into()),
        ));
    };
    let (cn, asked) =
        tls::csr_subject(&r.csr).map_err(|e| fail(Errno::EINVAL, what(e.to_string())))?;
    if cn != r.name {
        return Err(fail(
            Errno::EACCES,
            what(format!("the certificate request is for {cn:?}, not for the enrolling node")),
        ));
    }
    if let Some(p) = asked {
        if p.role != Role::Node || p.volumes.is_some() || p.read_only {
            return Err(fail(
                Errno::EACCES,
                what(format!(
                    "the certificate request asks for {} ({}); a join token grants only a node \
                     certificate (cairn:role=node)",
                    p.role.as_str(),
                    p.to_uri()
                )),
            ));
        }
    }
    if !ca_dir.join("ca.key").exists() {
        if r.forwarded {
            return Err(fail(
                Errno::ENOENT,
                what(format!("node {} does not hold the cluster CA key", node.name)),
            ));
        }
        return forward(node, r).await;
    }
    let ca = Ca::load(ca_dir).map_err(|e| fail(Errno::EIO, what(format!("cluster CA: {e}"))))?;
    let ca_pem = std::fs::read_to_string(ca_dir.join("ca.pem"))
        .map_err(|e| fail(Errno::EIO, what(format!("{}: {e}", ca_dir.join("ca.pem").display()))))?;
    let store = &node.store;
    // Everything that can be refused is checked before the token is used up: the token
    // itself (so a request without a valid one learns nothing more), whether the pool
    // takes this node (its address or uuid used by another member), the node
    // certificate, and the etcd client certificate (a bad request, or no etcd CA here).
    let token_refused = |e| {
        let e = crate::mgmt::join_refused(e);
        fail(e.errno, what(e.message))
    };
    cairn_config::check_join_token(store, &r.token).await.map_err(token_refused)?;
    match store.get_peer(&r.name).await.map_err(|e| fail(Errno::EIO, what(e.to_string())))? {
        Some(p) if p.uuid != r.uuid => {
            return Err(fail(
                Errno::EEXIST,
                what(format!(
                    "the name is already used by member uuid {} at {}; pick another --name",
                    p.uuid, p.addr
                )),
            ))
        }
        _ => {}
    }
    let rec = PeerRecord { name: r.name.clone(), addr: r.addr.clone(), uuid: r.uuid.clone() };
    store.check_new_peer(&rec).await.map_err(|e| match e {
        cairn_config::ConfigError::Conflict(m) => {
            fail(Errno::EEXIST, what(format!("{m} (the token is not used up)")))
        }
        e => fail(Errno::EIO, what(e.to_string())),
    })?;
    let cert = tls::issue_node_cert(&ca, &r.name, &r.csr)
        .map_err(|e| fail(Errno::EINVAL, what(e.to_string())))?;
    let etcd = match &r.etcd_csr {
        Some(csr) => {
            let signed = crate::etcd_cert::sign(ca_dir, &r.name, csr).map_err(|e| {
                fail(Errno::EINVAL, what(format!("etcd client certificate: {e:#}")))
            })?;
            let Some((cert, ca)) = signed else {
                return Err(fail(
                    Errno::EINVAL,
                    what(format!(
                        "it asks for an etcd client certificate, but {} holds no etcd CA \
                         ({}); make it there with 'cairn-appliance etcd-tls ca' (the token \
                         is not used up)",
                        node.name,
                        ca_dir.join(crate::etcd_cert::ETCD_CA_SUBDIR).display()
                    )),
                ));
            };
            // With etcd auth on, the certificate's CN must be an etcd user: made now, before
            // the token is used up (a refusal here leaves it valid).
            let made =
                crate::etcd_cert::ensure_user(ca_dir, &store.endpoints(), store.prefix(), &r.name)
                    .await
                    .map_err(|e| {
                        fail(Errno::EIO, what(format!("{e:#} (the token is not used up)")))
                    })?;
            tracing::info!(peer = %r.name, user = %crate::etcd_cert::common_name(&r.name), made, "etcd user for the enrolled node's certificate");
            Some(EtcdClientCert { cert, ca })
        }
        None => None,
    };
    let etcd_member = match (&r.etcd_member_csr, &etcd) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(fail(
                Errno::EINVAL,
                what(
                    "it asks for an etcd member certificate without an etcd client \
                      certificate request (the token is not used up)"
                        .into(),
                ),
            ))
        }
        (Some(csr), Some(_)) => {
            // for the address the node joins with (checked above), nothing it names itself
            let host = cairn_proto::HostPort::parse(&r.addr, cairn_proto::DEFAULT_PORT)
                .map_err(|e| fail(Errno::EINVAL, what(e.to_string())))?;
            let cert = crate::etcd_cert::sign_member(ca_dir, &r.name, host.host(), csr)
                .map_err(|e| fail(Errno::EINVAL, what(format!("etcd member certificate: {e:#}"))))?
                .ok_or_else(|| fail(Errno::EIO, what("the etcd CA went away".into())))?;
            Some(cert)
        }
    };
    let by =
        format!("{} at {} (enrolled from {})", r.name, r.addr, session.peer.ip().to_canonical());
    let grant =
        cairn_config::consume_join_token(store, &r.token, &by).await.map_err(token_refused)?;
    // Only a change to the pool since the check above can refuse it now.
    store.add_peer(rec).await.map_err(|e| fail(Errno::EEXIST, what(e.to_string())))?;
    tracing::info!(peer = %r.name, addr = %r.addr, token = grant.token_id, etcd_cert = etcd.is_some(), etcd_member = etcd_member.is_some(), "node enrolled with a join token: certificate issued, added to the pool");
    node.kick.notify_one();
    let by = node.name.clone();
    Ok(MgmtReply::Enrolled(EnrollReply { cert, ca: ca_pem, by, etcd, etcd_member }))
}

/// A member without the CA key: ask each other member in turn (over node connections);
/// the one holding the key answers, or refuses (a bad token: that refusal is the answer).
/// The token is used up only there, so asking several cannot use it twice.
async fn forward(node: &Arc<Node>, mut r: EnrollRequest) -> Result<MgmtReply, RemoteError> {
    let name = r.name.clone();
    r.forwarded = true;
    let peers = node.store.list_peers().await.map_err(|e| {
        fail(Errno::EIO, format!("enrollment of node {name}: listing the members: {e}"))
    })?;
    let mut tried = vec![];
    for p in peers.into_iter().filter(|p| p.name != node.name && p.name != name) {
        let req = Request::Mgmt(MgmtRequest::Enroll(r.clone()));
        match node.peers.call(&p.addr, &node.name, req, bytes::Bytes::new()).await {
            Ok((Reply::Mgmt(m @ MgmtReply::Enrolled(_)), _)) => {
                tracing::info!(peer = %name, via = %p.name, "enrollment passed on to the member holding the cluster CA");
                return Ok(m);
            }
            Ok((other, _)) => tried.push(format!("{}: unexpected reply {other:?}", p.name)),
            // Not the CA holder, or not reachable: try the next.
            Err(e)
                if e.errno == Errno::ENOENT
                    || e.errno == Errno::ENOTCONN
                    || e.errno == Errno::ETIMEDOUT
                    || e.errno == Errno(libc::ECONNREFUSED) =>
            {
                tried.push(format!("{}: {}", p.name, e.message))
            }
            Err(e) => return Err(e),
        }
    }
    Err(fail(
        Errno::ENOENT,
        format!(
            "enrollment of node {name}: no reachable member holds the cluster CA key (not {} \
             itself{}{}); enroll through the node that does",
            node.name,
            if tried.is_empty() { "" } else { "; " },
            tried.join("; ")
        ),
    ))
}

/// How a node without a certificate joins: `--join`, `--ca-cert-hash`, `--join-token-file`.
pub struct JoinSpec {
    pub member: String,
    pub ca_cert_hash: String,
    pub token_file: PathBuf,
    /// Where to store the etcd client certificate the enrollment brings (`--etcd-ca`,
    /// `--etcd-cert`, `--etcd-key`); `None`: ask for none.
    pub etcd: Option<EtcdPaths>,
}

pub struct EtcdPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Where to store an etcd server and peer certificate and its key (`--etcd-member-cert`,
    /// `--etcd-member-key`); `None`: ask for none.
    pub member: Option<(PathBuf, PathBuf)>,
}

/// Transient failures worth waiting out (a member still booting).
fn transient(e: &RemoteError) -> bool {
    [Errno(libc::ECONNREFUSED), Errno::ETIMEDOUT, Errno::ENOTCONN, Errno(libc::EHOSTUNREACH)]
        .contains(&e.errno)
}

/// How long a joining node keeps trying to reach its member.
const REACH_FOR: Duration = Duration::from_secs(60);

/// The joining node's side: unless `STATE_DIR/node.pem` already holds this node's
/// certificate, enroll with the member and store the certificate (0600) and `ca.pem`.
pub async fn join(
    spec: &JoinSpec,
    name: &str,
    addr: &str,
    uuid: &str,
    state_dir: &Path,
    ca_dir: &Path,
) -> anyhow::Result<()> {
    let node_pem = state_dir.join("node.pem");
    if let Ok(c) = Credentials::load(&node_pem) {
        if c.principal.name == name && c.principal.role == Role::Node {
            return Ok(());
        }
    }
    let pin = tls::parse_ca_cert_hash(&spec.ca_cert_hash).context("--ca-cert-hash")?;
    let token = std::fs::read_to_string(&spec.token_file)
        .with_context(|| format!("reading the join token from {}", spec.token_file.display()))?
        .trim()
        .to_string();
    let req = NodeRequest::new(name).with_context(|| format!("certificate request of {name}"))?;
    let t = tls::enroll_transport(&pin)?;
    let etcd_req = match &spec.etcd {
        Some(_) => Some(crate::etcd_cert::EtcdRequest::new(name)?),
        None => None,
    };
    let member_req = match spec.etcd.as_ref().and_then(|e| e.member.as_ref()) {
        Some(_) => Some(crate::etcd_cert::MemberRequest::new(name)?),
        None => None,
    };
    let host = cairn_proto::HostPort::parse(addr, cairn_proto::DEFAULT_PORT)
        .with_context(|| format!("--advertise {addr}"))?;
    let enroll = EnrollRequest {
        token,
        csr: req.csr_pem.clone(),
        name: name.into(),
        addr: addr.into(),
        uuid: uuid.into(),
        forwarded: false,
        etcd_csr: etcd_req.as_ref().map(|r| r.csr_pem.clone()),
        etcd_member_csr: member_req.as_ref().map(|r| r.csr_pem.clone()),
    };
    let member = &spec.member;
    let deadline = std::time::Instant::now() + REACH_FOR;
    let reply = loop {
        let r = async {
            let c = Connection::connect_with(
                member,
                None,
                &t,
                PeerKind::Cli,
                &format!("cairnd {name} (enrolling)"),
                None,
                Duration::from_secs(10),
            )
            .await?;
            let r = c
                .call(Request::Mgmt(MgmtRequest::Enroll(enroll.clone())), bytes::Bytes::new())
                .await;
            c.close();
            r
        }
        .await;
        match r {
            Err(e) if transient(&e) && std::time::Instant::now() < deadline => {
                tracing::warn!(member = %member, "cannot reach the member to enroll with yet: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => anyhow::bail!("cannot join the cluster through {member}: {}", e.message),
            Ok((Reply::Mgmt(MgmtReply::Enrolled(r)), _)) => break r,
            Ok((other, _)) => anyhow::bail!("enrolling with {member}: unexpected reply {other:?}"),
        }
    };
    let creds = req
        .credentials(&reply.cert, &reply.ca, &pin)
        .with_context(|| format!("the certificate {member} issued"))?;
    // Checked before anything is stored: a node with node.pem does not enroll again.
    let etcd = match (&spec.etcd, &etcd_req) {
        (Some(paths), Some(er)) => {
            let Some(e) = &reply.etcd else {
                anyhow::bail!(
                    "enrolling through {member}: {} sent no etcd client certificate",
                    reply.by
                );
            };
            let key = er
                .check(&e.cert, &e.ca)
                .with_context(|| format!("the etcd client certificate {member} issued"))?;
            Some((paths, e, key))
        }
        _ => None,
    };
    let etcd_member = match (&etcd, &member_req) {
        (Some((paths, e, _)), Some(mr)) => {
            // An older CA node ignores the request (a trailing field) but has used up the
            // token and added this node: take the rest, without a member certificate.
            match &reply.etcd_member {
                None => {
                    tracing::warn!(node = %name, by = %reply.by, "the enrollment answer carries no etcd member certificate (the CA node predates them): none stored; make one on the CA node to run an etcd member here");
                    None
                }
                Some(cert) => {
                    let key = mr.check(cert, &e.ca, host.host()).with_context(|| {
                        format!("the etcd member certificate {member} issued for {}", host.host())
                    })?;
                    paths.member.as_ref().map(|(c, k)| (c, k, cert, key))
                }
            }
        }
        _ => None,
    };
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating state dir {}", state_dir.display()))?;
    creds.save(&node_pem).with_context(|| format!("writing {}", node_pem.display()))?;
    let p = state_dir.join("ca.pem");
    std::fs::write(&p, &reply.ca).with_context(|| format!("writing {}", p.display()))?;
    // Also in the CA dir, for the CLI and the gateways (node.pem above holds it too, so a
    // CA dir this process may not write is no reason to stop).
    let p = ca_dir.join("ca.pem");
    if p != state_dir.join("ca.pem") {
        if let Err(e) = std::fs::create_dir_all(ca_dir).and_then(|_| std::fs::write(&p, &reply.ca))
        {
            tracing::warn!(path = %p.display(), "cannot write the cluster CA certificate there: {e}");
        }
    }
    if let Some((paths, e, key)) = etcd {
        crate::etcd_cert::save(&paths.ca, &paths.cert, &paths.key, &e.ca, &e.cert, &key)
            .context("storing the etcd client certificate")?;
        tracing::info!(node = %name, path = %paths.cert.display(), "etcd client certificate issued by the etcd CA");
    }
    if let Some((cert_path, key_path, cert, key)) = etcd_member {
        crate::etcd_cert::save_member(cert_path, key_path, cert, &key)
            .context("storing the etcd member certificate")?;
        tracing::info!(node = %name, path = %cert_path.display(), host = %host.host(), "etcd server and peer certificate issued by the etcd CA");
    }
    tracing::info!(node = %name, member = %reply.by, path = %node_pem.display(), "enrolled: node certificate issued by the cluster CA; a member of the pool");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert!(super::valid_name("node-2.a_b"));
        for n in ["", "a b", "a/b", "a:b", &"x".repeat(64)] {
            assert!(!super::valid_name(n), "{n:?}");
        }
    }
}
