//! The pin of the cluster CA (`sha256:` of its public key): what a joining node is given.

use super::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// Prefix of a pinned CA hash.
pub const CA_HASH_PREFIX: &str = "sha256:";

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// The pin of a CA certificate (DER): `sha256:` and the SHA-256 of its
/// SubjectPublicKeyInfo in hex, as `kubeadm join --discovery-token-ca-cert-hash`.
pub fn ca_cert_hash_der(der: &[u8]) -> Result<String, TlsError> {
    use sha2::Digest;
    let (_, x) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| bad(format!("CA certificate: {e}")))?;
    Ok(format!("{CA_HASH_PREFIX}{}", hex(&sha2::Sha256::digest(x.public_key().raw))))
}

/// [`ca_cert_hash_der`] of the first certificate of a PEM text.
pub fn ca_cert_hash(pem: &str) -> Result<String, TlsError> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes())
        .map_err(|e| bad(format!("CA certificate: {e}")))?;
    ca_cert_hash_der(&der)
}

/// Checks the form of a CA pin (`sha256:` and 64 hex digits); returns it in lower case.
pub fn parse_ca_cert_hash(s: &str) -> Result<String, TlsError> {
    let s = s.trim();
    let hexpart = s.strip_prefix(CA_HASH_PREFIX).ok_or_else(|| {
        bad(format!(
            "CA hash {s:?} does not start with {CA_HASH_PREFIX} (expected sha256:<64 hex digits>, \
             as 'cairn peer token create' prints)"
        ))
    })?;
    if hexpart.len() != 64 || !hexpart.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad(format!(
            "CA hash {s:?}: expected sha256: and 64 hex digits, found {} characters",
            hexpart.len()
        )));
    }
    Ok(format!("{CA_HASH_PREFIX}{}", hexpart.to_ascii_lowercase()))
}
