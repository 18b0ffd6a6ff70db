//! A joining node's side: its enrollment transport (no certificate; the server trusted
//! by the pinned CA hash), its key and certificate request, and what a request asks for.

use super::verify::{Checked, PinnedNode};
use super::*;
use crate::principal::{Principal, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{ClientConfig, RootCertStore};
use std::sync::Arc;

/// The transport of a joining node's enrollment: no client certificate; the server must
/// present a node certificate signed by a CA whose hash is `pin` (sent in its chain).
pub fn enroll_transport(pin: &str) -> Result<Transport, TlsError> {
    let pin = parse_ca_cert_hash(pin)?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(bad)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Checked(PinnedNode { pin })))
        .with_no_client_auth();
    Ok(Transport::Enroll(Arc::new(client)))
}

/// A joining node's key and its certificate request (CN = its name, SAN
/// `cairn:role=node`). The key stays here; the request goes to a member.
pub struct NodeRequest {
    name: String,
    principal: Principal,
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
        Ok(NodeRequest { name: p.name.clone(), principal: p.clone(), key, csr_pem })
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
        chains_to(&cert, &roots, &[], UnixTime::now())
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

impl NodeRequest {
    /// The credentials from a renewal's answer: `cert_pem` must be for this request's key
    /// and principal and signed by one of the CA certificates in `cas_pem`, which the
    /// credentials then trust.
    pub fn renewed(&self, cert_pem: &str, cas_pem: &str) -> Result<Credentials, TlsError> {
        let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| bad(format!("renewed certificate: {e}")))?;
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(cas_pem.as_bytes()) {
            let ca = ca.map_err(|e| bad(format!("CA certificate: {e}")))?;
            roots.add(ca).map_err(|e| bad(format!("cluster CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad("the answer carries no CA certificate"));
        }
        chains_to(&cert, &roots, &[], UnixTime::now()).map_err(|e| {
            bad(format!("renewed certificate not signed by the cluster's CA certificates: {e}"))
        })?;
        let (_, x) = x509_parser::parse_x509_certificate(&cert)
            .map_err(|e| bad(format!("renewed certificate: {e}")))?;
        if x.public_key().raw != self.key.public_key_der() {
            return Err(bad("the renewed certificate is not for this request's key"));
        }
        let c = Credentials::from_pem(&format!(
            "{}\n{}\n{}",
            cert_pem.trim(),
            cas_pem.trim(),
            self.key.serialize_pem()
        ))?;
        if c.principal != self.principal {
            return Err(bad(format!(
                "the renewed certificate is for {}, not {}",
                c.principal, self.principal
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
