//! Inode attributes: setattr (owner, mode, size, times) and statfs.

use super::{Brick, Cx};
use crate::csum::Change;
use crate::error::{fail, Ctx, R};
use crate::ids::{self, is_dir, is_lnk, is_reg, Found};
use crate::sys::{self};
use cairn_proto::msg::Reply;
use cairn_proto::{Id, SetTime, StatFs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

impl Brick {
    pub(crate) fn op_setattr(&self, cx: &Cx, id: Id, set: &cairn_proto::SetAttr) -> R<Reply> {
        let what = || format!("setattr of {id}");
        let times = [set_time(set.atime), set_time(set.mtime)];
        let want_times = set.atime.is_some() || set.mtime.is_some();
        let chown = set.uid.is_some() || set.gid.is_some();
        let (uid, gid) = (set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX));
        let found = self.find(id)?;
        let fd: Option<Arc<OwnedFd>> = match &found {
            Found::Dir(fd) => Some(fd.clone()),
            Found::Other(st) if is_reg(st) => Some(self.file(id)?),
            Found::Other(_) => None,
        };
        let st = match &found {
            Found::Dir(fd) => sys::fstat(fd.as_raw_fd()).ctx(what)?,
            Found::Other(st) => *st,
        };
        let r = ids::rel(id);
        let ix = self.idx.ids_fd();
        if chown {
            match &fd {
                Some(fd) => cx.user(|| sys::fchown(fd.as_raw_fd(), uid, gid)),
                None => cx.user(|| sys::lchownat(ix, &r, uid, gid)),
            }
            .ctx(what)?;
        }
        if let Some(perm) = set.perm {
            match &fd {
                Some(fd) => cx.user(|| sys::fchmod(fd.as_raw_fd(), perm & 0o7777)),
                None if is_lnk(&st) => Err(sys::errno(libc::EOPNOTSUPP)),
                None => cx.user(|| sys::fchmodat(ix, &r, perm & 0o7777)),
            }
            .ctx(what)?;
        }
        if let Some(size) = set.size {
            if is_dir(&st) {
                return Err(fail(libc::EISDIR, format!("{}: truncate of a directory", what())));
            }
            let Some(fd) = fd.as_ref().filter(|_| is_reg(&st)) else {
                return Err(fail(
                    libc::EINVAL,
                    format!("{}: truncate of a non-regular file", what()),
                ));
            };
            cx.check(fd.as_raw_fd(), &st, 2)?;
            let _g = self.stripe(id).lock();
            let f = fd.as_raw_fd();
            self.csum.begin(id)?;
            let old = self.csum.before(id, f, Change::None, Some(size))?;
            let r = sys::ftruncate(f, size);
            let sums = self.csum.changed(id, f, old, Change::None);
            r.ctx(what)?;
            sums?;
        }
        if want_times {
            match &fd {
                Some(fd) => cx.user(|| sys::futimens(fd.as_raw_fd(), &times)),
                None => cx.user(|| sys::lutimensat(ix, &r, &times)),
            }
            .ctx(what)?;
        }
        Ok(Reply::Attr(self.attr(id)?))
    }

    pub(crate) fn op_statfs(&self) -> R<Reply> {
        let s = sys::fstatvfs(self.idx.root.as_raw_fd()).ctx(|| "statfs")?;
        Ok(Reply::StatFs(StatFs {
            bsize: s.f_frsize as u32,
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            namemax: s.f_namemax as u32,
        }))
    }
}

pub(crate) fn set_time(t: Option<SetTime>) -> libc::timespec {
    match t {
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        Some(SetTime::Now) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        Some(SetTime::At(t)) => libc::timespec { tv_sec: t.sec, tv_nsec: t.nsec as i64 },
    }
}
