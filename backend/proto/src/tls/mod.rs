//! TLS 1.3 with mutual certificates on every Cairn connection (docs/security.md).
//!
//! The cluster CA ([`Ca`]) issues every certificate: nodes, the admin, gateways and clients.
//! A certificate names its holder (subject CN) and states its role in a `cairn:` SAN URI
//! ([`crate::principal`]). Both ends of a connection present one and check the other's
//! against the cluster CA: a server (always a `cairnd`) must hold a `node` certificate (no
//! host-name check: members are recognised by certificate, never by address); a client
//! any role, which the server then authorizes each request against.
//!
//! A credentials file (PEM) holds, in this order: the holder's certificate, the cluster
//! CA's certificate, and the holder's private key (PKCS#8). Processes find theirs through
//! [`default_transport`]: an explicit path set by the program (`--credentials`, the
//! libcairn option), `CAIRN_CREDENTIALS`, or the default paths ([`DEFAULT_PATHS`]).
//! `CAIRN_TRANSPORT=plain` (or `transport = plain`) turns TLS off for isolated networks.
//!
//! The module by idea: [`ca`] the cluster CA and what it issues; [`credentials`] a
//! holder's certificate, CA certificate(s) and key, and what a certificate states;
//! [`revoked`] the revocation set; [`keys`] the certificate, key and roots a process
//! presents and trusts (replaced on a reload); [`transport`] the rustls configurations
//! it connects and serves with; [`verify`] the certificate checks of both ends (one
//! verifier, three policies); [`pin`] the CA pin a joining node is given; [`enroll`] a
//! joining node's side; [`explain`] handshake errors in words; [`default`] which
//! transport a process uses.

mod ca;
mod credentials;
mod default;
mod enroll;
mod explain;
mod keys;
mod pin;
mod revoked;
mod transport;
mod verify;

pub use ca::{issue_for_csr, issue_node_cert, Ca};
pub use credentials::{
    pem_blocks, principal_of, serial_and_end, serial_of, write_private, Credentials,
};
pub use default::{
    default_transport, find_credentials, from_env, set_credentials_path, set_default,
};
pub use enroll::{csr_subject, enroll_transport, NodeRequest};
pub use explain::{explain, refused_as_revoked, tls_reason, REFUSED_AS_REVOKED};
pub use pin::{ca_cert_hash, ca_cert_hash_der, parse_ca_cert_hash, CA_HASH_PREFIX};
pub use revoked::Revoked;
pub use transport::{TlsConfig, Transport};

use std::path::Path;
use std::sync::Arc;

/// Where processes look for their credentials when neither an option nor
/// `CAIRN_CREDENTIALS` names a file: a client/gateway credential, then the admin one the
/// first node writes, then the first node's own copy in cairnd's default state dir.
pub const DEFAULT_PATHS: &[&str] =
    &["/etc/cairn/credentials.pem", "/etc/cairn/admin.pem", "/var/lib/cairn/admin.pem"];
/// Environment variable naming a credentials file.
pub const ENV_CREDENTIALS: &str = "CAIRN_CREDENTIALS";
/// Environment variable choosing the transport: `tls` (default) or `plain`.
pub const ENV_TRANSPORT: &str = "CAIRN_TRANSPORT";
/// Validity of the cluster CA.
pub const CA_DAYS: u32 = 3650;
/// Default validity of issued certificates.
pub const CERT_DAYS: u32 = 365;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Bad(String),
}

fn bad(what: impl std::fmt::Display) -> TlsError {
    TlsError::Bad(what.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `end_entity` chains to one of `roots` (through `intermediates`) and is valid `now`.
fn chains_to(
    end_entity: &rustls::pki_types::CertificateDer<'_>,
    roots: &rustls::RootCertStore,
    intermediates: &[rustls::pki_types::CertificateDer<'_>],
    now: rustls::pki_types::UnixTime,
) -> Result<(), rustls::Error> {
    let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &cert,
        roots,
        intermediates,
        now,
        provider().signature_verification_algorithms.all,
    )
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path)
        .map_err(|source| TlsError::Io { path: path.display().to_string(), source })
}

/// A cluster CA for the tests of one process, and credentials it issues.
#[cfg(any(test, feature = "testing"))]
pub mod test_ca;

#[cfg(test)]
mod tests;
