//! This node's TLS identity: its node certificate, and the cluster CA when this node holds
//! it (docs/security.md, "The cluster CA").
//!
//! At start, with TLS on, cairnd uses `STATE_DIR/node.pem` when it holds a valid node
//! certificate for this node's name. Otherwise it issues one with the cluster CA found in
//! the CA directory (`--ca-dir`, `CAIRN_CA_DIR`, default the state dir). When that
//! directory holds no CA, this is the first node of a new cluster: it creates the CA
//! (`ca.pem`, and `ca.key` readable by root only) and the admin credential `admin.pem`
//! (0600) that the `cairn` CLI uses. A node that joins later gets its certificate from
//! a node holding the CA ([`cairn_proto::tls::issue_node_cert`]), placed as its node.pem.

use anyhow::Context;
use cairn_proto::principal::{Principal, Role};
use cairn_proto::tls::{self, Ca, Credentials, Transport};
use std::os::fd::AsRawFd;
use std::path::Path;

/// A node certificate this close to its end is renewed: at start and by the running node
/// (`certs::run_credentials_watch`) when the CA is here, else from the node holding it
/// (`renew::run`).
pub const RENEW_BEFORE_SECS: i64 = 30 * 86400;

pub fn setup(
    name: &str,
    state_dir: &Path,
    ca_dir: &Path,
    transport: &str,
    joining: bool,
) -> anyhow::Result<Transport> {
    match transport {
        "plain" => {
            tracing::warn!(
                "transport = plain: connections are neither authenticated nor encrypted; \
                 use only on an isolated network"
            );
            return Ok(Transport::Plain);
        }
        "tls" => {}
        other => anyhow::bail!("unknown transport {other:?}: tls or plain"),
    }
    let node_pem = state_dir.join("node.pem");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if let Ok(c) = Credentials::load(&node_pem) {
        let fresh = c.not_after() > now + RENEW_BEFORE_SECS;
        let mine = c.principal.name == name && c.principal.role == Role::Node;
        if mine && (fresh || !ca_dir.join("ca.key").exists()) {
            if !fresh {
                tracing::warn!(path = %node_pem.display(), "node certificate expires soon; no cluster CA here: it is renewed from the node holding it once this node runs (renew.rs)");
            }
            return transport_of(&c, &node_pem);
        }
    }
    if joining && !ca_dir.join("ca.key").exists() {
        // A node joining with a token must not found a second cluster CA: its peers
        // would refuse it, and it them.
        anyhow::bail!(
            "{name} joins an existing cluster (--join-token-file) but has no node certificate \
             at {}: issue one on a node holding the cluster CA ('cairn client certificate \
             issue {name} --role node --out FILE') and place it there (mode 0600), or enroll \
             with the token: --join MEMBER:PORT --ca-cert-hash sha256:HEX (printed by 'cairn \
             peer token create')",
            node_pem.display()
        );
    }
    let ca = cluster_ca(ca_dir)?;
    let creds = ca
        .issue(&Principal::new(name, Role::Node), tls::CERT_DAYS)
        .with_context(|| format!("issuing the node certificate of {name}"))?;
    creds.save(&node_pem).with_context(|| format!("writing {}", node_pem.display()))?;
    tracing::info!(node = %name, path = %node_pem.display(), "issued this node's certificate");
    transport_of(&creds, &node_pem)
}

fn transport_of(c: &Credentials, path: &Path) -> anyhow::Result<Transport> {
    Transport::tls(c).with_context(|| format!("node credentials {}", path.display()))
}

/// The cluster CA of `dir`, created with the admin credential if there is none (under a
/// lock: nodes started together on one host with one CA dir create it once).
fn cluster_ca(dir: &Path) -> anyhow::Result<Ca> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating CA dir {}", dir.display()))?;
    let lock_path = dir.join(".ca.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    // SAFETY: a plain flock on an open file; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("locking {}", lock_path.display()));
    }
    if dir.join("ca.key").exists() {
        return Ca::load(dir)
            .with_context(|| format!("loading the cluster CA from {}", dir.display()));
    }
    let ca = Ca::create(&dir.display().to_string()).context("creating the cluster CA")?;
    tls::write_private(&dir.join("ca.key"), ca.key_pem().as_bytes())?;
    std::fs::write(dir.join("ca.pem"), ca.cert_pem())
        .with_context(|| format!("writing {}", dir.join("ca.pem").display()))?;
    let admin = ca.issue(&Principal::new("admin", Role::Admin), tls::CERT_DAYS)?;
    admin.save(&dir.join("admin.pem"))?;
    tracing::info!(dir = %dir.display(), "created the cluster CA and the admin credential admin.pem (root only)");
    Ok(ca)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joining_node_without_certificate_founds_no_ca() {
        let d = tempfile::tempdir().unwrap();
        let (state, ca) = (d.path().join("state"), d.path().join("ca"));
        let e = setup("node2", &state, &ca, "tls", true)
            .err()
            .expect("a joining node started")
            .to_string();
        assert!(e.contains("cairn client certificate issue node2 --role node"), "{e}");
        assert!(!ca.join("ca.key").exists(), "a joining node created a CA");
        assert!(!state.join("node.pem").exists());
        // the first node (no token) founds the cluster: CA, admin credential, node.pem
        std::fs::create_dir_all(&state).unwrap();
        if let Err(e) = setup("node1", &state, &ca, "tls", false) {
            panic!("first node: {e:#}");
        }
        assert!(ca.join("ca.key").exists() && ca.join("admin.pem").exists());
        assert!(state.join("node.pem").exists());
        // a joining node whose CA dir holds the CA (one host, shared dir) is issued one
        let state2 = d.path().join("state2");
        std::fs::create_dir_all(&state2).unwrap();
        if let Err(e) = setup("node2", &state2, &ca, "tls", true) {
            panic!("joining node with the CA at hand: {e:#}");
        }
        assert!(state2.join("node.pem").exists());
    }
}
