//! How connections are made ([`Transport`]) and the rustls configurations of a TLS one,
//! whose keys and trusted roots are replaced on a reload.

use super::keys::Keys;
use super::verify::{Checked, ClusterClient, ClusterNode};
use super::*;
use crate::principal::Principal;
use parking_lot::Mutex;
use rustls::{ClientConfig, ServerConfig};
use std::path::{Path, PathBuf};
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
    /// The credentials file this configuration was loaded from, for a client-only process
    /// ([`Transport::tls_file`]): checked before each new connection ([`TlsConfig::refresh`]).
    source: Option<Source>,
}

/// A credentials file and the version of it in use (modification time, size, inode).
struct Source {
    path: PathBuf,
    loaded: Mutex<Stamp>,
}

type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
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

    /// When loaded from a file ([`Transport::tls_file`]) and the file changed since: use
    /// the new credentials from the next handshake on (docs/security.md, "Rotation":
    /// a client's file re-issued, or re-issued under a new CA). Connections already open
    /// keep theirs. A file that does not load (being written, wrong holder) leaves the
    /// current credentials in use and is said once per version. The holder's name and
    /// role must stay; its volume limits may change (the servers enforce them).
    pub fn refresh(&self) {
        let Some(src) = &self.source else { return };
        let now = stamp(&src.path);
        let mut loaded = src.loaded.lock();
        if now.is_none() || now == *loaded {
            return;
        }
        let res = Credentials::load(&src.path).and_then(|c| {
            if c.principal.name != self.me.name || c.principal.role != self.me.role {
                return Err(bad(format!(
                    "{}: new credentials are for {}, not {}",
                    src.path.display(),
                    c.principal,
                    self.me
                )));
            }
            self.keys.reload(&c).map(|()| c)
        });
        *loaded = now;
        match res {
            Ok(c) => tracing::info!(
                path = %src.path.display(),
                serial = %c.serial(),
                "reloaded the credentials file; new connections use it"
            ),
            Err(e) => tracing::warn!(
                path = %src.path.display(),
                error = %e,
                "not reloading the credentials file; new connections keep the current credentials"
            ),
        }
    }

    /// The serial number of the certificate this process presents now.
    pub fn serial(&self) -> String {
        self.keys.current.read().cert.first().and_then(serial_of).unwrap_or_default()
    }
}

impl Transport {
    /// TLS with the credentials in `path`, reloaded when the file changes (checked before
    /// each new connection: [`TlsConfig::refresh`]): how client-only processes (the
    /// CLI, mount.cairn, libcairn and the gateways on it) load theirs.
    pub fn tls_file(path: &Path) -> Result<Transport, TlsError> {
        let loaded = stamp(path);
        Transport::tls_loaded(&Credentials::load(path)?, path, loaded)
    }

    /// [`Transport::tls_file`] with `creds` loaded from `path` when it was at `loaded`.
    fn tls_loaded(creds: &Credentials, path: &Path, loaded: Stamp) -> Result<Transport, TlsError> {
        Transport::build(
            creds,
            Some(Source { path: path.to_path_buf(), loaded: Mutex::new(loaded) }),
        )
    }

    /// The credentials in `path` as a TLS transport reloaded when the file changes, with
    /// a load failure told apart (`Err(Ok(_))`) from credentials TLS cannot use
    /// (`Err(Err(_))`).
    pub(super) fn tls_file_checked(path: &Path) -> Result<Transport, Result<TlsError, TlsError>> {
        let loaded = stamp(path);
        let creds = Credentials::load(path).map_err(Ok)?;
        Transport::tls_loaded(&creds, path, loaded).map_err(Err)
    }

    pub fn tls(creds: &Credentials) -> Result<Transport, TlsError> {
        Transport::build(creds, None)
    }

    fn build(creds: &Credentials, source: Option<Source>) -> Result<Transport, TlsError> {
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
            source,
        })))
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_) | Transport::Enroll(_))
    }
}
