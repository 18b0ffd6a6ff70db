//! Issued certificates and their revocation (docs/security.md, "Revocation").
//!
//! Every certificate the cluster CA issues is recorded under `/cairn/certs/<serial>` (the
//! serial number in lower-case hex): who holds it, its role and limits, when it expires,
//! and, once revoked, when and by whom. Every `cairnd` reads the revoked serials
//! ([`Store::revoked_serials`]) every few seconds into its TLS revocation set: a revoked
//! certificate is refused at the handshake, and its live sessions are closed. Records are
//! pruned a day after the certificate expired (it is refused as expired from then on).

use crate::store::{decode, encode, named_at, ConfigError, Record, RecordError, Store};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use tracing::info;

/// Records of expired certificates are deleted this long after they expired.
const KEEP_AFTER_EXPIRY: u64 = 24 * 3600;

/// An issued certificate, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertRecord {
    /// Serial number, lower-case hex (`cairn_proto::tls::serial_of`).
    pub serial: String,
    /// Holder (subject common name).
    pub name: String,
    /// `admin`, `node`, `gateway` or `client`.
    pub role: String,
    /// Volumes a client certificate is limited to (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<String>>,
    #[serde(default)]
    pub read_only: bool,
    /// Unix seconds.
    pub issued: u64,
    /// Unix seconds (the certificate's notAfter).
    pub expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
    /// Who revoked it (the principal of the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
}

/// Whether `s` is a serial number as recorded: hex, 1..=40 digits.
pub fn valid_serial(s: &str) -> bool {
    !s.is_empty() && s.len() <= 40 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Record for CertRecord {
    fn check(&self, key: &str) -> Result<(), RecordError> {
        if !valid_serial(&self.serial) {
            return Err(RecordError::CertSerial(self.serial.clone()));
        }
        named_at("certificate", &self.serial, key)
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Store {
    /// Records an issued certificate (replacing nothing: a serial already recorded, e.g.
    /// a node re-recording its certificate at every start, is left as it is, revoked or
    /// not).
    pub async fn record_cert(&self, rec: &CertRecord) -> Result<(), ConfigError> {
        if !valid_serial(&rec.serial) {
            return Err(ConfigError::Invalid(format!(
                "certificate serial {:?} is not lower-case hex",
                rec.serial
            )));
        }
        let key = self.ctx.key("certs", &rec.serial);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), encode(rec), None)]);
        if self.ctx.txn(&format!("record certificate {}", rec.serial), txn).await?.0 {
            info!(serial = rec.serial, name = rec.name, role = rec.role, "certificate recorded");
        }
        Ok(())
    }

    /// Every recorded certificate, oldest first (expired ones pruned).
    pub async fn certs(&self) -> Result<Vec<CertRecord>, ConfigError> {
        let (kvs, _) = self.ctx.range("list certificates", &self.ctx.dir("certs")).await?;
        let mut v: Vec<CertRecord> = kvs.iter().map(decode).collect::<Result<_, _>>()?;
        let t = now();
        for r in v.iter().filter(|r| r.expires + KEEP_AFTER_EXPIRY < t) {
            let key = self.ctx.key("certs", &r.serial);
            self.ctx
                .txn("prune certificate record", Txn::new().and_then([TxnOp::delete(key, None)]))
                .await?;
        }
        v.retain(|r| r.expires + KEEP_AFTER_EXPIRY >= t);
        v.sort_by(|a, b| (a.issued, &a.name, &a.serial).cmp(&(b.issued, &b.name, &b.serial)));
        Ok(v)
    }

    /// Publish the cluster CA certificate(s) trusted now (PEM: the new and the old CA
    /// during a rotation, else one), written by the node holding the CA. Other nodes
    /// compare it with what they trust to learn of a rotation; they take the certificates
    /// themselves from that node, over their authenticated connection, never from here.
    pub async fn put_ca_trust(&self, pem: &str) -> Result<(), ConfigError> {
        let key = self.ctx.key("ca", "trust");
        let txn = Txn::new().and_then([TxnOp::put(key.as_str(), pem, None)]);
        self.ctx.txn("publish the trusted CA certificates", txn).await?;
        Ok(())
    }

    /// What [`Store::put_ca_trust`] published last (`None`: nothing yet).
    pub async fn ca_trust(&self) -> Result<Option<String>, ConfigError> {
        let key = self.ctx.key("ca", "trust");
        Ok(self
            .ctx
            .get_one("read the trusted CA certificates", &key)
            .await?
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
    }

    /// The serial numbers of revoked certificates (one read: what every node's TLS
    /// revocation set is kept equal to).
    pub async fn revoked_serials(&self) -> Result<HashSet<String>, ConfigError> {
        let (kvs, _) = self.ctx.range("read revoked certificates", &self.ctx.dir("certs")).await?;
        let mut set = HashSet::new();
        for kv in &kvs {
            let r: CertRecord = decode(kv)?;
            if r.revoked_at.is_some() {
                set.insert(r.serial);
            }
        }
        Ok(set)
    }

    /// Revokes the certificates `what` names: a serial number (recorded or not: an
    /// unrecorded serial is recorded as revoked), or a holder's name (every unrevoked
    /// certificate of that name). Returns the records revoked now or before; NotFound when
    /// a name matches no certificate.
    pub async fn revoke_cert(&self, what: &str, by: &str) -> Result<Vec<CertRecord>, ConfigError> {
        let all = self.certs().await?;
        let serial = what.to_ascii_lowercase().replace(':', "");
        let mut targets: Vec<CertRecord> =
            all.iter().filter(|r| r.serial == serial).cloned().collect();
        if targets.is_empty() {
            targets = all.iter().filter(|r| r.name == what).cloned().collect();
        }
        if targets.is_empty() {
            if !valid_serial(&serial) {
                return Err(ConfigError::NotFound(format!(
                    "no certificate named {what:?} is recorded ('cairn client certificate list' shows them; a serial number is hex)"
                )));
            }
            // A certificate issued before records were kept: revoke its serial all the same.
            targets.push(CertRecord {
                serial,
                name: String::new(),
                role: String::new(),
                volumes: None,
                read_only: false,
                issued: 0,
                expires: now() + crate::certs::UNKNOWN_EXPIRY,
                revoked_at: None,
                revoked_by: None,
            });
        }
        let mut out = Vec::new();
        for mut rec in targets {
            if rec.revoked_at.is_some() {
                out.push(rec);
                continue;
            }
            let key = self.ctx.key("certs", &rec.serial);
            let op = format!("revoke certificate {}", rec.serial);
            rec.revoked_at = Some(now());
            rec.revoked_by = Some(by.to_string());
            let txn = Txn::new().and_then([TxnOp::put(key.as_str(), encode(&rec), None)]);
            self.ctx.txn(&op, txn).await?;
            info!(serial = rec.serial, name = rec.name, by, "certificate revoked");
            out.push(rec);
        }
        Ok(out)
    }
}

/// How long the record of a revoked serial whose certificate is unknown is kept: longer
/// than any certificate the CA issues lives.
pub const UNKNOWN_EXPIRY: u64 = 3650 * 86400;
