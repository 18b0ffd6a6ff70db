//! Extended attributes: the client-visible names and their on-disk names, and the
//! operations (as the caller, or as root for heal).

use super::{Brick, Cx};
use crate::error::{fail, show, Ctx, R};
use crate::ids::{is_reg, Found};
use crate::sys::{cstr, XTarget};
use cairn_proto::msg::Reply;
use cairn_proto::{Id, Xattr};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

impl Brick {
    /// Where the xattrs of `id` live; the fd (if any) is kept alive by the returned Arc.
    pub(crate) fn xtarget(&self, id: Id) -> R<(XTarget, Option<Arc<OwnedFd>>)> {
        let what = || format!("xattrs of {id}");
        match self.find(id)? {
            Found::Dir(fd) => Ok((XTarget::Fd(fd.as_raw_fd()), Some(fd))),
            Found::Other(st) if is_reg(&st) => {
                let fd = self.file(id)?;
                Ok((XTarget::Fd(fd.as_raw_fd()), Some(fd)))
            }
            Found::Other(_) => Ok((self.idx.xtarget(id).ctx(what)?, None)),
        }
    }

    pub(crate) fn op_getxattr(&self, cx: &Cx, id: Id, name: &[u8]) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let (t, _keep) = self.xtarget(id)?;
        let what = || format!("xattr {} of {id}", show(name));
        let v = if privileged { t.get(&disk) } else { cx.user(|| t.get(&disk)) }.ctx(what)?;
        Ok(Reply::Bytes(v))
    }

    pub(crate) fn op_setxattr(
        &self,
        cx: &Cx,
        id: Id,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let what = || format!("xattr {} of {id}", show(name));
        use cairn_proto::xattr_flags::{CREATE, REPLACE};
        if flags & !(CREATE | REPLACE) != 0 {
            return Err(fail(libc::EINVAL, format!("{}: bad flags {flags:#x}", what())));
        }
        let mut f = 0;
        if flags & CREATE != 0 {
            f |= libc::XATTR_CREATE;
        }
        if flags & REPLACE != 0 {
            f |= libc::XATTR_REPLACE;
        }
        let (t, _keep) = self.xtarget(id)?;
        if privileged { t.set(&disk, value, f) } else { cx.user(|| t.set(&disk, value, f)) }
            .ctx(what)?;
        Ok(Reply::Unit)
    }

    pub(crate) fn op_removexattr(&self, cx: &Cx, id: Id, name: &[u8]) -> R<Reply> {
        let (disk, privileged) = map_xattr(cx, name)?;
        let what = || format!("xattr {} of {id}", show(name));
        let (t, _keep) = self.xtarget(id)?;
        if privileged { t.remove(&disk) } else { cx.user(|| t.remove(&disk)) }.ctx(what)?;
        Ok(Reply::Unit)
    }

    pub(crate) fn op_listxattr(&self, id: Id) -> R<Reply> {
        Ok(Reply::Names(self.visible_xattrs(id)?))
    }

    /// Every client-visible xattr of `id` with the value the caller may read (GETXATTRS):
    /// what LISTXATTR and a GETXATTR of each name answer, in one request.
    pub(crate) fn op_getxattrs(&self, cx: &Cx, id: Id) -> R<Reply> {
        let (t, _keep) = self.xtarget(id)?;
        let mut out = Vec::new();
        for name in self.visible_xattrs(id)? {
            let value = match map_xattr(cx, &name) {
                Ok((disk, privileged)) => {
                    match if privileged { t.get(&disk) } else { cx.user(|| t.get(&disk)) } {
                        Ok(v) => Some(v.into()),
                        // removed since the listing: not there
                        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => continue,
                        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                            None
                        }
                        Err(e) => return Err(e).ctx(|| format!("xattr {} of {id}", show(&name))),
                    }
                }
                Err(e) if matches!(e.errno, libc::EACCES | libc::EPERM) => None,
                Err(e) => return Err(e),
            };
            out.push(Xattr { name, value });
        }
        Ok(Reply::Xattrs(out))
    }

    /// The client-visible xattr names of `id`.
    pub(crate) fn visible_xattrs(&self, id: Id) -> R<Vec<Vec<u8>>> {
        let (t, _keep) = self.xtarget(id)?;
        let names = t.list().ctx(|| format!("xattrs of {id}"))?;
        Ok(names.into_iter().filter_map(|n| unmap_xattr(&n)).collect())
    }

    /// Read a client-visible xattr as root (heal).
    pub(crate) fn xattr_pairs(&self, id: Id) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        let root = Cx { caller: None, replica: true, result: None };
        let (t, _keep) = self.xtarget(id)?;
        let mut out = Vec::new();
        for n in self.visible_xattrs(id)? {
            let (disk, _) = map_xattr(&root, &n)?;
            match t.get(&disk) {
                Ok(v) => out.push((n, v)),
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e).ctx(|| format!("xattr {} of {id}", show(&n))),
            }
        }
        Ok(out)
    }

    /// Make the client-visible xattrs of `id` exactly `want` (heal, as root).
    pub(crate) fn set_xattrs(&self, id: Id, want: &[(Vec<u8>, Vec<u8>)]) -> R<()> {
        let root = Cx { caller: None, replica: true, result: None };
        let (t, _keep) = self.xtarget(id)?;
        for n in self.visible_xattrs(id)? {
            if !want.iter().any(|(w, _)| *w == n) {
                let (disk, _) = map_xattr(&root, &n)?;
                t.remove(&disk).ctx(|| format!("removing xattr {} of {id}", show(&n)))?;
            }
        }
        for (n, v) in want {
            let (disk, _) = map_xattr(&root, n)?;
            t.set(&disk, v, 0).ctx(|| format!("setting xattr {} of {id}", show(n)))?;
        }
        Ok(())
    }
}

/// Map a client xattr name to its on-disk name; `true` when it needs uid 0.
pub(crate) fn map_xattr(cx: &Cx, name: &[u8]) -> R<(CString, bool)> {
    let shown = || show(name);
    if name.is_empty() || name.len() > 255 || name.contains(&0) {
        return Err(fail(libc::EINVAL, format!("bad xattr name {}", shown())));
    }
    if (name.starts_with(b"user.") && name.len() > 5)
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
    {
        return Ok((cstr(name).ctx(shown)?, false));
    }
    if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
        if cx.caller.is_some() {
            return Err(fail(libc::EPERM, format!("xattr {} needs uid 0", shown())));
        }
        let mut disk = b"trusted.cairn.x.".to_vec();
        disk.extend_from_slice(name);
        return Ok((cstr(&disk).ctx(shown)?, true));
    }
    Err(fail(libc::ENOTSUP, format!("xattr namespace of {} is not supported", shown())))
}

/// The client-visible name of an on-disk xattr, or `None` for internal/foreign ones.
pub(crate) fn unmap_xattr(disk: &[u8]) -> Option<Vec<u8>> {
    if let Some(rest) = disk.strip_prefix(b"trusted.cairn.x.") {
        return Some(rest.to_vec());
    }
    if disk.starts_with(b"user.")
        || disk == b"system.posix_acl_access"
        || disk == b"system.posix_acl_default"
    {
        return Some(disk.to_vec());
    }
    None
}
