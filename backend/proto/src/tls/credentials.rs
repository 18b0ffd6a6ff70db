//! A holder's credentials (certificate, cluster CA certificate(s), private key) and what a
//! certificate states (its principal, its serial number).

use super::*;
use crate::principal::{Principal, PrincipalError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::RootCertStore;
use std::path::Path;

/// A holder's certificate, the cluster CA's certificate(s) and the holder's key. During a
/// CA rotation the file holds the old and the new CA certificate (a trust bundle): both
/// are trusted.
pub struct Credentials {
    pub principal: Principal,
    pub(super) cert: CertificateDer<'static>,
    pub(super) cas: Vec<CertificateDer<'static>>,
    pub(super) key: PrivatePkcs8KeyDer<'static>,
    pem: String,
}

impl Credentials {
    pub fn from_pem(pem: &str) -> Result<Credentials, TlsError> {
        let mut certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| bad(format!("bad certificate: {e}")))?;
        if certs.len() < 2 || certs.len() > 4 {
            return Err(bad(format!(
                "expected 2 certificates (the holder's, then the cluster CA's; 3 during a CA \
                 rotation), found {}",
                certs.len()
            )));
        }
        let cert = certs.remove(0);
        let cas = certs;
        let key = match PrivateKeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| bad(format!("no private key: {e}")))?
        {
            PrivateKeyDer::Pkcs8(k) => k,
            _ => return Err(bad("the private key is not PKCS#8")),
        };
        let principal = principal_of(&cert).map_err(bad)?;
        Ok(Credentials { principal, cert, cas, key, pem: pem.to_string() })
    }

    pub fn load(path: &Path) -> Result<Credentials, TlsError> {
        let pem = read(path)?;
        Credentials::from_pem(&pem).map_err(|e| bad(format!("{}: {e}", path.display())))
    }

    /// The same certificate and key trusting the CA certificate(s) in `cas_pem` instead:
    /// the trust bundle of a CA rotation (old and new), or the new CA alone at its end.
    pub fn with_cas(&self, cas_pem: &str) -> Result<Credentials, TlsError> {
        let blocks = pem_blocks(&self.pem);
        let holder = blocks.iter().find(|b| b.contains("CERTIFICATE-----"));
        let key = blocks.iter().find(|b| b.contains("PRIVATE KEY-----"));
        let (Some(holder), Some(key)) = (holder, key) else {
            return Err(bad("credentials without a certificate or a key"));
        };
        let cas: String = pem_blocks(cas_pem)
            .into_iter()
            .filter(|b| b.contains("BEGIN CERTIFICATE-----"))
            .collect();
        Credentials::from_pem(&format!("{holder}{cas}{key}"))
    }

    /// Whether the certificate was issued by the CA whose certificate is `ca_pem` (and is
    /// valid now).
    pub fn signed_by(&self, ca_pem: &str) -> bool {
        let Ok(ca) = CertificateDer::from_pem_slice(ca_pem.as_bytes()) else { return false };
        let mut roots = RootCertStore::empty();
        if roots.add(ca).is_err() {
            return false;
        }
        chains_to(&self.cert, &roots, &[], UnixTime::now()).is_ok()
    }

    /// The CA certificates it trusts, PEM.
    pub fn cas_pem(&self) -> String {
        pem_blocks(&self.pem)
            .into_iter()
            .filter(|b| b.contains("BEGIN CERTIFICATE-----"))
            .skip(1)
            .collect()
    }

    /// The file form (certificate, CA certificate, key).
    pub fn to_pem(&self) -> &str {
        &self.pem
    }

    /// Write to `path`, readable by its owner only (0600).
    pub fn save(&self, path: &Path) -> Result<(), TlsError> {
        write_private(path, self.pem.as_bytes())
    }

    /// The certificate's serial number (lower-case hex), as the revocation set holds it.
    pub fn serial(&self) -> String {
        serial_of(&self.cert).unwrap_or_default()
    }

    /// When the certificate stops being valid (seconds since the epoch).
    pub fn not_after(&self) -> i64 {
        x509_parser::parse_x509_certificate(&self.cert)
            .map(|(_, c)| c.validity().not_after.timestamp())
            .unwrap_or(0)
    }
}

/// The `-----BEGIN ...-----` ... `-----END ...-----` blocks of a PEM text, each with its
/// final newline.
pub fn pem_blocks(pem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in pem.lines() {
        if line.starts_with("-----BEGIN ") {
            cur = Some(String::new());
        }
        if let Some(c) = cur.as_mut() {
            c.push_str(line);
            c.push('\n');
        }
        if line.starts_with("-----END ") {
            out.extend(cur.take());
        }
    }
    out
}

/// Write a secret file created 0600 (replacing any).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let io = |source| TlsError::Io { path: path.display().to_string(), source };
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The identity a certificate states: its subject CN and its `cairn:` SAN URI.
pub fn principal_of(cert: &CertificateDer<'_>) -> Result<Principal, PrincipalError> {
    let (_, x) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| PrincipalError::Unparsable(e.to_string()))?;
    let name = x
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .ok_or(PrincipalError::NoCommonName)?
        .to_string();
    let san = x
        .subject_alternative_name()
        .map_err(|e| PrincipalError::BadSan { name: name.clone(), reason: e.to_string() })?
        .ok_or_else(|| PrincipalError::NoCairnRole { name: name.clone() })?;
    for g in &san.value.general_names {
        if let x509_parser::extensions::GeneralName::URI(u) = g {
            if u.starts_with(crate::principal::URI_SCHEME) {
                return Principal::from_uri(&name, u).map_err(|e| PrincipalError::InCertificate {
                    name: name.clone(),
                    source: Box::new(e),
                });
            }
        }
    }
    Err(PrincipalError::NoCairnRole { name })
}

/// The serial number of a certificate in lower-case hex (no separators, leading zero
/// bytes kept as encoded): how `cairn client certificate list|revoke` name certificates.
pub fn serial_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(x.tbs_certificate.raw_serial().iter().map(|b| format!("{b:02x}")).collect())
}

/// The serial number ([`serial_of`]) and end (seconds since the epoch) of the first
/// certificate of a PEM text.
pub fn serial_and_end(cert_pem: &str) -> Option<(String, i64)> {
    let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
    let (_, x) = x509_parser::parse_x509_certificate(&cert).ok()?;
    Some((serial_of(&cert)?, x.validity().not_after.timestamp()))
}

impl Credentials {
    /// The pin of the cluster CA these credentials trust.
    pub fn ca_cert_hash(&self) -> String {
        self.cas.first().and_then(|ca| ca_cert_hash_der(ca).ok()).unwrap_or_default()
    }
}
