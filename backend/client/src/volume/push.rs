//! Pushes from the bricks: map changes, lease recalls (upcalls, then the acknowledgement)
//! and delegation recalls, and the subscription that keeps them coming.

use super::{Inner, Volume};
use crate::Result;
use bytes::Bytes;
use cairn_proto::map::BrickState;
use cairn_proto::msg::{Op, Push, Reply, Request};
use cairn_proto::{Creds, Id};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Called when a brick recalls a lease on `id` (`entries`: its directory entries too).
/// Returns `None` if the upcall's work is done, or an [`InvalidateDone`] that fires when work
/// it handed to another thread is: the recall is acknowledged to the brick only then (or
/// after [`INVALIDATE_ACK_WAIT`]), so the other client's change does not complete while
/// this client's caches (a FUSE mount's kernel caches) still hold what it changed.
pub type InvalidateFn = Arc<dyn Fn(Id, bool) -> Option<InvalidateDone> + Send + Sync>;
/// Delegation recall upcall (see [`Volume::on_recall`]): the file whose delegation a
/// brick recalls. Called on the push task: it must not block.
pub type RecallFn = Arc<dyn Fn(Id) + Send + Sync>;
/// Map-change upcall (see [`Volume::on_map_change`]): the epoch of the map this client
/// holds now. Called on the task that installed the map: it must not block.
pub type MapChangeFn = Arc<dyn Fn(u64) + Send + Sync>;
/// Completion of an upcall's deferred work (fired, or dropped, when it is done).
pub type InvalidateDone = tokio::sync::oneshot::Receiver<()>;
/// Longest wait for an upcall's deferred work before acknowledging the recall anyway: a
/// kernel notification can block on a request that itself waits on the recall, and the
/// brick waits for acknowledgements only 500 ms (`cairnd/src/leases.rs` RECALL_WAIT).
pub const INVALIDATE_ACK_WAIT: Duration = Duration::from_millis(400);

impl Inner {
    /// Send what is buffered of `id`, then give back its delegation (even when the flush
    /// failed: the flush's error is returned).
    pub(super) async fn deleg_return(self: &Arc<Self>, id: Id) -> Result<()> {
        let flushed = self.flush(id).await;
        self.on_home(&Creds::root(), id, Op::DelegReturn { id }).await?;
        flushed
    }

    pub(super) async fn run_pushes(
        self: Arc<Self>,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<(String, Push)>,
    ) {
        while let Some((addr, p)) = rx.recv().await {
            match p {
                Push::MapChanged(m) => self.set_map(*m),
                Push::Recall { id, .. } => {
                    let cb = self.on_recall.read().clone();
                    match cb {
                        Some(cb) => cb(id),
                        // Nobody to return it: give it back at once.
                        None => {
                            let me = self.clone();
                            tokio::spawn(async move {
                                let _ = me.deleg_return(id).await;
                            });
                        }
                    }
                }
                Push::Invalidate { id, entries, seq, .. } => {
                    self.attrs.invalidate(id);
                    self.xattrs.invalidate(id);
                    self.data.invalidate(id);
                    self.lockstate.invalidate(id);
                    self.searchers.invalidate(id);
                    if entries {
                        self.entries.invalidate_dir(id);
                        self.complete.invalidate(id);
                    }
                    let cb = self.on_invalidate.read().clone();
                    let done = cb.and_then(|cb| cb(id, entries));
                    let me = self.clone();
                    tokio::spawn(async move {
                        if let Some(done) = done {
                            if tokio::time::timeout(INVALIDATE_ACK_WAIT, done).await.is_err() {
                                tracing::debug!(%id, "recall upcall still running; acknowledging");
                            }
                        }
                        if let Ok(c) = me.pool.get(&addr).await {
                            let _ = c.call(Request::InvalidateAck { seq }, Bytes::new()).await;
                        }
                    });
                }
            }
        }
    }

    /// Keep one subscription for map pushes alive.
    pub(super) async fn run_subscription(self: Arc<Self>) {
        let mut current: Option<Arc<cairn_proto::rpc::Connection>> = None;
        while !self.closed.load(Ordering::Acquire) {
            if current.as_ref().map(|c| c.is_closed()).unwrap_or(true) {
                current = None;
                let map = self.map();
                let mut addrs: Vec<String> = self.opts.servers.clone();
                addrs.extend(map.sets.iter().flat_map(|s| {
                    s.bricks.iter().filter(|b| b.state != BrickState::Down).map(|b| b.addr.clone())
                }));
                for a in addrs {
                    let Ok(c) = self.pool.get(&a).await else { continue };
                    if let Ok((Reply::Map(m), _)) =
                        c.call(Request::Subscribe { volume: map.name.clone() }, Bytes::new()).await
                    {
                        self.set_map(*m);
                        current = Some(c);
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Volume {
    /// Register the upcall for lease recalls (Ganesha's and Samba's cache invalidation).
    pub fn on_invalidate(&self, f: InvalidateFn) {
        *self.inner.on_invalidate.write() = Some(f);
    }

    /// Register (or with `None` remove) the upcall for delegation recalls.
    pub fn on_recall(&self, f: Option<RecallFn>) {
        *self.inner.on_recall.write() = f;
    }

    /// Register (or with `None` remove) the upcall for map changes: called once per newer
    /// map this client installs (a push, or a map fetched after a brick said ours is
    /// stale), after it is installed, so that [`Volume::placement`] already answers from it
    /// (a pNFS MDS recalls the layouts whose chain or mirrors it changed).
    pub fn on_map_change(&self, f: Option<MapChangeFn>) {
        *self.inner.on_map_change.write() = f;
    }
}
