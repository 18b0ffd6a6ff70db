//! The checks of what a user gives: LUN names, IQNs, sizes, backing file paths, portals,
//! CHAP secrets.

use crate::error::{invalid, Error};
use cairn_proto::{HostPort, Size};

/// Default iSCSI port.
pub const ISCSI_PORT: u16 = 3260;

/// A LUN name: 1 to 64 of `A-Z a-z 0-9 _ -`, starting with a letter or digit (it names the
/// storage object and the default backing file).
pub fn check_lun_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| Err(invalid(format!("invalid LUN name '{name}': {why}")));
    if name.is_empty() || name.len() > 64 {
        return bad("must be 1 to 64 characters");
    }
    if let Some(c) = name.chars().find(|c| !c.is_ascii_alphanumeric() && *c != '_' && *c != '-') {
        return bad(&format!("'{c}' is not allowed (A-Z a-z 0-9 _ -)"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("must start with a letter or digit");
    }
    Ok(())
}

/// An iSCSI name (RFC 3720 3.2.6): `iqn.YYYY-MM.reversed.domain[:anything]`,
/// `eui.` + 16 hex digits, or `naa.` + 16 or 32 hex digits. `what` names it in messages
/// ("target IQN", "initiator name").
pub fn check_iqn(iqn: &str, what: &str) -> Result<(), Error> {
    let bad = |why: String| Err(invalid(format!("invalid {what} '{iqn}': {why}")));
    if iqn.len() > 223 {
        return bad("longer than 223 bytes".into());
    }
    let hex =
        |s: &str, n: &[usize]| n.contains(&s.len()) && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Some(h) = iqn.strip_prefix("eui.") {
        return if hex(h, &[16]) {
            Ok(())
        } else {
            bad("eui. must be followed by 16 hex digits".into())
        };
    }
    if let Some(h) = iqn.strip_prefix("naa.") {
        return if hex(h, &[16, 32]) {
            Ok(())
        } else {
            bad("naa. must be followed by 16 or 32 hex digits".into())
        };
    }
    let Some(rest) = iqn.strip_prefix("iqn.") else {
        return bad(
            "must start with iqn., eui. or naa. (e.g. iqn.2024-01.com.example:disk1)".into()
        );
    };
    if let Some(c) =
        iqn.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || ".-:".contains(*c)))
    {
        return bad(format!(
            "'{c}' is not allowed (iSCSI names are lowercase letters, digits, '.', '-' and ':')"
        ));
    }
    let (date, authority) = rest.split_once('.').unwrap_or((rest, ""));
    let ok_date = date.len() == 7
        && date.as_bytes()[4] == b'-'
        && date[..4].chars().all(|c| c.is_ascii_digit())
        && matches!(date[5..].parse::<u8>(), Ok(1..=12));
    if !ok_date {
        return bad(format!("date '{date}' after iqn. must be YYYY-MM"));
    }
    let domain = authority.split(':').next().unwrap_or("");
    if domain.is_empty() || domain.split('.').any(str::is_empty) {
        return bad(
            "no naming authority after the date (a reversed domain name, e.g. com.example)".into(),
        );
    }
    Ok(())
}

/// A LUN size: a [`Size`] (bytes, or a number with a K, M, G, T or P suffix, powers of
/// 1024 like targetcli), at least 1 MiB, at most 1 EiB and a multiple of 512.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    let bad = |why: &str| Err(invalid(format!("invalid size '{s}': {why}")));
    let bytes = s.parse::<Size>().map_err(|e| invalid(e.to_string()))?.bytes();
    if bytes > 1 << 60 {
        return bad("too large (at most 1 EiB)");
    }
    if bytes < 1 << 20 {
        return bad("a LUN is at least 1M");
    }
    if !bytes.is_multiple_of(512) {
        return bad("must be a multiple of 512 bytes (the block size)");
    }
    Ok(bytes)
}

/// Human-readable size, exact: `10G`, `1536M`, `1048576` ([`Size`]'s spelling).
pub fn format_size(b: u64) -> String {
    Size(b).to_string()
}

/// A backing file path inside the volume: relative, no empty, `.` or `..` components, and
/// nothing LIO's config string cannot carry (`,` `:` whitespace, control characters).
/// Returns it without leading slashes.
pub fn check_path(p: &str) -> Result<String, Error> {
    let bad = |why: &str| Err(invalid(format!("invalid backing file path '{p}': {why}")));
    let t = p.trim_start_matches('/');
    if t.is_empty() || t.ends_with('/') {
        return bad("it must name a file inside the volume");
    }
    if t.len() > 1024 {
        return bad("longer than 1024 bytes");
    }
    if t.split('/').any(|c| c.is_empty() || c == "." || c == ".." || c.len() > 255) {
        return bad("components must be non-empty, not . or .., at most 255 bytes");
    }
    if let Some(c) = t.chars().find(|c| c.is_control() || c.is_whitespace() || ",:\"'".contains(*c))
    {
        return bad(&format!("{c:?} cannot be carried in LIO's config string"));
    }
    Ok(t.to_string())
}

/// A portal: `IP[:PORT]` or `[IPv6][:PORT]` (a [`HostPort`] whose host is an IP address),
/// port 3260 by default. Returns (ip, port).
pub fn parse_portal(p: &str) -> Result<(String, u16), Error> {
    let hp = HostPort::parse(p, ISCSI_PORT)
        .map_err(|e| invalid(format!("invalid portal '{p}': {}", e.why)))?;
    match hp.ip() {
        Some(ip) => Ok((ip.to_string(), hp.port())),
        None => Err(invalid(format!(
            "invalid portal '{p}': expected IP[:PORT] or [IPv6][:PORT] (e.g. 0.0.0.0:3260, \
             10.0.0.5)"
        ))),
    }
}

/// Canonical spelling of a portal (`IP:PORT`, `[IPv6]:PORT`).
pub fn portal_string(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// CHAP user name or secret: 1 to 255 printable ASCII characters without whitespace,
/// quotes, `=` or `\` (targetcli parses `key=value`).
pub fn check_chap(what: &str, v: &str) -> Result<(), Error> {
    if v.is_empty() || v.len() > 255 {
        return Err(invalid(format!("invalid CHAP {what}: must be 1 to 255 characters")));
    }
    if v.chars().any(|c| !c.is_ascii_graphic() || "\"'=\\".contains(c)) {
        return Err(invalid(format!(
            "invalid CHAP {what}: printable ASCII only, no whitespace, quotes, '=' or '\\'"
        )));
    }
    Ok(())
}
