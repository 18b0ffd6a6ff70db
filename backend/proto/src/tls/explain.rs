//! Handshake errors in words an operator acts on.

/// How [`explain`] says the peer refused this process's certificate as revoked.
pub const REFUSED_AS_REVOKED: &str = "the peer refused our certificate: revoked";

/// Whether an error (a dial, or a connection that ended) says the peer refused this
/// process's own certificate as revoked.
pub fn refused_as_revoked(message: &str) -> bool {
    message.contains(REFUSED_AS_REVOKED)
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
            format!("{REFUSED_AS_REVOKED} ('cairn client certificate list' shows it)")
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
