//! Write-behind: buffered small writes sent in the background, bounded in flight, with
//! deferred errors reported on the next write, flush, fsync or release.

use super::{unexpected, Inner, Target, MAX_IO};
use crate::Result;
use bytes::Bytes;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Id};
use std::sync::Arc;

/// Write-behind extents in flight per file (random small writes are pipelined up to this)...
const MAX_INFLIGHT: usize = 32;
/// ...and at most this many write-behind buffers' worth of bytes.
const MAX_INFLIGHT_BUFFERS: u64 = 4;

impl Inner {
    pub(super) fn has_pending(&self, id: Id) -> bool {
        self.wb.busy(id)
    }

    /// Send an extent in the background, once the earlier writes it overlaps are done.
    pub(super) fn spawn_send(self: &Arc<Self>, id: Id, s: cairn_cache::Send) {
        let me = self.clone();
        tokio::spawn(async move {
            let cairn_cache::Send { creds, offset, data, after, done } = s;
            for w in after {
                w.wait().await;
            }
            if let Err(e) = me.write_now(&creds, id, offset, data).await {
                tracing::warn!(%id, offset, error = %e, "write-behind flush failed; reporting on next call");
                me.wb.set_error(id, e);
            }
            drop(done);
        });
    }

    /// Wait while the file has too much in flight (the oldest flight first).
    pub(super) async fn wait_room(&self, id: Id) {
        let max_bytes = self.wb.limit() as u64 * MAX_INFLIGHT_BUFFERS;
        while let Some(w) = self.wb.full(id, MAX_INFLIGHT, max_bytes) {
            w.wait().await;
        }
    }

    /// Send what is buffered and wait for every write of `id` in flight: a barrier.
    pub(super) async fn flush(self: &Arc<Self>, id: Id) -> Result<()> {
        if let Some(s) = self.wb.take(id) {
            self.spawn_send(id, s);
        }
        for w in self.wb.flights(id) {
            w.wait().await;
        }
        match self.wb.take_error(id) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Write `data` (at most `MAX_IO` bytes) and make the file durable, in one round trip
    /// when the head runs the fsync after the write (`BrickRequest::sync`); after a brick
    /// that answered plainly (one built before it), the fsync is sent here.
    pub(super) async fn write_synced(
        &self,
        c: &Creds,
        id: Id,
        offset: u64,
        data: Bytes,
    ) -> Result<u32> {
        let t = Target { set: self.home(id), key: id };
        let token = self.attrs.begin();
        let op = Op::Write { id, offset };
        let (reply, synced) = match self.call_with(t, c, op, data, false, 0, true).await?.0 {
            Reply::Synced(r) => (*r, true),
            r => (r, false),
        };
        let Reply::Written { count, attr } = reply else {
            return Err(unexpected("write", &reply));
        };
        self.attrs.put_change(token, &attr);
        if !synced {
            self.on_home(c, id, Op::Fsync { id, datasync: false }).await?;
        }
        Ok(count)
    }

    /// An fsync of `id` whose last buffered extent, if any, carries it: every earlier
    /// write of the file done first, then that extent sent with the fsync (one round trip,
    /// not a flush and an fsync). `false` if nothing was buffered (the caller fsyncs).
    pub(super) async fn sync_buffered(self: &Arc<Self>, id: Id) -> Result<bool> {
        let earlier = self.wb.flights(id);
        let Some(s) = self.wb.take(id) else { return Ok(false) };
        let cairn_cache::Send { creds, offset, data, after, done } = s;
        for w in earlier.into_iter().chain(after) {
            w.wait().await;
        }
        // An earlier write's deferred error is reported, but the buffered extent is still
        // sent, as a flush would.
        let deferred = self.wb.take_error(id);
        let r = if data.len() > MAX_IO {
            match self.write_now(&creds, id, offset, data).await {
                Ok(_) => self.on_home(&creds, id, Op::Fsync { id, datasync: false }).await,
                Err(e) => Err(e),
            }
            .map(|_| 0)
        } else {
            self.write_synced(&creds, id, offset, data).await
        };
        drop(done);
        match deferred {
            Some(e) => Err(e),
            None => r.map(|_| true),
        }
    }

    pub(super) async fn write_now(
        &self,
        c: &Creds,
        id: Id,
        offset: u64,
        data: Bytes,
    ) -> Result<u32> {
        let t = Target { set: self.home(id), key: id };
        let mut done = 0usize;
        while done < data.len() {
            let n = (data.len() - done).min(MAX_IO);
            let chunk = data.slice(done..done + n);
            let token = self.attrs.begin();
            let (r, _) =
                self.call(t, c, Op::Write { id, offset: offset + done as u64 }, chunk).await?;
            match r {
                Reply::Written { count, attr } => {
                    // This client's own change: voids fetches in flight (which may have
                    // been served before it); writes of one file in flight together
                    // answer in any order, and the newest is kept (`AttrCache::put_change`).
                    self.attrs.put_change(token, &attr);
                    done += count as usize;
                    if (count as usize) < n {
                        break;
                    }
                }
                other => return Err(unexpected("write", &other)),
            }
        }
        Ok(done as u32)
    }
}
