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

/// The shared role of cairnd's etcd user `cairn`: read-write under the cluster's prefix
/// (`scripts/etcd-tls.sh etcd_tls_auth`); its existence says etcd's auth is set up. A
/// node's own user `cairn-NODE` holds a role of its own ([`ensure_etcd_node_user`]).
pub const ETCD_NODE_ROLE: &str = "cairn";

/// The write ranges of node `node`'s own etcd role under `prefix` (no trailing `/`): the
/// whole prefix except the other nodes' liveness keys (`PREFIX/live/OTHER`), its own
/// `PREFIX/live/NODE` only. etcd's permissions only allow, so the liveness keys are left
/// out of the ranges (`scripts/etcd-tls.sh etcd_tls_own_node_user` grants the same).
pub fn node_write_ranges(prefix: &str, node: &str) -> Vec<(String, Option<String>)> {
    let mut end = prefix.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    vec![
        (prefix.to_string(), Some(format!("{prefix}/live/"))),
        (format!("{prefix}/live0"), Some(String::from_utf8_lossy(&end).into_owned())),
        (format!("{prefix}/live/{node}"), None),
    ]
}

/// Make etcd user `user` (no password: a client certificate with CN `user` is how it logs
/// in; `cairn-NODE`) holding a role of its own named like it: read everything under
/// `prefix`, write there except other nodes' liveness keys ([`node_write_ranges`]).
/// Connects to `endpoints` as etcd's `root` with `root` (the etcd CA and a client
/// certificate with CN root). A user that held the shared role [`ETCD_NODE_ROLE`] loses
/// it. Idempotent. Returns `false` without changing anything when etcd has no role
/// `cairn`, i.e. its auth was never set up (a plain test etcd): there, every certificate
/// of the etcd CA gets in anyway.
pub async fn ensure_etcd_node_user(
    endpoints: &[String],
    root: &EtcdSecurity,
    user: &str,
    node: &str,
    prefix: &str,
) -> Result<bool, ConfigError> {
    use etcd_client::Permission;
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
    match client.role_get(user).await {
        Ok(_) => {}
        Err(e) if not_found(&e) => {
            client
                .role_add(user)
                .await
                .map_err(request(format!("etcd role add {user} at {joined}")))?;
        }
        Err(e) => return Err(request(format!("etcd role get {user} at {joined}"))(e)),
    }
    let mut perms = vec![Permission::read(prefix).with_prefix()];
    for (key, end) in node_write_ranges(prefix, node) {
        let p = Permission::read_write(key);
        perms.push(match end {
            Some(end) => p.with_range_end(end),
            None => p,
        });
    }
    for p in perms {
        client.role_grant_permission(user, p).await.map_err(request(format!(
            "etcd role grant-permission {user} (under {prefix}) at {joined}"
        )))?;
    }
    let roles = match client.user_get(user).await {
        Ok(u) => u.roles().to_vec(),
        Err(e) if not_found(&e) => {
            client
                .user_add(user, "", Some(etcd_client::UserAddOptions::new().with_no_pwd()))
                .await
                .map_err(request(format!("etcd user add {user} at {joined}")))?;
            Vec::new()
        }
        Err(e) => return Err(request(format!("etcd user get {user} at {joined}"))(e)),
    };
    if !roles.iter().any(|r| r == user) {
        client
            .user_grant_role(user, user)
            .await
            .map_err(request(format!("etcd user grant-role {user} {user} at {joined}")))?;
    }
    if roles.iter().any(|r| r == ETCD_NODE_ROLE) {
        client.user_revoke_role(user, ETCD_NODE_ROLE).await.map_err(request(format!(
            "etcd user revoke-role {user} {ETCD_NODE_ROLE} at {joined}"
        )))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::node_write_ranges;

    #[test]
    fn a_node_writes_everything_but_the_other_liveness_keys() {
        let r = node_write_ranges("/cairn", "n1");
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            r,
            vec![
                ("/cairn".to_string(), some("/cairn/live/")),
                ("/cairn/live0".to_string(), some("/cairo")),
                ("/cairn/live/n1".to_string(), None),
            ]
        );
        let writable = |k: &str| {
            r.iter().any(|(a, b)| match b {
                Some(b) => k >= a.as_str() && k < b.as_str(),
                None => k == a,
            })
        };
        for k in ["/cairn/volumes/v", "/cairn/peers/n2", "/cairn/stale/v/1", "/cairn/live/n1"] {
            assert!(writable(k), "{k}");
        }
        for k in ["/cairn/live/n2", "/cairn/live/n10", "/cairn/live/", "/elsewhere", "/cairo"] {
            assert!(!writable(k), "{k}");
        }
    }
}
