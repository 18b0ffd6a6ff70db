//! After an unclean stop and in the background: the sidecars listed and the dirty ids
//! rebuilt at open; the dirty log tidied once its ids are idle.

use super::*;
use crate::dirty;
use crate::ids::Index;
use crate::sys::{self, cstr};
use cairn_proto::Id;
use std::io;
use std::os::fd::AsRawFd;

impl Checksums {
    /// At open: list the sidecars ([`Sidecars`]), removing those of inodes that are gone,
    /// and rebuild the table of every inode whose change a crash may have cut.
    pub(crate) fn recover(&self, idx: &Index) -> io::Result<()> {
        let mut dropped = 0u64;
        let mut known = Sidecars { ids: Default::default(), unknown: false };
        for e in sys::read_dir(self.dir.as_raw_fd())? {
            if e.name == b"dirty" {
                continue;
            }
            let name = cstr(&e.name)?;
            let gone = match std::str::from_utf8(&e.name).ok().and_then(Id::from_hex) {
                Some(id) => {
                    let gone = idx.lstat_index(id).is_err();
                    if !gone {
                        known.insert(id);
                    }
                    gone
                }
                None => e.name.starts_with(b".tmp."),
            };
            if gone {
                sys::unlinkat(self.dir.as_raw_fd(), &name, 0)?;
                dropped += 1;
            }
        }
        *self.sidecars.lock() = known;
        let mut rebuilt = 0u64;
        for id in self.dirty.listed()? {
            if let Ok(fd) = idx.file_fd(id) {
                if let Err(f) = self.rebuild(id, fd.as_raw_fd()) {
                    return Err(io::Error::new(
                        io::Error::from_raw_os_error(f.errno).kind(),
                        f.what,
                    ));
                }
                rebuilt += 1;
            }
        }
        self.dirty.recovered()?;
        if rebuilt + dropped > 0 {
            tracing::info!(brick = %self.shown, rebuilt, dropped, "checksum tables recovered after an unclean stop");
        }
        Ok(())
    }

    /// Write the dirty log to disk and tidy the ids idle for a while: their data and
    /// tables made durable (`fdatasync` of each file and its sidecar, or one `syncfs` for
    /// many), their listing dropped. Errors are logged; the ids stay listed and a later
    /// round retries them.
    pub(crate) fn tidy(&self, idx: &Index, busy: impl Fn(Id) -> bool) {
        let shown = &self.shown;
        if let Err(e) = self.dirty.sync_log() {
            tracing::warn!(brick = %shown, error = %e, "cannot write the checksum dirty log");
        }
        let sync_each = |ids: &[Id]| -> io::Result<()> {
            for &id in ids {
                let fd = match idx.file_fd(id) {
                    Ok(fd) => fd,
                    Err(_) => continue, // gone
                };
                sys::fsync(fd.as_raw_fd(), true)
                    .map_err(|e| io::Error::new(e.kind(), format!("fdatasync of {id}: {e}")))?;
                if self.sidecar_may_exist(id) {
                    if let Ok(sc) =
                        sys::openat(self.dir.as_raw_fd(), &Self::hex(id), libc::O_RDONLY, 0)
                    {
                        sys::fsync(sc.as_raw_fd(), true).map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("fdatasync of the sidecar of {id}: {e}"),
                            )
                        })?;
                    }
                }
            }
            Ok(())
        };
        let r = self.dirty.tidy(busy, |ids, how| match how {
            dirty::Synced::Each => sync_each(ids),
            dirty::Synced::All => sys::syncfs(idx.root.as_raw_fd())
                .map_err(|e| io::Error::new(e.kind(), format!("syncfs: {e}"))),
        });
        match r {
            Ok(Some((n, how))) => {
                tracing::debug!(brick = %shown, ids = n, ?how, "checksum dirty ids tidied")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(brick = %shown, error = %e, "cannot tidy the checksum dirty log; retrying later")
            }
        }
    }
}
