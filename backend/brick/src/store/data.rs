//! Data operations: open/release, read, write, fsync, fallocate, seek and
//! compare-and-write, each keeping the data checksums (`csum`) in step.

use super::{attr_of, Brick, Cx};
use crate::csum::Change;
use crate::error::{fail, Ctx, R};
use crate::ids::{is_reg, Found};
use crate::sys::{self};
use bytes::Bytes;
use cairn_proto::msg::Reply;
use cairn_proto::{Errno, Id, SeekWhence};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

impl Brick {
    pub(crate) fn op_open(&self, id: Id) -> R<Reply> {
        let mut opens = self.opens.lock();
        self.find(id)?;
        *opens.entry(id).or_insert(0) += 1;
        Ok(Reply::Unit)
    }

    pub(crate) fn op_release(&self, id: Id) -> R<Reply> {
        {
            let mut opens = self.opens.lock();
            match opens.get_mut(&id) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    return Ok(Reply::Unit);
                }
                Some(_) => {
                    opens.remove(&id);
                }
                None => return Ok(Reply::Unit),
            }
        }
        if let Ok(Found::Other(_)) = self.idx.find(id) {
            self.drop_if_unused(id)?;
        }
        Ok(Reply::Unit)
    }

    pub(crate) fn op_read(&self, cx: &Cx, id: Id, offset: u64, len: u32) -> R<(Reply, Bytes)> {
        let fd = self.file(id)?;
        self.read_fd(cx, id, &fd, offset, len, false)
    }

    /// READ of `id` from the fd cache and the page cache only (`execute_cached`): `None`
    /// when the file is not open in the cache, the data not all cached, or on any error.
    pub(crate) fn read_cached(
        &self,
        cx: &Cx,
        id: Id,
        offset: u64,
        len: u32,
    ) -> Option<(Reply, Bytes)> {
        let fd = self.idx.file_fd_cached(id)?;
        self.read_fd(cx, id, &fd, offset, len, true).ok()
    }

    /// READ of `id` open as `fd`. `nowait`: from the page cache only (see
    /// [`Brick::read_verified_at`]); a checksum mismatch is then returned as is, not
    /// re-checked.
    pub(crate) fn read_fd(
        &self,
        cx: &Cx,
        id: Id,
        fd: &OwnedFd,
        offset: u64,
        len: u32,
        nowait: bool,
    ) -> R<(Reply, Bytes)> {
        let what = || format!("read of {id} at {offset}+{len}");
        let f = fd.as_raw_fd();
        let st = sys::fstat(f).ctx(what)?;
        cx.check(f, &st, 4)?;
        if offset >= i64::MAX as u64 {
            // No byte of a file lies there: end of file, checked before any offset
            // arithmetic (pread would refuse a negative offset with EINVAL).
            return Ok((Reply::Data { eof: true }, Bytes::new()));
        }
        // At most what one reply frame carries (a larger one would be refused by the
        // peer), and not past i64::MAX (`check_range`): a short read, as POSIX allows.
        let len = (len as usize)
            .min(cairn_proto::frame::MAX_DATA as usize)
            .min((i64::MAX as u64).saturating_sub(offset) as usize);
        let size = st.st_size as u64;
        // Checked against the checksums without the stripe lock; a mismatch is re-checked
        // under it (a write may have been between its data and its checksum update), and a
        // table of 64 KiB blocks is converted under it.
        let (buf, size) = match self.csum.read_verified_at(id, f, size, offset, len, nowait, false)
        {
            Err(e)
                if !nowait
                    && (e.errno == crate::csum::ECORRUPT
                        || (e.errno == libc::EAGAIN
                            && e.what.contains(crate::csum::OLD_TABLE))) =>
            {
                let _g = self.stripe(id).lock();
                self.csum.read_verified(id, f, offset, len)?
            }
            r => r?,
        };
        let n = buf.len();
        let eof = n < len || offset.saturating_add(n as u64) >= size;
        Ok((Reply::Data { eof }, buf))
    }

    /// A write runs in *shared* mode on its stripe: under the stripe's table mutex it
    /// claims the checksum blocks it touches, reads what a partial overwrite needs and
    /// updates the table as if the data were already written (the table runs ahead of the
    /// data); then it writes the data with only its blocks claimed, so writes of different
    /// blocks of one file reach the page cache in parallel. Everything else that changes
    /// data or checks it against the table (truncate, fallocate, compare-and-write, heal,
    /// scrub, a read's re-check) takes the stripe exclusively and so waits for writes in
    /// flight. A write the table cannot be planned for (a file without a table, a block
    /// that must be summed from disk) takes the stripe exclusively, as before.
    pub(crate) fn op_write(&self, cx: &Cx, id: Id, offset: u64, data: &[u8]) -> R<Reply> {
        let what = || format!("write of {id} at {offset}+{}", data.len());
        let fd = self.file(id)?;
        let f = fd.as_raw_fd();
        let stripe = self.stripe(id);
        let shared = stripe.rw.read();
        let end = offset.saturating_add(data.len() as u64);
        let first = offset / crate::csum::BLOCK;
        let last = end.saturating_sub(1).max(offset) / crate::csum::BLOCK;
        let claim = stripe.claim(id, first, last);
        let st = {
            let _t = stripe.table.lock();
            let st = sys::fstat(f).ctx(what)?;
            cx.check(f, &st, 2)?;
            self.csum.begin(id)?;
            let old = self.csum.before(id, f, Change::Data(offset, data), None)?;
            let new = end.max(st.st_size as u64);
            match self.csum.planned(id, f, old, Change::Data(offset, data), new)? {
                true => st,
                false => {
                    drop(claim);
                    drop(shared);
                    return self.op_write_locked(cx, id, &fd, offset, data);
                }
            }
        };
        if let Err(e) = self.write_data(id, &fd, offset, data) {
            // The table already has this write: re-sum the range from what is on disk.
            drop(claim);
            drop(shared);
            let _g = stripe.lock();
            if let Err(f) = self.csum.disk(id, f, offset, data.len() as u64) {
                tracing::warn!(brick = %self.root.display(), %id, error = %f.what, "after a failed write");
            }
            return Err(e).ctx(what);
        }
        drop(claim);
        self.clear_suid(cx, f, &st).ctx(what)?;
        drop(shared);
        let st = sys::fstat(f).ctx(what)?;
        Ok(Reply::Written { count: data.len() as u32, attr: attr_of(id, &st, true) })
    }

    /// [`Self::op_write`] with the stripe held exclusively around data and table.
    pub(crate) fn op_write_locked(
        &self,
        cx: &Cx,
        id: Id,
        fd: &Arc<OwnedFd>,
        offset: u64,
        data: &[u8],
    ) -> R<Reply> {
        let what = || format!("write of {id} at {offset}+{}", data.len());
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 2)?;
        let f = fd.as_raw_fd();
        self.csum.begin(id)?;
        let old = self.csum.before(id, f, Change::Data(offset, data), None)?;
        let r = self.write_data(id, fd, offset, data);
        let change = match r {
            Ok(()) => Change::Data(offset, data),
            Err(_) => Change::Disk(offset, data.len() as u64),
        };
        let sums = self.csum.changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        self.clear_suid(cx, fd.as_raw_fd(), &st).ctx(what)?;
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Written { count: data.len() as u32, attr: attr_of(id, &st, true) })
    }

    /// Write `data` at `offset` of file `id` (open as `fd`): a large aligned write with
    /// `O_DIRECT`, anything else through the page cache, written out early when large
    /// (`writeback.rs`).
    pub(crate) fn write_data(
        &self,
        id: Id,
        fd: &Arc<OwnedFd>,
        offset: u64,
        data: &[u8],
    ) -> io::Result<()> {
        let mut done = 0;
        if self.writeback.direct(data, offset) {
            match self.idx.file_fd_direct(id, fd) {
                Ok(d) => match sys::pwrite(d.as_raw_fd(), data, offset) {
                    Ok(n) if n == data.len() => return Ok(()),
                    // Short (a full disk): the rest, unaligned now, through the page cache,
                    // which reports the error.
                    Ok(n) => done = n,
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.writeback.no_direct(&self.root, &e)
                    }
                    // Interrupted, or would block: this write goes through the page cache.
                    Err(e)
                        if e.kind() == io::ErrorKind::Interrupted
                            || e.raw_os_error() == Some(libc::EAGAIN) => {}
                    Err(e) => return Err(e),
                },
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.writeback.no_direct(&self.root, &e)
                }
                // Out of fds, say: this write goes through the page cache.
                Err(e) => {
                    tracing::debug!(brick = %self.root.display(), %id, error = %e, "no O_DIRECT fd; writing through the page cache");
                }
            }
        }
        let rest = &data[done..];
        sys::pwrite_all(fd.as_raw_fd(), rest, offset + done as u64)?;
        self.writeback.written(fd, offset + done as u64, rest.len());
        Ok(())
    }

    /// A write by someone other than root clears setuid (and setgid with group exec).
    pub(crate) fn clear_suid(&self, cx: &Cx, fd: RawFd, st: &libc::stat) -> io::Result<()> {
        if cx.caller.is_none() {
            return Ok(());
        }
        let mut kill = libc::S_ISUID;
        if st.st_mode & libc::S_IXGRP != 0 {
            kill |= libc::S_ISGID;
        }
        if st.st_mode & kill != 0 {
            sys::fchmod(fd, st.st_mode & 0o7777 & !kill)?;
        }
        Ok(())
    }

    pub(crate) fn op_fsync(&self, id: Id, datasync: bool) -> R<Reply> {
        let fd = match self.find(id)? {
            Found::Dir(fd) => fd,
            Found::Other(st) if is_reg(&st) => self.file(id)?,
            Found::Other(_) => return Ok(Reply::Unit),
        };
        sys::fsync(fd.as_raw_fd(), datasync).ctx(|| format!("fsync of {id}"))?;
        Ok(Reply::Unit)
    }

    pub(crate) fn op_fallocate(
        &self,
        cx: &Cx,
        id: Id,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> R<Reply> {
        use cairn_proto::falloc::{KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE};
        let what = || format!("fallocate of {id} mode {mode:#x} at {offset}+{len}");
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
            return Err(fail(libc::EOPNOTSUPP, format!("{}: unsupported mode", what())));
        }
        let fd = self.file(id)?;
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 2)?;
        let f = fd.as_raw_fd();
        self.csum.begin(id)?;
        let planned = if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            Change::Zero(offset, len)
        } else {
            Change::None
        };
        let old = self.csum.before(id, f, planned, None)?;
        let r = sys::fallocate(f, mode as i32, offset, len);
        let change = if r.is_err() {
            Change::Disk(offset, len)
        } else if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            Change::Zero(offset, len)
        } else {
            Change::None
        };
        let sums = self.csum.changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        Ok(Reply::Attr(self.attr(id)?))
    }

    pub(crate) fn op_seek(&self, id: Id, offset: u64, whence: SeekWhence) -> R<Reply> {
        let fd = self.file(id)?;
        let w = match whence {
            SeekWhence::Data => libc::SEEK_DATA,
            SeekWhence::Hole => libc::SEEK_HOLE,
        };
        // lseek on a shared fd moves its offset; nothing else uses the offset (pread/pwrite).
        let off = sys::lseek(fd.as_raw_fd(), offset, w)
            .ctx(|| format!("seek {whence:?} of {id} from {offset}"))?;
        Ok(Reply::Offset(off))
    }

    pub(crate) fn op_caw(&self, cx: &Cx, id: Id, offset: u64, data: &[u8]) -> R<Reply> {
        let what = || format!("compare_and_write of {id} at {offset}+{}", data.len() / 2);
        if data.len() & 1 != 0 {
            return Err(fail(libc::EINVAL, format!("{}: payload has odd length", what())));
        }
        let (cmp, new) = data.split_at(data.len() / 2);
        let fd = self.file(id)?;
        let _g = self.stripe(id).lock();
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        cx.check(fd.as_raw_fd(), &st, 6)?;
        let f = fd.as_raw_fd();
        let (cur, _) = self.csum.read_verified(id, f, offset, cmp.len())?;
        let mut cur = cur.to_vec();
        cur.resize(cmp.len(), 0);
        if let Some(at) = cur.iter().zip(cmp).position(|(a, b)| a != b) {
            return Err(fail(
                Errno::EMISCOMPARE.0,
                format!("{}: miscompare at byte {}", what(), offset + at as u64),
            ));
        }
        self.csum.begin(id)?;
        let old = self.csum.before(id, f, Change::Data(offset, new), None)?;
        let r = sys::pwrite_all(f, new, offset);
        let change = match r {
            Ok(()) => Change::Data(offset, new),
            Err(_) => Change::Disk(offset, new.len() as u64),
        };
        let sums = self.csum.changed(id, f, old, change);
        r.ctx(what)?;
        sums?;
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Written { count: new.len() as u32, attr: attr_of(id, &st, true) })
    }
}
