//! File data: opens, reads (quick-read from memory), writes (through write-behind), fsync,
//! fallocate, seek, compare-and-write and server-side copy.

use super::{err, unexpected, Target, Volume, MAX_IO};
use crate::Result;
use bytes::Bytes;
use cairn_cache::Append;
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Creds, Errno, Id, SeekWhence};
use std::sync::atomic::Ordering;

impl Volume {
    /// Note an open (keeps an unlinked file readable until `release`). No round trip.
    pub async fn open(&self, _c: &Creds, id: Id) -> Result<()> {
        self.note_open(id);
        Ok(())
    }

    /// [`open`](Self::open) without the async call (it never waits).
    pub fn note_open(&self, id: Id) {
        self.inner.opens.lock().entry(id).or_default().count += 1;
    }

    /// [`release`](Self::release) at once if it has nothing to wait for: nothing of the file
    /// buffered or in flight, and the bricks need not hear of it (the file was not unlinked
    /// while open here, or another open remains). A deferred write error stays for the
    /// next flush/fsync/release. Returns false, having done nothing, otherwise.
    pub fn release_if_idle(&self, id: Id) -> bool {
        let i = &self.inner;
        if i.wb.busy(id) {
            return false;
        }
        let mut o = i.opens.lock();
        match o.get_mut(&id) {
            Some(s) if s.count > 1 => s.count -= 1,
            Some(s) if s.registered => return false,
            Some(_) => {
                o.remove(&id);
            }
            None => {}
        }
        true
    }

    /// A read answered from memory, if it can be (quick-read content, nothing of the file
    /// buffered or in flight): what [`read`](Self::read) would return, without waiting.
    pub fn read_cached(&self, c: &Creds, id: Id, offset: u64, len: u32) -> Option<(Bytes, bool)> {
        let i = &self.inner;
        if i.has_pending(id) {
            return None;
        }
        let data = i.attrs.get(id).and_then(|a| i.data.get(&a, c))?;
        i.quick_reads.fetch_add(1, Ordering::Relaxed);
        let start = offset.min(data.len() as u64) as usize;
        let end = offset.saturating_add(len.min(MAX_IO as u32) as u64).min(data.len() as u64);
        let end = end as usize;
        Some((data.slice(start..end), end == data.len()))
    }

    /// Flush write-behind for `id` and drop the open; returns any deferred write error.
    pub async fn release(&self, id: Id) -> Result<()> {
        let i = &self.inner;
        let r = i.flush(id).await;
        let unregister = {
            let mut o = i.opens.lock();
            match o.get_mut(&id) {
                Some(s) => {
                    s.count = s.count.saturating_sub(1);
                    if s.count == 0 {
                        o.remove(&id).map(|s| s.registered).unwrap_or(false)
                    } else {
                        false
                    }
                }
                None => false,
            }
        };
        if unregister {
            let _ = i.on_home(&Creds::root(), id, Op::Release { id }).await;
        }
        r
    }

    /// Read up to `len` bytes; the bool is true at end of file.
    pub async fn read(&self, c: &Creds, id: Id, offset: u64, len: u32) -> Result<(Bytes, bool)> {
        let i = &self.inner;
        if i.has_pending(id) {
            i.flush(id).await?;
        }
        // Quick-read: the content that came with the lookup, while the attributes it came
        // with are still the cached (leased) ones.
        if let Some(r) = self.read_cached(c, id, offset, len) {
            return Ok(r);
        }
        let len = len.min(MAX_IO as u32);
        let r = i
            .call(
                Target { set: i.home(id), key: id },
                c,
                Op::Read { id, offset, len },
                Bytes::new(),
            )
            .await;
        i.after_read(id);
        match r? {
            (Reply::Data { eof }, data) => Ok((data, eof)),
            (other, _) => Err(unexpected("read", &other)),
        }
    }

    /// Write; buffered by write-behind when enabled (an error surfaces on a later write,
    /// flush, fsync or release of the same file).
    pub async fn write(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let i = &self.inner;
        if let Some(e) = i.wb.take_error(id) {
            return Err(e);
        }
        if !i.wb_on.load(Ordering::Acquire) {
            if i.has_pending(id) {
                i.flush(id).await?;
            }
            return i.write_now(c, id, offset, data).await;
        }
        let len = data.len() as u32;
        i.wait_room(id).await;
        match i.wb.append(id, c, offset, &data) {
            Append::Taken { send } => {
                i.attrs.invalidate(id);
                if let Some(s) = send {
                    i.spawn_send(id, s);
                }
                Ok(len)
            }
            Append::Through { flushed, after, done } => {
                if let Some(s) = flushed {
                    i.spawn_send(id, s);
                }
                for w in after {
                    w.wait().await;
                }
                let r = match i.wb.take_error(id) {
                    Some(e) => Err(e),
                    None => i.write_now(c, id, offset, data).await,
                };
                drop(done);
                r
            }
        }
    }

    /// Write through to every live replica before returning (NFS FILE_SYNC, SCSI FUA
    /// also call `fsync`).
    pub async fn write_through(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let i = &self.inner;
        i.flush(id).await?;
        i.write_now(c, id, offset, data).await
    }

    /// Write through and make the file durable (data and metadata on every live replica)
    /// before returning: NFS FILE_SYNC, or an UNSTABLE write with its COMMIT folded in.
    /// One round trip for at most [`MAX_IO`] bytes: the head fsyncs after the write
    /// (`BrickRequest::sync`); after a brick that did not (one built before it), the
    /// fsync is sent here.
    pub async fn write_sync(&self, c: &Creds, id: Id, offset: u64, data: Bytes) -> Result<u32> {
        let i = &self.inner;
        i.flush(id).await?;
        if data.len() > MAX_IO {
            let n = i.write_now(c, id, offset, data).await?;
            i.on_home(c, id, Op::Fsync { id, datasync: false }).await?;
            return Ok(n);
        }
        i.write_synced(c, id, offset, data).await
    }

    /// Send buffered writes of `id` to the bricks; returns any deferred error.
    pub async fn flush(&self, id: Id) -> Result<()> {
        self.inner.flush(id).await
    }

    /// Make `id` durable. What write-behind still buffers of it goes out with the fsync in
    /// one round trip (`BrickRequest::sync`) instead of a flush and then an fsync.
    pub async fn fsync(&self, c: &Creds, id: Id, datasync: bool) -> Result<()> {
        let i = &self.inner;
        if i.sync_buffered(id).await? {
            // A write error of the file deferred meanwhile is reported here too.
            return i.flush(id).await;
        }
        i.flush(id).await?;
        i.on_home(c, id, Op::Fsync { id, datasync }).await.map(|_| ())
    }

    pub async fn fallocate(
        &self,
        c: &Creds,
        id: Id,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let i = &self.inner;
        i.flush(id).await?;
        let r = i.on_home(c, id, Op::Fallocate { id, mode, offset, len }).await;
        i.attrs.invalidate(id);
        r.map(|_| ())
    }

    pub async fn seek(&self, c: &Creds, id: Id, offset: u64, whence: SeekWhence) -> Result<u64> {
        let i = &self.inner;
        i.flush(id).await?;
        match i.on_home(c, id, Op::Seek { id, offset, whence }).await? {
            Reply::Offset(o) => Ok(o),
            other => Err(unexpected("seek", &other)),
        }
    }

    /// Atomically, on the brick: if the data at `offset` equals `cmp`, write `data`
    /// (same length). EILSEQ (`Errno::EMISCOMPARE`) when it differs.
    pub async fn compare_and_write(
        &self,
        c: &Creds,
        id: Id,
        offset: u64,
        cmp: Bytes,
        data: Bytes,
    ) -> Result<()> {
        if cmp.len() != data.len() || cmp.is_empty() {
            return Err(err(
                Errno::EINVAL,
                "compare_and_write: compare and write buffers must have the same, non-zero length",
            ));
        }
        let i = &self.inner;
        i.flush(id).await?;
        let mut both = bytes::BytesMut::with_capacity(cmp.len() * 2);
        both.extend_from_slice(&cmp);
        both.extend_from_slice(&data);
        let r = i
            .call(
                Target { set: i.home(id), key: id },
                c,
                Op::CompareAndWrite { id, offset },
                both.freeze(),
            )
            .await;
        i.attrs.invalidate(id);
        r.map(|_| ())
    }

    /// Copy up to `len` bytes of regular file `src` from `src_offset` into regular file
    /// `dst` at `dst_offset`; returns the bytes copied (short at the end of `src`, 0 at or
    /// past it), as copy_file_range(2). The bricks copy (`Op::CopyRange` at the chain head
    /// of `dst`, in pieces of at most 8 MiB), reading `src` in their own replica set or
    /// over the brick network, and no byte of the data comes through this client; from a
    /// brick that cannot (`EXDEV`) or does not know the op (`EPROTO`, a brick built before
    /// it), by READ and WRITE here. `Stats::by_op` tells which (`copy_range` against
    /// `read`/`write`).
    pub async fn copy_range(
        &self,
        c: &Creds,
        src: Id,
        src_offset: u64,
        dst: Id,
        dst_offset: u64,
        len: u64,
    ) -> Result<u64> {
        let i = &self.inner;
        let fits = |off: u64| off.checked_add(len).is_some_and(|e| e <= i64::MAX as u64);
        if !fits(src_offset) || !fits(dst_offset) {
            return Err(err(
                Errno::EINVAL,
                format!(
                    "copy_range {src} at {src_offset} to {dst} at {dst_offset}, {len} bytes: past the largest file offset"
                ),
            ));
        }
        // Write-behind of either file reaches the bricks first (a barrier, as for a read).
        i.flush(src).await?;
        i.flush(dst).await?;
        let mut done = 0u64;
        let mut local = false;
        while done < len {
            let n = (len - done).min(MAX_IO as u64) as u32;
            let (so, dof) = (src_offset + done, dst_offset + done);
            let count = if local {
                self.copy_by_client(c, src, so, dst, dof, n).await?
            } else {
                let token = i.attrs.begin();
                let op = Op::CopyRange { src, src_offset: so, dst, dst_offset: dof, len: n };
                let t = Target { set: i.home(dst), key: dst };
                match i.call(t, c, op, Bytes::new()).await {
                    Ok((Reply::Written { count, attr }, _)) => {
                        i.attrs.put_change(token, &attr);
                        count
                    }
                    Ok((other, _)) => return Err(unexpected("copy_range", &other)),
                    Err(e) if e.errno == Errno::EXDEV || e.errno == Errno::EPROTO => {
                        tracing::debug!(%src, %dst, error = %e, "copy on the bricks refused; copying by read and write");
                        local = true;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            done += count as u64;
            if count < n {
                break;
            }
        }
        Ok(done)
    }

    /// One piece of [`copy_range`](Self::copy_range) through this client.
    pub(super) async fn copy_by_client(
        &self,
        c: &Creds,
        src: Id,
        src_offset: u64,
        dst: Id,
        dst_offset: u64,
        len: u32,
    ) -> Result<u32> {
        let mut done = 0u32;
        while done < len {
            let (data, eof) = self.read(c, src, src_offset + done as u64, len - done).await?;
            if data.is_empty() {
                break;
            }
            let n = data.len() as u32;
            let w = self.inner.write_now(c, dst, dst_offset + done as u64, data).await?;
            done += w;
            if eof || w < n {
                break;
            }
        }
        Ok(done)
    }
}
