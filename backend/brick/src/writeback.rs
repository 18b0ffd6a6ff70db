//! Early write-out of large writes: after a write of at least [`MIN_WRITE`] bytes, the
//! brick asks the kernel to start writing that range to disk (`sync_file_range` with
//! `SYNC_FILE_RANGE_WRITE`: start the I/O, do not wait for it), from a background thread
//! so the write's reply does not wait. The same idea as PostgreSQL's `*_flush_after` and
//! RocksDB's `bytes_per_sync`: a stream of writes goes to disk while it arrives instead of
//! piling up as dirty pages that the final `fsync` (or the kernel's writeback, later, in a
//! burst) must then write all at once. It matters most on a replicated volume, where
//! every brick of the set flushes its copy: with write-out as the data streams in, an
//! `fsync` at the end finds little left to do on any of them.
//!
//! Nothing here is a durability promise (only `fsync` is): with only
//! `SYNC_FILE_RANGE_WRITE`, the call neither waits for the I/O nor consumes a write-back
//! error, so a failed write-out is still reported to the next `fsync` of the file.
//! Small writes (random 4 KiB I/O) are left to the page cache, which absorbs overwrites.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

/// Writes of at least this many bytes are written out early (the FUSE mount, the client
/// library's write-behind and the NFS and SMB gateways send sequential data in 1 MiB
/// requests).
pub(crate) const MIN_WRITE: usize = 256 << 10;

/// Ranges queued for write-out; when the queue is full a range is left to the kernel.
const QUEUE: usize = 64;

type Range = (Arc<OwnedFd>, u64, u64);

pub(crate) struct Writeback {
    tx: Option<SyncSender<Range>>,
}

impl Writeback {
    /// One thread per brick (named `cairn-wb-<index>`); it ends when the brick is dropped.
    pub(crate) fn start(index: u32) -> Writeback {
        let (tx, rx) = sync_channel::<Range>(QUEUE);
        let spawned = std::thread::Builder::new().name(format!("cairn-wb-{index}")).spawn(
            move || {
                for (fd, off, len) in rx {
                    // SAFETY: a plain syscall on an fd this thread holds open.
                    let r = unsafe {
                        libc::sync_file_range(
                            fd.as_raw_fd(),
                            off as libc::off64_t,
                            len as libc::off64_t,
                            libc::SYNC_FILE_RANGE_WRITE,
                        )
                    };
                    if r != 0 {
                        let e = std::io::Error::last_os_error();
                        tracing::debug!(brick = index, off, len, error = %e, "early write-out not started");
                    }
                }
            },
        );
        match spawned {
            Ok(_) => Writeback { tx: Some(tx) },
            Err(e) => {
                tracing::warn!(brick = index, error = %e, "no early write-out thread; writes are left to the kernel's writeback");
                Writeback { tx: None }
            }
        }
    }

    /// Start writing `[off, off+len)` of `fd` out if the write was large; never blocks.
    pub(crate) fn written(&self, fd: &Arc<OwnedFd>, off: u64, len: usize) {
        if len < MIN_WRITE {
            return;
        }
        if let Some(tx) = &self.tx {
            // Full (the disk is behind): this range is left to the kernel's writeback.
            let _ = tx.try_send((fd.clone(), off, len as u64));
        }
    }
}
