//! Join tokens: what a node must present to join the cluster (`cairn peer token create`,
//! then `cairn peer probe HOST --token TOKEN`), in the manner of `kubeadm token create`.
//!
//! A token is `ID.SECRET` (8 and 32 hex digits: 128 random bits of secret). The store keeps
//! only its SHA-256, with its expiry and, once used or revoked, when and by whom, under
//! `/cairn/join-tokens/<ID>`. A token is used once: `consume_join_token` marks it used in
//! the same compare-and-swap that checks it, so two joins racing with one token cannot both
//! win. Records are pruned a day after they expire.

use crate::store::{decode, encode, named_at, ConfigError, Record, RecordError, Store};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tracing::info;

/// Longest lifetime of a join token (kubeadm's default is 24 h; we allow up to a week).
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default lifetime (`cairn peer token create` without `--ttl`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// Used, revoked or expired records are deleted this long after they expired.
const KEEP_AFTER_EXPIRY: u64 = 24 * 3600;

/// A stored join token: never the secret, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenRecord {
    /// 8 hex digits; the part before the dot.
    pub id: String,
    /// SHA-256 of the whole token `ID.SECRET`, hex.
    pub hash: String,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds; refused from then on.
    pub expires: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<u64>,
    /// Who joined with it (the node name and address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
}

impl Record for JoinTokenRecord {
    fn check(&self, key: &str) -> Result<(), RecordError> {
        if !valid_id(&self.id) {
            return Err(RecordError::TokenId(self.id.clone()));
        }
        if self.hash.len() != 64 || !self.hash.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(RecordError::TokenHash(self.id.clone()));
        }
        named_at("join token", &self.id, key)
    }
}

/// What a consumed token grants: the right to join, recorded as used by `by`. The tls
/// work issues the node's certificate in the same step, from this grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGrant {
    pub token_id: String,
    /// Who presented it (as passed to `consume_join_token`).
    pub by: String,
    /// Unix seconds.
    pub at: u64,
}

/// Why a join token was refused. Every case but `Store` is a refusal (EACCES).
#[derive(Debug, thiserror::Error)]
pub enum JoinTokenError {
    #[error("join token is malformed: expected ID.SECRET (8 and 32 hex digits) as printed by 'cairn peer token create'")]
    Malformed,
    #[error("join token {id} is not valid (unknown, or its secret is wrong)")]
    Invalid { id: String },
    #[error("join token {id} was already used (by {by} at {at}); create a new one with 'cairn peer token create'")]
    Used { id: String, by: String, at: String },
    #[error("join token {id} was revoked at {at}")]
    Revoked { id: String, at: String },
    #[error("join token {id} expired at {at}; create a new one with 'cairn peer token create'")]
    Expired { id: String, at: String },
    #[error(transparent)]
    Store(#[from] ConfigError),
}

fn valid_id(id: &str) -> bool {
    id.len() == 8 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two equal-length hex strings without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Splits `ID.SECRET`, checking the shape; `None` if malformed.
pub fn token_id(token: &str) -> Option<&str> {
    let (id, secret) = token.trim().split_once('.')?;
    (valid_id(id) && secret.len() == 32 && secret.bytes().all(|c| c.is_ascii_hexdigit()))
        .then_some(id)
}

impl Store {
    /// Creates a token valid for `ttl` (1 s ..= `MAX_TTL`). Returns the token, which is
    /// never stored nor shown again, and its record.
    pub async fn create_join_token(
        &self,
        ttl: Duration,
    ) -> Result<(String, JoinTokenRecord), ConfigError> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(ConfigError::Invalid(format!(
                "join token lifetime {}s is not between 1s and {}s",
                ttl.as_secs(),
                MAX_TTL.as_secs()
            )));
        }
        self.prune_join_tokens().await?;
        for _ in 0..8 {
            let id = format!("{:08x}", rand::random::<u32>());
            let token = format!("{id}.{:032x}", rand::random::<u128>());
            let t = now();
            let rec = JoinTokenRecord {
                id: id.clone(),
                hash: hash(&token),
                created: t,
                expires: t + ttl.as_secs(),
                used_at: None,
                used_by: None,
                revoked_at: None,
            };
            let key = self.ctx.key("join-tokens", &id);
            let txn = Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), encode(&rec), None)]);
            if self.ctx.txn("create join token", txn).await?.0 {
                info!(token = id, expires = rec.expires, "join token created");
                return Ok((token, rec));
            }
        }
        Err(ConfigError::Conflict("could not pick an unused join token id".into()))
    }

    /// Every stored join token, oldest first.
    pub async fn join_tokens(&self) -> Result<Vec<JoinTokenRecord>, ConfigError> {
        let (kvs, _) = self.ctx.range("list join tokens", &self.ctx.dir("join-tokens")).await?;
        let mut v: Vec<JoinTokenRecord> = kvs.iter().map(decode).collect::<Result<_, _>>()?;
        v.sort_by_key(|r| (r.created, r.id.clone()));
        Ok(v)
    }

    /// Revokes token `id` (the record stays until pruned, so a later use says "revoked").
    pub async fn revoke_join_token(&self, id: &str) -> Result<JoinTokenRecord, ConfigError> {
        if !valid_id(id) {
            return Err(ConfigError::Invalid(format!("join token id {id:?} is not 8 hex digits")));
        }
        let op = format!("revoke join token {id}");
        let key = self.ctx.key("join-tokens", id);
        for _ in 0..16 {
            let kv =
                self.ctx.get_one(&op, &key).await?.ok_or_else(|| {
                    ConfigError::NotFound(format!("join token {id} does not exist"))
                })?;
            let mut rec: JoinTokenRecord = decode(&kv)?;
            if rec.revoked_at.is_some() {
                return Ok(rec);
            }
            rec.revoked_at = Some(now());
            let txn = Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision())])
                .and_then([TxnOp::put(key.as_str(), encode(&rec), None)]);
            if self.ctx.txn(&op, txn).await?.0 {
                info!(token = id, "join token revoked");
                return Ok(rec);
            }
        }
        Err(ConfigError::Conflict(format!("join token {id}: too many concurrent changes")))
    }

    async fn prune_join_tokens(&self) -> Result<(), ConfigError> {
        let t = now();
        for r in self.join_tokens().await? {
            if r.expires + KEEP_AFTER_EXPIRY < t {
                let key = self.ctx.key("join-tokens", &r.id);
                self.ctx
                    .txn("prune join token", Txn::new().and_then([TxnOp::delete(key, None)]))
                    .await?;
            }
        }
        Ok(())
    }
}

/// Checks `token` and marks it used by `by`, atomically: the one place that decides whether
/// a node may join. A malformed, unknown, used, revoked or expired token is refused, saying
/// which.
pub async fn consume_join_token(
    store: &Store,
    token: &str,
    by: &str,
) -> Result<JoinGrant, JoinTokenError> {
    let token = token.trim();
    let id = token_id(token).ok_or(JoinTokenError::Malformed)?.to_string();
    let key = store.ctx.key("join-tokens", &id);
    let op = format!("use join token {id}");
    for _ in 0..16 {
        let Some(kv) = store.ctx.get_one(&op, &key).await? else {
            return Err(JoinTokenError::Invalid { id });
        };
        let mut rec: JoinTokenRecord = decode(&kv)?;
        let t = now();
        usable(&rec, token, &id, t)?;
        rec.used_at = Some(t);
        rec.used_by = Some(by.to_string());
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, kv.mod_revision())])
            .and_then([TxnOp::put(key.as_str(), encode(&rec), None)]);
        if store.ctx.txn(&op, txn).await?.0 {
            info!(token = id, by, "join token used");
            return Ok(JoinGrant { token_id: id, by: by.to_string(), at: t });
        }
    }
    Err(ConfigError::Conflict(format!("join token {id}: too many concurrent changes")).into())
}

/// Whether `token` (of id `id`, stored as `rec`) may be used at time `t`, saying why not.
fn usable(rec: &JoinTokenRecord, token: &str, id: &str, t: u64) -> Result<(), JoinTokenError> {
    let id = id.to_string();
    if !same(&rec.hash, &hash(token)) {
        return Err(JoinTokenError::Invalid { id });
    }
    if let Some(at) = rec.revoked_at {
        return Err(JoinTokenError::Revoked { id, at: cairn_proto::mgmt::rfc3339(at) });
    }
    if let Some(at) = rec.used_at {
        let by = rec.used_by.clone().unwrap_or_else(|| "?".into());
        return Err(JoinTokenError::Used { id, by, at: cairn_proto::mgmt::rfc3339(at) });
    }
    if t >= rec.expires {
        return Err(JoinTokenError::Expired { id, at: cairn_proto::mgmt::rfc3339(rec.expires) });
    }
    Ok(())
}

/// The checks of [`consume_join_token`] without using the token up: a request is checked
/// against it first, so one refused for another reason (its address taken, say) does not
/// cost the token, and one without a valid token learns nothing else.
pub async fn check_join_token(store: &Store, token: &str) -> Result<(), JoinTokenError> {
    let token = token.trim();
    let id = token_id(token).ok_or(JoinTokenError::Malformed)?.to_string();
    let key = store.ctx.key("join-tokens", &id);
    let Some(kv) = store.ctx.get_one(&format!("check join token {id}"), &key).await? else {
        return Err(JoinTokenError::Invalid { id });
    };
    let rec: JoinTokenRecord = decode(&kv)?;
    usable(&rec, token, &id, now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shape() {
        let t = format!("0123abcd.{:032x}", 7u128);
        assert_eq!(token_id(&t), Some("0123abcd"));
        assert_eq!(token_id(" 0123abcd.0000000000000000000000000000000f\n"), Some("0123abcd"));
        for bad in [
            "",
            "0123abcd",
            "0123abcd.",
            "0123ABCD.00000000000000000000000000000000",
            "0123abc.00000000000000000000000000000000",
            "0123abcd.0000",
        ] {
            assert_eq!(token_id(bad), None, "{bad}");
        }
        assert_eq!(hash("a").len(), 64);
        assert!(same(&hash("x"), &hash("x")) && !same(&hash("x"), &hash("y")));
    }
}
