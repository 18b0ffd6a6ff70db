//! The revocation set both ends of every handshake check.

use super::*;
use parking_lot::RwLock;
use rustls::pki_types::CertificateDer;
use std::collections::HashSet;

/// Serial numbers of revoked certificates (docs/security.md, "Revocation"): both ends of
/// every handshake refuse a certificate whose serial is in it. `cairnd` keeps it equal
/// to the cluster's revocation records in the config store; changes apply to the next
/// handshake (live sessions are closed by `cairnd`).
#[derive(Debug, Default)]
pub struct Revoked(RwLock<HashSet<String>>);

impl Revoked {
    pub fn contains(&self, serial: &str) -> bool {
        self.0.read().contains(serial)
    }

    /// Replace the set; true if it changed.
    pub fn replace(&self, serials: HashSet<String>) -> bool {
        let mut cur = self.0.write();
        if *cur == serials {
            return false;
        }
        *cur = serials;
        true
    }

    pub fn insert(&self, serial: &str) {
        self.0.write().insert(serial.to_string());
    }

    pub fn len(&self) -> usize {
        self.0.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.read().is_empty()
    }

    pub(super) fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if self.is_empty() {
            return Ok(());
        }
        match serial_of(cert) {
            Some(s) if !self.contains(&s) => Ok(()),
            _ => Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)),
        }
    }
}
