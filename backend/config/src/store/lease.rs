//! A node's liveness lease: registration, keep-alive, brick states published under it.

use super::check::check_name;
use super::*;
use cairn_proto::map::BrickState;
use etcd_client::PutOptions;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// A node's liveness lease; dropping it stops the keep-alive and revokes the lease (if a
/// tokio runtime is still around; otherwise the lease expires after its TTL).
pub struct NodeLease {
    ctx: Arc<Ctx>,
    node: String,
    id: i64,
    shared: Arc<LeaseShared>,
    task: JoinHandle<()>,
    released: bool,
}

struct LeaseShared {
    base: Instant,
    ttl: Duration,
    /// Milliseconds after `base` at which the last successful keep-alive was *sent* (the
    /// server extended the lease at some later moment, so this is conservative).
    last_renew_ms: AtomicU64,
    /// Set when etcd said the lease is gone (expired or revoked): never valid again.
    lost: AtomicBool,
}

impl LeaseShared {
    fn renewed_at(&self, sent: Instant) {
        let ms = sent.saturating_duration_since(self.base).as_millis() as u64;
        self.last_renew_ms.fetch_max(ms, Ordering::AcqRel);
    }

    fn is_alive(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return false;
        }
        let last = self.base + Duration::from_millis(self.last_renew_ms.load(Ordering::Acquire));
        last.elapsed() < self.ttl / 2
    }
}

fn brick_state_value(s: BrickState) -> Option<&'static str> {
    match s {
        BrickState::Up => Some("up"),
        BrickState::Healing => Some("healing"),
        BrickState::Down => None,
    }
}

impl NodeLease {
    pub fn lease_id(&self) -> i64 {
        self.id
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The lease's TTL as granted by etcd (may be longer than asked for).
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// True while the lease is known to be valid: the last successful keep-alive was sent
    /// less than half the TTL ago and etcd never reported the lease gone. When this turns
    /// false the node must stop accepting writes (it may be fenced out by now).
    pub fn is_alive(&self) -> bool {
        self.shared.is_alive()
    }

    /// Publishes the state of one brick served by this node, under the node's lease.
    /// `BrickState::Down` removes the key.
    pub async fn set_brick_state(
        &self,
        volume: &str,
        index: u32,
        state: BrickState,
    ) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let Some(value) = brick_state_value(state) else {
            return self.clear_brick_state(volume, index).await;
        };
        if !self.is_alive() {
            return Err(ConfigError::LeaseLost { node: self.node.clone(), lease: self.id });
        }
        let key = self.ctx.brick_key(volume, index);
        let op = format!("set brick {volume}/{index} {value} (node {})", self.node);
        let mut kv = self.ctx.client.kv_client();
        self.ctx.call(&op, kv.put(key, value, Some(PutOptions::new().with_lease(self.id)))).await?;
        Ok(())
    }

    /// Publishes this node's own report `name` of gateway-object `kind` (e.g. the fence
    /// generations it applied, `fence-applied/<node>`) under the node's lease: it goes
    /// with the lease, so a dead or cut-off node's report vanishes with its `/live` key.
    /// Not conditional: only this node writes it.
    pub async fn publish_gateway_object(
        &self,
        kind: &str,
        name: &str,
        doc: &str,
    ) -> Result<u64, ConfigError> {
        check_name("gateway object kind", kind)?;
        check_name(kind, name)?;
        if !self.is_alive() {
            return Err(ConfigError::LeaseLost { node: self.node.clone(), lease: self.id });
        }
        let key = self.ctx.key(&format!("gateway/{kind}"), name);
        let op = format!("publish {kind} {name} (node {})", self.node);
        let mut kv = self.ctx.client.kv_client();
        let r = self
            .ctx
            .call(&op, kv.put(key, doc, Some(PutOptions::new().with_lease(self.id))))
            .await?;
        Ok(r.header().map_or(0, |h| h.revision() as u64))
    }

    /// Removes the brick's state key (the brick is then Down).
    pub async fn clear_brick_state(&self, volume: &str, index: u32) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let key = self.ctx.brick_key(volume, index);
        let op = format!("clear brick {volume}/{index} (node {})", self.node);
        let mut kv = self.ctx.client.kv_client();
        self.ctx.call(&op, kv.delete(key, None)).await?;
        Ok(())
    }

    /// Stops renewing the lease without revoking it: it expires after its TTL, like when
    /// the node dies. `is_alive()` turns false after half the TTL.
    pub fn stop_keepalive(&self) {
        self.task.abort();
    }

    /// Stops the keep-alive and revokes the lease: the node's keys vanish at once.
    pub async fn revoke(mut self) -> Result<(), ConfigError> {
        self.released = true;
        self.task.abort();
        self.shared.lost.store(true, Ordering::Release);
        let mut lc = self.ctx.client.lease_client();
        let op = format!("revoke lease {:x} of node {}", self.id, self.node);
        match self.ctx.call(&op, lc.revoke(self.id)).await {
            Ok(_) => Ok(()),
            // Already expired: same outcome.
            Err(ConfigError::Request { source, .. })
                if source.to_string().contains("requested lease not found") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for NodeLease {
    fn drop(&mut self) {
        self.task.abort();
        if self.released {
            return;
        }
        self.shared.lost.store(true, Ordering::Release);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut lc = self.ctx.client.lease_client();
            let (id, node) = (self.id, self.node.clone());
            rt.spawn(async move {
                match tokio::time::timeout(REQUEST_TIMEOUT, lc.revoke(id)).await {
                    Ok(Ok(_)) => debug!(node, lease = id, "lease revoked on drop"),
                    Ok(Err(e)) => debug!(node, lease = id, error = %e, "revoke on drop failed"),
                    Err(_) => debug!(node, lease = id, "revoke on drop timed out"),
                }
            });
        }
    }
}

async fn keepalive_loop(ctx: Arc<Ctx>, node: String, id: i64, shared: Arc<LeaseShared>) {
    let interval = (shared.ttl / 3).max(Duration::from_millis(100));
    loop {
        let mut lc = ctx.client.lease_client();
        let sent = Instant::now();
        let (mut keeper, mut stream) = match tokio::time::timeout(interval, lc.keep_alive(id)).await
        {
            Ok(Ok(pair)) => {
                shared.renewed_at(sent);
                pair
            }
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) => {
                // The first answer said ttl <= 0: the lease is gone for good.
                warn!(node, lease = id, error = %e, "lease lost");
                shared.lost.store(true, Ordering::Release);
                return;
            }
            Ok(Err(e)) => {
                debug!(node, lease = id, error = %e, "lease keep-alive stream failed");
                tokio::time::sleep_until((sent + interval).into()).await;
                continue;
            }
            Err(_) => {
                debug!(node, lease = id, "lease keep-alive stream: no answer");
                continue;
            }
        };
        loop {
            tokio::time::sleep_until((sent_next(&shared, interval)).into()).await;
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match tokio::time::timeout(interval, stream.message()).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => shared.renewed_at(sent),
                Ok(Ok(Some(_))) => {
                    warn!(node, lease = id, "lease expired");
                    shared.lost.store(true, Ordering::Release);
                    return;
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    debug!(node, lease = id, "lease keep-alive stream closed");
                    break;
                }
                Err(_) => {
                    debug!(node, lease = id, "lease keep-alive: no answer in time");
                    break;
                }
            }
        }
        if !shared.is_alive() {
            warn!(node, lease = id, "lease not renewed for half its TTL: node is fenced");
        }
    }
}

/// When the next keep-alive is due: one interval after the last successful one (or now).
fn sent_next(shared: &LeaseShared, interval: Duration) -> Instant {
    shared.base + Duration::from_millis(shared.last_renew_ms.load(Ordering::Acquire)) + interval
}

impl Store {
    /// Grants a lease of `ttl_secs`, publishes `/live/<node>` = `addr` under it and keeps it
    /// alive from a background task until the `NodeLease` is dropped or revoked. Returns
    /// once the lease `is_alive()` (`LeaseLost` if no renewal got through within the TTL).
    pub async fn register_node(
        &self,
        node: &str,
        addr: &str,
        ttl_secs: u64,
    ) -> Result<NodeLease, ConfigError> {
        check_name("node", node)?;
        let op = format!("register node {node}");
        let mut lc = self.ctx.client.lease_client();
        let sent = Instant::now();
        let grant = self.ctx.call(&op, lc.grant(ttl_secs.max(1) as i64, None)).await?;
        let (id, ttl) = (grant.id(), Duration::from_secs(grant.ttl().max(1) as u64));
        let shared = Arc::new(LeaseShared {
            base: sent,
            ttl,
            last_renew_ms: AtomicU64::new(0),
            lost: AtomicBool::new(false),
        });
        let mut kv = self.ctx.client.kv_client();
        let put = kv.put(self.ctx.key("live", node), addr, Some(PutOptions::new().with_lease(id)));
        if let Err(e) = self.ctx.call(&op, put).await {
            let _ = self.ctx.call(&op, lc.revoke(id)).await;
            return Err(e);
        }
        let task =
            tokio::spawn(keepalive_loop(self.ctx.clone(), node.to_string(), id, shared.clone()));
        let lease = NodeLease {
            ctx: self.ctx.clone(),
            node: node.to_string(),
            id,
            shared,
            task,
            released: false,
        };
        // The lease counts as alive for half its TTL after the grant request was *sent*.
        // Over a slow link (an etcd connection recovering from a partition) the grant and
        // the put above can take longer than that: the lease would be handed out already
        // fenced, and everything published under it refused until the first renewal. Wait
        // for that renewal (the keep-alive task sends it at once).
        let deadline = Instant::now() + ttl;
        while !lease.is_alive() {
            if lease.shared.lost.load(Ordering::Acquire) || Instant::now() >= deadline {
                let _ = lease.revoke().await;
                return Err(ConfigError::LeaseLost { node: node.to_string(), lease: id });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        info!(node, addr, lease = id, ttl = ?ttl, "node registered");
        Ok(lease)
    }
}
