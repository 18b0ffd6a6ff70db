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
