//! The brick's part of moving a file to another replica set (a rebalance,
//! docs/rebalance.md): the fence on the set it leaves, the copy's inode outside the
//! namespace on the set it moves to, and the switch that leaves a moved stub behind.
//!
//! A fence lives in the memory of every brick of the set (`Op::MigrateMark` is
//! replicated) and lapses [`FENCE_TTL`] after it was last set: the rebalancer sets it
//! again while it copies, so a rebalancer that died (its node crashed) leaves no file
//! fenced for longer than that, and a switch (`MigrateOut`) with a lapsed fence is
//! refused (the rebalancer aborts the move and the file stays where it was). A brick
//! that opens holds no fence.

use super::{attr_of, Brick, Cx};
use crate::error::{fail, show, Ctx, R};
use crate::ids::{self, is_reg, Ent, Found};
use crate::sys::{self, cstr, XTarget};
use cairn_proto::msg::Reply;
use cairn_proto::{valid_name, Attr, Id};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How long a fence holds unless set again (shorter than a client's retry budget, 30 s,
/// so a write that waits out a dead rebalancer's fence is not failed).
pub const FENCE_TTL: Duration = Duration::from_secs(15);

impl Brick {
    /// The set regular file `id` is being moved to, while its move fences it here.
    pub fn migrating(&self, id: Id) -> Option<u32> {
        let mut f = self.fences.lock();
        match f.get(&id) {
            Some((to, at)) if at.elapsed() < FENCE_TTL => Some(*to),
            Some(_) => {
                f.remove(&id);
                None
            }
            None => None,
        }
    }

    /// Whether regular file `id`'s fd is in the fd cache (no syscall): then its index
    /// entry is the file, not a moved stub (making a stub forgets the fd).
    pub fn file_cached(&self, id: Id) -> Option<()> {
        self.idx.file_fd_cached(id).map(|_| ())
    }

    /// How many `Op::Open`s hold `id` on this brick.
    pub fn open_count(&self, id: Id) -> u32 {
        self.opens.lock().get(&id).copied().unwrap_or(0)
    }

    fn set_fence(&self, id: Id, to: Option<u32>) -> R<()> {
        let mut f = self.fences.lock();
        match to {
            Some(set) => f.insert(id, (set, Instant::now())),
            None => f.remove(&id),
        };
        Ok(())
    }

    /// `Op::MigrateMark` (set again by the rebalancer while it copies: see [`FENCE_TTL`]).
    pub(crate) fn op_migrate_mark(&self, cx: &Cx, id: Id, to: Option<u32>) -> R<Reply> {
        if to.is_some() && !cx.replica {
            match self.find(id)? {
                Found::Other(st) if is_reg(&st) => {}
                _ => return Err(fail(libc::EINVAL, format!("{id}: only regular files move"))),
            }
            if self.open_count(id) > 0 {
                return Err(fail(libc::EBUSY, format!("{id} is open (Op::Open); not moved")));
            }
        }
        self.set_fence(id, to)?;
        Ok(Reply::Unit)
    }

    /// `Op::MigrateIn`.
    pub(crate) fn op_migrate_in(&self, cx: &Cx, id: Id, a: &Attr) -> R<Reply> {
        let what = || format!("copy of {id} made outside the namespace");
        match self.idx.lstat_index(id) {
            // A copy that was cut (no name yet, or named here by a move cut before its
            // switch, while the set it leaves kept the file): start again from empty.
            Ok(st) if is_reg(&st) && self.idx.moved(id).ok().flatten().is_none() => {
                let fd = self.file(id)?;
                let _g = self.stripe(id).lock();
                self.csum.begin(id)?;
                let old =
                    self.csum.before(id, fd.as_raw_fd(), crate::csum::Change::None, Some(0))?;
                let r = sys::ftruncate(fd.as_raw_fd(), 0);
                let sums = self.csum.changed(id, fd.as_raw_fd(), old, crate::csum::Change::None);
                r.ctx(what)?;
                sums?;
            }
            Ok(_) if cx.replica => {}
            Ok(_) => {
                return Err(fail(
                    libc::EEXIST,
                    format!("{}: id {id} is already in use here", what()),
                ))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let (_, ab) = ids::bucket(id);
                let tmp = cstr(format!("{}/.tmp.in.{}", ab, id.to_hex()).as_bytes()).ctx(what)?;
                let ix = self.idx.ids_fd();
                let _ = sys::unlinkat(ix, &tmp, 0);
                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW;
                let fd = match sys::openat(ix, &tmp, flags, 0o600) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        self.idx.ensure_bucket(id).ctx(what)?;
                        sys::openat(ix, &tmp, flags, 0o600).ctx(what)?
                    }
                    r => r.ctx(what)?,
                };
                let f = fd.as_raw_fd();
                XTarget::Fd(f).set(ids::XATTR_ID, &id.to_bytes(), libc::XATTR_CREATE).ctx(what)?;
                sys::fchown(f, a.uid, a.gid).ctx(what)?;
                sys::fchmod(f, a.perm & 0o7777).ctx(what)?;
                sys::renameat2(ix, &tmp, ix, &ids::rel(id), libc::RENAME_NOREPLACE).ctx(what)?;
            }
            Err(e) => return Err(e).ctx(what),
        }
        Ok(Reply::Attr(self.attr(id)?))
    }

    /// `Op::MigrateOut`.
    pub(crate) fn op_migrate_out(
        &self,
        cx: &Cx,
        dir: Id,
        name: &[u8],
        id: Id,
        to: u32,
    ) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("switch of {} ({id}) in directory {dir} to set {to}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match ids::entry(d, name) {
            Ok(Ent::Inode { id: eid, st }) if eid == id => {
                if !cx.replica {
                    if st.st_nlink != 2 {
                        return Err(fail(libc::EBUSY, format!("{}: it has other names", what())));
                    }
                    if self.migrating(id) != Some(to) {
                        return Err(fail(libc::EBUSY, format!("{}: not fenced for it", what())));
                    }
                    if self.open_count(id) > 0 {
                        return Err(fail(libc::EBUSY, format!("{}: open", what())));
                    }
                }
            }
            // Done already (a replica that got it twice, a head's retry).
            Ok(Ent::Linkto { target, .. })
                if target == id && self.idx.moved(id).ok().flatten() == Some(to) =>
            {
                self.set_fence(id, None)?;
                return Ok(Reply::Unit);
            }
            Ok(_) => return Err(fail(libc::ESTALE, format!("{}: the name changed", what()))),
            Err(e) => return Err(e).ctx(what),
        }
        // The linkto is made in the index bucket and renamed over the name: the name is
        // the file or its linkto at every instant.
        let (_, ab) = ids::bucket(id);
        let tmp = cstr(format!("{}/.tmp.out.{}", ab, id.to_hex()).as_bytes()).ctx(what)?;
        let ix = self.idx.ids_fd();
        let _ = sys::unlinkat(ix, &tmp, 0);
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW;
        let fd = sys::openat(ix, &tmp, flags, 0).ctx(what)?;
        XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_LINKTO, &id.to_bytes(), 0).ctx(what)?;
        drop(fd);
        // The stub first: cut between the two, the id already forwards, and the old
        // inode is left under the name only (a lookup hashes to `to` first).
        let _g = self.stripe(id).lock();
        self.idx.make_stub(id, to).ctx(what)?;
        self.csum.forget(id);
        sys::renameat2(ix, &tmp, d, &cname, 0).ctx(what)?;
        self.forget_listing(dir);
        drop(_g);
        self.set_fence(id, None)?;
        Ok(Reply::Unit)
    }

    /// `Op::MigrateDrop`.
    pub(crate) fn op_migrate_drop(&self, id: Id) -> R<Reply> {
        match self.idx.lstat_index(id) {
            Ok(st)
                if is_reg(&st)
                    && st.st_nlink == 1
                    && self.idx.moved(id).ok().flatten().is_none()
                    && self.open_count(id) == 0 =>
            {
                self.idx.unlink(id).ctx(|| format!("dropping the copy of {id}"))?;
                self.csum.forget(id);
            }
            _ => {}
        }
        Ok(Reply::Unit)
    }

    /// `Op::MigrateStub`: make `id`'s index entry a moved stub naming `to`, or rewrite
    /// the stub there; EEXIST if the entry is an inode (never replaced).
    pub(crate) fn op_migrate_stub(&self, id: Id, to: u32) -> R<Reply> {
        let what = || format!("moved stub of {id} to set {to}");
        match self.idx.lstat_index(id) {
            Ok(st) if !ids::stub_shaped(&st) => {
                return Err(fail(libc::EEXIST, format!("{}: the inode itself is here", what())))
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let _g = self.stripe(id).lock();
        self.idx.make_stub(id, to).ctx(what)?;
        self.csum.forget(id);
        Ok(Reply::Unit)
    }

    /// The state of a moved stub as attributes (for tests and `cairn` tools): `None` when
    /// `id`'s index entry here is not one.
    pub fn stub_attr(&self, id: Id) -> Option<(Attr, u32)> {
        let set = self.idx.moved(id).ok().flatten()?;
        let st = self.idx.lstat_index(id).ok()?;
        Some((attr_of(id, &st, false), set))
    }
}
