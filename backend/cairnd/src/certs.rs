//! Issued certificates and their revocation (docs/security.md, "Revocation").
//!
//! - `CertRecord` (the CLI records what it issued), `CertList`, `CertRevoke` (admin only,
//!   audited by the service): records under `/cairn/certs/` in the config store.
//! - At start a node records its own certificate (and the admin credential it created).
//! - [`run_revocation_sync`] keeps this node's TLS revocation set equal to the store's
//!   revoked serials (read every [`REFRESH`]) and closes the live sessions of revoked
//!   certificates: a revocation reaches every node within seconds, and the node that
//!   takes it applies it at once.
//! - [`run_credentials_watch`] reloads this node's certificate when `node.pem` changes
//!   (renewed by an operator, or by this node when it holds the CA and the certificate
//!   nears its end), without a restart: new connections, to and from this node, use the
//!   new certificate and trust the CA certificate(s) of the new file; open ones go on.

use crate::config_error::cfg;
use crate::node::Node;
use cairn_config::{CertRecord, Store};
use cairn_proto::map::BrickState;
use cairn_proto::mgmt::{CertInfo, MgmtReply, MgmtRequest};
use cairn_proto::rpc::{close_sessions, Session};
use cairn_proto::tls::{Credentials, Revoked, Transport};
use cairn_proto::{Errno, RemoteError};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How often each node reads the revoked serials from the config store.
pub const REFRESH: Duration = Duration::from_secs(2);

fn info(r: CertRecord) -> CertInfo {
    CertInfo {
        serial: r.serial,
        name: r.name,
        role: r.role,
        volumes: r.volumes,
        read_only: r.read_only,
        issued: r.issued,
        expires: r.expires,
        revoked_at: r.revoked_at,
        revoked_by: r.revoked_by,
    }
}

fn record(c: CertInfo) -> CertRecord {
    CertRecord {
        serial: c.serial,
        name: c.name,
        role: c.role,
        volumes: c.volumes,
        read_only: c.read_only,
        issued: c.issued,
        expires: c.expires,
        revoked_at: None,
        revoked_by: None,
    }
}

/// The record of a credential's certificate, issued now.
pub fn record_of(c: &Credentials) -> CertRecord {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CertRecord {
        serial: c.serial(),
        name: c.principal.name.clone(),
        role: c.principal.role.as_str().into(),
        volumes: c.principal.volumes.clone(),
        read_only: c.principal.read_only,
        issued: now,
        expires: c.not_after().max(0) as u64,
        revoked_at: None,
        revoked_by: None,
    }
}

/// The certificate requests (admin only: `authz`), for `session`.
pub async fn handle(
    node: &Arc<Node>,
    session: &Session,
    m: &MgmtRequest,
) -> Result<MgmtReply, RemoteError> {
    match m {
        MgmtRequest::CertRecord(c) => {
            node.store.record_cert(&record(c.clone())).await.map_err(cfg)?;
            Ok(MgmtReply::Done {
                message: format!("certificate {} of {} recorded", c.serial, c.name),
            })
        }
        MgmtRequest::CertList => Ok(MgmtReply::Certs(
            node.store.certs().await.map_err(cfg)?.into_iter().map(info).collect(),
        )),
        MgmtRequest::CertRevoke { what } => {
            let by = match &session.principal {
                Some(p) => p.to_string(),
                None => format!("{}@{}", session.hello.name, session.peer),
            };
            let revoked = node.store.revoke_cert(what, &by).await.map_err(cfg)?;
            // Apply here at once; the other nodes follow within REFRESH.
            if let Ok(Transport::Tls(t)) = cairn_proto::tls::default_transport() {
                for r in &revoked {
                    t.revoked.insert(&r.serial);
                }
                close_revoked(&t.revoked);
            }
            Ok(MgmtReply::Certs(revoked.into_iter().map(info).collect()))
        }
        _ => Err(RemoteError::new(Errno::EINVAL, "not a certificate request")),
    }
}

fn close_revoked(revoked: &Revoked) {
    if revoked.is_empty() {
        return;
    }
    for label in close_sessions(|s| s.serial.as_deref().is_some_and(|x| revoked.contains(x))) {
        tracing::warn!(session = %label, "closed a session: its certificate is revoked");
    }
}

/// Record this node's certificate, and the admin credential when this node's CA dir holds
/// it (the first node created it), so both can be listed and revoked.
pub async fn record_local(store: &Store, files: &[&Path]) {
    for f in files {
        let Ok(c) = Credentials::load(f) else { continue };
        if let Err(e) = store.record_cert(&record_of(&c)).await {
            tracing::warn!(file = %f.display(), error = %e, "cannot record certificate");
        }
    }
}

/// Keep `revoked` equal to the store's revoked serials, closing the sessions of revoked
/// certificates. Runs forever.
pub async fn run_revocation_sync(store: Arc<Store>, revoked: Arc<Revoked>) {
    let mut warned = false;
    loop {
        match store.revoked_serials().await {
            Ok(set) => {
                warned = false;
                if revoked.replace(set) {
                    tracing::info!(revoked = revoked.len(), "certificate revocation set updated");
                }
                close_revoked(&revoked);
            }
            // Kept as it was: a revocation is never undone by an unreachable store.
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(error = %e, "cannot read revoked certificates; keeping the last set");
            }
            Err(_) => {}
        }
        tokio::time::sleep(REFRESH).await;
    }
}

/// A file's identity for change detection: modification time and size.
fn stamp(path: &Path) -> Option<(std::time::SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Reload `tls` from `node_pem` whenever the file changes; renew it (a new certificate
/// of the cluster CA in `ca_dir`) when it is within `renew_before` of its end and the CA
/// is here. Records every new certificate in the store. Runs forever.
pub async fn run_credentials_watch(
    store: Arc<Store>,
    tls: Arc<cairn_proto::tls::TlsConfig>,
    node_pem: std::path::PathBuf,
    ca_dir: std::path::PathBuf,
    renew_before: i64,
) {
    let mut seen = stamp(&node_pem);
    let mut warned = None;
    loop {
        tokio::time::sleep(REFRESH).await;
        if let Err(e) = renew_if_due(&tls, &node_pem, &ca_dir, renew_before) {
            tracing::warn!(path = %node_pem.display(), error = %e, "cannot renew the node certificate");
        }
        let now = stamp(&node_pem);
        if now == seen {
            continue;
        }
        match Credentials::load(&node_pem).and_then(|c| tls.reload(&c).map(|()| c)) {
            Ok(c) => {
                seen = now;
                warned = None;
                tracing::info!(
                    path = %node_pem.display(),
                    serial = %c.serial(),
                    "reloaded this node's certificate; new connections use it"
                );
                if let Err(e) = store.record_cert(&record_of(&c)).await {
                    tracing::warn!(error = %e, "cannot record the reloaded certificate");
                }
            }
            // A file being written, or a bad one: keep the current credentials, and
            // say so once per change.
            Err(e) => {
                if warned != now {
                    tracing::warn!(path = %node_pem.display(), error = %e, "not reloading the node certificate; keeping the current one");
                    warned = now;
                }
            }
        }
    }
}

/// When the cluster CA is in `ca_dir`: issue a new node certificate into `node_pem` when
/// the current one ends within `renew_before` seconds or was issued by a CA the CA dir
/// no longer trusts (a CA rotation finished), and make it trust what the CA dir trusts
/// (`ca-bundle.pem` during a rotation and after it, else `ca.pem`).
fn renew_if_due(
    tls: &cairn_proto::tls::TlsConfig,
    node_pem: &Path,
    ca_dir: &Path,
    renew_before: i64,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let cur = Credentials::load(node_pem)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if !ca_dir.join("ca.key").exists() {
        return Ok(());
    }
    let Ok(ca_pem) = std::fs::read_to_string(ca_dir.join("ca.pem")) else {
        return Ok(());
    };
    let trust = std::fs::read_to_string(ca_dir.join("ca-bundle.pem")).unwrap_or(ca_pem.clone());
    let certs = |pem: &str| -> Vec<String> {
        cairn_proto::tls::pem_blocks(pem)
            .into_iter()
            .filter(|b| b.contains("BEGIN CERTIFICATE"))
            .collect()
    };
    // CAs compared by key (the pin hash): a CA certificate re-encoded by an issuer is
    // the same CA.
    let keys = |pem: &str| -> Vec<String> {
        let mut v: Vec<String> = certs(pem)
            .iter()
            .map(|c| cairn_proto::tls::ca_cert_hash(c).unwrap_or_else(|_| c.clone()))
            .collect();
        v.sort();
        v
    };
    let due = cur.not_after() <= now + renew_before;
    // During a rotation a certificate of the old CA stays (clients that trust only the
    // old CA still reach this node); once the old CA is retired it is re-issued.
    let other_ca = !certs(&trust).iter().any(|ca| cur.signed_by(ca));
    if due || other_ca {
        let ca = cairn_proto::tls::Ca::load(ca_dir).context("loading the cluster CA")?;
        let new = ca
            .issue(&tls.me, cairn_proto::tls::CERT_DAYS)?
            .with_cas(&trust)
            .context("adding the trusted CA certificates")?;
        new.save(node_pem)?;
        let why = if due { "it nears its end" } else { "its CA was retired" };
        tracing::info!(path = %node_pem.display(), serial = %new.serial(), "re-issued this node's certificate: {why}");
    } else if keys(&cur.cas_pem()) != keys(&trust) {
        cur.with_cas(&trust)?.save(node_pem)?;
        tracing::info!(path = %node_pem.display(), "this node's certificate now trusts the CA certificate(s) of {}", ca_dir.display());
    }
    Ok(())
}

/// Whether this node's own certificate is revoked, as the config store says now: asked
/// when a peer refused our certificate as revoked (a forward, a heal), before anything is
/// concluded from it. Enters the revoked state ([`enter_revoked`]) when so.
pub async fn own_revoked(node: &Arc<Node>) -> bool {
    if node.cert_revoked.load(Ordering::Acquire) {
        return true;
    }
    let Ok(Transport::Tls(t)) = cairn_proto::tls::default_transport() else { return false };
    match node.store.revoked_serials().await {
        Ok(set) => {
            t.revoked.replace(set);
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read revoked certificates; keeping the last set");
        }
    }
    let serial = t.serial();
    if !t.revoked.contains(&serial) {
        return false;
    }
    enter_revoked(node, &serial).await;
    true
}

/// This node's certificate is revoked (docs/security.md, "Revocation"): every other node
/// refuses it, so this node can neither forward writes nor heal. Its bricks stop serving
/// clients at once (clients get ESTALEMAP and go to the new heads), are marked stale (they
/// heal before they serve again) and published Healing; the rest of each replica set goes
/// on. Said once. Left when the node has a certificate that is not revoked
/// ([`run_own_revocation_watch`]).
pub async fn enter_revoked(node: &Arc<Node>, serial: &str) {
    if node.cert_revoked.swap(true, Ordering::AcqRel) {
        return;
    }
    let slots: Vec<_> = node.bricks.read().values().cloned().collect();
    for s in &slots {
        s.healing.store(true, Ordering::Release);
    }
    tracing::error!(
        node = %node.name,
        serial,
        bricks = slots.len(),
        "this node's certificate is revoked: the other nodes refuse it, so its bricks stop serving and are marked stale (the other bricks of their replica sets go on); give the node a new certificate ('cairn client certificate issue NAME --role node' on the CA node, into STATE_DIR/node.pem: it is reloaded) and they catch up"
    );
    let why = format!("node {}'s certificate {serial} is revoked", node.name);
    for s in &slots {
        if let Err(e) = node.store.mark_self_stale(&s.volume, s.index, &why).await {
            tracing::warn!(volume = %s.volume, brick = s.index, error = %e, "cannot mark this revoked node's brick stale");
        }
        if let Err(e) = node.lease().set_brick_state(&s.volume, s.index, BrickState::Healing).await
        {
            tracing::warn!(volume = %s.volume, brick = s.index, error = %e, "cannot publish brick state");
        }
    }
    node.kick.notify_one();
}

/// Watch whether this node's own certificate is in the revocation set (kept by
/// [`run_revocation_sync`]): enter the revoked state when it is, leave it once the node
/// presents a certificate that is not (a new `node.pem`, reloaded by
/// [`run_credentials_watch`]); its bricks then catch up and come back. Runs forever.
pub async fn run_own_revocation_watch(node: Arc<Node>, tls: Arc<cairn_proto::tls::TlsConfig>) {
    loop {
        let serial = tls.serial();
        if tls.revoked.contains(&serial) {
            enter_revoked(&node, &serial).await;
        } else if node.cert_revoked.swap(false, Ordering::AcqRel) {
            tracing::info!(node = %node.name, serial, "this node's certificate is valid again (a new one): its bricks catch up and come back");
            node.kick.notify_one();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
