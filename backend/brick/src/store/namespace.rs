//! Namespace operations: lookup, create, mkdir, linkto entries, link, unlink, rmdir,
//! rename, readlink. A replica applies them idempotently (see `Exec::Replica`).

use super::{attr_of, Brick, Cx};
use crate::error::{fail, show, Ctx, R};
use crate::ids::Ent;
use crate::ids::{self, id_of_fd, is_dir, is_lnk, is_reg, Found};
use crate::sys::{self, cstr, XTarget};
use cairn_proto::msg::Reply;
use cairn_proto::{valid_name, FileType, Id};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

impl Brick {
    pub(crate) fn op_lookup(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        if name == b".." {
            return self.op_lookup_parent(cx, dir);
        }
        valid_name(name)?;
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let what = || format!("{} in directory {dir}", show(name));
        let cname = cstr(name).ctx(what)?;
        // The lstat as the caller checks its search permission on the directory; its
        // result is the entry's (no second lstat as root).
        let st = cx.user(|| sys::lstatat(d, &cname)).ctx(what)?;
        match ids::entry_of(d, name, st).ctx(what)? {
            Ent::Inode { id, st } => {
                Ok(Reply::Entry { attr: attr_of(id, &st, true), linkto: None })
            }
            Ent::Linkto { target, st } => {
                Ok(Reply::Entry { attr: attr_of(target, &st, false), linkto: Some(target) })
            }
            Ent::Foreign { .. } => Err(fail(libc::EIO, format!("{} has no cairn id", what()))),
        }
    }

    /// `..` of directory `dir`: its parent, from the brick's own tree (every brick holds
    /// every directory at its place in the volume), so a gateway can walk up from a
    /// directory it only knows by handle. The root is its own parent.
    pub(crate) fn op_lookup_parent(&self, cx: &Cx, dir: Id) -> R<Reply> {
        let what = || format!("the parent of directory {dir}");
        let pfd = if dir == Id::ROOT {
            self.idx.data.clone()
        } else {
            let dfd = self.dir(dir)?;
            Arc::new(cx.user(|| sys::open_dir_at(dfd.as_raw_fd(), c"..")).ctx(what)?)
        };
        let id = match id_of_fd(pfd.as_raw_fd()).ctx(what)? {
            Some(id) => id,
            None if dir == Id::ROOT => Id::ROOT,
            None => return Err(fail(libc::EIO, format!("{} has no cairn id", what()))),
        };
        let st = sys::fstat(pfd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Entry { attr: attr_of(id, &st, true), linkto: None })
    }

    pub(crate) fn op_lookup_path(&self, cx: &Cx, components: &[Vec<u8>]) -> R<Reply> {
        let mut cur = self.idx.data.clone();
        let mut out = Vec::new();
        for c in components {
            valid_name(c)?;
            let cname = cstr(c).ctx(|| show(c))?;
            let fd = match cx.user(|| sys::open_dir_at(cur.as_raw_fd(), &cname)) {
                Ok(fd) => fd,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e).ctx(|| format!("path component {}", show(c))),
            };
            let Some(id) = id_of_fd(fd.as_raw_fd()).ctx(|| show(c))? else { break };
            let st = sys::fstat(fd.as_raw_fd()).ctx(|| show(c))?;
            out.push(attr_of(id, &st, false));
            cur = self.idx.remember_dir(id, fd);
        }
        Ok(Reply::Attrs(out))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_create(
        &self,
        cx: &Cx,
        dir: Id,
        name: &[u8],
        id: Id,
        kind: FileType,
        perm: u32,
        rdev: u64,
        target: Option<&[u8]>,
        exclusive: bool,
    ) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        if id == Id::ROOT || id == Id(0) {
            return Err(fail(libc::EINVAL, format!("{}: invalid id {id}", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let existing = |cx: &Cx| -> R<Option<Reply>> {
            match ids::entry(d, name) {
                Ok(Ent::Inode { id: eid, st }) => {
                    if cx.replica && eid == id {
                        self.apply_result(cx, id, None)?;
                        return Ok(Some(Reply::Attr(self.attr(id)?)));
                    }
                    if !exclusive && !cx.replica && kind == FileType::Regular && is_reg(&st) {
                        return Ok(Some(Reply::Attr(attr_of(eid, &st, true))));
                    }
                    Err(fail(libc::EEXIST, format!("{} exists (id {eid})", what())))
                }
                Ok(_) => Err(fail(libc::EEXIST, format!("{} exists", what()))),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
                Err(e) => Err(e).ctx(what),
            }
        };
        // A non-exclusive create by a caller looks first (an existing file is opened even
        // where the caller may not create one). A replica (root) creates first and looks
        // only on EEXIST: no failing lstat per create (the kernel reports EEXIST before
        // it allocates anything, so a full brick still finds the entry it already has).
        if !exclusive && !cx.replica {
            if let Some(r) = existing(cx)? {
                return Ok(r);
            }
        }
        let perm = perm & 0o7777;
        let mut file: Option<OwnedFd> = None;
        let made = match kind {
            FileType::Regular => cx
                .user(|| {
                    // As root (a root caller, a replica), opened as the fd cache opens a
                    // file, and kept there: the write that follows a create needs no
                    // lstat and open of the index link. A caller's fd is not kept.
                    let how = match cx.caller {
                        None => libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK,
                        Some(_) => libc::O_RDONLY,
                    };
                    sys::openat(
                        d,
                        &cname,
                        libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | how,
                        perm,
                    )
                })
                .map(|fd| file = Some(fd)),
            FileType::Directory => {
                return Err(fail(libc::EINVAL, format!("{}: create of a directory", what())))
            }
            FileType::Symlink => {
                let t = target.ok_or_else(|| {
                    fail(libc::EINVAL, format!("{}: symlink without target", what()))
                })?;
                if t.is_empty() || t.len() > 4095 {
                    return Err(fail(
                        libc::EINVAL,
                        format!("{}: bad symlink target length", what()),
                    ));
                }
                let ct = cstr(t).ctx(what)?;
                cx.user(|| sys::symlinkat(&ct, d, &cname))
            }
            other => cx.user(|| sys::mknodat(d, &cname, other.mode_bits() | perm, rdev)),
        };
        if let Err(e) = made {
            if e.raw_os_error() == Some(libc::EEXIST) && (!exclusive || cx.replica) {
                if let Some(r) = existing(cx)? {
                    return Ok(r);
                }
            }
            return Err(e).ctx(what);
        }
        let finish = || -> io::Result<()> {
            let t = match &file {
                Some(fd) => XTarget::Fd(fd.as_raw_fd()),
                None => XTarget::at(d, name)?,
            };
            t.set(ids::XATTR_ID, &id.to_bytes(), libc::XATTR_CREATE)?;
            self.idx.link_file(id, d, name)
        };
        if let Err(e) = finish() {
            let _ = sys::unlinkat(d, &cname, 0);
            return Err(e).ctx(|| format!("{}: recording id {id}", what()));
        }
        self.forget_listing(dir);
        // A regular file's attributes are read (and a replica's copied from the head's)
        // through the fd the create has, not by the path of its index link.
        let st = match (&file, cx.result.filter(|_| cx.replica)) {
            (Some(fd), Some(a)) => Some(self.apply_result_fd(id, fd.as_raw_fd(), a)?),
            (Some(fd), None) => Some(sys::fstat(fd.as_raw_fd()).ctx(|| format!("stat of {id}"))?),
            (None, _) => {
                if cx.replica {
                    self.apply_result(cx, id, None)?;
                }
                None
            }
        };
        if let (Some(fd), None) = (file, cx.caller) {
            self.idx.remember_file(id, fd);
        }
        match st {
            Some(st) => Ok(Reply::Attr(attr_of(id, &st, true))),
            None => Ok(Reply::Attr(self.attr(id)?)),
        }
    }

    pub(crate) fn op_mkdir(&self, cx: &Cx, dir: Id, name: &[u8], id: Id, perm: u32) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        if id == Id::ROOT || id == Id(0) {
            return Err(fail(libc::EINVAL, format!("{}: invalid id {id}", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match ids::entry(d, name) {
            Ok(Ent::Inode { id: eid, st }) if cx.replica && eid == id && is_dir(&st) => {
                let fd = self.dir(id)?;
                self.apply_result(cx, id, Some(fd.as_raw_fd()))?;
                return Ok(Reply::Attr(self.attr(id)?));
            }
            Ok(_) => return Err(fail(libc::EEXIST, format!("{} exists", what()))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        if self.idx.lstat_index(id).is_ok() {
            return Err(fail(libc::EEXIST, format!("{}: id {id} already in use", what())));
        }
        cx.user(|| sys::mkdirat(d, &cname, perm & 0o7777)).ctx(what)?;
        let finish = || -> io::Result<Arc<OwnedFd>> {
            let fd = sys::open_dir_at(d, &cname)?;
            XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_ID, &id.to_bytes(), libc::XATTR_CREATE)?;
            self.idx.set_dir_link(id, dir, name)?;
            Ok(self.idx.remember_dir(id, fd))
        };
        let fd = match finish() {
            Ok(fd) => fd,
            Err(e) => {
                let _ = sys::unlinkat(d, &cname, libc::AT_REMOVEDIR);
                self.idx.forget_dir(id);
                return Err(e).ctx(|| format!("{}: recording id {id}", what()));
            }
        };
        self.forget_listing(dir);
        if cx.replica {
            self.apply_result(cx, id, Some(fd.as_raw_fd()))?;
        }
        let st = sys::fstat(fd.as_raw_fd()).ctx(what)?;
        Ok(Reply::Attr(attr_of(id, &st, false)))
    }

    pub(crate) fn op_mklinkto(&self, _cx: &Cx, dir: Id, name: &[u8], target: Id) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("linkto {} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match ids::entry(d, name) {
            // Made already, as a head's retry of it finds it when it got the linkto from a
            // catch-up rather than from the request (a rename whose linkto step failed
            // with EEXIST there left its file under neither name): done.
            Ok(Ent::Linkto { target: t, .. }) if t == target => return Ok(Reply::Unit),
            Ok(_) => return Err(fail(libc::EEXIST, format!("{} exists", what()))),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e).ctx(what),
        }
        let fd = sys::openat(
            d,
            &cname,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
            0,
        )
        .ctx(what)?;
        if let Err(e) = XTarget::Fd(fd.as_raw_fd()).set(ids::XATTR_LINKTO, &target.to_bytes(), 0) {
            let _ = sys::unlinkat(d, &cname, 0);
            return Err(e).ctx(what);
        }
        self.forget_listing(dir);
        Ok(Reply::Unit)
    }

    pub(crate) fn op_link(&self, cx: &Cx, id: Id, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("link of {id} as {} in directory {dir}", show(name));
        if let Found::Dir(_) = self.find(id)? {
            return Err(fail(libc::EPERM, format!("{}: hard link to a directory", what())));
        }
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match cx.user(|| sys::linkat(self.idx.ids_fd(), &ids::rel(id), d, &cname)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && cx.replica => {
                match ids::entry(d, name) {
                    Ok(Ent::Inode { id: eid, .. }) if eid == id => {}
                    _ => return Err(e).ctx(what),
                }
            }
            Err(e) => return Err(e).ctx(what),
        }
        self.forget_listing(dir);
        Ok(Reply::Attr(self.attr(id)?))
    }

    pub(crate) fn op_unlink(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let ent = match ids::entry(d, name) {
            Ok(e) => e,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => {
                return Ok(Reply::Unit)
            }
            Err(e) => return Err(e).ctx(what),
        };
        if is_dir(ent.st()) {
            return Err(fail(libc::EISDIR, format!("{} is a directory", what())));
        }
        cx.user(|| sys::unlinkat(d, &cname, 0)).ctx(what)?;
        self.forget_listing(dir);
        if let Ent::Inode { id, .. } = ent {
            self.drop_if_unused(id)?;
        }
        Ok(Reply::Unit)
    }

    /// `Op::UnlinkLinkto`: remove `name` only if it is a linkto. Checked and removed under
    /// the directory's lock the head holds for the op, so a real file of that name made
    /// by another client is never removed in its place.
    pub(crate) fn op_unlink_linkto(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("linkto {} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        match ids::entry(d, name) {
            Ok(Ent::Linkto { .. }) => {}
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e).ctx(what),
            // The head removed a linkto: what this replica has instead is left to heal.
            _ if cx.replica => return Ok(Reply::Unit),
            _ => return Err(fail(libc::ENOENT, format!("{}: no linkto of that name", what()))),
        }
        cx.user(|| sys::unlinkat(d, &cname, 0)).ctx(what)?;
        self.forget_listing(dir);
        Ok(Reply::Unit)
    }

    pub(crate) fn op_rmdir(&self, cx: &Cx, dir: Id, name: &[u8]) -> R<Reply> {
        valid_name(name)?;
        let what = || format!("{} in directory {dir}", show(name));
        let dfd = self.dir(dir)?;
        let d = dfd.as_raw_fd();
        let cname = cstr(name).ctx(what)?;
        let ent = match ids::entry(d, name) {
            Ok(e) => e,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => {
                return Ok(Reply::Unit)
            }
            Err(e) => return Err(e).ctx(what),
        };
        if !is_dir(ent.st()) {
            return Err(fail(libc::ENOTDIR, format!("{} is not a directory", what())));
        }
        let mut r = cx.user(|| sys::unlinkat(d, &cname, libc::AT_REMOVEDIR));
        if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY))
            && self.remove_linktos_only(d, name).ctx(what)?
        {
            r = cx.user(|| sys::unlinkat(d, &cname, libc::AT_REMOVEDIR));
        }
        r.ctx(what)?;
        self.forget_listing(dir);
        if let Ent::Inode { id, .. } = ent {
            self.forget_listing(id);
            self.idx.unlink(id).ctx(|| format!("removing index link of {id}"))?;
        }
        Ok(Reply::Unit)
    }

    /// If directory `name` holds linkto entries only, remove them (they are internal, the
    /// user sees the directory as empty). Returns whether it did.
    pub(crate) fn remove_linktos_only(&self, d: RawFd, name: &[u8]) -> io::Result<bool> {
        let sub = sys::open_dir_at(d, &cstr(name)?)?;
        let s = sub.as_raw_fd();
        let entries = sys::read_dir(s)?;
        for e in &entries {
            if !matches!(ids::entry(s, &e.name)?, Ent::Linkto { .. }) {
                return Ok(false);
            }
        }
        for e in &entries {
            sys::unlinkat(s, &cstr(&e.name)?, 0)?;
        }
        Ok(true)
    }

    pub(crate) fn op_rename(
        &self,
        cx: &Cx,
        src_dir: Id,
        src_name: &[u8],
        dst_dir: Id,
        dst_name: &[u8],
        flags: u32,
    ) -> R<Reply> {
        valid_name(src_name)?;
        valid_name(dst_name)?;
        let what = || {
            format!(
                "{} in directory {src_dir} to {} in directory {dst_dir}",
                show(src_name),
                show(dst_name)
            )
        };
        use cairn_proto::rename_flags::{EXCHANGE, NOREPLACE};
        if flags & !(EXCHANGE | NOREPLACE) != 0 || flags == EXCHANGE | NOREPLACE {
            return Err(fail(libc::EINVAL, format!("{}: bad flags {flags:#x}", what())));
        }
        let sfd = self.dir(src_dir)?;
        let dfd = self.dir(dst_dir)?;
        let (s, d) = (sfd.as_raw_fd(), dfd.as_raw_fd());
        let (cs, cd) = (cstr(src_name).ctx(what)?, cstr(dst_name).ctx(what)?);
        let src = match ids::entry(s, src_name) {
            Ok(e) => Some(e),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cx.replica => None,
            Err(e) => return Err(e).ctx(what),
        };
        let dst = match ids::entry(d, dst_name) {
            Ok(e) => Some(e),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(e).ctx(what),
        };
        if cx.replica && replica_rename_done(cx, src.as_ref(), dst.as_ref(), flags, &what)? {
            return Ok(Reply::Unit);
        }
        let Some(src) = src else {
            return Err(fail(libc::ENOENT, format!("{}: no source", what())));
        };
        let same = |a: &libc::stat, b: &libc::stat| a.st_ino == b.st_ino && a.st_dev == b.st_dev;
        if let (true, Some(Ent::Inode { st, .. }), Ent::Inode { st: sst, .. }) =
            (cx.replica && flags & EXCHANGE == 0, &dst, &src)
        {
            if same(st, sst) && !is_dir(st) {
                // Both names are one inode here but were not at the head (a heal linked the
                // destination name before this rename arrived): rename(2) would do nothing
                // and leave the source name, which the head no longer has. Drop it.
                sys::unlinkat(s, &cs, 0).ctx(what)?;
                self.forget_listing(src_dir);
                self.forget_listing(dst_dir);
                return Ok(Reply::Unit);
            }
        }
        // renameat2 flags have the same values as ours.
        cx.user(|| sys::renameat2(s, &cs, d, &cd, flags)).ctx(what)?;
        self.forget_listing(src_dir);
        self.forget_listing(dst_dir);
        if let Ent::Inode { id, st } = &src {
            if is_dir(st) {
                self.idx
                    .set_dir_link(*id, dst_dir, dst_name)
                    .ctx(|| format!("{}: updating index link of {id}", what()))?;
            }
        }
        if let Some(Ent::Inode { id, st }) = &dst {
            if flags & EXCHANGE != 0 {
                if is_dir(st) {
                    self.idx
                        .set_dir_link(*id, src_dir, src_name)
                        .ctx(|| format!("{}: updating index link of {id}", what()))?;
                }
            } else if !same(st, src.st()) {
                if is_dir(st) {
                    self.forget_listing(*id);
                    self.idx.unlink(*id).ctx(|| format!("removing index link of {id}"))?;
                } else {
                    self.drop_if_unused(*id)?;
                }
            }
        }
        Ok(Reply::Unit)
    }

    pub(crate) fn op_readlink(&self, id: Id) -> R<Reply> {
        match self.find(id)? {
            Found::Other(st) if is_lnk(&st) => {
                let t = sys::readlinkat(self.idx.ids_fd(), &ids::rel(id))
                    .ctx(|| format!("readlink of {id}"))?;
                Ok(Reply::Bytes(t))
            }
            _ => Err(fail(libc::EINVAL, format!("{id} is not a symlink"))),
        }
    }
}

/// Whether a rename forwarded by the head is already applied on this replica (`Ok(true)`:
/// do nothing), to apply (`Ok(false)`), or impossible here (`Err`). The head sends the id
/// of the inode it moved (`cx.result`); the replica must hold that inode under the source
/// name. If it does not, either the destination holds it (the rename is applied already:
/// a re-sent forward, or a heal copied the directories first) or this brick missed an
/// earlier change of these names — a rename into the source name while it was down, say.
/// Applying nothing and answering success would hide that miss from the head; the error
/// makes the head record the inodes as pending for this brick, which then heals them.
pub(crate) fn replica_rename_done(
    cx: &Cx,
    src: Option<&Ent>,
    dst: Option<&Ent>,
    flags: u32,
    what: &dyn Fn() -> String,
) -> R<bool> {
    use cairn_proto::rename_flags::EXCHANGE;
    let id_of = |e: Option<&Ent>| match e {
        Some(Ent::Inode { id, .. }) => Some(*id),
        Some(Ent::Linkto { target, .. }) => Some(*target),
        _ => None,
    };
    let moved = cx.result.map(|a| a.id);
    let (have, at_dst) = (id_of(src), id_of(dst));
    match moved {
        // A head that does not say what it moved: apply what is here.
        None if src.is_some() => Ok(false),
        Some(m) if src.is_some() && have == Some(m) => Ok(false),
        // Applied before (the source name may have been taken again since).
        Some(m) if flags & EXCHANGE == 0 && at_dst == Some(m) => Ok(true),
        _ if src.is_none() => Err(fail(
            libc::ENOENT,
            format!(
                "{}: the source is not on this replica, which missed an earlier change of it (the head moved {})",
                what(),
                moved.map(|m| m.to_string()).unwrap_or_else(|| "an unknown inode".into())
            ),
        )),
        _ => Err(fail(
            libc::ESTALE,
            format!(
                "{}: the source is {} on this replica, which missed an earlier change of it (the head moved {})",
                what(),
                have.map(|h| h.to_string()).unwrap_or_else(|| "not a cairn inode".into()),
                moved.map(|m| m.to_string()).unwrap_or_default()
            ),
        )),
    }
}
