//! How connections are made ([`Transport`]) and the rustls configurations of a TLS one,
//! whose keys and trusted roots are replaced on a reload.

use super::keys::Keys;
use super::verify::{Checked, ClusterClient, ClusterNode};
use super::*;
use crate::principal::Principal;
use rustls::{ClientConfig, ServerConfig};
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
        self.keys.reload(creds)
    }

    /// The serial number of the certificate this process presents now.
    pub fn serial(&self) -> String {
        self.keys.current.read().cert.first().and_then(serial_of).unwrap_or_default()
    }
}

impl Transport {
    pub fn tls(creds: &Credentials) -> Result<Transport, TlsError> {
        let revoked = Arc::new(Revoked::default());
        let keys = Arc::new(Keys::new(creds)?);
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Checked(ClusterNode {
                keys: keys.clone(),
                revoked: revoked.clone(),
            })))
            .with_client_cert_resolver(keys.clone());
        let verifier =
            Arc::new(Checked(ClusterClient { keys: keys.clone(), revoked: revoked.clone() }));
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
