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
//!
//! **Direct writes.** A large write whose memory, offset and length are all page aligned
//! (the protocol reads large payloads into page-aligned buffers: `cairn_proto::aligned`)
//! skips the page cache altogether: `pwrite` on an `O_DIRECT` fd of the file. That saves
//! the copy into the page cache and the filesystem's per-page work for buffered writes
//! and their write-back (about a third of a brick's CPU on a sequential write), which on a
//! replicated volume every brick of the set pays. The bytes then are not cached: a read
//! soon after goes to the disk. A filesystem that refuses `O_DIRECT` (`EINVAL`) turns
//! direct writes off for the brick (logged once); a short direct write (a full disk)
//! writes the rest through the page cache, which reports the error. `CAIRN_DIRECT_WRITES=0`
//! turns them off (A/B measurements).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

/// Writes of at least this many bytes are written out early (the FUSE mount, the client
/// library's write-behind and the NFS and SMB gateways send sequential data in 1 MiB
/// requests).
pub(crate) const MIN_WRITE: usize = 256 << 10;

/// Ranges queued for write-out; when the queue is full a range is left to the kernel.
const QUEUE: usize = 64;

type Range = (Arc<OwnedFd>, u64, u64);

/// Aligned writes of at least this many bytes go straight to disk (`O_DIRECT`).
pub(crate) const MIN_DIRECT: usize = MIN_WRITE;

pub(crate) struct Writeback {
    tx: Option<SyncSender<Range>>,
    /// Large aligned writes use `O_DIRECT` (off once the filesystem refused it).
    direct: AtomicBool,
}

impl Writeback {
    /// One thread per brick (named `cairn-wb-<index>`); it ends when the brick is dropped.
    pub(crate) fn start(index: u32) -> Writeback {
        let direct = AtomicBool::new(std::env::var("CAIRN_DIRECT_WRITES").as_deref() != Ok("0"));
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
            Ok(_) => Writeback { tx: Some(tx), direct },
            Err(e) => {
                tracing::warn!(brick = index, error = %e, "no early write-out thread; writes are left to the kernel's writeback");
                Writeback { tx: None, direct }
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

    /// Whether a write of `data` at `offset` should go to disk with `O_DIRECT`.
    pub(crate) fn direct(&self, data: &[u8], offset: u64) -> bool {
        data.len() >= MIN_DIRECT
            && self.direct.load(Ordering::Relaxed)
            && cairn_proto::aligned::direct_ok(data, offset)
    }

    /// The filesystem refused `O_DIRECT`: large writes go through the page cache from now.
    pub(crate) fn no_direct(&self, brick: &std::path::Path, e: &std::io::Error) {
        if self.direct.swap(false, Ordering::Relaxed) {
            tracing::info!(brick = %brick.display(), error = %e, "no O_DIRECT on this brick's filesystem; large writes go through the page cache");
        }
    }
}
