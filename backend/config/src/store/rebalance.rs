//! Rebalance progress records (docs/rebalance.md): one per volume and node,
//! `rebalance/VOLUME/NODE`, written by that node's run about once a second, read by
//! `status`, by the run itself when its `cairnd` starts again (it resumes from the
//! position recorded), and by the run that finishes last (every node `completed`: the
//! volume stops `rebalancing`). Not bound to a lease: a node that fails and comes back
//! finds its record.

use super::check::{check_name, decode, named_at, Record};
use super::*;
use cairn_proto::mgmt::RebalanceNode;
use etcd_client::TxnOp;

impl Record for RebalanceNode {
    fn check(&self, key: &str) -> Result<(), RecordError> {
        named_at("rebalance node", &self.node, key)
    }
}

impl Store {
    fn rebalance_dir(&self, volume: &str) -> String {
        self.ctx.dir(&format!("rebalance/{volume}"))
    }

    /// Store node `r.node`'s record of its rebalance of `volume` (replacing the last).
    pub async fn put_rebalance(&self, volume: &str, r: &RebalanceNode) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        check_name("node", &r.node)?;
        let op = format!("store the rebalance record of {volume} on {}", r.node);
        let key = format!("{}{}", self.rebalance_dir(volume), r.node);
        let doc = serde_json::to_string(r)
            .map_err(|e| ConfigError::Invalid(format!("{op}: cannot encode: {e}")))?;
        self.ctx.txn(&op, etcd_client::Txn::new().and_then([TxnOp::put(key, doc, None)])).await?;
        Ok(())
    }

    /// Every node's rebalance record of `volume`, by node name.
    pub async fn rebalance_records(&self, volume: &str) -> Result<Vec<RebalanceNode>, ConfigError> {
        check_name("volume", volume)?;
        let op = format!("read the rebalance records of {volume}");
        let (kvs, _) = self.ctx.range(&op, &self.rebalance_dir(volume)).await?;
        kvs.iter().map(decode).collect()
    }

    /// Every volume's record of node `node`'s rebalance: what a starting `cairnd` resumes.
    pub async fn rebalance_records_of(
        &self,
        node: &str,
    ) -> Result<Vec<(String, RebalanceNode)>, ConfigError> {
        check_name("node", node)?;
        let op = format!("read the rebalance records of node {node}");
        let dir = self.ctx.dir("rebalance");
        let (kvs, _) = self.ctx.range(&op, &dir).await?;
        let mut out = vec![];
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key());
            let Some((vol, n)) = key.strip_prefix(&dir).and_then(|k| k.split_once('/')) else {
                continue;
            };
            if n == node {
                out.push((vol.to_string(), decode(kv)?));
            }
        }
        Ok(out)
    }
}

impl Store {
    fn layout_lock_key(&self, volume: &str) -> String {
        self.ctx.key("layout-lock", volume)
    }

    /// Take volume `volume`'s layout lock (`layout-lock/VOLUME`) for `holder` (what holds
    /// it, e.g. "add-brick on n1"), bound to etcd lease `lease` when given, so a dead
    /// node's lock goes with its lease. At most one layout change per volume (add-brick,
    /// a rebalance's start) holds it; `Conflict` naming the holder otherwise.
    pub async fn take_layout_lock(
        &self,
        volume: &str,
        holder: &str,
        lease: Option<i64>,
    ) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let op = format!("take the layout lock of {volume}");
        let key = self.layout_lock_key(volume);
        let opts = lease.map(|l| etcd_client::PutOptions::new().with_lease(l));
        let txn = etcd_client::Txn::new()
            .when([etcd_client::Compare::version(key.as_str(), etcd_client::CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), holder, opts)]);
        if self.ctx.txn(&op, txn).await?.0 {
            return Ok(());
        }
        let by = match self.ctx.get_one(&op, &key).await? {
            Some(kv) => String::from_utf8_lossy(kv.value()).into_owned(),
            None => "a change that just ended; try again".into(),
        };
        Err(ConfigError::Conflict(format!(
            "volume {volume}: another layout change holds the volume's layout lock ({by}): one layout change at a time"
        )))
    }

    /// Release `volume`'s layout lock if `holder` holds it.
    pub async fn release_layout_lock(&self, volume: &str, holder: &str) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let op = format!("release the layout lock of {volume}");
        let key = self.layout_lock_key(volume);
        let txn = etcd_client::Txn::new()
            .when([etcd_client::Compare::value(
                key.as_str(),
                etcd_client::CompareOp::Equal,
                holder,
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        self.ctx.txn(&op, txn).await?;
        Ok(())
    }
}
