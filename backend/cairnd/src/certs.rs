//! Issued certificates and their revocation (docs/security.md, "Revocation").
//!
//! - `CertRecord` (the CLI records what it issued), `CertList`, `CertRevoke` (admin only,
//!   audited by the service): records under `/cairn/certs/` in the config store.
//! - At start a node records its own certificate (and the admin credential it created).
//! - [`run_revocation_sync`] keeps this node's TLS revocation set equal to the store's
//!   revoked serials (read every [`REFRESH`]) and closes the live sessions of revoked
//!   certificates: a revocation reaches every node within seconds, and the node that
//!   takes it applies it at once.

use crate::mgmt::cfg;
use crate::node::Node;
use cairn_config::{CertRecord, Store};
use cairn_proto::mgmt::{CertInfo, MgmtReply, MgmtRequest};
use cairn_proto::rpc::{close_sessions, Session};
use cairn_proto::tls::{Credentials, Revoked, Transport};
use cairn_proto::{Errno, RemoteError};
use std::path::Path;
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
