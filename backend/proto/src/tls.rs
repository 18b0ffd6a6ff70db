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

use crate::principal::{Principal, Role};
use crate::{Errno, RemoteError};
use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
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
    let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| bad(format!("certificate request of node {name}: {e}")))?;
    let now = time::OffsetDateTime::now_utc();
    ca.sign(
        &Principal::new(name, Role::Node),
        &csr.public_key,
        now - time::Duration::hours(1),
        now + time::Duration::days(CERT_DAYS as i64),
    )
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path)
        .map_err(|source| TlsError::Io { path: path.display().to_string(), source })
}

/// A holder's certificate, the cluster CA's certificate(s) and the holder's key. During a
/// CA rotation the file holds the old and the new CA certificate (a trust bundle): both
/// are trusted.
pub struct Credentials {
    pub principal: Principal,
    cert: CertificateDer<'static>,
    cas: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
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
        let Ok(cert) = rustls::server::ParsedCertificate::try_from(&self.cert) else {
            return false;
        };
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &roots,
            &[],
            UnixTime::now(),
            provider().signature_verification_algorithms.all,
        )
        .is_ok()
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
pub fn principal_of(cert: &CertificateDer<'_>) -> Result<Principal, String> {
    let (_, x) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| format!("unparsable certificate: {e}"))?;
    let name = x
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .ok_or("certificate has no subject common name")?
        .to_string();
    let san = x
        .subject_alternative_name()
        .map_err(|e| format!("certificate of {name}: bad subject alternative names: {e}"))?
        .ok_or_else(|| format!("certificate of {name} has no cairn: role"))?;
    for g in &san.value.general_names {
        if let x509_parser::extensions::GeneralName::URI(u) = g {
            if u.starts_with(crate::principal::URI_SCHEME) {
                return Principal::from_uri(&name, u)
                    .map_err(|e| format!("certificate of {name}: {e}"));
            }
        }
    }
    Err(format!("certificate of {name} has no cairn: role"))
}

/// The serial number of a certificate in lower-case hex (no separators, leading zero
/// bytes kept as encoded): how `cairn client certificate list|revoke` name certificates.
pub fn serial_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(x.tbs_certificate.raw_serial().iter().map(|b| format!("{b:02x}")).collect())
}

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

    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if self.is_empty() {
            return Ok(());
        }
        match serial_of(cert) {
            Some(s) if !self.contains(&s) => Ok(()),
            _ => Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked)),
        }
    }
}

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
struct Keys {
    current: RwLock<Arc<rustls::sign::CertifiedKey>>,
    roots: RwLock<Arc<RootCertStore>>,
    client_verifier: RwLock<Arc<dyn ClientCertVerifier>>,
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

/// Checks a server's certificate: issued by the cluster CA, valid now, and of role node.
/// No host-name check: nodes are recognised by certificate, not by address.
#[derive(Debug)]
struct NodeVerifier {
    keys: Arc<Keys>,
    revoked: Arc<Revoked>,
}

/// The client certificate check of servers: webpki's (chain to the cluster CA, validity),
/// then the revocation set.
#[derive(Debug)]
struct RevocationVerifier {
    keys: Arc<Keys>,
    revoked: Arc<Revoked>,
}

impl RevocationVerifier {
    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        self.keys.client_verifier.read().clone()
    }
}

impl ClientCertVerifier for RevocationVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner().client_auth_mandatory()
    }

    // No hints: the roots change on a CA rotation, and Cairn clients hold one certificate.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self.inner().verify_client_cert(end_entity, intermediates, now)?;
        self.revoked.check(end_entity)?;
        Ok(ok)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        let roots = self.keys.roots.read().clone();
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &roots,
            intermediates,
            now,
            provider().signature_verification_algorithms.all,
        )?;
        self.revoked.check(end_entity)?;
        let p = principal_of(end_entity).map_err(rustls::Error::General)?;
        if p.role != Role::Node {
            return Err(rustls::Error::General(format!(
                "the server's certificate is for {p}, not a node of the cluster"
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider().signature_verification_algorithms.supported_schemes()
    }
}

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
            "CA hash {s:?} does not start with {CA_HASH_PREFIX} (expected sha256:<64 hex digits>,              as 'cairn peer token create' prints)"
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

impl Credentials {
    /// The pin of the cluster CA these credentials trust.
    pub fn ca_cert_hash(&self) -> String {
        self.cas.first().and_then(|ca| ca_cert_hash_der(ca).ok()).unwrap_or_default()
    }
}

/// The transport of a joining node's enrollment: no client certificate; the server must
/// present a node certificate signed by a CA whose hash is `pin` (sent in its chain).
pub fn enroll_transport(pin: &str) -> Result<Transport, TlsError> {
    let pin = parse_ca_cert_hash(pin)?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(bad)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedVerifier { pin }))
        .with_no_client_auth();
    Ok(Transport::Enroll(Arc::new(client)))
}

/// Trusts a server whose chain holds a CA certificate of the pinned hash, that CA signed
/// the server's certificate, and that certificate is a node's.
#[derive(Debug)]
struct PinnedVerifier {
    pin: String,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| ca_cert_hash_der(c).is_ok_and(|h| h == self.pin))
            .ok_or_else(|| {
                let seen: Vec<String> =
                    intermediates.iter().filter_map(|c| ca_cert_hash_der(c).ok()).collect();
                rustls::Error::General(if seen.is_empty() {
                    "the server sent no cluster CA certificate to check the CA hash against".into()
                } else {
                    format!(
                        "wrong CA hash: the server's cluster CA is {}, not the pinned {}                          (another cluster, or a mistyped --ca-cert-hash)",
                        seen.join(" or "),
                        self.pin
                    )
                })
            })?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.clone().into_owned())
            .map_err(|e| rustls::Error::General(format!("cluster CA certificate: {e}")))?;
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &roots,
            &[],
            now,
            provider().signature_verification_algorithms.all,
        )?;
        let p = principal_of(end_entity).map_err(rustls::Error::General)?;
        if p.role != Role::Node {
            return Err(rustls::Error::General(format!(
                "the server's certificate is for {p}, not a node of the cluster"
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider().signature_verification_algorithms.supported_schemes()
    }
}

/// A joining node's key and its certificate request (CN = its name, SAN
/// `cairn:role=node`). The key stays here; the request goes to a member.
pub struct NodeRequest {
    name: String,
    key: rcgen::KeyPair,
    /// The request, PEM.
    pub csr_pem: String,
}

impl NodeRequest {
    pub fn new(name: &str) -> Result<NodeRequest, TlsError> {
        NodeRequest::for_principal(&Principal::new(name, Role::Node))
    }

    /// A request for any principal (tests: a request asking for another role).
    pub fn for_principal(p: &Principal) -> Result<NodeRequest, TlsError> {
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, p.name.clone());
        let uri = rcgen::Ia5String::try_from(p.to_uri()).map_err(bad)?;
        params.subject_alt_names = vec![rcgen::SanType::URI(uri)];
        let csr_pem = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .map_err(|e| bad(format!("certificate request of {}: {e}", p.name)))?;
        Ok(NodeRequest { name: p.name.clone(), key, csr_pem })
    }

    /// The credentials from a member's answer: `ca_pem` must have hash `pin`, and
    /// `cert_pem` must be a node certificate for this name and key, signed by that CA.
    pub fn credentials(
        &self,
        cert_pem: &str,
        ca_pem: &str,
        pin: &str,
    ) -> Result<Credentials, TlsError> {
        let pin = parse_ca_cert_hash(pin)?;
        let got = ca_cert_hash(ca_pem)?;
        if got != pin {
            return Err(bad(format!(
                "the member sent a cluster CA of hash {got}, not the pinned {pin}"
            )));
        }
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| bad(format!("node certificate: {e}")))?;
        let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes())
            .map_err(|e| bad(format!("CA certificate: {e}")))?;
        let mut roots = RootCertStore::empty();
        roots.add(ca).map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
        let parsed = rustls::server::ParsedCertificate::try_from(&cert).map_err(bad)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &roots,
            &[],
            UnixTime::now(),
            provider().signature_verification_algorithms.all,
        )
        .map_err(|e| bad(format!("node certificate not signed by the pinned CA: {e}")))?;
        let (_, x) = x509_parser::parse_x509_certificate(&cert)
            .map_err(|e| bad(format!("node certificate: {e}")))?;
        if x.public_key().raw != self.key.public_key_der() {
            return Err(bad("the node certificate is not for this node's key"));
        }
        let c = Credentials::from_pem(&format!(
            "{}\n{}\n{}",
            cert_pem.trim(),
            ca_pem.trim(),
            self.key.serialize_pem()
        ))?;
        if c.principal != Principal::new(&self.name, Role::Node) {
            return Err(bad(format!(
                "the certificate is for {}, not node {}",
                c.principal, self.name
            )));
        }
        Ok(c)
    }
}

/// What a certificate request asks for: its subject CN and, when it states one, the
/// principal of its `cairn:` SAN URI. Fails for a request whose signature is bad.
pub fn csr_subject(csr_pem: &str) -> Result<(String, Option<Principal>), TlsError> {
    let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .map_err(|e| bad(format!("bad certificate request: {e}")))?;
    let name = csr
        .params
        .distinguished_name
        .get(&rcgen::DnType::CommonName)
        .and_then(|v| match v {
            rcgen::DnValue::Utf8String(s) => Some(s.clone()),
            rcgen::DnValue::PrintableString(s) => Some(s.as_str().to_string()),
            rcgen::DnValue::Ia5String(s) => Some(s.as_str().to_string()),
            _ => None,
        })
        .ok_or_else(|| bad("certificate request has no subject common name"))?;
    let mut asked = None;
    for san in &csr.params.subject_alt_names {
        if let rcgen::SanType::URI(u) = san {
            let u = u.as_str();
            if u.starts_with(crate::principal::URI_SCHEME) {
                asked = Some(
                    Principal::from_uri(&name, u)
                        .map_err(|e| bad(format!("certificate request of {name}: {e}")))?,
                );
            }
        }
    }
    Ok((name, asked))
}

/// [`explain`] for an error that TLS raised (an alert, a bad record), `None` for others.
pub fn tls_reason(e: &std::io::Error) -> Option<String> {
    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).map(|_| explain(e))
}

/// A handshake error in words an operator acts on.
pub fn explain(e: &std::io::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                format!("{e} (the peer closed the connection: does it speak TLS, is it running with transport = plain?)")
            }
            _ => e.to_string(),
        };
    };
    match inner {
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            "certificate not signed by the cluster CA".into()
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "certificate expired".into()
        }
        E::InvalidCertificate(C::Revoked) => "certificate revoked".into(),
        E::AlertReceived(A::CertificateRevoked) => {
            "the peer refused our certificate: revoked ('cairn client certificate list' shows it)"
                .into()
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "certificate not valid yet".into()
        }
        E::AlertReceived(A::UnknownCA | A::BadCertificate) => {
            "the peer refused our certificate: not signed by its cluster CA".into()
        }
        E::AlertReceived(A::CertificateExpired) => {
            "the peer refused our certificate: expired".into()
        }
        E::AlertReceived(A::CertificateRequired) => "the peer requires a client certificate".into(),
        E::InvalidMessage(_) => {
            "the peer does not speak TLS (is it running with transport = plain?)".into()
        }
        other => other.to_string(),
    }
}

static DEFAULT: RwLock<Option<Transport>> = RwLock::new(None);
static PATH: RwLock<Option<PathBuf>> = RwLock::new(None);

/// Use the credentials in `path` (loaded when the first connection is made, so a missing
/// file is reported with that connection's error).
pub fn set_credentials_path(path: &Path) {
    *PATH.write() = Some(path.to_path_buf());
    *DEFAULT.write() = None;
}

/// Set the transport of this process's connections (clients and servers).
pub fn set_default(t: Transport) {
    *DEFAULT.write() = Some(t);
}

/// The transport set with [`set_default`], or else the one the environment chooses:
/// `CAIRN_TRANSPORT=plain`, or TLS with the credentials [`find_credentials`] finds.
pub fn default_transport() -> Result<Transport, RemoteError> {
    if let Some(t) = DEFAULT.read().clone() {
        return Ok(t);
    }
    let path = PATH.read().clone();
    let t = from_env(path.as_deref())?;
    *DEFAULT.write() = Some(t.clone());
    Ok(t)
}

/// The transport for explicit options: `plain`, or TLS with `credentials` (or the
/// environment's / a default path's).
pub fn from_env(credentials: Option<&Path>) -> Result<Transport, RemoteError> {
    if std::env::var(ENV_TRANSPORT).is_ok_and(|v| v == "plain") {
        return Ok(Transport::Plain);
    }
    let path = find_credentials(credentials)?;
    let creds = Credentials::load(&path)
        .map_err(|e| RemoteError::new(Errno::EACCES, format!("cannot load credentials: {e}")))?;
    Transport::tls(&creds)
        .map_err(|e| RemoteError::new(Errno::EINVAL, format!("{}: {e}", path.display())))
}

/// The credentials file to use: `explicit`, `$CAIRN_CREDENTIALS`, or the first of
/// [`DEFAULT_PATHS`] that exists.
pub fn find_credentials(explicit: Option<&Path>) -> Result<PathBuf, RemoteError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os(ENV_CREDENTIALS).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    for p in DEFAULT_PATHS {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    Err(RemoteError::new(
        Errno::EACCES,
        format!(
            "no credentials: pass --credentials FILE, set {ENV_CREDENTIALS}, or install one at {} \
             (issue one with 'cairn client certificate issue NAME' on an admin host)",
            DEFAULT_PATHS[0]
        ),
    ))
}

/// A cluster CA for the tests of one process, and credentials it issues.
#[cfg(any(test, feature = "testing"))]
pub mod test_ca {
    use super::*;
    use std::sync::OnceLock;

    pub fn ca() -> &'static Ca {
        static CA: OnceLock<Ca> = OnceLock::new();
        CA.get_or_init(|| Ca::create("test").expect("test CA"))
    }

    pub fn credentials(p: &Principal) -> Credentials {
        ca().issue(p, 1).expect("test credentials")
    }

    pub fn transport(p: &Principal) -> Transport {
        Transport::tls(&credentials(p)).expect("test transport")
    }

    /// Make TLS with a node certificate this process's default transport (both ends of
    /// the tests' connections).
    pub fn use_for_process() {
        static DONE: OnceLock<()> = OnceLock::new();
        DONE.get_or_init(|| set_default(transport(&Principal::new("test-node", Role::Node))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_credentials_round_trip_with_their_principal() {
        let ca = Ca::create("t").unwrap();
        let p = Principal {
            name: "c1".into(),
            role: Role::Client,
            volumes: Some(vec!["a".into(), "b".into()]),
            read_only: true,
        };
        let c = ca.issue(&p, 3).unwrap();
        assert_eq!(c.principal, p);
        let back = Credentials::from_pem(c.to_pem()).unwrap();
        assert_eq!(back.principal, p);
        Transport::tls(&back).unwrap();
        // The CA survives a round trip through its files' text.
        let ca2 = Ca::from_pem(&ca.cert_pem(), &ca.key_pem()).unwrap();
        ca2.issue(&p, 1).unwrap();
        let other = Ca::create("u").unwrap();
        assert!(Ca::from_pem(&ca.cert_pem(), &other.key_pem()).is_err());
    }

    #[test]
    fn ca_hash_format() {
        let ca = Ca::create("t").unwrap();
        let h = ca_cert_hash(&ca.cert_pem()).unwrap();
        assert!(h.starts_with("sha256:") && h.len() == 7 + 64, "{h}");
        assert_eq!(parse_ca_cert_hash(&h.to_uppercase().replace("SHA256:", "sha256:")).unwrap(), h);
        let c = ca.issue(&Principal::new("n", Role::Node), 1).unwrap();
        assert_eq!(c.ca_cert_hash(), h);
        for (bad, why) in [
            ("abc", "does not start with sha256:"),
            ("sha256:12", "found 2 characters"),
            (&format!("sha1:{}", &h[7..]), "does not start with sha256:"),
            (&format!("sha256:{}", "g".repeat(64)), "64 hex digits"),
        ] {
            let e = parse_ca_cert_hash(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_node_request_becomes_credentials_only_from_the_pinned_ca() {
        let ca = Ca::create("t").unwrap();
        let pin = ca_cert_hash(&ca.cert_pem()).unwrap();
        let r = NodeRequest::new("n2").unwrap();
        let (name, asked) = csr_subject(&r.csr_pem).unwrap();
        assert_eq!(name, "n2");
        assert_eq!(asked, Some(Principal::new("n2", Role::Node)));
        let cert = issue_node_cert(&ca, "n2", &r.csr_pem).unwrap();
        let c = r.credentials(&cert, &ca.cert_pem(), &pin).unwrap();
        assert_eq!(c.principal, Principal::new("n2", Role::Node));
        Transport::tls(&c).unwrap();
        // Another CA (the pin says which one is right).
        let other = Ca::create("u").unwrap();
        let e = r.credentials(&cert, &other.cert_pem(), &pin).err().unwrap().to_string();
        assert!(e.contains("not the pinned"), "{e}");
        let cert_other = issue_node_cert(&other, "n2", &r.csr_pem).unwrap();
        let e = r.credentials(&cert_other, &ca.cert_pem(), &pin).err().unwrap().to_string();
        assert!(e.contains("not signed by the pinned CA"), "{e}");
        // A certificate for another key, or another name.
        let r2 = NodeRequest::new("n2").unwrap();
        let e = r2.credentials(&cert, &ca.cert_pem(), &pin).err().unwrap().to_string();
        assert!(e.contains("not for this node's key"), "{e}");
        let cert3 = issue_node_cert(&ca, "n3", &r.csr_pem).unwrap();
        let e = r.credentials(&cert3, &ca.cert_pem(), &pin).err().unwrap().to_string();
        assert!(e.contains("not node n2"), "{e}");
        // A request asking for the admin role says so.
        let adm = NodeRequest::for_principal(&Principal::new("x", Role::Admin)).unwrap();
        assert_eq!(csr_subject(&adm.csr_pem).unwrap().1.unwrap().role, Role::Admin);
        assert!(csr_subject(
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
        )
        .is_err());
    }

    #[test]
    fn node_certificates_from_a_request() {
        let ca = Ca::create("t").unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let csr = rcgen::CertificateParams::default().serialize_request(&key).unwrap();
        let pem = issue_node_cert(&ca, "n2", &csr.pem().unwrap()).unwrap();
        let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(principal_of(&cert).unwrap(), Principal::new("n2", Role::Node));
    }
}
