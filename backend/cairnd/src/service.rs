//! The RPC service of `cairnd`: dispatches every request a connection carries.

use crate::audit::Audit;
use crate::node::Node;
use crate::{authz, chain, metrics, mgmt};
use bytes::Bytes;
use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use cairn_proto::msg::{Reply, Request, Response, Welcome};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::rpc::{Service, Session};
use cairn_proto::{Errno, RemoteError, PROTOCOL_VERSION};
use futures::future::BoxFuture;
use std::sync::Arc;

pub struct Daemon {
    pub node: Arc<Node>,
    pub audit: Arc<Audit>,
    /// The CA dir, with TLS on: enrollment signs with the cluster CA there, if any.
    pub ca_dir: Option<std::path::PathBuf>,
    /// Fenced gateways (`fence.rs`): their sessions' requests are refused.
    pub fences: Arc<crate::fence::Fences>,
}

/// With TLS, who may manage is the certificate's role, checked by `authz` (changing
/// `auth.allow`, join tokens and the audit log need `admin`), from any address. On a
/// plain connection (no identity) management is open to any host, except changing who
/// may use a volume, handling join tokens and reading the audit log: those only from this
/// host (the local CLI) or a node of the cluster.
fn mgmt_allowed(node: &Node, session: &Session, m: &MgmtRequest) -> Result<(), RemoteError> {
    if session.principal.is_some() || node.may_manage(session) {
        return Ok(());
    }
    let client = session.peer.ip().to_canonical();
    if let Some((volume, key)) = mgmt::changes_access(m) {
        return Err(RemoteError::new(
            Errno::EACCES,
            format!(
                "volume {volume}: client {client} may not change {key}: auth.allow / \
                 auth.reject are changed only from a node of the cluster (run the cairn CLI \
                 there)"
            ),
        ));
    }
    let what = match m {
        MgmtRequest::PeerTokenCreate { .. } => "create join tokens",
        MgmtRequest::PeerTokenList => "list join tokens",
        MgmtRequest::PeerTokenRevoke { .. } => "revoke join tokens",
        MgmtRequest::AuditLog { .. } => "read the audit log",
        _ => return Ok(()),
    };
    Err(RemoteError::new(
        Errno::EACCES,
        format!("client {client} may not {what}: only from a node of the cluster (run the cairn CLI there)"),
    ))
}

/// Whether a session is shown secrets: by the role of its certificate, or (plain
/// transport) by `by_address`.
fn sees_secrets(p: Option<&Principal>, by_address: impl FnOnce() -> bool) -> bool {
    match p {
        Some(p) => matches!(p.role, Role::Admin | Role::Node | Role::Gateway),
        None => by_address(),
    }
}

/// Gateway documents with every secret masked (`audit::redact`).
fn mask_secrets(r: MgmtReply) -> MgmtReply {
    match r {
        MgmtReply::Gateway { revision, objects } => MgmtReply::Gateway {
            revision,
            objects: objects
                .into_iter()
                .map(|mut o| {
                    o.doc = match serde_json::from_str::<serde_json::Value>(&o.doc) {
                        Ok(mut v) => {
                            crate::audit::redact(&mut v);
                            v.to_string()
                        }
                        Err(_) => "{}".into(),
                    };
                    o
                })
                .collect(),
        },
        other => other,
    }
}

async fn dispatch(
    node: Arc<Node>,
    audit: Arc<Audit>,
    ca_dir: Option<std::path::PathBuf>,
    session: Arc<Session>,
    req: Request,
    data: Bytes,
) -> Result<(Reply, Bytes), RemoteError> {
    // Who may do what: the role and limits of the session's certificate (TLS; a plain
    // connection carries no identity).
    if let Some(p) = &session.principal {
        if let Err(e) = authz::authorize(p, &req) {
            tracing::warn!(session = %session.label(), error = %e, "request refused");
            // A refused management request is audited like any other outcome.
            if let Request::Mgmt(m) = &req {
                audit.record(&session, m, &Err(e.clone()));
            }
            return Err(e);
        }
    }
    // Every request that names a volume is bound to it here, and refused unless the
    // session may use it (`auth.allow` / `auth.reject`): brick ops of every kind (locks,
    // leases, xattrs, statfs...), forwarded mutations, the map and its subscription.
    match &req {
        Request::Brick(r) => node.admit(&session, &r.volume)?,
        // Only a chain head forwards mutations: a forged one whose op fails would make
        // the brick record a missed change and stop serving until healed.
        // By address on a plain connection only: with TLS the node certificate says it.
        Request::Replicate(r) if session.principal.is_none() && !node.is_member(&session) => {
            return Err(RemoteError::new(
                Errno::EACCES,
                format!(
                    "volume {}: client {} is not a node of the cluster; only nodes forward replicated changes",
                    r.volume,
                    session.peer.ip().to_canonical()
                ),
            ));
        }
        Request::Replicate(_) => {}
        Request::GetMap { volume } | Request::Subscribe { volume } => {
            node.admit(&session, volume)?
        }
        // Checked below, where the outcome is audited.
        Request::Mgmt(_) => {}
        Request::Hello(_) | Request::Ping | Request::InvalidateAck { .. } => {}
    }
    match req {
        Request::Hello(_) => Err(RemoteError::new(Errno::EPROTO, "HELLO sent twice")),
        Request::Ping => Ok((Reply::Pong, Bytes::new())),
        Request::Brick(r) => {
            let op = r.op.name();
            let t = std::time::Instant::now();
            let res = chain::handle(&node, &session, r, data).await;
            metrics::observe(op, t.elapsed(), res.is_ok());
            res
        }
        Request::Replicate(r) => {
            let op = r.op.name();
            let t = std::time::Instant::now();
            let res = crate::peers::replicate(&node, r, data).await;
            metrics::observe_replica(op, t.elapsed(), res.is_ok());
            res
        }
        Request::GetMap { volume } => match node.map(&volume) {
            Some(m) => Ok((Reply::Map(Box::new((*m).clone())), Bytes::new())),
            None => Err(RemoteError::new(Errno::ENOENT, format!("volume {volume} does not exist"))),
        },
        Request::Subscribe { volume } => match node.map(&volume) {
            Some(m) => {
                node.subscribe(&volume, &session);
                Ok((Reply::Map(Box::new((*m).clone())), Bytes::new()))
            }
            None => Err(RemoteError::new(Errno::ENOENT, format!("volume {volume} does not exist"))),
        },
        Request::InvalidateAck { seq } => {
            node.leases.ack(seq);
            Ok((Reply::Unit, Bytes::new()))
        }
        Request::Mgmt(m) => {
            let res = match mgmt_allowed(&node, &session, &m) {
                Err(e) => Err(e),
                Ok(()) => match &m {
                    MgmtRequest::AuditLog { since, limit } => audit
                        .read(*since, (*limit).clamp(1, 100_000) as usize)
                        .map(MgmtReply::Audit),
                    MgmtRequest::CertRecord(_)
                    | MgmtRequest::CertList
                    | MgmtRequest::CertRevoke { .. } => {
                        crate::certs::handle(&node, &session, &m).await
                    }
                    MgmtRequest::Enroll(r) => {
                        crate::enroll::handle(&node, ca_dir.as_deref(), &session, r.clone()).await
                    }
                    MgmtRequest::CertRenew(r) => {
                        crate::renew::handle(&node, ca_dir.as_deref(), &session, r.clone()).await
                    }
                    _ => mgmt::handle(&node, m.clone()).await,
                },
            };
            audit.record(&session, &m, &res);
            // Secrets (CHAP passwords) go only to the roles that need them (admin, node,
            // gateway: `authz` lets no other read gateway documents); on a plain
            // connection, only to this host and the cluster's nodes.
            let res = if sees_secrets(session.principal.as_ref(), || node.may_manage(&session)) {
                res
            } else {
                res.map(mask_secrets)
            };
            res.map(|r| (Reply::Mgmt(r), Bytes::new()))
        }
    }
}

impl Service for Daemon {
    fn welcome(&self, session: u64) -> Welcome {
        Welcome { version: PROTOCOL_VERSION, session, node: self.node.name.clone() }
    }

    fn call(
        &self,
        session: Arc<Session>,
        req: Request,
        data: Bytes,
    ) -> BoxFuture<'static, (Response, Bytes)> {
        let node = self.node.clone();
        let audit = self.audit.clone();
        let ca_dir = self.ca_dir.clone();
        // A fenced gateway's session: refused before anything runs (fence.rs).
        if let Err(e) = self.fences.check(&session, &req) {
            tracing::debug!(session = %session.label(), error = %e, "request of a fenced gateway refused");
            return Box::pin(async move { (Err(e), Bytes::new()) });
        }
        Box::pin(async move {
            match dispatch(node, audit, ca_dir, session, req, data).await {
                Ok((r, d)) => (Ok(r), d),
                Err(e) => (Err(e), Bytes::new()),
            }
        })
    }

    fn closed(&self, session: &Arc<Session>) {
        self.fences.forget(session);
        self.node.session_closed(session.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_follow_the_role_not_the_address() {
        let p = |r| Principal::new("x", r);
        // With a certificate the address does not matter either way.
        for r in [Role::Admin, Role::Node, Role::Gateway] {
            assert!(sees_secrets(Some(&p(r)), || false), "{r}");
        }
        assert!(!sees_secrets(Some(&p(Role::Client)), || true));
        // Plain transport: by address.
        assert!(sees_secrets(None, || true));
        assert!(!sees_secrets(None, || false));
    }
}
