//! Opening a brick: its marker checked, its directories opened, the id index swept and
//! the checksum tables recovered after an unclean stop.

use super::Brick;
use crate::csum::Checksums;
use crate::error::io_err;
use crate::ids::{self, id_of, id_of_fd, is_dir, is_lnk, Index};
use crate::marker::read_marker;
use crate::pending::PendingLog;
use crate::stripe::Stripe;
use crate::sys::{self, cstr, XTarget};
use cairn_proto::{Errno, Id, RemoteError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::Arc;

impl Brick {
    /// Open an existing brick, checking its marker names `volume_id` and `index`.
    /// Errors name the path and what did not match.
    ///
    /// Sets the process umask to 0: modes come from clients, which applied their own.
    /// Starts the brick's tidy thread (`cairn-tidy-<index>`), which ends soon after the
    /// last reference is dropped.
    pub fn open(path: &Path, volume_id: &str, index: u32) -> Result<Arc<Brick>, RemoteError> {
        let shown = path.display();
        let marker = read_marker(path)?.ok_or_else(|| {
            RemoteError::new(
                Errno::ENOENT,
                format!("{shown} is not a brick (no .cairn/brick.json)"),
            )
        })?;
        if marker.format != 1 {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("brick {shown}: unknown format {}", marker.format),
            ));
        }
        if marker.volume_id != volume_id {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!(
                    "brick {shown} belongs to volume {} ({}), not {volume_id}",
                    marker.volume, marker.volume_id
                ),
            ));
        }
        if marker.index != index {
            return Err(RemoteError::new(
                Errno::EINVAL,
                format!("brick {shown} is brick {} of its volume, not {index}", marker.index),
            ));
        }
        let p = sys::cstr(path.as_os_str().as_encoded_bytes()).map_err(|e| io_err(e, &shown))?;
        let open = |dir: RawFd, name: &std::ffi::CStr, what: &str| {
            sys::open_dir_at(dir, name).map_err(|e| io_err(e, format!("brick {shown}: {what}")))
        };
        let root = open(libc::AT_FDCWD, &p, "open")?;
        let ids = open(root.as_raw_fd(), c".cairn/ids", "open .cairn/ids")?;
        let data = open(root.as_raw_fd(), c"data", "open data/")?;
        let pending_dir = open(root.as_raw_fd(), c".cairn/pending", "open .cairn/pending")?;
        let pending = PendingLog::open(pending_dir)
            .map_err(|e| io_err(e, format!("brick {shown}: reading .cairn/pending")))?;
        let (csum, tidy_rx) = Checksums::open(root.as_raw_fd(), &shown.to_string())?;
        match id_of_fd(data.as_raw_fd()) {
            Ok(Some(id)) if id == Id::ROOT => {}
            other => {
                return Err(RemoteError::new(
                    Errno::EIO,
                    format!("brick {shown}: data/ does not carry the root id ({other:?})"),
                ))
            }
        }
        unsafe { libc::umask(0) };
        let brick = Brick {
            root: path.to_path_buf(),
            marker,
            idx: Index::new(root, ids, data),
            opens: Mutex::new(HashMap::new()),
            fences: Mutex::new(HashMap::new()),
            pending,
            listings: Mutex::new(HashMap::new()),
            stripes: (0..64).map(|_| Stripe::default()).collect(),
            csum,
            writeback: crate::writeback::Writeback::start(index),
        };
        brick.sweep().map_err(|e| io_err(e, format!("brick {shown}: sweeping the id index")))?;
        brick
            .csum
            .recover(&brick.idx)
            .map_err(|e| io_err(e, format!("brick {shown}: recovering data checksums")))?;
        let brick = Arc::new(brick);
        brick.start_tidy(tidy_rx);
        Ok(brick)
    }

    /// Remove index hard links whose inode has no other name (left by a crash between
    /// unlinking a name and its index link), and leftover temporary links.
    pub(crate) fn sweep(&self) -> io::Result<()> {
        let ids = self.idx.ids_fd();
        let mut removed = 0u64;
        for a in sys::read_dir(ids)? {
            let Ok(afd) = sys::open_dir_at(ids, &cstr(&a.name)?) else { continue };
            for b in sys::read_dir(afd.as_raw_fd())? {
                let Ok(bfd) = sys::open_dir_at(afd.as_raw_fd(), &cstr(&b.name)?) else {
                    continue;
                };
                for e in sys::read_dir(bfd.as_raw_fd())? {
                    let name = cstr(&e.name)?;
                    if e.name.starts_with(b".tmp.") {
                        let _ = sys::unlinkat(bfd.as_raw_fd(), &name, 0);
                        continue;
                    }
                    let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) else {
                        continue;
                    };
                    if id == Id::ROOT {
                        continue;
                    }
                    let st = sys::lstatat(bfd.as_raw_fd(), &name)?;
                    if st.st_nlink != 1 || is_dir(&st) {
                        continue;
                    }
                    // A moved stub forwards its id (docs/rebalance.md).
                    if ids::stub_shaped(&st)
                        && ids::moved_of(&XTarget::at(bfd.as_raw_fd(), &e.name)?)?.is_some()
                    {
                        continue;
                    }
                    // A symlink without the id xattr is a directory's index link.
                    if is_lnk(&st) && id_of(&XTarget::at(bfd.as_raw_fd(), &e.name)?)? != Some(id) {
                        continue;
                    }
                    sys::unlinkat(bfd.as_raw_fd(), &name, 0)?;
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            tracing::info!(brick = %self.root.display(), removed, "removed orphaned index links");
        }
        Ok(())
    }

    /// The brick's tidy thread: every `LOG_SYNC`, write the dirty log's appends to disk
    /// and tidy the ids idle for a while (`Checksums::tidy`); while nothing
    /// is listed it sleeps until the next listing wakes it (`wakes`). It holds the brick
    /// only during a round and ends once the brick (and with it the log's end of `wakes`)
    /// is dropped.
    pub(crate) fn start_tidy(self: &Arc<Self>, wakes: std::sync::mpsc::Receiver<()>) {
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("cairn-tidy-{}", self.marker.index))
            .spawn(move || loop {
                use std::sync::mpsc::RecvTimeoutError;
                // Not holding the brick while waiting.
                let Some(quiet) = weak.upgrade().map(|b| b.csum.quiet()) else { return };
                let woken = if quiet {
                    wakes.recv().map_err(|_| RecvTimeoutError::Disconnected)
                } else {
                    wakes.recv_timeout(crate::csum::TIDY_EVERY)
                };
                match woken {
                    // Something was listed: tick from now on.
                    Ok(()) => continue,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                let Some(b) = weak.upgrade() else { return };
                b.csum.tidy(&b.idx, |id| b.stripe(id).try_lock().is_none());
            });
        if let Err(e) = spawned {
            // Changes still list their ids; the next open rebuilds them all.
            tracing::error!(brick = %self.root.display(), error = %e, "cannot start the checksum tidy thread; dirty ids are rebuilt at the next open");
        }
    }
}
