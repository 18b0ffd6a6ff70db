//! This process's certificate and key, and the roots it trusts ([`Keys`]): what a
//! [`TlsConfig`] presents and checks peers against, replaced as a whole on a reload.

use super::*;
use parking_lot::RwLock;
use rustls::pki_types::PrivateKeyDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, SignatureScheme};
use std::sync::Arc;

/// This process's certificate and key, and the roots it trusts: replaced by
/// [`TlsConfig::reload`], read at every handshake.
pub(super) struct Keys {
    pub(super) current: RwLock<Arc<rustls::sign::CertifiedKey>>,
    pub(super) roots: RwLock<Arc<RootCertStore>>,
    pub(super) client_verifier: RwLock<Arc<dyn ClientCertVerifier>>,
}

impl Keys {
    pub(super) fn new(creds: &Credentials) -> Result<Keys, TlsError> {
        Ok(Keys {
            current: RwLock::new(certified_key(creds)?),
            roots: RwLock::new(roots_of(creds)?),
            client_verifier: RwLock::new(client_verifier(roots_of(creds)?)?),
        })
    }

    /// Present `creds`' certificate and trust its CA certificate(s) from the next
    /// handshake on (all three built first: a bad file changes nothing).
    pub(super) fn reload(&self, creds: &Credentials) -> Result<(), TlsError> {
        let key = certified_key(creds)?;
        let roots = roots_of(creds)?;
        let verifier = client_verifier(roots.clone())?;
        *self.current.write() = key;
        *self.roots.write() = roots;
        *self.client_verifier.write() = verifier;
        Ok(())
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys").finish_non_exhaustive()
    }
}

impl rustls::server::ResolvesServerCert for Keys {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

impl rustls::client::ResolvesClientCert for Keys {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current.read().clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn certified_key(creds: &Credentials) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let key = provider()
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(creds.key.clone_key()))
        .map_err(|e| bad(format!("own key: {e}")))?;
    // The server sends the CA certificate(s) after its own: a joining node checks one
    // against its pinned hash ([`enroll_transport`]).
    let mut chain = vec![creds.cert.clone()];
    chain.extend(creds.cas.iter().cloned());
    let ck = rustls::sign::CertifiedKey::new(chain, key);
    ck.keys_match().map_err(|e| bad(format!("own certificate and key: {e}")))?;
    Ok(Arc::new(ck))
}

fn roots_of(creds: &Credentials) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in &creds.cas {
        roots.add(ca.clone()).map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

/// A client without a certificate completes the handshake but may only enroll
/// (`rpc::Session::unauthenticated`): a joining node has none yet.
fn client_verifier(roots: Arc<RootCertStore>) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(roots, provider())
        .allow_unauthenticated()
        .build()
        .map_err(bad)
}
