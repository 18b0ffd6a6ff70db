//! How connections are made ([`Transport`]) and the rustls configurations of a TLS one,
//! whose keys and trusted roots are replaced on a reload.

use super::verify::{NodeVerifier, RevocationVerifier};
use super::*;
use crate::principal::Principal;
use parking_lot::RwLock;
use rustls::pki_types::PrivateKeyDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SignatureScheme};
use std::sync::Arc;

/// How connections are made: TLS with this process's credentials, or plain TCP.
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(Arc<TlsConfig>),
    /// A joining node's connection to a member, before it has a certificate: no client
    /// certificate, and the server is trusted by the pinned hash of its cluster CA
    /// ([`enroll_transport`]). Client side only.
    Enroll(Arc<ClientConfig>),
}

pub struct TlsConfig {
    pub client: Arc<ClientConfig>,
    pub server: Arc<ServerConfig>,
    /// This process's own identity.
    pub me: Principal,
    /// Certificates both ends refuse (shared by `client` and `server`).
    pub revoked: Arc<Revoked>,
    keys: Arc<Keys>,
    /// The pin of the cluster CA ([`ca_cert_hash_der`]): what a joining node is given
    /// (of the first CA the credentials trust, as loaded at start).
    pub ca_cert_hash: String,
}

impl TlsConfig {
    /// Use `creds` from the next handshake on, as server and as client: its certificate
    /// and key, and its CA certificate(s) as the trusted roots (docs/security.md,
    /// "Rotation"). Connections already open keep theirs. The holder must stay the same
    /// (name and role).
    pub fn reload(&self, creds: &Credentials) -> Result<(), TlsError> {
        if creds.principal != self.me {
            return Err(bad(format!(
                "new credentials are for {}, not {}",
                creds.principal, self.me
            )));
        }
        let key = certified_key(creds)?;
        let roots = roots_of(creds)?;
        let verifier = client_verifier(roots.clone())?;
        *self.keys.current.write() = key;
        *self.keys.roots.write() = roots;
        *self.keys.client_verifier.write() = verifier;
        Ok(())
    }

    /// The serial number of the certificate this process presents now.
    pub fn serial(&self) -> String {
        self.keys.current.read().cert.first().and_then(serial_of).unwrap_or_default()
    }
}

/// This process's certificate and key, and the roots it trusts: replaced by
/// [`TlsConfig::reload`], read at every handshake.
pub(super) struct Keys {
    pub(super) current: RwLock<Arc<rustls::sign::CertifiedKey>>,
    pub(super) roots: RwLock<Arc<RootCertStore>>,
    pub(super) client_verifier: RwLock<Arc<dyn ClientCertVerifier>>,
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

impl Transport {
    pub fn tls(creds: &Credentials) -> Result<Transport, TlsError> {
        let revoked = Arc::new(Revoked::default());
        let keys = Arc::new(Keys {
            current: RwLock::new(certified_key(creds)?),
            roots: RwLock::new(roots_of(creds)?),
            client_verifier: RwLock::new(client_verifier(roots_of(creds)?)?),
        });
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NodeVerifier {
                keys: keys.clone(),
                revoked: revoked.clone(),
            }))
            .with_client_cert_resolver(keys.clone());
        let verifier =
            Arc::new(RevocationVerifier { keys: keys.clone(), revoked: revoked.clone() });
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(keys.clone());
        // No session resumption: a resumed session skips the certificate checks, so a
        // certificate revoked (or expired) since would still get in. Connections are
        // long-lived; a full handshake per connection costs little.
        client.resumption = rustls::client::Resumption::disabled();
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        Ok(Transport::Tls(Arc::new(TlsConfig {
            client: Arc::new(client),
            server: Arc::new(server),
            me: creds.principal.clone(),
            revoked,
            keys,
            ca_cert_hash: creds.ca_cert_hash(),
        })))
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_) | Transport::Enroll(_))
    }
}
