//! Who is at the other end of a connection: the identity its TLS certificate states.
//!
//! Every certificate the cluster CA issues names its holder (the subject's common name) and
//! carries one subject-alternative-name URI in the `cairn:` scheme with the holder's role
//! and, for clients, its limits:
//!
//! ```text
//! cairn:role=admin
//! cairn:role=node
//! cairn:role=gateway
//! cairn:role=client                    any volume, read-write
//! cairn:role=client;volumes=a,b;ro     volumes a and b only, read-only
//! ```
//!
//! The parsed form is [`Principal`]; `cairnd` attaches it to each session and checks every
//! request against it (`cairnd/src/authz.rs`); the audit log records it. Its fields are
//! stable.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a certificate's identity (its subject CN and `cairn:` SAN URI) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("SAN URI {uri:?} is not in the {URI_SCHEME} scheme")]
    NotCairnScheme { uri: String },
    #[error("unknown role {role:?} in {uri:?}")]
    UnknownRole { role: String, uri: String },
    #[error("unknown field {field:?} in {uri:?}")]
    UnknownField { field: String, uri: String },
    #[error("no role in {uri:?}")]
    NoRole { uri: String },
    #[error("unparsable certificate: {0}")]
    Unparsable(String),
    #[error("certificate has no subject common name")]
    NoCommonName,
    #[error("certificate of {name}: bad subject alternative names: {reason}")]
    BadSan { name: String, reason: String },
    #[error("certificate of {name} has no cairn: role")]
    NoCairnRole { name: String },
    #[error("certificate of {name}: {source}")]
    InCertificate { name: String, source: Box<PrincipalError> },
}

/// The role a certificate grants (docs/security.md, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Manages the cluster (the `cairn` CLI): every request.
    Admin,
    /// A `cairnd` of the cluster: chain forwards, heal, management between nodes.
    Node,
    /// An NFS/SMB/iSCSI gateway: data of any volume, and reading gateway documents with
    /// their secrets.
    Gateway,
    /// A FUSE mount or a libcairn application: data, possibly limited to some volumes and
    /// read-only.
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Node => "node",
            Role::Gateway => "gateway",
            Role::Client => "client",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "admin" => Role::Admin,
            "node" => Role::Node,
            "gateway" => Role::Gateway,
            "client" => Role::Client,
            _ => return None,
        })
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identity of a peer, from its certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// The certificate's subject common name (a node name, `admin`, a client name).
    pub name: String,
    pub role: Role,
    /// The only volumes this principal may use (clients); `None`: any.
    pub volumes: Option<Vec<String>>,
    /// May read but not change volume data (clients).
    pub read_only: bool,
}

/// The URI scheme of the SAN that carries the role.
pub const URI_SCHEME: &str = "cairn:";

impl Principal {
    pub fn new(name: &str, role: Role) -> Principal {
        Principal { name: name.to_string(), role, volumes: None, read_only: false }
    }

    /// The SAN URI stating this principal's role and limits (`cairn:role=...`).
    pub fn to_uri(&self) -> String {
        let mut s = format!("{URI_SCHEME}role={}", self.role);
        if let Some(v) = &self.volumes {
            s.push_str(";volumes=");
            s.push_str(&v.join(","));
        }
        if self.read_only {
            s.push_str(";ro");
        }
        s
    }

    /// Parse a `cairn:` SAN URI of the certificate of `name`.
    pub fn from_uri(name: &str, uri: &str) -> Result<Principal, PrincipalError> {
        let rest = uri
            .strip_prefix(URI_SCHEME)
            .ok_or_else(|| PrincipalError::NotCairnScheme { uri: uri.to_string() })?;
        let mut role = None;
        let mut volumes = None;
        let mut read_only = false;
        for part in rest.split(';').filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("role", r)) => {
                    role = Some(Role::parse(r).ok_or_else(|| PrincipalError::UnknownRole {
                        role: r.to_string(),
                        uri: uri.to_string(),
                    })?)
                }
                Some(("volumes", v)) => {
                    volumes =
                        Some(v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
                }
                None if part == "ro" => read_only = true,
                _ => {
                    return Err(PrincipalError::UnknownField {
                        field: part.to_string(),
                        uri: uri.to_string(),
                    })
                }
            }
        }
        let role = role.ok_or_else(|| PrincipalError::NoRole { uri: uri.to_string() })?;
        Ok(Principal { name: name.to_string(), role, volumes, read_only })
    }

    /// Whether this principal's certificate lets it use `volume` at all.
    pub fn may_use(&self, volume: &str) -> bool {
        match &self.volumes {
            None => true,
            Some(v) => v.iter().any(|x| x == volume),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_round_trips() {
        let cases = [
            Principal::new("admin", Role::Admin),
            Principal::new("node1", Role::Node),
            Principal::new("gw", Role::Gateway),
            Principal { name: "c".into(), role: Role::Client, volumes: None, read_only: true },
            Principal {
                name: "c".into(),
                role: Role::Client,
                volumes: Some(vec!["a".into(), "b".into()]),
                read_only: false,
            },
        ];
        for p in cases {
            let back = Principal::from_uri(&p.name, &p.to_uri()).unwrap();
            assert_eq!(back, p, "{}", p.to_uri());
        }
        assert_eq!(
            Principal::from_uri("x", "cairn:role=client;volumes=a,b;ro").unwrap().to_uri(),
            "cairn:role=client;volumes=a,b;ro"
        );
    }

    #[test]
    fn refusals_name_the_uri_and_what_is_wrong() {
        let msg = |u: &str| Principal::from_uri("x", u).unwrap_err().to_string();
        assert_eq!(msg("http://x"), r#"SAN URI "http://x" is not in the cairn: scheme"#);
        assert_eq!(msg("cairn:role=king"), r#"unknown role "king" in "cairn:role=king""#);
        assert_eq!(msg("cairn:role=client;rw"), r#"unknown field "rw" in "cairn:role=client;rw""#);
        assert_eq!(msg("cairn:volumes=a"), r#"no role in "cairn:volumes=a""#);
    }

    #[test]
    fn bad_uris_are_refused() {
        for u in
            ["http://x", "cairn:", "cairn:role=king", "cairn:role=client;rw", "cairn:volumes=a"]
        {
            assert!(Principal::from_uri("x", u).is_err(), "{u}");
        }
    }

    #[test]
    fn volume_limits() {
        let mut p = Principal::new("c", Role::Client);
        assert!(p.may_use("a"));
        p.volumes = Some(vec!["a".into()]);
        assert!(p.may_use("a"));
        assert!(!p.may_use("b"));
    }
}
