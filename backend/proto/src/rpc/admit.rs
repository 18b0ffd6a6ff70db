//! Who may say what: the HELLO kinds a certificate allows, and the one request a
//! connection without a certificate may make (enrollment).

use crate::msg::{PeerKind, Request};
use crate::principal::Principal;
use crate::{Errno, RemoteError};

/// Whether a peer with certificate `p` may say HELLO as `kind`: only nodes speak as
/// `Daemon` (plain connections carry no identity and are not checked; a TLS client
/// without a certificate is no node).
pub(super) fn kind_allowed(kind: &PeerKind, p: Option<&Principal>, unauthenticated: bool) -> bool {
    match (kind, p) {
        (PeerKind::Daemon, Some(p)) => p.role == crate::principal::Role::Node,
        (PeerKind::Daemon, None) => !unauthenticated,
        _ => true,
    }
}

/// Whether a connection without a certificate may make request `r`: enrollment only.
pub(super) fn allowed_unauthenticated(r: &Request) -> bool {
    matches!(r, Request::Mgmt(crate::mgmt::MgmtRequest::Enroll(_)))
}

/// The refusal of any other request on such a connection.
pub(super) fn unauthenticated_refusal(r: &Request) -> RemoteError {
    let what = match r {
        Request::Mgmt(m) => format!("{m:?}"),
        other => format!("{other:?}"),
    };
    let what = what.split([' ', '(', '{']).next().unwrap_or_default().to_string();
    RemoteError::new(
        Errno::EACCES,
        format!(
            "permission denied: {what} needs a certificate of the cluster CA; this connection \
             presented none, and before authentication a node accepts only enrollment (a join \
             token and a certificate request: cairnd --join)"
        ),
    )
}
