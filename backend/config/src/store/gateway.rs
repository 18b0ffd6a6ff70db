//! Gateway objects (NFS exports, SMB shares, iSCSI LUNs and targets): opaque JSON here.

use super::check::check_name;
use super::*;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tracing::info;

impl Store {
    /// Every object of one gateway kind (`nfs-export`, `smb-share`, `iscsi-lun`, ...), by
    /// name, with the store revision of the read (pass it to `put_gateway_object` to make
    /// a read-check-write atomic). The documents are opaque JSON here; their schema is the
    /// `cairn-gateway` crate's.
    pub async fn gateway_objects(
        &self,
        kind: &str,
    ) -> Result<(Vec<(String, String, u64)>, u64), ConfigError> {
        check_name("gateway object kind", kind)?;
        let op = format!("list {kind} objects");
        let dir = self.ctx.dir(&format!("gateway/{kind}"));
        let (kvs, rev) = self.ctx.range(&op, &dir).await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key());
            let name = key.strip_prefix(&dir).unwrap_or(&key).to_string();
            let doc = String::from_utf8(kv.value().to_vec())
                .map_err(|_| ConfigError::Invalid(format!("gateway object {key}: not UTF-8")))?;
            out.push((name, doc, kv.mod_revision() as u64));
        }
        Ok((out, rev as u64))
    }

    /// Stores `doc` as object `name` of `kind`. With `if_unchanged_since = Some(rev)` the
    /// write happens only if no object of that kind changed after revision `rev` (from
    /// `gateway_objects`); otherwise `Conflict`, and the caller re-reads, re-checks and
    /// retries. Returns the new revision.
    pub async fn put_gateway_object(
        &self,
        kind: &str,
        name: &str,
        doc: &str,
        if_unchanged_since: Option<u64>,
    ) -> Result<u64, ConfigError> {
        check_name("gateway object kind", kind)?;
        check_name(kind, name)?;
        let op = format!("store {kind} {name}");
        let dir = self.ctx.dir(&format!("gateway/{kind}"));
        let key = format!("{dir}{name}");
        let mut txn = Txn::new();
        if let Some(rev) = if_unchanged_since {
            txn = txn
                .when([Compare::mod_revision(dir.as_str(), CompareOp::Less, rev as i64 + 1)
                    .with_prefix()]);
        }
        let (ok, rev) =
            self.ctx.txn(&op, txn.and_then([TxnOp::put(key.as_str(), doc, None)])).await?;
        if !ok {
            return Err(ConfigError::Conflict(format!(
                "{kind} objects were changed concurrently; try again"
            )));
        }
        info!(kind, name, revision = rev, "gateway object stored");
        Ok(rev)
    }

    /// Deletes object `name` of `kind`; `NotFound` if there is none.
    pub async fn delete_gateway_object(&self, kind: &str, name: &str) -> Result<(), ConfigError> {
        check_name("gateway object kind", kind)?;
        check_name(kind, name)?;
        let op = format!("delete {kind} {name}");
        let key = self.ctx.key(&format!("gateway/{kind}"), name);
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Greater, 0)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        if self.ctx.txn(&op, txn).await?.0 {
            info!(kind, name, "gateway object deleted");
            Ok(())
        } else {
            Err(ConfigError::NotFound(format!("{kind} {name} does not exist")))
        }
    }
}
