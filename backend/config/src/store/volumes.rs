//! Volume records: created with unique brick `node:path`s, updated by compare-and-swap.

use super::check::{check_name, check_volume};
use super::*;
use crate::records::*;
use etcd_client::{Compare, CompareOp, DeleteOptions, KeyValue, Txn, TxnOp};
use tracing::{debug, info};

impl Store {
    /// Finds a brick of `v` whose `node:path` is used by another volume in `others`.
    fn brick_clash(v: &VolumeRecord, others: &[KeyValue]) -> Result<(), ConfigError> {
        for kv in others {
            let o: VolumeRecord = decode(kv)?;
            if o.name == v.name {
                continue;
            }
            for b in v.sets.iter().flat_map(|s| &s.bricks) {
                if o.sets
                    .iter()
                    .flat_map(|s| &s.bricks)
                    .any(|x| x.node == b.node && x.path == b.path)
                {
                    return Err(ConfigError::Conflict(format!(
                        "volume {}: brick {}:{} is already used by volume {}",
                        v.name, b.node, b.path, o.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Stores a new volume; returns its mod revision. `Conflict` if the volume exists or a
    /// brick `node:path` is used by another volume.
    pub async fn create_volume(&self, v: &VolumeRecord) -> Result<u64, ConfigError> {
        check_volume(v)?;
        let op = format!("create volume {}", v.name);
        let key = self.ctx.key("volumes", &v.name);
        let dir = self.ctx.dir("volumes");
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &dir).await?;
            if kvs.iter().any(|kv| kv.key() == key.as_bytes()) {
                return Err(ConfigError::Conflict(format!("volume {} already exists", v.name)));
            }
            Self::brick_clash(v, &kvs)?;
            let txn = Txn::new()
                .when([
                    Compare::version(key.as_str(), CompareOp::Equal, 0),
                    Compare::mod_revision(dir.as_str(), CompareOp::Less, rev + 1).with_prefix(),
                ])
                .and_then([TxnOp::put(key.as_str(), encode(v), None)]);
            let (ok, rev) = self.ctx.txn(&op, txn).await?;
            if ok {
                info!(volume = v.name, revision = rev, "volume created");
                return Ok(rev);
            }
            debug!(volume = v.name, "volumes changed concurrently, retrying");
        }
        Err(ConfigError::Conflict(format!(
            "volume {}: too many concurrent changes to volumes",
            v.name
        )))
    }

    pub async fn get_volume(&self, name: &str) -> Result<Option<(VolumeRecord, u64)>, ConfigError> {
        check_name("volume", name)?;
        let op = format!("get volume {name}");
        match self.ctx.get_one(&op, &self.ctx.key("volumes", name)).await? {
            Some(kv) => Ok(Some((decode(&kv)?, kv.mod_revision() as u64))),
            None => Ok(None),
        }
    }

    /// Compare-and-swap update: succeeds only if the record's mod revision is still
    /// `expected_mod_revision` (from `get_volume`); returns the new mod revision. New bricks
    /// must not be used by another volume.
    pub async fn update_volume(
        &self,
        v: &VolumeRecord,
        expected_mod_revision: u64,
    ) -> Result<u64, ConfigError> {
        check_volume(v)?;
        let op = format!("update volume {}", v.name);
        let key = self.ctx.key("volumes", &v.name);
        let dir = self.ctx.dir("volumes");
        let expected = expected_mod_revision as i64;
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &dir).await?;
            let Some(cur) = kvs.iter().find(|kv| kv.key() == key.as_bytes()) else {
                return Err(ConfigError::NotFound(format!("volume {} does not exist", v.name)));
            };
            if cur.mod_revision() != expected {
                return Err(ConfigError::Conflict(format!(
                    "volume {} was changed concurrently (now at revision {}, expected {})",
                    v.name,
                    cur.mod_revision(),
                    expected
                )));
            }
            Self::brick_clash(v, &kvs)?;
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, expected),
                    Compare::mod_revision(dir.as_str(), CompareOp::Less, rev + 1).with_prefix(),
                ])
                .and_then([TxnOp::put(key.as_str(), encode(v), None)]);
            let (ok, rev) = self.ctx.txn(&op, txn).await?;
            if ok {
                debug!(volume = v.name, revision = rev, "volume updated");
                return Ok(rev);
            }
        }
        Err(ConfigError::Conflict(format!(
            "volume {}: too many concurrent changes to volumes",
            v.name
        )))
    }

    /// Deletes a volume, its brick states and its rebalance records.
    pub async fn delete_volume(&self, name: &str) -> Result<(), ConfigError> {
        check_name("volume", name)?;
        let op = format!("delete volume {name}");
        let key = self.ctx.key("volumes", name);
        let bricks = format!("{}/bricks/{}/", self.ctx.prefix, name);
        let stale = format!("{}/stale/{}/", self.ctx.prefix, name);
        let rebalance = format!("{}/rebalance/{}/", self.ctx.prefix, name);
        let txn =
            Txn::new().when([Compare::version(key.as_str(), CompareOp::Greater, 0)]).and_then([
                TxnOp::delete(key.as_str(), None),
                TxnOp::delete(bricks, Some(DeleteOptions::new().with_prefix())),
                TxnOp::delete(stale, Some(DeleteOptions::new().with_prefix())),
                TxnOp::delete(rebalance, Some(DeleteOptions::new().with_prefix())),
            ]);
        if self.ctx.txn(&op, txn).await?.0 {
            info!(volume = name, "volume deleted");
            Ok(())
        } else {
            Err(ConfigError::NotFound(format!("volume {name} does not exist")))
        }
    }

    pub async fn list_volumes(&self) -> Result<Vec<VolumeRecord>, ConfigError> {
        let (kvs, _) = self.ctx.range("list volumes", &self.ctx.dir("volumes")).await?;
        kvs.iter().map(decode).collect()
    }
}
