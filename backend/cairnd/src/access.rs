//! Which clients may reach a volume: the volume options `auth.allow` and `auth.reject`
//! (gluster's), lists of address patterns matched against the real peer address of a
//! client's TCP connection. Parsing and matching live here and nowhere else.
//!
//! A pattern is `*` (every address), an IPv4 address whose octets may be `*`
//! (`192.168.1.*`; a trailing `*` stands for the rest, so `10.1.*` is `10.1.0.0/16`), an
//! IPv6 address, or a CIDR block of either (`10.0.0.0/24`, `fd00::/8`). Host names are not
//! accepted: addresses are matched, never resolved. Addresses are compared in canonical
//! form, so a client that reaches a dual-stack socket as `::ffff:10.0.0.1` matches IPv4
//! patterns.

use std::collections::BTreeMap;
use std::net::IpAddr;

pub const ALLOW: &str = "auth.allow";
pub const REJECT: &str = "auth.reject";

/// Why a value of `auth.allow` / `auth.reject` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// One entry is not an address pattern: the entry, and what a pattern looks like.
    #[error("'{pattern}' is not an address pattern ({why})")]
    Pattern { pattern: String, why: String },
    #[error("the list is empty (use * for every address)")]
    Empty,
    /// A stored option that does not parse (the config store edited by hand).
    #[error("{key}: {source}")]
    Option {
        key: &'static str,
        #[source]
        source: Box<AccessError>,
    },
}

/// One address pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    /// An address block: `prefix` leading bits of `net` (IPv4 or IPv6, canonical).
    Net {
        net: IpAddr,
        prefix: u8,
    },
    /// IPv4 with wildcard octets: `None` matches any value.
    Octets([Option<u8>; 4]),
}

impl Pattern {
    fn parse(s: &str) -> Result<Pattern, AccessError> {
        let bad =
            |why: &str| Err(AccessError::Pattern { pattern: s.to_string(), why: why.to_string() });
        if s == "*" {
            return Ok(Pattern::Any);
        }
        if let Some((addr, len)) = s.split_once('/') {
            let Ok(net) = addr.parse::<IpAddr>() else {
                return bad("a CIDR block is ADDRESS/LENGTH, e.g. 10.0.0.0/24");
            };
            let max = if net.is_ipv4() { 32 } else { 128 };
            let Some(prefix) = len.parse::<u8>().ok().filter(|p| *p <= max) else {
                return bad(&format!("prefix length must be 0..={max}"));
            };
            // `::ffff:10.0.0.0/120` is `10.0.0.0/24`.
            return Ok(match (net, net.to_canonical()) {
                (IpAddr::V6(_), IpAddr::V4(v4)) if prefix >= 96 => {
                    Pattern::Net { net: IpAddr::V4(v4), prefix: prefix - 96 }
                }
                _ => Pattern::Net { net, prefix },
            });
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return Ok(Pattern::Net { net: ip, prefix: if ip.is_ipv4() { 32 } else { 128 } });
        }
        if s.contains('*') && !s.contains(':') {
            let parts: Vec<&str> = s.split('.').collect();
            if parts.len() > 4 {
                return bad("an IPv4 pattern has at most 4 octets");
            }
            let mut octets = [None; 4];
            for (i, p) in parts.iter().enumerate() {
                octets[i] = match *p {
                    "*" => None,
                    p if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
                        match p.parse::<u8>() {
                            Ok(n) => Some(n),
                            Err(_) => return bad("an octet is 0..=255 or *"),
                        }
                    }
                    _ => return bad("an octet is 0..=255 or *"),
                };
            }
            if parts.len() < 4 && parts.last() != Some(&"*") {
                return bad("a pattern shorter than 4 octets must end in *");
            }
            return Ok(Pattern::Octets(octets));
        }
        bad("give an IPv4 or IPv6 address, a CIDR block, or * wildcards; host names are not matched")
    }

    fn matches(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Pattern::Any, _) => true,
            (Pattern::Octets(o), IpAddr::V4(a)) => {
                o.iter().zip(a.octets()).all(|(p, b)| p.is_none_or(|p| p == b))
            }
            (Pattern::Net { net: IpAddr::V4(n), prefix }, IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - *prefix as u32).unwrap_or(0);
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (Pattern::Net { net: IpAddr::V6(n), prefix }, IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - *prefix as u32).unwrap_or(0);
                u128::from(*n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// A comma-separated list of patterns (blanks around entries ignored).
fn parse_list(value: &str) -> Result<Vec<Pattern>, AccessError> {
    let entries: Vec<&str> = value.split(',').map(str::trim).collect();
    if entries.iter().all(|e| e.is_empty()) {
        return Err(AccessError::Empty);
    }
    entries.into_iter().filter(|e| !e.is_empty()).map(Pattern::parse).collect()
}

/// Check a value of `auth.allow` / `auth.reject`.
pub fn validate(value: &str) -> Result<(), AccessError> {
    parse_list(value).map(|_| ())
}

/// The access rules of one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    allow: Vec<Pattern>,
    reject: Vec<Pattern>,
}

impl Default for Rules {
    /// `auth.allow *`, no `auth.reject`: every address.
    fn default() -> Rules {
        Rules { allow: vec![Pattern::Any], reject: vec![] }
    }
}

impl Rules {
    /// From a volume's options. An option that does not parse (the config store edited by
    /// hand: `volume set` validates) lets no client in, rather than every client.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<Rules, (Rules, AccessError)> {
        let mut r = Rules::default();
        for (key, list) in [(ALLOW, &mut r.allow), (REJECT, &mut r.reject)] {
            if let Some(v) = options.get(key) {
                match parse_list(v) {
                    Ok(p) => *list = p,
                    Err(e) => {
                        return Err((
                            Rules { allow: vec![], reject: vec![] },
                            AccessError::Option { key, source: Box::new(e) },
                        ))
                    }
                }
            }
        }
        Ok(r)
    }

    /// True if a client at `ip` may use the volume: allowed and not rejected (reject wins).
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.allow.iter().any(|p| p.matches(ip)) && !self.reject.iter().any(|p| p.matches(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn rules(allow: Option<&str>, reject: Option<&str>) -> Rules {
        let mut o = BTreeMap::new();
        if let Some(a) = allow {
            o.insert(ALLOW.to_string(), a.to_string());
        }
        if let Some(r) = reject {
            o.insert(REJECT.to_string(), r.to_string());
        }
        Rules::from_options(&o).unwrap()
    }

    #[test]
    fn default_allows_everyone() {
        let r = rules(None, None);
        assert_eq!(r, Rules::default());
        assert!(r.allows(ip("10.1.2.3")) && r.allows(ip("::1")) && r.allows(ip("::ffff:1.2.3.4")));
        assert_eq!(rules(Some("*"), None), Rules::default());
    }

    #[test]
    fn addresses_and_wildcards() {
        let r = rules(Some("127.0.0.1, 192.168.1.*,10.1.*"), None);
        assert!(r.allows(ip("127.0.0.1")));
        assert!(!r.allows(ip("127.0.0.2")));
        assert!(r.allows(ip("192.168.1.0")) && r.allows(ip("192.168.1.255")));
        assert!(!r.allows(ip("192.168.2.1")));
        assert!(r.allows(ip("10.1.0.0")) && r.allows(ip("10.1.255.7")));
        assert!(!r.allows(ip("10.10.0.1")), "10.1.* is 10.1.0.0/16, not a string prefix");
        let r = rules(Some("10.*.3.*"), None);
        assert!(r.allows(ip("10.200.3.4")) && !r.allows(ip("10.200.4.3")));
        assert!(!r.allows(ip("::1")), "IPv4 patterns never match IPv6 addresses");
    }

    #[test]
    fn cidr_blocks() {
        let r = rules(Some("10.0.0.0/24,fd00::/8,0.0.0.0/0"), Some("0.0.0.0/0"));
        assert!(!r.allows(ip("10.0.0.1")), "reject wins over allow");
        assert!(r.allows(ip("fd12::1")));
        assert!(!r.allows(ip("fe80::1")));
        let r = rules(Some("10.0.0.0/24"), None);
        assert!(r.allows(ip("10.0.0.255")) && !r.allows(ip("10.0.1.0")));
        // Host bits in the block are ignored, as `ip route` does.
        assert!(rules(Some("10.0.0.77/24"), None).allows(ip("10.0.0.1")));
        assert!(rules(Some("::/0"), None).allows(ip("2001:db8::1")));
        assert!(!rules(Some("::/0"), None).allows(ip("1.2.3.4")));
    }

    #[test]
    fn ipv6_and_mapped_addresses() {
        let r = rules(Some("::1,2001:db8::/32"), None);
        assert!(r.allows(ip("::1")) && r.allows(ip("2001:db8:1::5")));
        assert!(!r.allows(ip("2001:db9::1")));
        // A client on a dual-stack socket shows as ::ffff:a.b.c.d: IPv4 patterns match it.
        let r = rules(Some("127.0.0.1,192.168.1.*"), Some("10.0.0.0/8"));
        assert!(r.allows(ip("::ffff:127.0.0.1")));
        assert!(r.allows(ip("::ffff:192.168.1.9")));
        assert!(!r.allows(ip("::ffff:127.0.0.2")));
        let r = rules(Some("*"), Some("10.0.0.0/8"));
        assert!(!r.allows(ip("::ffff:10.9.9.9")));
        // Mapped patterns are IPv4 patterns.
        assert!(rules(Some("::ffff:10.0.0.1"), None).allows(ip("10.0.0.1")));
        assert!(rules(Some("::ffff:10.0.0.0/120"), None).allows(ip("10.0.0.200")));
    }

    #[test]
    fn reject_wins() {
        let r = rules(None, Some("127.0.0.2"));
        assert!(r.allows(ip("127.0.0.1")) && !r.allows(ip("127.0.0.2")));
        let r = rules(Some("127.0.0.*"), Some("127.0.0.2"));
        assert!(r.allows(ip("127.0.0.3")) && !r.allows(ip("127.0.0.2")));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        for bad in [
            "",
            " , ",
            "256.1.1.1",
            "10.1",
            "10.1.*.*.*",
            "10..1.*",
            "10.1.x.*",
            "10.1.2*",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/abc",
            "::/129",
            "fe80::*",
            "gluster.example.com",
            "-1.2.3.4",
            "1.2.3.4:80",
        ] {
            let e = validate(bad).expect_err(bad).to_string();
            assert!(e.contains("pattern") || e.contains("empty"), "{bad}: {e}");
        }
        assert!(validate("10.0.0.0/24, *").is_ok());
        assert!(validate("1.2.3.4,").is_ok(), "a trailing comma is harmless");
    }

    #[test]
    fn a_bad_stored_option_lets_no_one_in() {
        let mut o = BTreeMap::new();
        o.insert(REJECT.to_string(), "nonsense".to_string());
        let (r, e) = Rules::from_options(&o).unwrap_err();
        assert!(matches!(&e, AccessError::Option { key: REJECT, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with("auth.reject: 'nonsense' is not an address pattern"), "{msg}");
        assert!(!r.allows(ip("127.0.0.1")));
    }
}
