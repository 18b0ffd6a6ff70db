//! How `cairnd` proves itself to etcd (TLS).

use super::*;

/// How cairnd proves itself to etcd: the CA that signed etcd's certificate, and this
/// node's client certificate and key (PEM files). All `None`: plain HTTP (a test or an
/// isolated etcd on loopback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl EtcdSecurity {
    fn read(what: &str, p: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
        std::fs::read(p).map_err(|e| {
            ConfigError::Invalid(format!("etcd {what} {}: cannot read: {e}", p.display()))
        })
    }

    pub(super) fn tls_options(&self) -> Result<Option<etcd_client::TlsOptions>, ConfigError> {
        if self.ca.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        let mut tls = etcd_client::TlsOptions::new();
        if let Some(ca) = &self.ca {
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(Self::read("CA", ca)?));
        }
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => {
                tls = tls.identity(etcd_client::Identity::from_pem(
                    Self::read("client certificate", c)?,
                    Self::read("client key", k)?,
                ));
            }
            (None, None) => {}
            _ => {
                return Err(ConfigError::Invalid(
                    "etcd client certificate and key go together (--etcd-cert and --etcd-key)"
                        .into(),
                ))
            }
        }
        Ok(Some(tls))
    }
}

/// The role every cairnd's etcd user holds: read-write under the cluster's prefix
/// (`scripts/etcd-tls.sh etcd_tls_auth`).
pub const ETCD_NODE_ROLE: &str = "cairn";

/// Make etcd user `name` (no password: a client certificate with CN `name` is how it logs
/// in) holding role [`ETCD_NODE_ROLE`], connecting to `endpoints` as etcd's `root` with
/// `root` (the etcd CA and a client certificate with CN root). Idempotent. Returns `false`
/// without changing anything when etcd has no role `cairn`, i.e. its auth was never set up
/// (a plain test etcd): there, every certificate of the etcd CA gets in anyway.
pub async fn ensure_etcd_node_user(
    endpoints: &[String],
    root: &EtcdSecurity,
    name: &str,
) -> Result<bool, ConfigError> {
    let joined = endpoints.join(",");
    let mut opts = ConnectOptions::new()
        .with_connect_timeout(DEFAULT_CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    if let Some(tls) = root.tls_options()? {
        opts = opts.with_tls(tls);
    }
    let mut client = Client::connect(endpoints, Some(opts))
        .await
        .map_err(|source| ConfigError::Unreachable { endpoints: joined.clone(), source })?;
    let request = |op: String| move |source| ConfigError::Request { op, source };
    let not_found = |e: &etcd_client::Error| e.to_string().contains("not found");
    match client.role_get(ETCD_NODE_ROLE).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => return Ok(false),
        Err(e) => return Err(request(format!("etcd role get {ETCD_NODE_ROLE} at {joined}"))(e)),
    }
    let has_role = match client.user_get(name).await {
        Ok(u) => u.roles().iter().any(|r| r == ETCD_NODE_ROLE),
        Err(e) if not_found(&e) => {
            client
                .user_add(name, "", Some(etcd_client::UserAddOptions::new().with_no_pwd()))
                .await
                .map_err(request(format!("etcd user add {name} at {joined}")))?;
            false
        }
        Err(e) => return Err(request(format!("etcd user get {name} at {joined}"))(e)),
    };
    if !has_role {
        client.user_grant_role(name, ETCD_NODE_ROLE).await.map_err(request(format!(
            "etcd user grant-role {name} {ETCD_NODE_ROLE} at {joined}"
        )))?;
    }
    Ok(true)
}
