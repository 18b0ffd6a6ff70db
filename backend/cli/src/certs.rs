//! `cairn client certificate issue`: certificates of the cluster CA for clients, gateways,
//! admins and joining nodes, issued locally on the node that holds the CA, then recorded
//! in the cluster so they can be listed and revoked (docs/security.md).

use crate::args::{CaRotate, CertIssue, CertRenew, IssueRole};
use crate::client;
use crate::exit;
use crate::plan::Settings;
use cairn_proto::mgmt::{CertInfo, MgmtReply, MgmtRequest, RenewReply, RenewRequest};
use cairn_proto::principal::{Principal, Role};
use cairn_proto::tls::{Ca, Credentials, ENV_CREDENTIALS};
use std::io::Write;
use std::path::PathBuf;

/// Where the cluster CA is looked for without `--ca-dir` or `CAIRN_CA_DIR`: cairnd's default
/// state dir (`make up`, Ansible), then the appliance's `/etc/cairn`; the first that holds
/// `ca.key`, else the first (named in the error).
const CA_DIRS: &[&str] = &["/var/lib/cairn", "/etc/cairn"];

/// Where the cluster CA is looked for: `--ca-dir`, `CAIRN_CA_DIR`, [`CA_DIRS`].
fn ca_dir(a: &CertIssue) -> PathBuf {
    ca_dir_of(&a.ca_dir)
}

fn ca_dir_of(d: &Option<PathBuf>) -> PathBuf {
    d.clone()
        .or_else(|| std::env::var_os("CAIRN_CA_DIR").filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| default_ca_dir(CA_DIRS))
}

fn default_ca_dir(dirs: &[&str]) -> PathBuf {
    let dirs: Vec<PathBuf> = dirs.iter().map(PathBuf::from).collect();
    dirs.iter().find(|d| d.join("ca.key").is_file()).unwrap_or(&dirs[0]).clone()
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
    // A gateway may be held to the volumes it serves (cairnd checks a certificate's volume
    // list for every role); read-only is for clients only.
    if (a.volumes.is_some() && !matches!(role, Role::Client | Role::Gateway))
        || (a.read_only && role != Role::Client)
    {
        let _ = writeln!(
            err,
            "client certificate issue: {}: --volumes applies to --role client and gateway only, \
             --read-only to --role client only",
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
    // During a CA rotation a credential trusts both CAs (the bundle).
    let creds = match ca.issue(&p, a.days).and_then(|c| match bundle(&dir) {
        Some(b) => c.with_cas(&b),
        None => Ok(c),
    }) {
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

/// The trust bundle of a CA rotation in progress (`ca-bundle.pem`), if any.
fn bundle(dir: &std::path::Path) -> Option<String> {
    std::fs::read_to_string(dir.join("ca-bundle.pem")).ok()
}

/// `cairn cluster ca rotate [--finish]` (docs/security.md, "Rotation").
pub fn rotate(a: &CaRotate, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let dir = ca_dir_of(&a.ca_dir);
    let step = if a.finish { "cluster ca rotate --finish" } else { "cluster ca rotate" };
    match rotate_step(&dir, a.finish) {
        Ok(msg) => {
            if json {
                let _ = writeln!(
                    out,
                    "{{\"command\":{step:?},\"result\":\"success\",\"message\":{msg:?}}}"
                );
            } else {
                let _ = writeln!(out, "{step}: success: {msg}");
            }
            exit::OK
        }
        Err(e) => {
            let _ = writeln!(err, "{step}: {}: failed: {e}", dir.display());
            exit::FAILED
        }
    }
}

fn rotate_step(dir: &std::path::Path, finish: bool) -> Result<String, String> {
    use cairn_proto::tls::{pem_blocks, write_private, Credentials};
    let io = |p: &std::path::Path, e: &dyn std::fmt::Display| format!("{}: {e}", p.display());
    let ca = Ca::load(dir).map_err(|e| {
        format!("cannot load the cluster CA ({e}); run this on the node that holds it, as root, or pass --ca-dir")
    })?;
    let bundle_path = dir.join("ca-bundle.pem");
    let admin_path = dir.join("admin.pem");
    let in_progress = bundle(dir).is_some_and(|b| {
        pem_blocks(&b).iter().filter(|x| x.contains("BEGIN CERTIFICATE")).count() > 1
    });
    let admin = Credentials::load(&admin_path).map_err(|e| e.to_string())?;
    if finish {
        if !in_progress {
            return Err("no CA rotation in progress (run 'cairn cluster ca rotate' first)".into());
        }
        let new = ca.cert_pem();
        std::fs::write(&bundle_path, &new).map_err(|e| io(&bundle_path, &e))?;
        admin.with_cas(&new).and_then(|c| c.save(&admin_path)).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(dir.join("ca-old.pem"));
        return Ok("the old CA is retired: nodes holding the CA trust only the new one within \
                   seconds; certificates of the old CA are refused from then on"
            .into());
    }
    if in_progress {
        return Err(
            "a CA rotation is in progress: finish it first ('cairn cluster ca rotate --finish')"
                .into(),
        );
    }
    let old_pem = ca.cert_pem();
    let new = Ca::create(&dir.display().to_string()).map_err(|e| e.to_string())?;
    let both = format!("{}{}", new.cert_pem(), old_pem);
    // The bundle first: a node that reads the new CA must already find both trusted.
    std::fs::write(dir.join("ca-old.pem"), &old_pem)
        .map_err(|e| io(&dir.join("ca-old.pem"), &e))?;
    std::fs::write(&bundle_path, &both).map_err(|e| io(&bundle_path, &e))?;
    let new_admin = new
        .issue(&admin.principal, cairn_proto::tls::CERT_DAYS)
        .and_then(|c| c.with_cas(&both))
        .map_err(|e| e.to_string())?;
    write_private(&dir.join("ca.key"), new.key_pem().as_bytes()).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("ca.pem"), new.cert_pem()).map_err(|e| io(&dir.join("ca.pem"), &e))?;
    new_admin.save(&admin_path).map_err(|e| e.to_string())?;
    Ok(format!(
        "new cluster CA in {}; both CAs are trusted (ca-bundle.pem); admin.pem re-issued; nodes \
         holding the CA re-issue their certificates within seconds; re-issue the other \
         credentials ('cairn client certificate issue'), then run 'cairn cluster ca rotate --finish'",
        dir.display()
    ))
}

/// A credential this close to its end is renewed by `renew --if-due`.
const RENEW_BEFORE_SECS: i64 = 30 * 86400;

/// CAs compared by key (the pin hash), sorted.
fn ca_keys(pem: &str) -> Vec<String> {
    let mut v: Vec<String> = cairn_proto::tls::pem_blocks(pem)
        .iter()
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .map(|c| cairn_proto::tls::ca_cert_hash(c).unwrap_or_else(|_| c.clone()))
        .collect();
    v.sort();
    v
}

/// `cairn client certificate renew`: the certificate of the credentials in use, renewed
/// from the node holding the cluster CA (`CertRenew`; docs/security.md, "Rotation").
pub fn renew(
    a: &CertRenew,
    s: &Settings,
    credentials: Option<&std::path::Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let fail = |err: &mut dyn Write, e: &dyn std::fmt::Display| {
        let _ = writeln!(err, "client certificate renew: failed: {e}");
        exit::FAILED
    };
    let path = match cairn_proto::tls::find_credentials(credentials) {
        Ok(p) => p,
        Err(e) => return fail(err, &e.message),
    };
    let cur = match Credentials::load(&path) {
        Ok(c) => c,
        Err(e) => return fail(err, &e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(err, &format!("cannot start the I/O runtime: {e}")),
    };
    let ask = |csr: String| -> Result<RenewReply, String> {
        let req = MgmtRequest::CertRenew(RenewRequest { csr, on_behalf: None });
        match rt.block_on(client::call(&s.addr, req, s.timeout)) {
            Ok(MgmtReply::Renewed(r)) => Ok(r),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    };
    let target = a.out.clone().unwrap_or_else(|| path.clone());
    if a.if_due {
        let trust = match ask(String::new()) {
            Ok(r) => r.cas,
            Err(e) => return fail(err, &format!("{}: {e}", path.display())),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let due = cur.not_after() <= now + RENEW_BEFORE_SECS;
        if !due && ca_keys(&cur.cas_pem()) == ca_keys(&trust) {
            let _ = writeln!(
                out,
                "{} ({}): not due; valid for {} more days, and it trusts the cluster's CA certificates",
                cur.principal,
                path.display(),
                (cur.not_after() - now) / 86400
            );
            return exit::OK;
        }
    }
    let req = match cairn_proto::tls::NodeRequest::for_principal(&cur.principal) {
        Ok(r) => r,
        Err(e) => return fail(err, &e),
    };
    let reply = match ask(req.csr_pem.clone()) {
        Ok(r) => r,
        Err(e) => return fail(err, &format!("{}: {e}", path.display())),
    };
    let new = match req.renewed(&reply.cert, &reply.cas) {
        Ok(c) => c,
        Err(e) => return fail(err, &format!("the certificate {} issued: {e}", reply.by)),
    };
    if let Err(e) = new.save(&target) {
        return fail(err, &e);
    }
    let p = &new.principal;
    if s.json {
        let _ = writeln!(
            out,
            "{{\"name\":{:?},\"identity\":{:?},\"serial\":{:?},\"by\":{:?},\"file\":{:?}}}",
            p.name,
            p.to_uri(),
            new.serial(),
            reply.by,
            target.display().to_string()
        );
    } else {
        let _ = writeln!(
            out,
            "renewed {p} ({}), serial {} (issued by {}, trusting {} CA certificate(s)): {}",
            p.to_uri(),
            new.serial(),
            reply.by,
            ca_keys(&reply.cas).len(),
            target.display()
        );
    }
    exit::OK
}

#[cfg(test)]
mod ca_dir_tests {
    use super::default_ca_dir;

    #[test]
    fn the_first_default_dir_holding_the_ca_key_is_taken() {
        let t = std::env::temp_dir().join(format!("cairn-ca-dir-test-{}", std::process::id()));
        let (a, b) = (t.join("var"), t.join("etc"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let dirs = [a.to_str().unwrap(), b.to_str().unwrap()];
        assert_eq!(default_ca_dir(&dirs), a, "no CA anywhere: the first, for the error");
        std::fs::write(b.join("ca.key"), "k").unwrap();
        assert_eq!(default_ca_dir(&dirs), b, "the appliance's /etc/cairn");
        std::fs::write(a.join("ca.key"), "k").unwrap();
        assert_eq!(default_ca_dir(&dirs), a);
        std::fs::remove_dir_all(&t).unwrap();
    }
}
