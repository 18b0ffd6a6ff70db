//! The watch on the prefix: a revision after every change, surviving etcd restarts.

use super::*;
use cairn_proto::Backoff;
use etcd_client::{WatchOptions, WatchStream, Watcher};
use std::sync::Arc;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Back-off between attempts to re-establish a broken watch.
const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(100);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(5);

impl Store {
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
