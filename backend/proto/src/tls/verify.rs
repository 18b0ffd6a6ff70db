//! The certificate checks: a server's (cluster CA, node role), a client's (cluster CA,
//! revocation), and a joining node's check of a server by the pinned CA hash.

use super::transport::Keys;
use super::*;
use crate::principal::Role;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Checks a server's certificate: issued by the cluster CA, valid now, and of role node.
/// No host-name check: nodes are recognised by certificate, not by address.
#[derive(Debug)]
pub(super) struct NodeVerifier {
    pub(super) keys: Arc<Keys>,
    pub(super) revoked: Arc<Revoked>,
}

/// The client certificate check of servers: webpki's (chain to the cluster CA, validity),
/// then the revocation set.
#[derive(Debug)]
pub(super) struct RevocationVerifier {
    pub(super) keys: Arc<Keys>,
    pub(super) revoked: Arc<Revoked>,
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

/// Trusts a server whose chain holds a CA certificate of the pinned hash, that CA signed
/// the server's certificate, and that certificate is a node's.
#[derive(Debug)]
pub(super) struct PinnedVerifier {
    pub(super) pin: String,
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
