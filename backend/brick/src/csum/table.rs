//! Loading and storing a table: the xattr or the sidecar, the sidecars kept open and
//! known, the conversion of tables of 64 KiB blocks.

use super::*;
use crate::error::{fail, Ctx, R};
use crate::sys::{self, cstr, XTarget};
use cairn_proto::Id;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

impl Checksums {
    pub(super) fn hex(id: Id) -> std::ffi::CString {
        cstr(id.to_hex().as_bytes()).expect("hex has no NUL")
    }

    /// The sidecar of `id`, open: kept open between changes (`Checksums::fds`, up to
    /// [`SIDECAR_FDS`]), so a stream of writes does not open it per write. A kept fd whose
    /// file has no link left (the sidecar was removed, or replaced by a rename) is
    /// dropped and the name opened again.
    /// `ENOENT` without a system call for an id that [`Sidecars`] says has none.
    pub(super) fn sidecar_open(&self, id: Id) -> io::Result<Arc<OwnedFd>> {
        if !self.sidecar_may_exist(id) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let kept = self.fds.lock().get(&id).cloned();
        if let Some(sc) = kept {
            if sys::fstat(sc.as_raw_fd()).is_ok_and(|st| st.st_nlink > 0) {
                return Ok(sc);
            }
            self.fds.lock().remove(&id);
        }
        let flags = libc::O_RDWR | libc::O_NOFOLLOW;
        let sc = Arc::new(sys::openat(self.dir.as_raw_fd(), &Self::hex(id), flags, 0)?);
        let mut fds = self.fds.lock();
        if fds.len() >= SIDECAR_FDS {
            fds.clear();
        }
        fds.insert(id, sc.clone());
        Ok(sc)
    }

    /// Whether `id` may have a sidecar ([`Sidecars`]; `false`: it has none).
    pub(crate) fn sidecar_may_exist(&self, id: Id) -> bool {
        self.sidecars.lock().may_have(id)
    }

    /// Whether `id` has a sidecar (a `lstat` only if [`Sidecars`] says it may).
    pub(super) fn sidecar_exists(&self, id: Id) -> bool {
        self.sidecar_may_exist(id) && sys::lstatat(self.dir.as_raw_fd(), &Self::hex(id)).is_ok()
    }

    /// Remove the sidecar of `id` (if any) and forget it in [`Sidecars`].
    pub(super) fn sidecar_remove(&self, id: Id) {
        let mut known = self.sidecars.lock();
        if !known.may_have(id) {
            return;
        }
        match sys::unlinkat(self.dir.as_raw_fd(), &Self::hex(id), 0) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                // Still there, as far as we know: keep it known.
                tracing::warn!(brick = %self.shown, %id, error = %e, "cannot remove checksum sidecar");
            }
            _ => {
                known.ids.remove(&id);
            }
        }
    }

    /// Load the table of `id` (`fd` its data; the stripe lock held, exclusively or shared
    /// with its table mutex: a table of 64 KiB blocks is converted). `None`: the file has no
    /// checksums (created before checksums existed, or never written).
    pub(crate) fn load(&self, id: Id, fd: RawFd) -> R<Option<Sums>> {
        match self.load_any(id, fd)? {
            Some((s, true)) => self.convert(id, fd, s).map(Some),
            other => Ok(other.map(|x| x.0)),
        }
    }

    /// [`Self::load`] without the stripe lock: a table of 64 KiB blocks is refused
    /// (`EAGAIN`, [`OLD_TABLE`]: run again under the lock).
    pub(super) fn load_unlocked(&self, id: Id, fd: RawFd) -> R<Option<Sums>> {
        match self.load_any(id, fd)? {
            Some((_, true)) => Err(fail(libc::EAGAIN, format!("read of {id}: {OLD_TABLE}"))),
            other => Ok(other.map(|x| x.0)),
        }
    }

    /// The table of `id` as stored, and whether it is of 64 KiB blocks (then its entries
    /// are format-2 entries of 64 KiB blocks, a format-1 table's converted).
    pub(super) fn load_any(&self, id: Id, fd: RawFd) -> R<Option<(Sums, bool)>> {
        let what = || format!("checksums of {id}");
        match self.sidecar_open(id) {
            Ok(sc) => {
                let mut h = [0u8; HDR as usize];
                let n = sys::pread(sc.as_raw_fd(), &mut h, 0).ctx(what)?;
                let Hdr { size, ver, partial, old } = parse_header(&h[..n])
                    .ok_or_else(|| corrupt(id, 0, "has a damaged checksum sidecar"))?;
                if ver == 1 {
                    let mut buf = vec![0u8; (size.div_ceil(OLD_BLOCK) * 4) as usize];
                    sys::pread(sc.as_raw_fd(), &mut buf, HDR).ctx(what)?;
                    let v = from_v1(size, &le32(&buf));
                    let loc = Loc::Mem { v, sidecar: true };
                    let s = Sums { size, loaded: (size, true), partial: false, loc };
                    return Ok(Some((s, true)));
                }
                let loc = Loc::Sidecar(sc);
                return Ok(Some((Sums { size, loaded: (size, partial), partial, loc }, old)));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let v = match XTarget::Fd(fd).get_sized(XATTR_CSUM, XATTR_BYTES) {
            Ok(v) => v,
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {
                // A new, never written file starts an empty table; a non-empty file without
                // one predates checksums.
                let st = sys::fstat(fd).ctx(what)?;
                return Ok((st.st_size == 0).then(|| (Sums::empty(), false)));
            }
            Err(e) => return Err(e).ctx(what),
        };
        let Hdr { size, ver, partial, old } =
            parse_header(&v).ok_or_else(|| corrupt(id, 0, "has a damaged checksum xattr"))?;
        let body = &v[HDR as usize..];
        let blocks = if old { size.div_ceil(OLD_BLOCK) } else { nblocks(size) };
        if body.len() % 4 != 0 || (body.len() / 4) as u64 != blocks {
            return Err(corrupt(id, 0, "has a checksum xattr of the wrong length"));
        }
        let mut entries = le32(body);
        if ver == 1 {
            entries = from_v1(size, &entries);
        }
        let loc = Loc::Mem { v: entries, sidecar: false };
        Ok(Some((Sums { size, loaded: (size, partial), partial, loc }, old)))
    }

    /// Convert `old`, a table of 64 KiB blocks (format-2 entries), to 4 KiB blocks (stripe
    /// lock held: the data does not change meanwhile). Every 64 KiB block with data is read
    /// and checked against its old entry, then summed per 4 KiB; a block that fails keeps
    /// failing: its new entries are stored XOR [`FAILING`] (logged at error level; reads of
    /// it get ECORRUPT until a heal or a full overwrite). A hole whose old entry is not that
    /// of zeros likewise. Unknown entries (a partial table) stay unknown. Holes of the file
    /// are not read. The new table replaces the old one whole (a sidecar is built under a
    /// temporary name and renamed over the old), under the dirty mark like a change (a crash
    /// meanwhile rebuilds the table).
    pub(crate) fn convert(&self, id: Id, fd: RawFd, old: Sums) -> R<Sums> {
        let what = || format!("converting the checksums of {id} to 4 KiB blocks");
        let t0 = Instant::now();
        let size = old.size;
        let per = OLD_BLOCK / BLOCK;
        let nold = size.div_ceil(OLD_BLOCK);
        let nnew = nblocks(size);
        let partial = old.partial;
        let mut bad = 0u64;
        let mut convert = |out: &mut dyn FnMut(u64, &[u32]) -> io::Result<()>| -> io::Result<()> {
            let mut runs = vec![];
            data_runs(fd, 0, size, OLD_BLOCK, |a, b| {
                runs.push((a, b.min(nold)));
                Ok(())
            })?;
            runs.push((nold, nold));
            let mut buf = vec![0u8; (BATCH * BLOCK) as usize];
            let mut next = 0;
            for (a, b) in runs {
                // Holes: the old entry must be that of zeros (or unknown).
                let mut ob = next;
                while ob < a {
                    ob = old.next_stored(ob)?;
                    if ob >= a {
                        break;
                    }
                    let n = (a - ob).min(BATCH * 1024);
                    for (i, e) in old.get(ob, n)?.into_iter().enumerate() {
                        if matches!(e, Some(e) if e != 0) {
                            bad += 1;
                            let b0 = (ob + i as u64) * per;
                            let raw = vec![old.encode(Some(FAILING)); per.min(nnew - b0) as usize];
                            out(b0, &raw)?;
                        }
                    }
                    ob += n;
                }
                let mut ob = a;
                while ob < b {
                    let n = (b - ob).min(BATCH / per);
                    let (start, end) = (ob * OLD_BLOCK, ((ob + n) * OLD_BLOCK).min(size));
                    let want = (end - start) as usize;
                    let got = sys::pread(fd, &mut buf[..want], start)?;
                    // A file shorter than its table: the missing bytes fail (as zeros,
                    // unless their entry is of zeros; the size check fails anyway).
                    buf[got..want].fill(0);
                    let es = old.get(ob, n)?;
                    let mut raw = Vec::with_capacity(want.div_ceil(BLOCK as usize));
                    for (i, chunk) in buf[..want].chunks(OLD_BLOCK as usize).enumerate() {
                        let Some(e) = es[i] else {
                            raw.extend(chunk.chunks(BLOCK as usize).map(|_| 0));
                            continue;
                        };
                        let ok = enc_old(crc32c::crc32c(chunk), chunk.len() as u64) == e;
                        if !ok {
                            bad += 1;
                        }
                        let x = if ok { 0 } else { FAILING };
                        raw.extend(
                            chunk
                                .chunks(BLOCK as usize)
                                .map(|c| old.encode(Some(enc_bytes(c) ^ x))),
                        );
                    }
                    out(ob * per, &raw)?;
                    ob += n;
                }
                next = b;
            }
            Ok(())
        };
        self.begin(id)?;
        let sidecar = matches!(old.loc, Loc::Sidecar(_) | Loc::Mem { sidecar: true, .. })
            || nnew > XATTR_MAX_BLOCKS;
        let loc = if sidecar {
            let sc = self.sidecar_build(id, fd, size, partial, |sc| {
                convert(&mut |b0, e| write_runs(sc, b0, e))
            })?;
            self.fds.lock().remove(&id);
            Loc::Sidecar(Arc::new(sc))
        } else {
            let mut v = vec![0u32; nnew as usize];
            convert(&mut |b0, e| {
                v[b0 as usize..b0 as usize + e.len()].copy_from_slice(e);
                Ok(())
            })
            .ctx(what)?;
            let sidecar = self.xattr_put(id, fd, size, partial, &v)?;
            Loc::Mem { v, sidecar }
        };
        if bad > 0 {
            tracing::error!(brick = %self.shown, %id, blocks = bad, "64 KiB blocks fail their old checksums while converting to 4 KiB blocks; they keep failing until healed");
        }
        tracing::debug!(brick = %self.shown, %id, size, elapsed = ?t0.elapsed(), "checksums converted to 4 KiB blocks");
        Ok(Sums { size, loaded: (size, partial), partial, loc })
    }

    /// Write back a table changed in memory (xattr) or finish one changed in place (sidecar:
    /// header and length). A table grown past the xattr limit moves to a sidecar.
    pub(super) fn commit(&self, id: Id, fd: RawFd, s: Sums) -> R<()> {
        let what = || format!("writing checksums of {id}");
        match s.loc {
            Loc::Mem { mut v, sidecar } => {
                let n = nblocks(s.size);
                if sidecar || n > XATTR_MAX_BLOCKS {
                    v.truncate(n as usize);
                    return self.sidecar_write(id, fd, s.size, s.partial, &v).map(drop);
                }
                v.resize(n as usize, 0);
                self.xattr_put(id, fd, s.size, s.partial, &v).map(drop)
            }
            Loc::Sidecar(sc) if (s.size, s.partial) != s.loaded => {
                sys::pwrite_all(sc.as_raw_fd(), &header(s.size, s.partial), 0).ctx(what)?;
                sys::ftruncate(sc.as_raw_fd(), HDR + nblocks(s.size) * 4).ctx(what)
            }
            Loc::Sidecar(_) => Ok(()), // entries written in place; header unchanged
        }
    }

    /// Store a table of at most [`XATTR_MAX_BLOCKS`] entries in the xattr; where it does not
    /// fit (an ext4 of 1 KiB blocks has less than 1 KiB for all xattrs of an inode) in a
    /// sidecar instead. Returns whether it went to a sidecar.
    pub(super) fn xattr_put(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        partial: bool,
        v: &[u32],
    ) -> R<bool> {
        let mut buf = header(size, partial).to_vec();
        buf.extend(to_le(v));
        match XTarget::Fd(fd).set(XATTR_CSUM, &buf, 0) {
            Ok(()) => Ok(false),
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::E2BIG | libc::ERANGE)) =>
            {
                tracing::debug!(brick = %self.shown, %id, bytes = buf.len(), error = %e, "checksum table does not fit the xattr; using a sidecar");
                self.sidecar_write(id, fd, size, partial, v).map(|_| true)
            }
            Err(e) => Err(e).ctx(|| format!("writing checksums of {id}")),
        }
    }

    /// Create the sidecar of `id` (written to a temporary name, renamed into place, then
    /// the xattr removed), with stored entries `raw` from block 0 (the rest zero). Returns
    /// it open.
    pub(super) fn sidecar_write(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        partial: bool,
        raw: &[u32],
    ) -> R<OwnedFd> {
        self.sidecar_build(id, fd, size, partial, |sc| write_runs(sc, 0, raw))
    }

    pub(super) fn sidecar_build(
        &self,
        id: Id,
        fd: RawFd,
        size: u64,
        partial: bool,
        fill: impl FnOnce(RawFd) -> io::Result<()>,
    ) -> R<OwnedFd> {
        let what = || format!("writing checksum sidecar of {id}");
        let d = self.dir.as_raw_fd();
        let tmp = cstr(format!(".tmp.{}", id.to_hex()).as_bytes()).ctx(what)?;
        let _ = sys::unlinkat(d, &tmp, 0);
        let sc =
            sys::openat(d, &tmp, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600).ctx(what)?;
        sys::pwrite_all(sc.as_raw_fd(), &header(size, partial), 0).ctx(what)?;
        sys::ftruncate(sc.as_raw_fd(), HDR + nblocks(size) * 4).ctx(what)?;
        fill(sc.as_raw_fd()).ctx(what)?;
        {
            // Known before it is in place (under the set's lock: a removal meanwhile
            // cannot forget it after the rename).
            let mut known = self.sidecars.lock();
            known.insert(id);
            sys::renameat2(d, &tmp, d, &Self::hex(id), 0).ctx(what)?;
        }
        match XTarget::Fd(fd).remove(XATTR_CSUM) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => Err(e).ctx(what),
            _ => Ok(sc),
        }
    }

    /// Forget the checksums of an inode that is gone (its sidecar and dirty marker).
    pub(crate) fn forget(&self, id: Id) {
        self.fds.lock().remove(&id);
        self.sidecar_remove(id);
        self.dirty.forget(id);
    }
}
