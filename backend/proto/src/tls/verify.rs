//! The certificate checks of both ends: one verifier, three policies.
//!
//! [`Checked`] is what rustls calls. It checks the handshake signatures the same way for
//! every policy (the ring provider's algorithms) and asks its policy whether the peer's
//! certificate is acceptable. A policy says only that:
//! - [`ClusterNode`]: a server as members and clients check it: it chains to a trusted
//!   cluster CA and is valid now, is not revoked, and is a node's (no host-name check:
//!   nodes are recognised by certificate, not by address);
//! - [`ClusterClient`]: a client as a server checks it: webpki's client check against the
//!   trusted CA(s) (chain, validity; a client without a certificate is let through, to
//!   enroll only: `rpc::Session::unauthenticated`), then the revocation set;
//! - [`PinnedNode`]: a server as a joining node checks it: its chain holds a CA
//!   certificate of the pinned hash, that CA signed it, and it is a node's.

use super::keys::Keys;
use super::*;
use crate::principal::Role;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Whether a peer's certificate (`end_entity`, with the chain it sent) is acceptable
/// `now`. A policy of the server's certificate is a [`ServerPolicy`], of the client's a
/// [`ClientPolicy`].
pub(super) trait Policy: std::fmt::Debug + Send + Sync {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error>;
}

/// A policy for the certificate a server presents.
pub(super) trait ServerPolicy: Policy {}

/// A policy for the certificate a client presents.
pub(super) trait ClientPolicy: Policy {
    /// Whether a client must present one (else the handshake completes without).
    fn mandatory(&self) -> bool;
}

/// The verifier of a policy.
#[derive(Debug)]
pub(super) struct Checked<P>(pub(super) P);

/// The server's certificate is a node's.
fn is_node(end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
    let p = principal_of(end_entity).map_err(|e| rustls::Error::General(e.to_string()))?;
    if p.role != Role::Node {
        return Err(rustls::Error::General(format!(
            "the server's certificate is for {p}, not a node of the cluster"
        )));
    }
    Ok(())
}

/// The handshake signature checks, the same for every policy and in both verifier traits:
/// the ring provider's algorithms.
macro_rules! signatures {
    () => {
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
    };
}

impl<P: ServerPolicy> ServerCertVerifier for Checked<P> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.check(end_entity, intermediates, now)?;
        Ok(ServerCertVerified::assertion())
    }

    signatures!();
}

impl<P: ClientPolicy> ClientCertVerifier for Checked<P> {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.mandatory()
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
        self.0.check(end_entity, intermediates, now)?;
        Ok(ClientCertVerified::assertion())
    }

    signatures!();
}

/// A server of this cluster (see the module's text).
#[derive(Debug)]
pub(super) struct ClusterNode {
    pub(super) keys: Arc<Keys>,
    pub(super) revoked: Arc<Revoked>,
}

impl Policy for ClusterNode {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        let roots = self.keys.roots.read().clone();
        chains_to(end_entity, &roots, intermediates, now)?;
        self.revoked.check(end_entity)?;
        is_node(end_entity)
    }
}

impl ServerPolicy for ClusterNode {}

/// A client of this cluster (see the module's text).
#[derive(Debug)]
pub(super) struct ClusterClient {
    pub(super) keys: Arc<Keys>,
    pub(super) revoked: Arc<Revoked>,
}

impl ClusterClient {
    /// webpki's client check against the roots trusted now.
    fn webpki(&self) -> Arc<dyn ClientCertVerifier> {
        self.keys.client_verifier.read().clone()
    }
}

impl Policy for ClusterClient {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
        self.webpki().verify_client_cert(end_entity, intermediates, now)?;
        self.revoked.check(end_entity)
    }
}

impl ClientPolicy for ClusterClient {
    fn mandatory(&self) -> bool {
        self.webpki().client_auth_mandatory()
    }
}

/// A server whose cluster CA has the pinned hash (see the module's text).
#[derive(Debug)]
pub(super) struct PinnedNode {
    pub(super) pin: String,
}

impl Policy for PinnedNode {
    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), rustls::Error> {
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
                        "wrong CA hash: the server's cluster CA is {}, not the pinned {} \
                         (another cluster, or a mistyped --ca-cert-hash)",
                        seen.join(" or "),
                        self.pin
                    )
                })
            })?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.clone().into_owned())
            .map_err(|e| rustls::Error::General(format!("cluster CA certificate: {e}")))?;
        chains_to(end_entity, &roots, &[], now)?;
        is_node(end_entity)
    }
}

impl ServerPolicy for PinnedNode {}
