//! Scrub: every regular file of the brick checked against its data checksums.

use super::Brick;
use crate::error::Ctx;
use crate::ids::is_reg;
use crate::sys::{self, cstr};
use cairn_proto::{Id, RemoteError};
use std::os::fd::AsRawFd;

impl Brick {
    /// Verify every block of regular file `id` (scrub): its data regions are read and
    /// checked, its holes only need zero (or unknown) entries. Returns the file size.
    pub fn scrub_file(&self, id: Id) -> Result<u64, RemoteError> {
        self.with_context("scrub", || {
            let fd = self.file(id)?;
            let f = fd.as_raw_fd();
            let _g = self.stripe(id).lock();
            let st = sys::fstat(f).ctx(|| format!("stat of {id}"))?;
            let size = st.st_size as u64;
            self.csum.scrub(id, f, size)?;
            Ok(size)
        })
    }

    /// Ids of the regular files of this brick (for a scrub).
    pub fn scrub_ids(&self) -> Result<Vec<Id>, RemoteError> {
        self.with_context("scrub", || {
            let mut out = vec![];
            let ids = self.idx.ids_fd();
            let w = || "listing the id index".to_string();
            for a in sys::read_dir(ids).ctx(w)? {
                let Ok(afd) = sys::open_dir_at(ids, &cstr(&a.name).ctx(w)?) else { continue };
                for b in sys::read_dir(afd.as_raw_fd()).ctx(w)? {
                    let Ok(bfd) = sys::open_dir_at(afd.as_raw_fd(), &cstr(&b.name).ctx(w)?) else {
                        continue;
                    };
                    for e in sys::read_dir(bfd.as_raw_fd()).ctx(w)? {
                        let Some(id) = std::str::from_utf8(&e.name).ok().and_then(Id::from_hex)
                        else {
                            continue;
                        };
                        if e.d_type == libc::DT_REG
                            || (e.d_type == libc::DT_UNKNOWN
                                && sys::lstatat(bfd.as_raw_fd(), &cstr(&e.name).ctx(w)?)
                                    .map(|st| is_reg(&st))
                                    .unwrap_or(false))
                        {
                            out.push(id);
                        }
                    }
                }
            }
            Ok(out)
        })
    }
}
