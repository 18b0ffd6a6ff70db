//! `HOST[:PORT]` addresses, parsed and printed in one place for every part of Cairn (the
//! CLI's `--host` and peers, libcairn's server list, `mount.cairn`'s source and `servers=`,
//! the gateways' iSCSI portals).
//!
//! Accepted: `host`, `host:port`, `[v6]`, `[v6]:port`; a missing port is the caller's
//! default. An IPv6 literal must be in brackets (`::1:5` could mean `[::1]:5` or
//! `[::1:5]`). Printed as `host:port`, or `[v6]:port` for a host with a colon, so what is
//! printed parses back to the same value.

use std::fmt;
use std::str::FromStr;

/// A host (name or IP literal, without brackets) and a port (1-65535).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    host: String,
    port: u16,
}

/// Why an address was refused; its `Display` names the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address '{text}': {why}")]
pub struct AddrError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl HostPort {
    /// `host` and `port` as they are (see [`parse`](Self::parse) for the checks).
    pub fn new(host: impl Into<String>, port: u16) -> HostPort {
        HostPort { host: host.into(), port }
    }

    /// Parse `HOST[:PORT]` or `[IPv6][:PORT]`, with `default_port` when no port is given.
    /// Refused: an empty text or host, whitespace, `/`, a port that is not 1-65535, an
    /// unclosed or misplaced bracket, and an IPv6 literal without brackets.
    pub fn parse(text: &str, default_port: u16) -> Result<HostPort, AddrError> {
        let bad = |why: &str| AddrError { text: text.to_string(), why: why.to_string() };
        if text.is_empty() {
            return Err(bad("empty address, expected HOST[:PORT]"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/') {
            return Err(bad("expected HOST[:PORT] (no whitespace or '/')"));
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let Some((host, after)) = rest.split_once(']') else {
                return Err(bad("missing ']' after the IPv6 address"));
            };
            if host.contains(['[', ']']) {
                return Err(bad("expected [IPv6][:PORT]"));
            }
            match after {
                "" => (host, None),
                a => match a.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => return Err(bad("expected [IPv6]:PORT")),
                },
            }
        } else {
            if text.contains(['[', ']']) {
                return Err(bad("a bracket is only allowed around an IPv6 address"));
            }
            match text.matches(':').count() {
                0 => (text, None),
                1 => text.split_once(':').map(|(h, p)| (h, Some(p))).expect("one colon"),
                _ => return Err(bad("an IPv6 address must be in brackets, e.g. [::1]:7420")),
            }
        };
        if host.is_empty() {
            return Err(bad("empty host"));
        }
        let port = match port {
            None => default_port,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n != 0 && !p.starts_with('+') => n,
                _ => return Err(bad(&format!("port '{p}' is not a number 1-65535"))),
            },
        };
        Ok(HostPort { host: host.to_string(), port })
    }

    /// The host: a name or an IP literal (IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as an IP address, if it is one.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        self.host.parse().ok()
    }
}

/// `host:port`, or `[v6]:port` when the host has a colon.
impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// [`HostPort::parse`] with `cairnd`'s default port ([`crate::DEFAULT_PORT`]).
impl FromStr for HostPort {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<HostPort, AddrError> {
        HostPort::parse(s, crate::DEFAULT_PORT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Result<String, AddrError> {
        s.parse::<HostPort>().map(|h| h.to_string())
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(p("node1").unwrap(), "node1:7420");
        assert_eq!(p("node1:9000").unwrap(), "node1:9000");
        assert_eq!(p("10.0.0.1").unwrap(), "10.0.0.1:7420");
        assert_eq!(p("[::1]").unwrap(), "[::1]:7420");
        assert_eq!(p("[::1]:99").unwrap(), "[::1]:99");
        assert_eq!(p("[fe80::2]:65535").unwrap(), "[fe80::2]:65535");
        let h = HostPort::parse("[::1]", 3260).unwrap();
        assert_eq!((h.host(), h.port()), ("::1", 3260));
        assert_eq!(h.ip(), Some("::1".parse().unwrap()));
        assert_eq!(HostPort::new("a", 1).ip(), None);
    }

    #[test]
    fn refused_with_the_text_and_why() {
        for (bad, why) in [
            ("", "empty address"),
            (":7420", "empty host"),
            ("[]:1", "empty host"),
            ("node1:0", "port '0'"),
            ("node1:x", "port 'x'"),
            ("node1:", "port ''"),
            ("node1:65536", "port '65536'"),
            ("node1:+5", "port '+5'"),
            ("a b", "no whitespace"),
            ("h/x:1", "no whitespace or '/'"),
            ("[::1", "missing ']'"),
            ("[::1]x", "expected [IPv6]:PORT"),
            ("::1", "must be in brackets"),
            ("::1:5", "must be in brackets"),
            ("a]:1", "bracket"),
            ("[[::1]]", "expected [IPv6]"),
        ] {
            let e = bad.parse::<HostPort>().unwrap_err();
            assert_eq!(e.text, bad);
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("invalid address '{bad}': ")), "{msg}");
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
    }

    fn host() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9.-]{0,20}",
            any::<std::net::Ipv4Addr>().prop_map(|a| a.to_string()),
            any::<std::net::Ipv6Addr>().prop_map(|a| a.to_string()),
        ]
    }

    proptest! {
        #[test]
        fn display_parses_back(h in host(), port in 1u16..) {
            let hp = HostPort::new(h, port);
            prop_assert_eq!(hp.to_string().parse::<HostPort>(), Ok(hp.clone()));
            prop_assert_eq!(HostPort::parse(&hp.to_string(), 1), Ok(hp));
        }

        #[test]
        fn any_text_parses_or_names_itself(s in "[a-z0-9:\\[\\]. /+-]{0,12}") {
            match s.parse::<HostPort>() {
                Ok(hp) => prop_assert_eq!(hp.to_string().parse::<HostPort>(), Ok(hp)),
                Err(e) => {
                    let quoted = format!("'{s}'");
                    prop_assert!(e.to_string().contains(&quoted));
                }
            }
        }
    }
}
