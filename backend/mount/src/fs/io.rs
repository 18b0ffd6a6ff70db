//! File I/O: open, read, write, flush, release, fsync, fallocate, server-side copy, seek.

use super::*;

impl CairnFs {
    pub(super) fn op_open(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        OpenFlags(flags): OpenFlags,
        reply: ReplyOpen,
    ) {
        self.count("open");
        let id = try_reply!(self.id(ino), reply);
        // No round trip: answered here.
        let c = self.creds(req);
        self.sh.vol.note_open(id);
        reply.opened(FileHandle(CairnFs::new_handle(&self.sh, id, c, flags)), FopenFlags::empty());
    }

    pub(super) fn op_read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.count("read");
        let (id, c) = match self.sh.handles.lock().get(&fh) {
            Some(h) => (h.id, h.read_creds.clone()),
            None => return reply.error(Errno::from_i32(libc::EBADF)),
        };
        // Quick-read content: answered here.
        if let Some((data, _eof)) = self.sh.vol.read_cached(&c, id, offset, size) {
            return reply.data(&data);
        }
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.read(&c, id, offset, size).await {
                Ok((data, _eof)) => reply.data(&data),
                Err(e) => {
                    reply.error(Errno::from_i32(fail("read", format!("{id}@{offset}+{size}"), &e)))
                }
            }
        });
    }

    pub(super) fn op_write(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.count("write");
        let (id, c, sync) = try_reply!(self.handle(fh, ino), reply);
        if self.sh.cfg.writeback_cache {
            let end = offset + data.len() as u64;
            let mut w = self.sh.written.lock();
            match w.get_mut(&id) {
                Some(a) => a.size = a.size.max(end),
                None => {
                    if let Some(mut a) = self.sh.vol.cached_attr(id) {
                        a.size = a.size.max(end);
                        w.insert(id, a);
                    }
                }
            }
        }
        let sh = self.sh.clone();
        let run = move |data: Bytes| async move {
            let len = data.len();
            let r = if sync {
                sh.vol.write_through(&c, id, offset, data).await
            } else {
                sh.vol.write(&c, id, offset, data).await
            };
            match r {
                Ok(n) => {
                    sh.inodes.lock().local_change(ino, Some(offset + n as u64), None, None);
                    reply.written(n)
                }
                Err(e) => {
                    reply.error(Errno::from_i32(fail("write", format!("{id}@{offset}+{len}"), &e)))
                }
            }
        };
        // Large writes: the data stays in fuser's buffer and this thread waits until the
        // write is done with it; the reply still goes out from the runtime.
        match (data.len() >= lend::LEND_MIN).then(|| self.sh.parked.take(lend::SLOT_WAIT)).flatten()
        {
            Some(_slot) => {
                self.count("write.lent");
                lend::with_lent(data, |data| self.spawn(run(data)));
            }
            None => self.spawn(run(Bytes::copy_from_slice(data))),
        }
    }

    pub(super) fn op_flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        FileHandle(fh): FileHandle,
        LockOwner(lock_owner): LockOwner,
        reply: ReplyEmpty,
    ) {
        self.count("flush");
        let (id, read_only) = match self.sh.handles.lock().get(&fh) {
            Some(h) => (h.id, h.read_only),
            None => return reply.error(Errno::from_i32(libc::EBADF)),
        };
        // A read-only open wrote nothing to report at close: unless it may hold POSIX
        // locks, answer here rather than on the runtime.
        if read_only && !self.sh.lockers.lock().contains(&(id, lock_owner)) {
            return reply.ok();
        }
        let (c, sh, pid) = (self.creds(req), self.sh.clone(), req.pid());
        self.spawn(async move {
            let r = sh.vol.flush(id).await;
            // close(2) releases every POSIX lock the process holds on the file.
            if sh.lockers.lock().remove(&(id, lock_owner)) {
                let unlock =
                    Lock { kind: LockKind::Unlock, start: 0, len: 0, owner: lock_owner, pid };
                if let Err(e) = sh.vol.setlock(&c, id, unlock, false).await {
                    warn!(%id, lock_owner, error = %e, "releasing POSIX locks on close");
                }
            }
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("flush", id, &e))),
            }
        });
    }

    pub(super) fn op_release(
        &self,
        _req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.count("release");
        let h = self.sh.handles.lock().remove(&fh);
        let read_only = h.as_ref().map(|h| h.read_only).unwrap_or(false);
        let id = match h {
            Some(h) => {
                let mut opens = self.sh.opens.lock();
                if let Some(n) = opens.get_mut(&h.id) {
                    *n -= 1;
                    if *n == 0 {
                        opens.remove(&h.id);
                        self.sh.written.lock().remove(&h.id);
                    }
                }
                h.id
            }
            None => try_reply!(self.id(ino), reply),
        };
        // A read-only open with nothing of the file to wait for: answered here (a deferred
        // error of another open's writes is left to that one).
        if read_only && self.sh.vol.release_if_idle(id) {
            return reply.ok();
        }
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.release(id).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("release", id, &e))),
            }
        });
    }

    pub(super) fn op_fsync(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.count("fsync");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.fsync(&c, id, datasync).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(Errno::from_i32(fail("fsync", id, &e))),
            }
        });
    }

    pub(super) fn op_fallocate(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.count("fallocate");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        // The kernel's loff_t values: negative ones arrive here as huge.
        let max = i64::MAX as u64;
        if offset > max || length == 0 || length > max {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.fallocate(&c, id, mode as u32, offset, length).await {
                Ok(()) => {
                    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                        let end = Some(offset + length);
                        sh.inodes.lock().local_change(ino, end, None, None);
                    }
                    reply.ok()
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "fallocate",
                    format!("{id}@{offset}+{length}"),
                    &e,
                ))),
            }
        });
    }

    /// copy_file_range(2) inside the volume: the bricks copy when both files share a
    /// replica set (`Volume::copy_range`), so the data does not come through this mount.
    // The arguments of fuser's `Filesystem` method, as the kernel sends them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op_copy_file_range(
        &self,
        _req: &Request,
        INodeNo(ino_in): INodeNo,
        FileHandle(fh_in): FileHandle,
        offset_in: u64,
        INodeNo(ino_out): INodeNo,
        FileHandle(fh_out): FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.count("copy_file_range");
        let (src, _, _) = try_reply!(self.handle(fh_in, ino_in), reply);
        // The credentials the destination was opened with, as for a WRITE of it.
        let (dst, c, _) = try_reply!(self.handle(fh_out, ino_out), reply);
        let max = i64::MAX as u64;
        if flags.bits() != 0 || offset_in > max || offset_out > max {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        // The reply carries a 32-bit count (the kernel asks for at most that much anyway).
        let len = len.min(u32::MAX as u64 & !0xfff);
        let sh = self.sh.clone();
        self.spawn(async move {
            match sh.vol.copy_range(&c, src, offset_in, dst, offset_out, len).await {
                Ok(n) => {
                    sh.inodes.lock().local_change(ino_out, Some(offset_out + n), None, None);
                    reply.written(n as u32)
                }
                Err(e) => reply.error(Errno::from_i32(fail(
                    "copy_file_range",
                    format!("{src}@{offset_in} to {dst}@{offset_out}+{len}"),
                    &e,
                ))),
            }
        });
    }

    pub(super) fn op_lseek(
        &self,
        req: &Request,
        INodeNo(ino): INodeNo,
        FileHandle(fh): FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.count("lseek");
        let (id, _, _) = try_reply!(self.handle(fh, ino), reply);
        let w = match whence {
            libc::SEEK_DATA => SeekWhence::Data,
            libc::SEEK_HOLE => SeekWhence::Hole,
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        if offset < 0 {
            return reply.error(Errno::from_i32(libc::ENXIO));
        }
        let (c, sh) = (self.creds(req), self.sh.clone());
        self.spawn(async move {
            match sh.vol.seek(&c, id, offset as u64, w).await {
                Ok(o) => reply.offset(o as i64),
                Err(e) => reply.error(Errno::from_i32(fail("lseek", format!("{id}@{offset}"), &e))),
            }
        });
    }
}
