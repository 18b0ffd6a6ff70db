//! The etcd config store: the connection (`Ctx`: key layout, bounded requests, error
//! classification) and `Store`'s constructors. Each idea of the store is its own file:
//! `check` (records read back are held to their rules), `security` (etcd TLS), `lease`
//! (node liveness), `peers`, `volumes`, `gateway` (gateway objects), `map` (brick states
//! and the volume maps built from one read), `watch` (changes under the prefix).

mod check;
#[cfg(test)]
mod fuzz;
mod gateway;
mod lease;
mod map;
mod peers;
mod rebalance;
mod security;
mod volumes;
mod watch;

use etcd_client::{Client, ConnectOptions, GetOptions, KeyValue, Txn};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

pub(crate) use check::{decode, encode, named_at, Record};
pub use lease::NodeLease;
pub use map::build_map;
pub use security::{ensure_etcd_node_user, EtcdSecurity, ETCD_NODE_ROLE};

/// Default bound on `Store::connect` (first answer from etcd).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on every single request to etcd.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Optimistic transactions (read a snapshot, check it, commit if nothing changed) are retried
/// this many times when another writer got in between.
const TXN_RETRIES: usize = 16;

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
    BadRecord { key: String, source: RecordError },
}

/// Why a record read back from etcd is refused (`ConfigError::BadRecord` names its key).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not JSON of the record's type.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// It names another record than the one its key names.
    #[error("it names {what} {name:?}, not the one of its key")]
    NotItsKey { what: &'static str, name: String },
    #[error("certificate serial {0:?} is not lower-case hex")]
    CertSerial(String),
    #[error("join token id {0:?} is not 8 hex digits")]
    TokenId(String),
    #[error("join token {0}: hash is not a SHA-256 in hex")]
    TokenHash(String),
    /// A name or volume that could never have been stored (`ConfigError::Invalid`).
    #[error(transparent)]
    Invalid(Box<ConfigError>),
}

impl From<ConfigError> for RecordError {
    fn from(e: ConfigError) -> RecordError {
        RecordError::Invalid(Box::new(e))
    }
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

    /// The etcd endpoints this store connected to.
    pub fn endpoints(&self) -> Vec<String> {
        self.ctx.endpoints.split(',').map(str::to_string).collect()
    }

    /// The current etcd revision. Map epochs are revisions, so they only grow.
    pub async fn revision(&self) -> Result<u64, ConfigError> {
        self.ctx.revision().await
    }
}
