//! The etcd client certificate a joining node gets in its enrollment answer
//! (docs/security.md, "etcd"). etcd requires a client certificate of the **etcd CA**, a CA
//! of its own (not the cluster CA: a FUSE client's or a gateway's cluster certificate must
//! not open etcd), kept like `ca.key` on the node holding the cluster CA, in
//! `CA_DIR/etcd-ca/` (`ca.pem`, `ca-key.pem`; made by `scripts/etcd-tls.sh` or
//! `cairn-appliance etcd-tls ca`).
//!
//! The joining node makes a key and a request for CN `cairn-NAME` ([`EtcdRequest`]); the
//! member holding the etcd CA signs it ([`sign`]) for client authentication only; the
//! joining node checks the answer ([`EtcdRequest::check`]) and writes the certificate, the
//! etcd CA and its key where `--etcd-cert`, `--etcd-ca` and `--etcd-key` say, before it
//! connects to etcd with them. The key never leaves the joining node.

use anyhow::{bail, Context};
use std::path::Path;

/// Where the etcd CA lives under a CA dir.
pub const ETCD_CA_SUBDIR: &str = "etcd-ca";
/// Validity of an etcd client certificate (as `etcd_tls_client` issues them).
const DAYS: i64 = 3650;

/// The etcd user a node's certificate names (its CN).
pub fn common_name(node: &str) -> String {
    format!("cairn-{node}")
}

/// A joining node's etcd key and its certificate request.
pub struct EtcdRequest {
    key: rcgen::KeyPair,
    cn: String,
    pub csr_pem: String,
}

impl EtcdRequest {
    pub fn new(node: &str) -> anyhow::Result<EtcdRequest> {
        let key = rcgen::KeyPair::generate().context("etcd client key")?;
        let cn = common_name(node);
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn.clone());
        let csr_pem = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .with_context(|| format!("etcd certificate request of {cn}"))?;
        Ok(EtcdRequest { key, cn, csr_pem })
    }

    /// The member's answer checked: `cert` is for this key and CN, and `ca` is a
    /// certificate. (The answer comes over the enrollment connection, whose member proved
    /// itself with the pinned cluster CA.) Returns the key (PEM) to store with it.
    pub fn check(&self, cert: &str, ca: &str) -> anyhow::Result<String> {
        let der = pem_der(cert).context("etcd client certificate")?;
        let (_, x) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| anyhow::anyhow!("etcd client certificate: {e}"))?;
        if x.public_key().raw != self.key.public_key_der() {
            bail!("the etcd client certificate is not for this node's etcd key");
        }
        let cn = x.subject().iter_common_name().next().and_then(|c| c.as_str().ok());
        if cn != Some(self.cn.as_str()) {
            bail!("the etcd client certificate is for {cn:?}, not {}", self.cn);
        }
        let ca_der = pem_der(ca).context("etcd CA certificate")?;
        let (_, cax) = x509_parser::parse_x509_certificate(&ca_der)
            .map_err(|e| anyhow::anyhow!("etcd CA certificate: {e}"))?;
        if x.issuer() != cax.subject() {
            bail!(
                "the etcd client certificate is issued by {}, not by the etcd CA {}",
                x.issuer(),
                cax.subject()
            );
        }
        Ok(self.key.serialize_pem())
    }
}

fn pem_der(pem: &str) -> anyhow::Result<Vec<u8>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| anyhow::anyhow!("not a PEM certificate: {e}"))?;
    Ok(p.contents)
}

/// The etcd CA under `ca_dir` (its certificate PEM, the issuer and its key); `None` when
/// this node holds none.
fn load_ca(ca_dir: &Path) -> anyhow::Result<Option<(String, rcgen::Certificate, rcgen::KeyPair)>> {
    let dir = ca_dir.join(ETCD_CA_SUBDIR);
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca-key.pem"));
    if !key_path.exists() {
        return Ok(None);
    }
    let ca_pem = std::fs::read_to_string(&cert_path)
        .with_context(|| format!("etcd CA {}", cert_path.display()))?;
    let key_pem = std::fs::read_to_string(&key_path)
        .with_context(|| format!("etcd CA key {}", key_path.display()))?;
    let key = rcgen::KeyPair::from_pem(&key_pem)
        .with_context(|| format!("etcd CA key {}", key_path.display()))?;
    let issuer = rcgen::CertificateParams::from_ca_cert_pem(&ca_pem)
        .with_context(|| format!("etcd CA {}", cert_path.display()))?
        .self_signed(&key)
        .with_context(|| {
            format!("etcd CA key {} does not fit {}", key_path.display(), cert_path.display())
        })?;
    Ok(Some((ca_pem, issuer, key)))
}

/// A certificate for CN `cn` and the key of `csr`, signed by the etcd CA (`DAYS`).
fn issue(
    cn: String,
    csr: &rcgen::CertificateSigningRequestParams,
    (issuer, key): (&rcgen::Certificate, &rcgen::KeyPair),
    eku: Vec<rcgen::ExtendedKeyUsagePurpose>,
    sans: Vec<rcgen::SanType>,
) -> anyhow::Result<String> {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.key_usages =
        vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = eku;
    params.subject_alt_names = sans;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(DAYS);
    let mut serial = [0u8; 16];
    getrandom(&mut serial);
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    Ok(params.signed_by(&csr.public_key, issuer, key)?.pem())
}

/// The member's side: an etcd client certificate for node `node` from its request, and
/// the etcd CA's certificate; `None` when this node holds no etcd CA under `ca_dir`.
pub fn sign(ca_dir: &Path, node: &str, csr_pem: &str) -> anyhow::Result<Option<(String, String)>> {
    let Some((ca_pem, issuer, key)) = load_ca(ca_dir)? else {
        return Ok(None);
    };
    let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .context("bad etcd certificate request")?;
    let want = common_name(node);
    let cn = csr.params.distinguished_name.get(&rcgen::DnType::CommonName).and_then(|v| match v {
        rcgen::DnValue::Utf8String(s) => Some(s.clone()),
        rcgen::DnValue::PrintableString(s) => Some(s.as_str().to_string()),
        _ => None,
    });
    if cn.as_deref() != Some(want.as_str()) {
        bail!("the etcd certificate request is for {cn:?}, not {want:?}");
    }
    // Only the CN of the request is taken: no SAN, client authentication only.
    let cert = issue(
        want,
        &csr,
        (&issuer, &key),
        vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth],
        vec![],
    )
    .context("signing the etcd client certificate")?;
    Ok(Some((cert, ca_pem)))
}

/// The common name of a node's etcd server and peer certificate. Not an etcd user (a
/// request authenticated with it gets no rights when etcd auth is on).
pub fn member_common_name(node: &str) -> String {
    format!("etcd-member-{node}")
}

/// The names an etcd member's certificate holds: `host` (the node's enrollment address,
/// an IP or a DNS name), 127.0.0.1 and localhost.
fn member_sans(host: &str) -> anyhow::Result<Vec<rcgen::SanType>> {
    let mut sans = vec![];
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => sans.push(rcgen::SanType::IpAddress(ip)),
        Err(_) => sans.push(rcgen::SanType::DnsName(
            host.to_string().try_into().with_context(|| format!("bad host name {host:?}"))?,
        )),
    }
    if host != "127.0.0.1" {
        sans.push(rcgen::SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    }
    if host != "localhost" {
        sans.push(rcgen::SanType::DnsName("localhost".to_string().try_into()?));
    }
    Ok(sans)
}

/// The member's side: an etcd server and peer certificate (server and client
/// authentication, as `etcd_tls_make`'s server.pem) for node `node` at `host`, from its
/// request; `None` when this node holds no etcd CA. Only the request's key is taken: the
/// names are `host`, 127.0.0.1 and localhost, whatever the request asks.
pub fn sign_member(
    ca_dir: &Path,
    node: &str,
    host: &str,
    csr_pem: &str,
) -> anyhow::Result<Option<String>> {
    let Some((_, issuer, key)) = load_ca(ca_dir)? else {
        return Ok(None);
    };
    let csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
        .context("bad etcd member certificate request")?;
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let cert = issue(
        member_common_name(node),
        &csr,
        (&issuer, &key),
        vec![ServerAuth, ClientAuth],
        member_sans(host)?,
    )
    .with_context(|| format!("signing the etcd member certificate of {node} for {host}"))?;
    Ok(Some(cert))
}

/// A joining node's etcd member key and its certificate request (server and peer
/// certificate for its address).
pub struct MemberRequest {
    key: rcgen::KeyPair,
    pub csr_pem: String,
}

impl MemberRequest {
    pub fn new(node: &str) -> anyhow::Result<MemberRequest> {
        let key = rcgen::KeyPair::generate().context("etcd member key")?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(rcgen::DnType::CommonName, member_common_name(node));
        let csr_pem = params
            .serialize_request(&key)
            .and_then(|c| c.pem())
            .with_context(|| format!("etcd member certificate request of {node}"))?;
        Ok(MemberRequest { key, csr_pem })
    }

    /// The member's answer checked: `cert` is for this key, issued by the etcd CA `ca`,
    /// and names `host`. Returns the key (PEM) to store with it.
    pub fn check(&self, cert: &str, ca: &str, host: &str) -> anyhow::Result<String> {
        let der = pem_der(cert).context("etcd member certificate")?;
        let (_, x) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| anyhow::anyhow!("etcd member certificate: {e}"))?;
        if x.public_key().raw != self.key.public_key_der() {
            bail!("the etcd member certificate is not for this node's etcd member key");
        }
        let ca_der = pem_der(ca).context("etcd CA certificate")?;
        let (_, cax) = x509_parser::parse_x509_certificate(&ca_der)
            .map_err(|e| anyhow::anyhow!("etcd CA certificate: {e}"))?;
        if x.issuer() != cax.subject() {
            bail!("the etcd member certificate is issued by {}, not by the etcd CA", x.issuer());
        }
        use x509_parser::extensions::GeneralName;
        let names: Vec<String> = x
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|s| {
                s.value
                    .general_names
                    .iter()
                    .filter_map(|g| match g {
                        GeneralName::DNSName(d) => Some(d.to_string()),
                        GeneralName::IPAddress(b) => match b.len() {
                            4 => Some(
                                std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).ok()?).to_string(),
                            ),
                            16 => Some(
                                std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).ok()?)
                                    .to_string(),
                            ),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !names.iter().any(|n| n == host) {
            bail!("the etcd member certificate names {names:?}, not this node's address {host}");
        }
        Ok(self.key.serialize_pem())
    }
}

/// The member's side, with etcd auth on: make the joining node's etcd user (its
/// certificate's CN, with a role of its own: the cluster's keys under `prefix`, no other
/// node's liveness key; `cairn_config::ensure_etcd_node_user`), acting as etcd's `root` with the root client
/// certificate kept with the etcd CA (`CA_DIR/etcd-ca/root.pem`, made with it by
/// `etcd_tls_make`). cairnd's own etcd user may not add users. Without a root certificate
/// there, refused: the node would get a certificate etcd does not know. An etcd whose auth
/// was never set up (no role `cairn`) is left alone.
pub async fn ensure_user(
    ca_dir: &Path,
    endpoints: &[String],
    prefix: &str,
    node: &str,
) -> anyhow::Result<bool> {
    let dir = ca_dir.join(ETCD_CA_SUBDIR);
    let (cert, key) = (dir.join("root.pem"), dir.join("root-key.pem"));
    if !cert.exists() || !key.exists() {
        bail!(
            "no etcd root certificate {} (and its key) next to the etcd CA to create etcd \
             user {}",
            cert.display(),
            common_name(node)
        );
    }
    let tls = endpoints.iter().any(|e| e.starts_with("https://"));
    let root = if tls {
        cairn_config::EtcdSecurity {
            ca: Some(dir.join("ca.pem")),
            cert: Some(cert),
            key: Some(key),
        }
    } else {
        cairn_config::EtcdSecurity::default()
    };
    let user = common_name(node);
    cairn_config::ensure_etcd_node_user(endpoints, &root, &user, node, prefix)
        .await
        .with_context(|| format!("etcd user {user} (its own role, under {prefix})"))
}

fn getrandom(b: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(b)).expect("/dev/urandom");
}

/// Store what the enrollment brought: the certificate and the etcd CA (0644) and the key
/// (0600), each written atomically, the key never readable by others.
pub fn save(
    ca: &Path,
    cert: &Path,
    key: &Path,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> anyhow::Result<()> {
    save_files(key, key_pem, &[(cert, cert_pem), (ca, ca_pem)])
}

/// Store an etcd member certificate (0644) and its key (0600) as [`save`] does.
pub fn save_member(cert: &Path, key: &Path, cert_pem: &str, key_pem: &str) -> anyhow::Result<()> {
    save_files(key, key_pem, &[(cert, cert_pem)])
}

/// `key` (0600) and the `public` files, in directories made 0700 when missing.
fn save_files(key: &Path, key_pem: &str, public: &[(&Path, &str)]) -> anyhow::Result<()> {
    for p in public.iter().map(|(p, _)| *p).chain([key]) {
        if let Some(d) = p.parent() {
            if !d.exists() {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                    .with_context(|| format!("chmod 0700 {}", d.display()))?;
            }
        }
    }
    cairn_proto::tls::write_private(key, key_pem.as_bytes())
        .with_context(|| format!("writing {}", key.display()))?;
    for (p, text) in public {
        let tmp = p.with_extension("new");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, p).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_etcd_ca_no_certificate() {
        let d = tempfile::tempdir().unwrap();
        let r = EtcdRequest::new("n2").unwrap();
        assert!(sign(d.path(), "n2", &r.csr_pem).unwrap().is_none());
    }
}
