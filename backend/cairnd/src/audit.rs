//! The audit log of management actions: who asked, what, when, and how it ended. One JSON
//! object per line, appended to a file only root and the cairn group may read (0640), and
//! also emitted as a tracing event with target `audit` (journald when cairnd runs under
//! systemd). Secrets never reach it: a join token shows only its id, and values of keys
//! that name a password, secret or token (inside gateway documents too) are masked.
//!
//! Recorded: every management request that changes something, and any request refused
//! for want of rights (EACCES/EPERM), reads included. Plain reads that succeed are not
//! recorded (status polling would drown the log).

use cairn_proto::mgmt::{MgmtReply, MgmtRequest};
use cairn_proto::rpc::Session;
use cairn_proto::{Errno, RemoteError};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const MASK: &str = "********";

pub struct Audit {
    path: Option<PathBuf>,
    file: Mutex<Option<File>>,
}

impl Audit {
    /// Appends to `path` (created 0640; an existing file is brought back to 0640).
    pub fn open(path: &Path) -> anyhow::Result<Audit> {
        use anyhow::Context;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating audit log dir {}", dir.display()))?;
        }
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)
            .with_context(|| format!("opening audit log {}", path.display()))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o640))
            .with_context(|| format!("chmod 0640 {}", path.display()))?;
        Ok(Audit { path: Some(path.to_path_buf()), file: Mutex::new(Some(f)) })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Records `req` from `session` with its outcome, if it is an action or a refusal.
    pub fn record(
        &self,
        session: &Session,
        req: &MgmtRequest,
        res: &Result<MgmtReply, RemoteError>,
    ) {
        let refused =
            matches!(res, Err(e) if e.errno == Errno::EACCES || e.errno == Errno(libc::EPERM));
        if is_read(req) && !refused {
            return;
        }
        let line = entry(session, req, res, unix_now()).to_string();
        tracing::info!(target: "audit", "{line}");
        let mut f = self.file.lock();
        if let Some(file) = f.as_mut() {
            if let Err(e) = writeln!(file, "{line}") {
                tracing::error!(
                    path = %self.path.as_deref().unwrap_or(Path::new("?")).display(),
                    "cannot append to the audit log: {e}"
                );
            }
        }
    }

    /// Records at or after `since` (Unix seconds), the newest `limit` of them.
    pub fn read(&self, since: Option<u64>, limit: usize) -> Result<Vec<String>, RemoteError> {
        let Some(path) = &self.path else {
            return Ok(vec![]);
        };
        let f = File::open(path).map_err(|e| {
            RemoteError::new(
                Errno::from_io(&e),
                format!("cannot read audit log {}: {e}", path.display()),
            )
        })?;
        let mut out = std::collections::VecDeque::new();
        for line in BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            if let Some(s) = since {
                let t = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|v| v.get("unix").and_then(Value::as_u64))
                    .unwrap_or(0);
                if t < s {
                    continue;
                }
            }
            out.push_back(line);
            if out.len() > limit {
                out.pop_front();
            }
        }
        Ok(out.into())
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Requests that change nothing.
fn is_read(req: &MgmtRequest) -> bool {
    use MgmtRequest as M;
    matches!(
        req,
        M::PeerStatus
            | M::VolumeInfo { .. }
            | M::VolumeStatus { .. }
            | M::VolumeList
            | M::HealInfo { .. }
            | M::GatewayList { .. }
            | M::HealStatistics { .. }
            | M::HealLocal { full: false, .. }
            | M::AuditLog { .. }
            | M::CertList
    )
}

/// The request's name and arguments, as JSON without secrets.
fn what(req: &MgmtRequest) -> (String, Value) {
    let v = serde_json::to_value(req).unwrap_or(Value::Null);
    let (kind, mut args) = match v {
        Value::String(s) => (s, json!({})),
        Value::Object(m) if m.len() == 1 => {
            let (k, a) = m.into_iter().next().expect("one entry");
            (k, a)
        }
        other => ("?".to_string(), other),
    };
    // A gateway document is JSON in a string: parse it so its secrets can be masked.
    if let Some(doc) = args.get_mut("doc") {
        if let Some(parsed) = doc.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()) {
            *doc = parsed;
        } else if doc.is_string() {
            *doc = Value::String(MASK.into());
        }
    }
    redact(&mut args);
    (kind, args)
}

/// Whether a JSON key names a secret: a password, secret, token or private key.
pub fn is_secret_key(k: &str) -> bool {
    let k = k.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "private"].iter().any(|w| k.contains(w))
}

/// Masks, in place, the value of every key that names a secret. A join token keeps its id
/// (the part before the dot), which is what `cairn peer token list` shows.
pub fn redact(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                let k = k.to_ascii_lowercase();
                if k.contains("token") {
                    if let Some(s) = x.as_str() {
                        let id = s.split_once('.').map(|(id, _)| id).unwrap_or("");
                        *x = Value::String(format!("{id}.{MASK}"));
                        continue;
                    }
                }
                if ["password", "passwd", "secret", "token", "private"]
                    .iter()
                    .any(|w| k.contains(w))
                    && !x.is_null()
                {
                    *x = Value::String(MASK.into());
                } else {
                    redact(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

/// Whether a JSON document holds a secret that was masked on the way out (written back
/// as read by a client that may not see secrets: it would replace the real one).
pub fn has_masked_secret(doc: &str) -> bool {
    fn walk(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, x)| {
                (is_secret_key(k) && x.as_str().is_some_and(|s| s.contains(MASK))) || walk(x)
            }),
            Value::Array(a) => a.iter().any(walk),
            _ => false,
        }
    }
    serde_json::from_str::<Value>(doc).is_ok_and(|v| walk(&v))
}

fn entry(
    session: &Session,
    req: &MgmtRequest,
    res: &Result<MgmtReply, RemoteError>,
    unix: u64,
) -> Value {
    let (kind, args) = what(req);
    // The principal of the connection's certificate (null on a plain connection).
    let who = json!({
        "addr": session.peer.to_string(),
        "client": session.hello.name,
        "kind": format!("{:?}", session.hello.kind).to_lowercase(),
        "principal": session.principal.as_ref().map(|p| json!({"name": p.name, "role": p.role.as_str()})),
    });
    let result = match res {
        Ok(_) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "errno": e.errno.name(), "message": e.message}),
    };
    json!({
        "time": cairn_proto::mgmt::rfc3339(unix),
        "unix": unix,
        "who": who,
        "what": kind,
        "args": args,
        "result": result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        let (k, a) = what(&MgmtRequest::PeerProbe {
            addr: "n2:7420".into(),
            token: Some("0123abcd.0123456789abcdef0123456789abcdef".into()),
        });
        assert_eq!(k, "PeerProbe");
        assert_eq!(a, json!({"addr": "n2:7420", "token": "0123abcd.********"}));
        let doc = r#"{"name":"t1","acls":[{"chap_user":"alice","chap_password":"s3cret-pass12"}]}"#;
        let (k, a) = what(&MgmtRequest::GatewayPut {
            kind: "iscsi-target".into(),
            name: "t1".into(),
            doc: doc.into(),
            if_unchanged_since: None,
        });
        assert_eq!(k, "GatewayPut");
        let s = a.to_string();
        assert!(!s.contains("s3cret"), "{s}");
        assert!(s.contains("alice") && s.contains(MASK), "{s}");
        let (k, a) = what(&MgmtRequest::VolumeSet {
            name: "v".into(),
            key: "auth.allow".into(),
            value: "10.0.0.1".into(),
        });
        assert_eq!((k.as_str(), a["key"].as_str()), ("VolumeSet", Some("auth.allow")));
        assert!(
            is_read(&MgmtRequest::VolumeList)
                && !is_read(&MgmtRequest::VolumeDelete { name: "v".into() })
        );
    }
}
