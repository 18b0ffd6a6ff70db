//! Certificates renewed from the member holding the cluster CA (docs/security.md,
//! "Rotation"), for nodes and gateways that do not hold it.
//!
//! - [`handle`]: the `CertRenew` request. The holder proves who it is by the certificate
//!   of its connection (a node's or a gateway's) and sends a certificate request for a new
//!   key (or none: it asks only what the cluster trusts now). The member holding `ca.key`
//!   signs a certificate for the same identity (name, role, limits: whatever the request
//!   names) and answers it with the CA certificate(s) trusted now; a member without the key
//!   passes the request on to the others, vouching for the holder it authenticated.
//! - [`run`]: on a node holding the CA, publish the CA certificate(s) it trusts in the config
//!   store (`/cairn/ca/trust`) when they change; on any other node, compare them with what
//!   its `node.pem` trusts and renew from the CA node when the CA is rotated, the old CA
//!   retired, or its certificate nears its end. The store only says *when*; the
//!   certificates come from the CA node over the node's authenticated connection.
//!   `certs::run_credentials_watch` then loads the new `node.pem` as for any change.
//!
//! A CA rotation on a node without the CA, as on the CA node: at `rotate` it trusts both
//! CAs and keeps its certificate (a client that trusts only the old CA still reaches it),
//! and keeps the certificate of the new CA it was given in `node-next.pem`; at `--finish`
//! it switches to that one (no connection needed: the CA node no longer accepts the old
//! certificate).

use crate::config_error::cfg;
use crate::node::Node;
use cairn_config::CertRecord;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest, RenewReply, RenewRequest};
use cairn_proto::msg::{Reply, Request};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::rpc::Session;
use cairn_proto::tls::{self, Credentials, NodeRequest, TlsConfig};
use cairn_proto::{Errno, RemoteError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// After a failed renewal, the next try waits this long.
const RETRY_AFTER: Duration = Duration::from_secs(30);

fn fail(errno: Errno, msg: impl Into<String>) -> RemoteError {
    RemoteError::new(errno, msg.into())
}

/// The CA certificate(s) the CA dir trusts now: the bundle during and after a rotation,
/// else the CA's own.
fn trust_of(ca_dir: &Path) -> Option<String> {
    std::fs::read_to_string(ca_dir.join("ca-bundle.pem"))
        .or_else(|_| std::fs::read_to_string(ca_dir.join("ca.pem")))
        .ok()
}

fn certs(pem: &str) -> Vec<String> {
    tls::pem_blocks(pem).into_iter().filter(|b| b.contains("BEGIN CERTIFICATE")).collect()
}

/// CAs compared by key (the pin hash), sorted.
fn ca_keys(pem: &str) -> Vec<String> {
    let mut v: Vec<String> =
        certs(pem).iter().map(|c| tls::ca_cert_hash(c).unwrap_or_else(|_| c.clone())).collect();
    v.sort();
    v
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The member's side of `CertRenew` (authz: roles node and gateway).
pub async fn handle(
    node: &Arc<Node>,
    ca_dir: Option<&Path>,
    session: &Session,
    r: RenewRequest,
) -> Result<MgmtReply, RemoteError> {
    let Some(me) = &session.principal else {
        return Err(fail(Errno::EACCES, "a certificate renewal needs the certificate to renew"));
    };
    let holder = match &r.on_behalf {
        Some((name, uri)) => {
            if me.role != Role::Node {
                return Err(fail(
                    Errno::EACCES,
                    format!("permission denied for {me}: only a node passes on a renewal"),
                ));
            }
            Principal::from_uri(name, uri).map_err(|e| {
                fail(Errno::EINVAL, format!("renewal passed on by {me}: holder {name}: {e}"))
            })?
        }
        None => me.clone(),
    };
    let what = |m: String| format!("certificate renewal of {holder}: {m}");
    if !matches!(holder.role, Role::Node | Role::Gateway) {
        return Err(fail(
            Errno::EACCES,
            what(format!(
                "a {} certificate is not renewed by its holder; an admin issues a new one \
                 ('cairn client certificate issue')",
                holder.role.as_str()
            )),
        ));
    }
    if !r.csr.is_empty() {
        let (cn, asked) =
            tls::csr_subject(&r.csr).map_err(|e| fail(Errno::EINVAL, what(e.to_string())))?;
        if cn != holder.name || asked.as_ref().is_some_and(|p| *p != holder) {
            let asked = asked.map(|p| p.to_string()).unwrap_or(cn);
            return Err(fail(
                Errno::EACCES,
                what(format!("the certificate request is for {asked}, not the holder's identity")),
            ));
        }
    }
    let Some(ca_dir) = ca_dir else {
        return Err(fail(
            Errno::EINVAL,
            what("this node runs with transport = plain: it issues no certificates".into()),
        ));
    };
    if !ca_dir.join("ca.key").exists() {
        if r.on_behalf.is_some() {
            return Err(fail(
                Errno::ENOENT,
                what(format!("node {} does not hold the cluster CA key", node.name)),
            ));
        }
        let on_behalf = Some((holder.name.clone(), holder.to_uri()));
        return ask(node, RenewRequest { csr: r.csr, on_behalf }).await.map(MgmtReply::Renewed);
    }
    let cas = trust_of(ca_dir)
        .ok_or_else(|| fail(Errno::EIO, what(format!("no ca.pem in {}", ca_dir.display()))))?;
    let mut cert = String::new();
    if !r.csr.is_empty() {
        let ca = tls::Ca::load(ca_dir)
            .map_err(|e| fail(Errno::EIO, what(format!("cluster CA: {e}"))))?;
        cert = tls::issue_for_csr(&ca, &holder, &r.csr)
            .map_err(|e| fail(Errno::EINVAL, what(e.to_string())))?;
        let (serial, expires) = tls::serial_and_end(&cert).unwrap_or_default();
        let rec = CertRecord {
            serial: serial.clone(),
            name: holder.name.clone(),
            role: holder.role.as_str().into(),
            volumes: holder.volumes.clone(),
            read_only: holder.read_only,
            issued: now().max(0) as u64,
            expires: expires.max(0) as u64,
            revoked_at: None,
            revoked_by: None,
        };
        node.store.record_cert(&rec).await.map_err(cfg)?;
        tracing::info!(holder = %holder, serial, "renewed a certificate with the cluster CA");
    }
    Ok(MgmtReply::Renewed(RenewReply { cert, cas, by: node.name.clone() }))
}

/// Ask the other members in turn (over this node's connections); the one holding the CA
/// key answers, or refuses (that refusal is the answer).
async fn ask(node: &Arc<Node>, r: RenewRequest) -> Result<RenewReply, RemoteError> {
    let peers =
        node.store.list_peers().await.map_err(|e| {
            fail(Errno::EIO, format!("certificate renewal: listing the members: {e}"))
        })?;
    let mut tried = vec![];
    for p in peers.into_iter().filter(|p| p.name != node.name) {
        let req = Request::Mgmt(MgmtRequest::CertRenew(r.clone()));
        match node.peers.call(&p.addr, &node.name, req, bytes::Bytes::new()).await {
            Ok((Reply::Mgmt(MgmtReply::Renewed(reply)), _)) => return Ok(reply),
            Ok((other, _)) => tried.push(format!("{}: unexpected reply {other:?}", p.name)),
            // Not the CA holder, not reachable, or it predates renewals: the next.
            Err(e)
                if [
                    Errno::ENOENT,
                    Errno::ENOTCONN,
                    Errno::ETIMEDOUT,
                    Errno::EINVAL,
                    Errno(libc::ECONNREFUSED),
                    Errno(libc::ECONNRESET),
                    Errno(libc::EPROTO),
                ]
                .contains(&e.errno) =>
            {
                tried.push(format!("{}: {}", p.name, e.message))
            }
            Err(e) => return Err(e),
        }
    }
    Err(fail(
        Errno::ENOENT,
        format!(
            "certificate renewal: no reachable member holds the cluster CA key (not {}{}{})",
            node.name,
            if tried.is_empty() { "" } else { "; " },
            tried.join("; ")
        ),
    ))
}

/// Where a node without the CA keeps the certificate of the new CA it was given when a
/// rotation began, until the old CA is retired.
pub fn next_path(node_pem: &Path) -> PathBuf {
    node_pem.with_file_name("node-next.pem")
}

/// Runs forever (see the module's description).
pub async fn run(
    node: Arc<Node>,
    tls: Arc<TlsConfig>,
    node_pem: PathBuf,
    ca_dir: PathBuf,
    renew_before: i64,
) {
    let mut published: Option<String> = None;
    let mut asked_for: Option<String> = None;
    let mut first = true;
    loop {
        // The CA node publishes its trust at once, before clients come: a config store
        // write while a client's connection is dying kept that session (and its share
        // reservations) past the keepalive (faults/share-dead-client; cause not found yet).
        if !std::mem::take(&mut first) {
            tokio::time::sleep(crate::certs::REFRESH).await;
        }
        if ca_dir.join("ca.key").exists() {
            let Some(trust) = trust_of(&ca_dir) else { continue };
            if published.as_ref() != Some(&trust) {
                match node.store.put_ca_trust(&trust).await {
                    Ok(()) => published = Some(trust),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot publish the trusted CA certificates")
                    }
                }
            }
            continue;
        }
        if let Err(e) = step(&node, &tls, &node_pem, renew_before, &mut asked_for).await {
            tracing::warn!(path = %node_pem.display(), error = %e, "cannot renew this node's certificate from the CA node; retrying in {}s", RETRY_AFTER.as_secs());
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}

/// One look at a node without the CA (see [`run`]).
async fn step(
    node: &Arc<Node>,
    tls: &TlsConfig,
    node_pem: &Path,
    renew_before: i64,
    asked_for: &mut Option<String>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let cur = Credentials::load(node_pem)?;
    let trust = node.store.ca_trust().await?.unwrap_or_else(|| cur.cas_pem());
    let due = cur.not_after() <= now() + renew_before;
    let retired = !certs(&trust).iter().any(|ca| cur.signed_by(ca));
    let changed = ca_keys(&cur.cas_pem()) != ca_keys(&trust);
    let next_pem = next_path(node_pem);
    if retired {
        if let Ok(next) = Credentials::load(&next_pem) {
            if next.principal == cur.principal && certs(&trust).iter().any(|ca| next.signed_by(ca))
            {
                next.with_cas(&trust)?.save(node_pem)?;
                let _ = std::fs::remove_file(&next_pem);
                tracing::info!(path = %node_pem.display(), serial = %next.serial(), "re-issued this node's certificate: its CA was retired (the certificate of the new CA the CA node gave at the rotation's start)");
                return Ok(());
            }
        }
    }
    // Asked already for this trust, and the answer differed (a stale record): not again
    // until something else changes.
    if !(due || retired || (changed && asked_for.as_deref() != Some(trust.as_str()))) {
        return Ok(());
    }
    *asked_for = Some(trust.clone());
    let req = NodeRequest::for_principal(&tls.me)?;
    let reply = ask(node, RenewRequest { csr: req.csr_pem.clone(), on_behalf: None })
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let new = req
        .renewed(&reply.cert, &reply.cas)
        .with_context(|| format!("the certificate {} issued for this node", reply.by))?;
    let old_ok = certs(&reply.cas).iter().any(|ca| cur.signed_by(ca));
    if due || !old_ok {
        new.save(node_pem)?;
        let _ = std::fs::remove_file(&next_pem);
        let why = if due { "it nears its end" } else { "its CA was retired" };
        tracing::info!(path = %node_pem.display(), serial = %new.serial(), by = %reply.by, "renewed this node's certificate from the CA node: {why}");
    } else {
        // A rotation began: keep the certificate (clients that trust only the old CA
        // still reach this node), trust both, and keep the new one for its end.
        new.save(&next_pem)?;
        cur.with_cas(&reply.cas)?.save(node_pem)?;
        tracing::info!(path = %node_pem.display(), by = %reply.by, next = %new.serial(), "this node's certificate now trusts the CA certificate(s) the CA node sent; a certificate of the new CA waits in node-next.pem for the old CA's retirement");
    }
    Ok(())
}
