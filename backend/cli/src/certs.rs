//! `cairn client certificate issue`: certificates of the cluster CA for clients, gateways,
//! admins and joining nodes, issued locally on the node that holds the CA, then recorded
//! in the cluster so they can be listed and revoked (docs/security.md).

use crate::args::{CertIssue, IssueRole};
use crate::client;
use crate::exit;
use crate::plan::Settings;
use cairn_proto::mgmt::{CertInfo, MgmtRequest};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::tls::{Ca, Credentials, ENV_CREDENTIALS};
use std::io::Write;
use std::path::PathBuf;

/// Where the cluster CA is looked for: `--ca-dir`, `CAIRN_CA_DIR`, cairnd's default state
/// dir.
fn ca_dir(a: &CertIssue) -> PathBuf {
    a.ca_dir
        .clone()
        .or_else(|| std::env::var_os("CAIRN_CA_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/lib/cairn"))
}

/// Record the issued certificate through the cairnd at `s.addr` (admin credentials); the
/// error in words when that fails.
fn record(s: &Settings, creds: &Credentials, days: u32) -> Result<(), String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let p = &creds.principal;
    let info = CertInfo {
        serial: creds.serial(),
        name: p.name.clone(),
        role: p.role.as_str().into(),
        volumes: p.volumes.clone(),
        read_only: p.read_only,
        issued: now,
        expires: now + u64::from(days) * 86400,
        revoked_at: None,
        revoked_by: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the I/O runtime: {e}"))?;
    rt.block_on(client::call(&s.addr, MgmtRequest::CertRecord(info), s.timeout))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn issue(a: &CertIssue, s: &Settings, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let json = s.json;
    let role = match a.role {
        IssueRole::Client => Role::Client,
        IssueRole::Gateway => Role::Gateway,
        IssueRole::Admin => Role::Admin,
        IssueRole::Node => Role::Node,
    };
    if role != Role::Client && (a.volumes.is_some() || a.read_only) {
        let _ = writeln!(
            err,
            "client certificate issue: {}: --volumes and --read-only apply to --role client only",
            a.name
        );
        return exit::USAGE;
    }
    let p = Principal {
        name: a.name.clone(),
        role,
        volumes: a.volumes.clone(),
        read_only: a.read_only,
    };
    let dir = ca_dir(a);
    let fail = |err: &mut dyn Write, e: &dyn std::fmt::Display| {
        let _ = writeln!(err, "client certificate issue: {}: failed: {e}", a.name);
        exit::FAILED
    };
    let ca = match Ca::load(&dir) {
        Ok(ca) => ca,
        Err(e) => {
            return fail(
                err,
                &format!(
                    "cannot load the cluster CA from {} ({e}); run this on the node that created the cluster, as root, or pass --ca-dir",
                    dir.display()
                ),
            )
        }
    };
    let creds = match ca.issue(&p, a.days) {
        Ok(c) => c,
        Err(e) => return fail(err, &e),
    };
    let serial = creds.serial();
    let recorded = record(s, &creds, a.days);
    if let Err(e) = &recorded {
        let _ = writeln!(
            err,
            "client certificate issue: {}: warning: certificate {serial} issued but not recorded \
             in the cluster ({e}); 'client certificate list' will not show it; revoke it with \
             'cairn client certificate revoke {serial}'",
            a.name
        );
    }
    match &a.out {
        Some(path) => {
            if let Err(e) = creds.save(path) {
                return fail(err, &e);
            }
            if json {
                let _ = writeln!(
                    out,
                    "{{\"name\":{:?},\"identity\":{:?},\"serial\":{:?},\"recorded\":{},\"file\":{:?}}}",
                    p.name,
                    p.to_uri(),
                    serial,
                    recorded.is_ok(),
                    path.display().to_string()
                );
            } else {
                let _ = writeln!(
                    out,
                    "issued {p} ({}), serial {serial}, valid {} days: {} (mode 0600; point {ENV_CREDENTIALS} or --credentials at it)",
                    p.to_uri(),
                    a.days,
                    path.display()
                );
            }
        }
        None => {
            let _ = out.write_all(creds.to_pem().as_bytes());
        }
    }
    exit::OK
}
