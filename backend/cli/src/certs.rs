//! `cairn client certificate issue`: certificates of the cluster CA for clients, gateways,
//! admins and joining nodes, issued locally on the node that holds the CA
//! (docs/security.md).

use crate::args::{CertIssue, IssueRole};
use crate::exit;
use cairn_proto::principal::{Principal, Role};
use cairn_proto::tls::{Ca, ENV_CREDENTIALS};
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

pub fn issue(a: &CertIssue, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
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
    match &a.out {
        Some(path) => {
            if let Err(e) = creds.save(path) {
                return fail(err, &e);
            }
            if json {
                let _ = writeln!(
                    out,
                    "{{\"name\":{:?},\"identity\":{:?},\"file\":{:?}}}",
                    p.name,
                    p.to_uri(),
                    path.display().to_string()
                );
            } else {
                let _ = writeln!(
                    out,
                    "issued {p} ({}), valid {} days: {} (mode 0600; point {ENV_CREDENTIALS} or --credentials at it)",
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
