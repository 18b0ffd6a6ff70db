use crate::records::*;
use cairn_proto::map::{BrickInfo, BrickState, ReplicaSet, VolumeMap};
use cairn_proto::Backoff;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue, PutOptions,
    Txn, TxnOp, WatchOptions, WatchStream, Watcher,
};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// Default bound on `Store::connect` (first answer from etcd).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on every single request to etcd.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Optimistic transactions (read a snapshot, check it, commit if nothing changed) are retried
/// this many times when another writer got in between.
const TXN_RETRIES: usize = 16;
const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(100);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config store unreachable at {endpoints}: {source}")]
    Unreachable { endpoints: String, source: etcd_client::Error },
    #[error("config store: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// An etcd request failed for a reason other than reachability.
    #[error("config store: {op}: {source}")]
    Request { op: String, source: etcd_client::Error },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// A record or name that can never be stored (empty name, `/` in a name, bad id...).
    #[error("{0}")]
    Invalid(String),
    /// The node's lease is no longer known to be valid: it must stop serving.
    #[error("lease {lease:x} of node {node} is lost or expired")]
    LeaseLost { node: String, lease: i64 },
    #[error("bad record at {key}: {source}")]
    BadRecord { key: String, source: serde_json::Error },
}

/// Connection and key layout shared by a `Store`, its leases and its watch task.
pub(crate) struct Ctx {
    client: Client,
    /// Without trailing slash, e.g. `/cairn`.
    prefix: String,
    /// Comma-separated, for error messages.
    endpoints: String,
}

impl Ctx {
    pub(crate) fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/{}/{}", self.prefix, kind, name)
    }

    pub(crate) fn dir(&self, kind: &str) -> String {
        format!("{}/{}/", self.prefix, kind)
    }

    fn brick_key(&self, volume: &str, index: u32) -> String {
        format!("{}/bricks/{}/{}", self.prefix, volume, index)
    }

    fn unreachable(&self, op: &str, why: String) -> ConfigError {
        ConfigError::Unreachable {
            endpoints: self.endpoints.clone(),
            source: etcd_client::Error::IoError(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{op}: {why}"),
            )),
        }
    }

    fn classify(&self, op: &str, e: etcd_client::Error) -> ConfigError {
        let unreachable = match &e {
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
            // 14 = UNAVAILABLE, 4 = DEADLINE_EXCEEDED; 2 = UNKNOWN is how tonic reports a
            // connection that broke under a request ("transport error" with an I/O source).
            etcd_client::Error::GRpcStatus(s) => {
                matches!(s.code() as i32, 14 | 4)
                    || (s.code() as i32 == 2 && std::error::Error::source(s).is_some())
            }
            _ => false,
        };
        if unreachable {
            ConfigError::Unreachable { endpoints: self.endpoints.clone(), source: e }
        } else {
            ConfigError::Request { op: op.to_string(), source: e }
        }
    }

    /// Runs one etcd request with a bound and error context.
    pub(crate) async fn call<T>(
        &self,
        op: &str,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, ConfigError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.classify(op, e)),
            Err(_) => Err(self.unreachable(op, format!("no answer within {REQUEST_TIMEOUT:?}"))),
        }
    }

    /// All key-values under `dir` and the revision they were read at.
    pub(crate) async fn range(
        &self,
        op: &str,
        dir: &str,
    ) -> Result<(Vec<KeyValue>, i64), ConfigError> {
        let mut kv = self.client.kv_client();
        let mut resp = self.call(op, kv.get(dir, Some(GetOptions::new().with_prefix()))).await?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((resp.take_kvs(), rev))
    }

    pub(crate) async fn get_one(
        &self,
        op: &str,
        key: &str,
    ) -> Result<Option<KeyValue>, ConfigError> {
        let mut kv = self.client.kv_client();
        let mut resp = self.call(op, kv.get(key, None)).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    pub(crate) async fn txn(&self, op: &str, txn: Txn) -> Result<(bool, u64), ConfigError> {
        let mut kv = self.client.kv_client();
        let resp = self.call(op, kv.txn(txn)).await?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((resp.succeeded(), rev as u64))
    }

    async fn revision(&self) -> Result<u64, ConfigError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .call(
                "read revision",
                kv.get(self.prefix.as_str(), Some(GetOptions::new().with_count_only())),
            )
            .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0) as u64)
    }
}

pub(crate) fn decode<T: Record>(kv: &KeyValue) -> Result<T, ConfigError> {
    decode_value(kv.key(), kv.value())
}

/// A record as read back from `key`: parsed, then held to the rules it was stored under
/// (a corrupted or hand-edited record is an error naming its key, never data the rest of
/// the cluster trips over).
fn decode_value<T: Record>(key: &[u8], value: &[u8]) -> Result<T, ConfigError> {
    let key = String::from_utf8_lossy(key).into_owned();
    let r: T = match serde_json::from_slice(value) {
        Ok(r) => r,
        Err(source) => return Err(ConfigError::BadRecord { key, source }),
    };
    match r.check(&key) {
        Ok(()) => Ok(r),
        Err(why) => Err(ConfigError::BadRecord { key, source: serde::de::Error::custom(why) }),
    }
}

/// What a stored record must hold; `key` is where it was read from.
pub(crate) trait Record: serde::de::DeserializeOwned {
    fn check(&self, key: &str) -> Result<(), String>;
}

/// The record's name is the last component of its key.
fn named_at(what: &str, name: &str, key: &str) -> Result<(), String> {
    match key.rsplit_once('/') {
        Some((_, last)) if last == name => Ok(()),
        _ => Err(format!("it names {what} {name:?}, not the one of its key")),
    }
}

impl Record for PeerRecord {
    fn check(&self, key: &str) -> Result<(), String> {
        check_name("peer", &self.name).map_err(|e| e.to_string())?;
        named_at("peer", &self.name, key)
    }
}

impl Record for VolumeRecord {
    fn check(&self, key: &str) -> Result<(), String> {
        check_volume(self).map_err(|e| e.to_string())?;
        named_at("volume", &self.name, key)
    }
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> String {
    // Records are plain data (strings, integers, maps with string keys): cannot fail.
    serde_json::to_string(v).expect("config records always serialize")
}

/// Peer, node and volume names become key components: keep them boring.
fn check_name(what: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || name.len() > 255
        || name.chars().any(|c| c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::Invalid(format!(
            "invalid {what} name {name:?}: must be 1-255 characters without '/' or whitespace"
        )));
    }
    Ok(())
}

fn check_volume(v: &VolumeRecord) -> Result<(), ConfigError> {
    check_name("volume", &v.name)?;
    if v.id.len() != 32 || u128::from_str_radix(&v.id, 16).is_err() {
        return Err(ConfigError::Invalid(format!(
            "volume {}: id {:?} is not 32 hex digits",
            v.name, v.id
        )));
    }
    let mut indices = HashMap::new();
    let mut places = HashMap::new();
    for b in v.sets.iter().flat_map(|s| &s.bricks) {
        check_name("node", &b.node).map_err(|e| {
            ConfigError::Invalid(format!("volume {}: brick {}: {e}", v.name, b.index))
        })?;
        if !b.path.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick {}:{} path is not absolute",
                v.name, b.node, b.path
            )));
        }
        if indices.insert(b.index, ()).is_some() {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick index {} used twice",
                v.name, b.index
            )));
        }
        if places.insert((b.node.as_str(), b.path.as_str()), ()).is_some() {
            return Err(ConfigError::Invalid(format!(
                "volume {}: brick {}:{} listed twice",
                v.name, b.node, b.path
            )));
        }
    }
    Ok(())
}

/// How cairnd proves itself to etcd: the CA that signed etcd's certificate, and this
/// node's client certificate and key (PEM files). All `None`: plain HTTP (a test or an
/// isolated etcd on loopback).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl EtcdSecurity {
    fn read(what: &str, p: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
        std::fs::read(p).map_err(|e| {
            ConfigError::Invalid(format!("etcd {what} {}: cannot read: {e}", p.display()))
        })
    }

    fn tls_options(&self) -> Result<Option<etcd_client::TlsOptions>, ConfigError> {
        if self.ca.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        let mut tls = etcd_client::TlsOptions::new();
        if let Some(ca) = &self.ca {
            tls = tls.ca_certificate(etcd_client::Certificate::from_pem(Self::read("CA", ca)?));
        }
        match (&self.cert, &self.key) {
            (Some(c), Some(k)) => {
                tls = tls.identity(etcd_client::Identity::from_pem(
                    Self::read("client certificate", c)?,
                    Self::read("client key", k)?,
                ));
            }
            (None, None) => {}
            _ => {
                return Err(ConfigError::Invalid(
                    "etcd client certificate and key go together (--etcd-cert and --etcd-key)"
                        .into(),
                ))
            }
        }
        Ok(Some(tls))
    }
}

/// The cluster config store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) ctx: Arc<Ctx>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("endpoints", &self.ctx.endpoints)
            .field("prefix", &self.ctx.prefix)
            .finish()
    }
}

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

pub fn build_map(
    v: &VolumeRecord,
    peers: &[PeerRecord],
    states: &HashMap<u32, BrickState>,
    epoch: u64,
) -> VolumeMap {
    let addrs: HashMap<&str, &str> =
        peers.iter().map(|p| (p.name.as_str(), p.addr.as_str())).collect();
    let sets = v
        .sets
        .iter()
        .map(|s| ReplicaSet {
            id: s.id,
            bricks: s
                .bricks
                .iter()
                .map(|b| {
                    let (addr, state) = match addrs.get(b.node.as_str()) {
                        Some(addr) => (
                            addr.to_string(),
                            states.get(&b.index).copied().unwrap_or(BrickState::Down),
                        ),
                        None => (String::new(), BrickState::Down),
                    };
                    BrickInfo {
                        index: b.index,
                        node: b.node.clone(),
                        addr,
                        path: b.path.clone(),
                        state,
                    }
                })
                .collect(),
        })
        .collect();
    VolumeMap {
        name: v.name.clone(),
        // Checked to be 32 hex digits when the record is stored.
        id: u128::from_str_radix(&v.id, 16).unwrap_or_else(|_| {
            warn!(volume = v.name, id = v.id, "volume id is not hex");
            0
        }),
        epoch,
        layout_epoch: v.layout_epoch,
        rebalancing: v.rebalancing,
        layout: v.layout.clone(),
        status: v.status,
        replica: v.replica,
        sets,
        options: v.options.clone(),
    }
}

impl Store {
    /// Connects to etcd and checks it answers within `DEFAULT_CONNECT_TIMEOUT`.
    /// `endpoints` are URLs (`http://host:port`) or `host:port`; `prefix` is the key prefix
    /// (`/cairn`).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Store, ConfigError> {
        Self::connect_with_timeout(endpoints, prefix, DEFAULT_CONNECT_TIMEOUT).await
    }

    pub async fn connect_with_timeout(
        endpoints: &[String],
        prefix: &str,
        timeout: Duration,
    ) -> Result<Store, ConfigError> {
        Self::connect_secure(endpoints, prefix, timeout, &EtcdSecurity::default()).await
    }

    /// Connects like `connect_with_timeout`, over TLS with a client certificate when
    /// `security` names them (etcd started with `--client-cert-auth`; with etcd auth on,
    /// the certificate's CN is the etcd user).
    pub async fn connect_secure(
        endpoints: &[String],
        prefix: &str,
        timeout: Duration,
        security: &EtcdSecurity,
    ) -> Result<Store, ConfigError> {
        let joined = endpoints.join(",");
        if endpoints.is_empty() {
            return Err(ConfigError::Invalid("no etcd endpoints given".into()));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "config store prefix {prefix:?} must start with '/'"
            )));
        }
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        if let Some(tls) = security.tls_options()? {
            opts = opts.with_tls(tls);
        }
        let unreachable = |source| ConfigError::Unreachable { endpoints: joined.clone(), source };
        let client =
            match tokio::time::timeout(timeout, Client::connect(endpoints, Some(opts))).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(unreachable(e)),
                Err(_) => {
                    return Err(unreachable(etcd_client::Error::IoError(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {timeout:?}"),
                    ))))
                }
            };
        let ctx = Arc::new(Ctx { client, prefix: prefix.to_string(), endpoints: joined.clone() });
        // The client connects lazily: make sure somebody answers.
        let mut kv = ctx.client.kv_client();
        let probe = kv.get(ctx.prefix.as_str(), Some(GetOptions::new().with_count_only()));
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(unreachable(e)),
            Err(_) => {
                return Err(unreachable(etcd_client::Error::IoError(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                ))))
            }
        }
        info!(endpoints = joined, prefix, "connected to config store");
        Ok(Store { ctx })
    }

    pub fn prefix(&self) -> &str {
        &self.ctx.prefix
    }

    /// The current etcd revision. Map epochs are revisions, so they only grow.
    pub async fn revision(&self) -> Result<u64, ConfigError> {
        self.ctx.revision().await
    }

    // ---- peers ----

    /// Adds (or re-adds, idempotently, or updates the address of) a peer. Refuses a name
    /// already used by another uuid, a uuid already used by another name, and an address
    /// already used by another name.
    pub async fn add_peer(&self, p: PeerRecord) -> Result<(), ConfigError> {
        check_name("peer", &p.name)?;
        if p.addr.is_empty() || p.uuid.is_empty() {
            return Err(ConfigError::Invalid(format!("peer {}: empty address or uuid", p.name)));
        }
        let op = format!("add peer {}", p.name);
        let dir = self.ctx.dir("peers");
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &dir).await?;
            for kv in &kvs {
                let e: PeerRecord = decode(kv)?;
                if e == p {
                    return Ok(());
                }
                if e.name == p.name && e.uuid != p.uuid {
                    return Err(ConfigError::Conflict(format!(
                        "peer name {} is already used by node {} (not {})",
                        p.name, e.uuid, p.uuid
                    )));
                }
                if e.name != p.name && e.uuid == p.uuid {
                    return Err(ConfigError::Conflict(format!(
                        "node {} is already a peer named {} (not {})",
                        p.uuid, e.name, p.name
                    )));
                }
                if e.name != p.name && e.addr == p.addr {
                    return Err(ConfigError::Conflict(format!(
                        "peer {}: address {} is already used by peer {}",
                        p.name, p.addr, e.name
                    )));
                }
            }
            // Commit only if no peer changed since the snapshot we checked.
            let txn = Txn::new()
                .when([Compare::mod_revision(dir.as_str(), CompareOp::Less, rev + 1).with_prefix()])
                .and_then([TxnOp::put(self.ctx.key("peers", &p.name), encode(&p), None)]);
            if self.ctx.txn(&op, txn).await?.0 {
                info!(peer = p.name, addr = p.addr, "peer added");
                return Ok(());
            }
            debug!(peer = p.name, "peers changed concurrently, retrying");
        }
        Err(ConfigError::Conflict(format!("peer {}: too many concurrent changes to peers", p.name)))
    }

    /// Removes a peer. Refused while a volume has a brick on it.
    pub async fn remove_peer(&self, name: &str) -> Result<(), ConfigError> {
        check_name("peer", name)?;
        let op = format!("remove peer {name}");
        let key = self.ctx.key("peers", name);
        let vdir = self.ctx.dir("volumes");
        for _ in 0..TXN_RETRIES {
            let (kvs, rev) = self.ctx.range(&op, &vdir).await?;
            for kv in &kvs {
                let v: VolumeRecord = decode(kv)?;
                if let Some(b) = v.sets.iter().flat_map(|s| &s.bricks).find(|b| b.node == name) {
                    return Err(ConfigError::Conflict(format!(
                        "peer {name} still serves brick {}:{} of volume {}",
                        b.node, b.path, v.name
                    )));
                }
            }
            let txn = Txn::new()
                .when([
                    Compare::version(key.as_str(), CompareOp::Greater, 0),
                    Compare::mod_revision(vdir.as_str(), CompareOp::Less, rev + 1).with_prefix(),
                ])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            if self.ctx.txn(&op, txn).await?.0 {
                info!(peer = name, "peer removed");
                return Ok(());
            }
            if self.ctx.get_one(&op, &key).await?.is_none() {
                return Err(ConfigError::NotFound(format!("peer {name} does not exist")));
            }
        }
        Err(ConfigError::Conflict(format!("peer {name}: too many concurrent changes to volumes")))
    }

    pub async fn list_peers(&self) -> Result<Vec<PeerRecord>, ConfigError> {
        let (kvs, _) = self.ctx.range("list peers", &self.ctx.dir("peers")).await?;
        kvs.iter().map(decode).collect()
    }

    pub async fn get_peer(&self, name: &str) -> Result<Option<PeerRecord>, ConfigError> {
        check_name("peer", name)?;
        let op = format!("get peer {name}");
        self.ctx.get_one(&op, &self.ctx.key("peers", name)).await?.as_ref().map(decode).transpose()
    }

    // ---- volumes ----

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

    /// Deletes a volume and its brick states.
    pub async fn delete_volume(&self, name: &str) -> Result<(), ConfigError> {
        check_name("volume", name)?;
        let op = format!("delete volume {name}");
        let key = self.ctx.key("volumes", name);
        let bricks = format!("{}/bricks/{}/", self.ctx.prefix, name);
        let stale = format!("{}/stale/{}/", self.ctx.prefix, name);
        let txn =
            Txn::new().when([Compare::version(key.as_str(), CompareOp::Greater, 0)]).and_then([
                TxnOp::delete(key.as_str(), None),
                TxnOp::delete(bricks, Some(DeleteOptions::new().with_prefix())),
                TxnOp::delete(stale, Some(DeleteOptions::new().with_prefix())),
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

    // ---- gateway objects ----

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

    // ---- liveness ----

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

    /// Brick states of a volume by brick index; a missing index means Down.
    pub async fn brick_states(
        &self,
        volume: &str,
    ) -> Result<HashMap<u32, BrickState>, ConfigError> {
        check_name("volume", volume)?;
        let dir = format!("{}/bricks/{}/", self.ctx.prefix, volume);
        let (kvs, _) = self.ctx.range(&format!("brick states of {volume}"), &dir).await?;
        let mut out = HashMap::new();
        for kv in kvs {
            let key = String::from_utf8_lossy(kv.key());
            let index = key[dir.len()..].parse::<u32>();
            let state = match kv.value() {
                b"up" => Some(BrickState::Up),
                b"healing" => Some(BrickState::Healing),
                _ => None,
            };
            match (index, state) {
                (Ok(i), Some(s)) => {
                    out.insert(i, s);
                }
                _ => {
                    warn!(key = %key, value = %String::from_utf8_lossy(kv.value()), "ignoring bad brick state")
                }
            }
        }
        for (i, _) in self.stale_bricks(volume).await? {
            if let Some(s) = out.get_mut(&i) {
                if *s == BrickState::Up {
                    *s = BrickState::Healing;
                }
            }
        }
        Ok(out)
    }

    /// Demote brick `index` of `volume`: it missed a write that brick `by` applied. Until
    /// the brick heals and clears the marker, maps show it Healing (never a chain head,
    /// never read from). The marker is not under any lease: it outlives both nodes.
    ///
    /// Refused (`Conflict`) when `by` is itself stale (of two bricks that lost each other,
    /// only one may demote the other, or neither could ever come back up), and when `by`
    /// is not published as up (a head whose node lost its lease, or that is catching up,
    /// acts on an old map: it must not demote the bricks that are the current replicas).
    pub async fn mark_stale(&self, volume: &str, index: u32, by: u32) -> Result<(), ConfigError> {
        check_name("volume", volume)?;
        let key = format!("{}/stale/{}/{}", self.ctx.prefix, volume, index);
        let mine = format!("{}/stale/{}/{}", self.ctx.prefix, volume, by);
        let by_state = self.ctx.brick_key(volume, by);
        let txn = Txn::new()
            .when([
                Compare::version(mine.as_str(), CompareOp::Equal, 0),
                Compare::value(by_state.as_str(), CompareOp::Equal, "up"),
            ])
            .and_then([TxnOp::put(
                key.as_str(),
                format!("missed a write applied by brick {by}"),
                None,
            )])
            .or_else([TxnOp::get(mine.as_str(), None)]);
        let op = format!("mark brick {index} of {volume} stale");
        let mut kv = self.ctx.client.kv_client();
        let resp = self.ctx.call(&op, kv.txn(txn)).await?;
        if resp.succeeded() {
            return Ok(());
        }
        let by_is_stale = resp.op_responses().into_iter().any(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => !g.kvs().is_empty(),
            _ => false,
        });
        Err(ConfigError::Conflict(if by_is_stale {
            format!("brick {by} of {volume} is stale itself and cannot demote brick {index}")
        } else {
            format!("brick {by} of {volume} is not up and cannot demote brick {index}")
        }))
    }

    /// Stale markers of a volume: brick index and the marker's mod revision.
    pub async fn stale_bricks(&self, volume: &str) -> Result<Vec<(u32, i64)>, ConfigError> {
        check_name("volume", volume)?;
        let dir = format!("{}/stale/{}/", self.ctx.prefix, volume);
        let (kvs, _) = self.ctx.range(&format!("stale markers of {volume}"), &dir).await?;
        Ok(kvs
            .iter()
            .filter_map(|kv| {
                let key = String::from_utf8_lossy(kv.key());
                key[dir.len()..].parse::<u32>().ok().map(|i| (i, kv.mod_revision()))
            })
            .collect())
    }

    /// Clear a brick's stale marker if it is still the one seen (mod revision `seen`) when
    /// the heal that answers it started; false if it was set again meanwhile.
    pub async fn clear_stale(
        &self,
        volume: &str,
        index: u32,
        seen: i64,
    ) -> Result<bool, ConfigError> {
        check_name("volume", volume)?;
        let key = format!("{}/stale/{}/{}", self.ctx.prefix, volume, index);
        let txn = Txn::new()
            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, seen)])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        Ok(self.ctx.txn(&format!("clear stale marker of brick {index} of {volume}"), txn).await?.0)
    }

    /// Nodes holding a live lease: name -> address.
    pub async fn live_nodes(&self) -> Result<BTreeMap<String, String>, ConfigError> {
        let dir = self.ctx.dir("live");
        let (kvs, _) = self.ctx.range("list live nodes", &dir).await?;
        Ok(kvs
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key()[dir.len()..]).into_owned(),
                    String::from_utf8_lossy(kv.value()).into_owned(),
                )
            })
            .collect())
    }

    /// Maps of all volumes from one consistent read of the whole store; the epoch of every
    /// map is the etcd revision of that read (so epochs only grow, and equal the revision
    /// `watch()` reported for the last change they include).
    pub async fn volume_maps(&self) -> Result<(u64, Vec<VolumeMap>), ConfigError> {
        let root = format!("{}/", self.ctx.prefix);
        let (kvs, rev) = self.ctx.range("read volume maps", &root).await?;
        let (pdir, vdir, bdir) =
            (self.ctx.dir("peers"), self.ctx.dir("volumes"), self.ctx.dir("bricks"));
        let sdir = self.ctx.dir("stale");
        let mut peers = Vec::new();
        let mut volumes = Vec::new();
        let mut states: HashMap<String, HashMap<u32, BrickState>> = HashMap::new();
        let mut stale: Vec<(String, u32)> = Vec::new();
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key());
            if let Some(rest) = key.strip_prefix(&sdir) {
                if let Some((vol, idx)) = rest.split_once('/') {
                    if let Ok(i) = idx.parse::<u32>() {
                        stale.push((vol.to_string(), i));
                    }
                }
            } else if key.starts_with(&pdir) {
                peers.push(decode::<PeerRecord>(kv)?);
            } else if key.starts_with(&vdir) {
                volumes.push(decode::<VolumeRecord>(kv)?);
            } else if let Some(rest) = key.strip_prefix(&bdir) {
                let state = match kv.value() {
                    b"up" => BrickState::Up,
                    b"healing" => BrickState::Healing,
                    _ => continue,
                };
                if let Some((vol, idx)) = rest.split_once('/') {
                    if let Ok(i) = idx.parse::<u32>() {
                        states.entry(vol.to_string()).or_default().insert(i, state);
                    }
                }
            }
        }
        for (vol, i) in stale {
            if let Some(s) = states.get_mut(&vol).and_then(|m| m.get_mut(&i)) {
                if *s == BrickState::Up {
                    *s = BrickState::Healing;
                }
            }
        }
        let empty = HashMap::new();
        let maps = volumes
            .iter()
            .map(|v| build_map(v, &peers, states.get(&v.name).unwrap_or(&empty), rev as u64))
            .collect();
        Ok((rev as u64, maps))
    }

    // ---- watch ----

    /// Yields the etcd revision each time anything under the prefix changes, starting with
    /// the changes after this call returns. Survives etcd restarts (the watch is
    /// re-established from the next unseen revision, with back-off); if that history was
    /// compacted meanwhile, the current revision is yielded instead so the consumer
    /// rebuilds. The background task ends when the receiver is dropped.
    pub async fn watch(&self) -> Result<mpsc::Receiver<u64>, ConfigError> {
        let rev = self.ctx.revision().await?;
        let pair = open_watch(&self.ctx, rev as i64 + 1).await?;
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(watch_loop(self.ctx.clone(), pair, rev as i64 + 1, tx));
        Ok(rx)
    }
}

async fn open_watch(ctx: &Ctx, start: i64) -> Result<(Watcher, WatchStream), ConfigError> {
    let mut wc = ctx.client.watch_client();
    let opts = WatchOptions::new().with_prefix().with_start_revision(start);
    ctx.call("watch", wc.watch(format!("{}/", ctx.prefix), Some(opts))).await
}

async fn watch_loop(
    ctx: Arc<Ctx>,
    first: (Watcher, WatchStream),
    mut next: i64,
    tx: mpsc::Sender<u64>,
) {
    let mut cur = Some(first);
    let mut backoff = Backoff::doubling(WATCH_BACKOFF_MIN, WATCH_BACKOFF_MAX);
    loop {
        let Some((_watcher, stream)) = cur.as_mut() else {
            tokio::select! {
                _ = tx.closed() => return,
                _ = backoff.wait() => {}
            }
            match open_watch(&ctx, next).await {
                Ok(pair) => {
                    info!(prefix = ctx.prefix, from = next, "config watch re-established");
                    cur = Some(pair);
                }
                Err(e) => debug!(error = %e, "re-establishing config watch failed"),
            }
            continue;
        };
        let msg = tokio::select! {
            _ = tx.closed() => return,
            m = stream.message() => m,
        };
        match msg {
            Ok(Some(resp)) if resp.canceled() => {
                if resp.compact_revision() > 0 {
                    warn!(
                        from = next,
                        compacted = resp.compact_revision(),
                        "config watch history compacted; resyncing"
                    );
                    match ctx.revision().await {
                        Ok(r) => {
                            next = r as i64 + 1;
                            if tx.send(r).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => debug!(error = %e, "reading revision after compaction failed"),
                    }
                } else {
                    warn!(reason = resp.cancel_reason(), "config watch canceled by etcd");
                }
                cur = None;
            }
            Ok(Some(resp)) => {
                backoff.reset();
                let rev =
                    resp.events().iter().filter_map(|e| e.kv().map(|kv| kv.mod_revision())).max();
                if let Some(rev) = rev {
                    next = next.max(rev + 1);
                    if tx.send(rev as u64).await.is_err() {
                        return;
                    }
                }
            }
            Ok(None) => {
                warn!("config watch stream ended; re-establishing");
                cur = None;
            }
            Err(e) => {
                warn!(error = %e, "config watch broke; re-establishing");
                cur = None;
            }
        }
    }
}

/// Property tests ("fuzzing") of records read back from etcd: whatever bytes a corrupted or
/// hand-edited record holds, reading it gives a record that keeps the rules it was stored
/// under, or an error naming its key; never a panic. Default 1024 cases each (about a
/// second); `PROPTEST_CASES=100000 cargo test -p cairn-config fuzz` for long runs.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn config() -> proptest::test_runner::Config {
        let mut c = proptest::test_runner::Config {
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        };
        if std::env::var_os("PROPTEST_CASES").is_none() {
            c.cases = 1024;
        }
        c
    }

    const VOL_KEY: &str = "/cairn/volumes/vol0";
    const PEER_KEY: &str = "/cairn/peers/n1";

    fn volume() -> VolumeRecord {
        let brick = |index, node: &str| BrickRecord { index, node: node.into(), path: "/b".into() };
        VolumeRecord {
            name: "vol0".into(),
            id: "0123456789abcdef0123456789abcdef".into(),
            status: cairn_proto::map::VolumeStatus::Started,
            replica: 2,
            sets: vec![SetRecord { id: 0, bricks: vec![brick(0, "n1"), brick(1, "n2")] }],
            options: BTreeMap::from([("performance.cache-timeout".into(), "1".into())]),
            layout_epoch: 3,
            rebalancing: false,
            layout: vec![],
            reset_bricks: Default::default(),
        }
    }

    /// A JSON value to put somewhere in a record.
    fn json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::{json, Value};
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            prop::sample::select(
                &[
                    "",
                    "vol0",
                    "n1",
                    "/b",
                    "a/b",
                    "zz",
                    "0123456789abcdef0123456789abcdef",
                    "Started",
                    "\0",
                    " "
                ][..]
            )
            .prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(2, 8, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Replace the value at a random path (objects by key, arrays by index) of `v`.
    fn replace(v: &mut serde_json::Value, path: &[usize], with: serde_json::Value) {
        let Some((&i, rest)) = path.split_first() else {
            *v = with;
            return;
        };
        let child = match v {
            serde_json::Value::Object(m) if !m.is_empty() => {
                let k = m.keys().nth(i % m.len()).cloned();
                k.and_then(|k| m.get_mut(&k))
            }
            serde_json::Value::Array(a) if !a.is_empty() => {
                let n = a.len();
                a.get_mut(i % n)
            }
            _ => None,
        };
        match child {
            Some(c) => replace(c, rest, with),
            None => *v = with,
        }
    }

    fn check_read<T: Record>(
        key: &str,
        bytes: &[u8],
        rules: impl Fn(&T) -> Result<(), String>,
    ) -> Result<Option<T>, TestCaseError> {
        match decode_value::<T>(key.as_bytes(), bytes) {
            Ok(r) => {
                rules(&r).map_err(|e| {
                    TestCaseError::fail(format!(
                        "record at {key} read without error but breaks the rules: {e}\n{}",
                        String::from_utf8_lossy(bytes)
                    ))
                })?;
                Ok(Some(r))
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(matches!(e, ConfigError::BadRecord { .. }), "{msg}");
                prop_assert!(msg.contains(key), "error does not name the key: {msg}");
                Ok(None)
            }
        }
    }

    fn volume_rules(key: &str) -> impl Fn(&VolumeRecord) -> Result<(), String> + '_ {
        move |v| {
            check_volume(v).map_err(|e| e.to_string())?;
            if !key.ends_with(&format!("/{}", v.name)) {
                return Err(format!("record names volume {:?}", v.name));
            }
            Ok(())
        }
    }

    fn peer_rules(key: &str) -> impl Fn(&PeerRecord) -> Result<(), String> + '_ {
        move |p| {
            check_name("peer", &p.name).map_err(|e| e.to_string())?;
            if !key.ends_with(&format!("/{}", p.name)) {
                return Err(format!("record names peer {:?}", p.name));
            }
            Ok(())
        }
    }

    /// What the fuzzing below found: these hand-edited records were read as if good (the
    /// volume's id silently became 0; a record under one name served as another).
    #[test]
    fn hand_edited_records_name_their_key() {
        let good = encode(&volume());
        assert!(decode_value::<VolumeRecord>(VOL_KEY.as_bytes(), good.as_bytes()).is_ok());
        for (key, bad) in [
            (VOL_KEY, good.replace("0123456789abcdef0123456789abcdef", "not-hex")),
            (VOL_KEY, good.replace("\"path\":\"/b\"", "\"path\":\"b\"")),
            ("/cairn/volumes/other", good.clone()),
        ] {
            let e = decode_value::<VolumeRecord>(key.as_bytes(), bad.as_bytes()).unwrap_err();
            assert!(e.to_string().starts_with(&format!("bad record at {key}: ")), "{e}");
        }
        let peer = r#"{"name":"n 1","addr":"127.0.0.1:7420","uuid":"u"}"#;
        let e = decode_value::<PeerRecord>(PEER_KEY.as_bytes(), peer.as_bytes()).unwrap_err();
        assert!(e.to_string().contains(PEER_KEY), "{e}");
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn edited_volume_record(path in prop::collection::vec(any::<usize>(), 0..4), with in json()) {
            let mut v = serde_json::to_value(volume()).unwrap();
            replace(&mut v, &path, with);
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Some(r) = check_read(VOL_KEY, &bytes, volume_rules(VOL_KEY))? {
                let map = build_map(&r, &[], &HashMap::new(), 1);
                prop_assert_eq!(&map.name, &r.name);
                let again: VolumeRecord = decode_value(VOL_KEY.as_bytes(), encode(&r).as_bytes()).unwrap();
                prop_assert_eq!(again, r);
            }
        }

        #[test]
        fn corrupted_volume_record(cuts in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4), truncate in any::<bool>()) {
            let mut bytes = encode(&volume()).into_bytes();
            for (at, b) in cuts {
                let at = at % bytes.len();
                bytes[at] = b;
            }
            if truncate {
                bytes.truncate(bytes.len() / 2);
            }
            if let Some(r) = check_read(VOL_KEY, &bytes, volume_rules(VOL_KEY))? {
                build_map(&r, &[], &HashMap::new(), 1);
            }
        }

        #[test]
        fn edited_peer_record(path in prop::collection::vec(any::<usize>(), 0..2), with in json()) {
            let p = PeerRecord { name: "n1".into(), addr: "127.0.0.1:7420".into(), uuid: "u".into() };
            let mut v = serde_json::to_value(p).unwrap();
            replace(&mut v, &path, with);
            check_read(PEER_KEY, &serde_json::to_vec(&v).unwrap(), peer_rules(PEER_KEY))?;
        }
    }
}
