//! Opening a brick: its marker checked, its directories opened, the id index swept and
//! the checksum tables recovered after an unclean stop.

use super::Brick;
use crate::error::io_err;
use crate::ids::{id_of, id_of_fd, is_dir, is_lnk, Index};
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
        // Bricks prepared before data checksums existed get their directories now.
        for d in [c".cairn/csum", c".cairn/csum/dirty"] {
            match sys::mkdirat(root.as_raw_fd(), d, 0o700) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                    return Err(io_err(e, format!("brick {shown}: mkdir {d:?}")))
                }
                _ => {}
            }
        }
        let csum_dir = open(root.as_raw_fd(), c".cairn/csum", "open .cairn/csum")?;
        let dirty_dir = open(root.as_raw_fd(), c".cairn/csum/dirty", "open .cairn/csum/dirty")?;
        let (tidy_wake, tidy_rx) = std::sync::mpsc::sync_channel(1);
        let dirty = crate::dirty::DirtyLog::open(dirty_dir, tidy_wake)
            .map_err(|e| io_err(e, format!("brick {shown}: opening .cairn/csum/dirty/log.*")))?;
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
            pending,
            listings: Mutex::new(HashMap::new()),
            stripes: (0..64).map(|_| Stripe::default()).collect(),
            csum_dir,
            dirty,
            csum_fds: Mutex::new(HashMap::new()),
            csum_sidecars: Mutex::new(crate::csum::Sidecars::unknown()),
            writeback: crate::writeback::Writeback::start(index),
        };
        brick.sweep().map_err(|e| io_err(e, format!("brick {shown}: sweeping the id index")))?;
        brick
            .sums_recover()
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
}
