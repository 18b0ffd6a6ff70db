//! The cluster certificate authority ([`Ca`]): created once, loaded from its files, and
//! issuing certificates (with a fresh key, or for a joining node's request).

use super::*;
use crate::principal::{Principal, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::Path;

/// The cluster certificate authority: its certificate and private key.
pub struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    /// A new CA for cluster `cluster` (valid [`CA_DAYS`]).
    pub fn create(cluster: &str) -> Result<Ca, TlsError> {
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("cairn CA {cluster}"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(CA_DAYS as i64);
        let cert = params.self_signed(&key).map_err(bad)?;
        Ok(Ca { cert, key })
    }

    /// The CA from its certificate and key (PEM).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, TlsError> {
        let key =
            rcgen::KeyPair::from_pem(key_pem).map_err(|e| bad(format!("cluster CA key: {e}")))?;
        let params = rcgen::CertificateParams::from_ca_cert_pem(cert_pem)
            .map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
        // The stored certificate must carry this key.
        let stored = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
        let (_, x) = x509_parser::parse_x509_certificate(&stored)
            .map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
        if x.public_key().raw != key.public_key_der() {
            return Err(bad("cluster CA key does not match its certificate"));
        }
        // Re-signed in memory only to serve as the issuer (same name, key and key id):
        // certificates it signs verify against the stored certificate.
        let cert = params.self_signed(&key).map_err(bad)?;
        Ok(Ca { cert, key })
    }

    /// Load the CA from `dir/ca.pem` and `dir/ca.key`.
    pub fn load(dir: &Path) -> Result<Ca, TlsError> {
        let cert = read(&dir.join("ca.pem"))?;
        let key = read(&dir.join("ca.key"))?;
        Ca::from_pem(&cert, &key)
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A new key and a certificate for `p`, valid `days` from now.
    pub fn issue(&self, p: &Principal, days: u32) -> Result<Credentials, TlsError> {
        let now = time::OffsetDateTime::now_utc();
        self.issue_between(
            p,
            now - time::Duration::hours(1),
            now + time::Duration::days(days as i64),
        )
    }

    /// [`Ca::issue`] with an explicit validity (tests: expired certificates).
    pub fn issue_between(
        &self,
        p: &Principal,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> Result<Credentials, TlsError> {
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let cert = self.sign(p, &key, not_before, not_after)?;
        Credentials::from_pem(&format!("{}{}{}", cert, self.cert.pem(), key.serialize_pem()))
    }

    fn sign(
        &self,
        p: &Principal,
        public_key: &impl rcgen::PublicKeyData,
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> Result<String, TlsError> {
        if p.name.is_empty() || p.name.contains(['\n', '\0']) {
            return Err(bad(format!("bad certificate name {:?}", p.name)));
        }
        if let Some(v) = &p.volumes {
            if v.iter().any(|v| v.is_empty() || v.contains([',', ';', '=']) || !v.is_ascii()) {
                return Err(bad(format!("bad volume list {v:?}")));
            }
        }
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, p.name.clone());
        let uri = rcgen::Ia5String::try_from(p.to_uri()).map_err(bad)?;
        params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = not_before;
        params.not_after = not_after;
        let mut serial = [0u8; 16];
        rand_bytes(&mut serial);
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        Ok(params.signed_by(public_key, &self.cert, &self.key).map_err(bad)?.pem())
    }
}

fn rand_bytes(b: &mut [u8]) {
    rustls::crypto::ring::default_provider().secure_random.fill(b).expect("system random source");
}

/// A node certificate for `name` (role node) for the key of a certificate signing request
/// (PEM): how a joining node gets its certificate without its key leaving it.
pub fn issue_node_cert(ca: &Ca, name: &str, csr_pem: &str) -> Result<String, TlsError> {
    issue_for_csr(ca, &Principal::new(name, Role::Node), csr_pem)
}

/// A certificate for `p` (its role and limits, whatever the request names) for the key of
/// a certificate signing request (PEM), valid [`CERT_DAYS`]: a renewal.
pub fn issue_for_csr(ca: &Ca, p: &Principal, csr_pem: &str) -> Result<String, TlsError> {
    let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| bad(format!("certificate request of {}: {e}", p.name)))?;
    let now = time::OffsetDateTime::now_utc();
    ca.sign(
        p,
        &csr.public_key,
        now - time::Duration::hours(1),
        now + time::Duration::days(CERT_DAYS as i64),
    )
}
