//! Extended attributes (on a directory's every set when they change), read through the
//! xattr cache (`cache/src/xattr.rs`): the first read of an inode's xattrs by a caller
//! fetches all of them with their values in one round trip (GETXATTRS, leased by the
//! inode's head as its attributes are), and later getxattr, listxattr and getxattrs calls
//! of that caller are answered from it until a recall or the cache timeout.

use super::{err, unexpected, Volume};
use crate::Result;
use cairn_cache::{XattrChange, XattrList};
use cairn_proto::msg::{Op, Reply};
use cairn_proto::{Attr, Creds, Errno, FileType, Id, Xattr};

/// What a cached complete list of `owner`'s (the caller whose GETXATTRS filled it) answers
/// for a getxattr of `name` by `c`, as the brick would (`map_xattr`, then the kernel's
/// xattr_permission on the brick's file as `c`): the value, the brick's error, or `None`
/// (ask the brick). The names are the same in every caller's list; a value `owner` may
/// read is `c`'s when `c` is root or the mode bits let `c` read a user.* name.
fn answer(
    c: &Creds,
    owner: &Creds,
    list: &[Xattr],
    a: Option<&Attr>,
    kind: Option<FileType>,
    name: &[u8],
) -> Option<Result<Vec<u8>>> {
    let absent = |errno: Errno| {
        let n = String::from_utf8_lossy(name);
        Some(Err(err(errno, format!("xattr {n:?}: refused or absent (cached list)"))))
    };
    let found = list.iter().find(|x| x.name == name);
    // `None` value: `owner` may not read it; the brick says why (EACCES or EPERM).
    let value = || found.and_then(|x| x.value.as_ref()).map(|v| Ok(v.to_vec()));
    let user = name.starts_with(b"user.") && name.len() > 5;
    let privileged = name.starts_with(b"trusted.") || name.starts_with(b"security.");
    // POSIX ACLs: anyone may read them; ENODATA when there is none, except on a
    // symlink (EOPNOTSUPP there: the brick says it) or an inode of unknown type.
    if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
        return match (found, kind) {
            (Some(_), _) => value(),
            (None, Some(k)) if k != FileType::Symlink => absent(Errno::ENODATA),
            _ => None,
        };
    }
    if c.uid == 0 {
        // Root reads every name the bricks store; other namespaces are ENOTSUP there.
        return match found {
            Some(_) => value(),
            None => (user || privileged).then(|| absent(Errno::ENODATA)).flatten(),
        };
    }
    if privileged {
        return absent(Errno::EPERM);
    }
    if found.is_some() && c == owner {
        return value();
    }
    // A user.* name of a file or directory that `c` may read by its mode bits, with no
    // POSIX ACL that may say otherwise: present or absent as the list says.
    let a = a?;
    if !user
        || !matches!(a.kind, FileType::Regular | FileType::Directory)
        || list.iter().any(|x| x.name == b"system.posix_acl_access")
    {
        return None;
    }
    let bits = if c.uid == a.uid {
        a.perm & 0o400
    } else if c.gid == a.gid || c.groups.contains(&a.gid) {
        a.perm & 0o040
    } else {
        a.perm & 0o004
    };
    match found {
        _ if bits == 0 => None,
        Some(_) => value(),
        None => absent(Errno::ENODATA),
    }
}

impl Volume {
    pub async fn getxattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<Vec<u8>> {
        let i = &self.inner;
        if let Some((owner, list)) = self.cached_xattrs(c, id).await {
            let a = i.attrs.get(id);
            let kind = i.kinds.lock().get(&id).copied().or(a.as_ref().map(|a| a.kind));
            if let Some(r) = answer(c, &owner, &list, a.as_ref(), kind, name) {
                return r;
            }
        }
        match i.on_home(c, id, Op::GetXattr { id, name: name.to_vec() }).await? {
            Reply::Bytes(b) => Ok(b),
            other => Err(unexpected("getxattr", &other)),
        }
    }

    /// A complete list of `id`'s xattrs from the cache (`c`'s own, else another caller's)
    /// and whose it is, fetched (and kept) as `c` with one GETXATTRS if none is there;
    /// `None` when the cache is off or the fetch failed (the caller then asks for what it
    /// wants by itself, and gets the brick's error).
    async fn cached_xattrs(&self, c: &Creds, id: Id) -> Option<(Creds, XattrList)> {
        let i = &self.inner;
        if !i.xattrs.enabled() {
            return None;
        }
        if let Some(l) = i.xattrs.get_any(id, c) {
            return Some(l);
        }
        let l = self.fetch_xattrs(c, id).await.ok()?;
        Some((c.clone(), std::sync::Arc::new(l)))
    }

    /// One GETXATTRS, kept in the cache unless a recall or an own change crossed it.
    async fn fetch_xattrs(&self, c: &Creds, id: Id) -> Result<Vec<Xattr>> {
        let i = &self.inner;
        let token = i.xattrs.begin();
        match i.on_home(c, id, Op::GetXattrs { id }).await? {
            Reply::Xattrs(x) => {
                i.xattrs.put(token, id, c, x.clone());
                Ok(x)
            }
            other => Err(unexpected("getxattrs", &other)),
        }
    }

    pub async fn setxattr(
        &self,
        c: &Creds,
        id: Id,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        let token = self.inner.xattrs.begin();
        let op = Op::SetXattr { id, name: name.to_vec(), value: value.to_vec(), flags };
        let r = self.on_inode(c, id, op).await;
        self.inner.attrs.invalidate(id);
        self.own_xattr_change(token, c, id, name, r.is_ok(), XattrChange::Set(value));
        r.map(|_| ())
    }

    /// After this client's setxattr or removexattr of `name` (begun with `token`): the
    /// cached lists get the change if it succeeded; otherwise, or for a POSIX ACL (which
    /// changes who may read what), they are dropped.
    fn own_xattr_change(
        &self,
        token: u64,
        c: &Creds,
        id: Id,
        name: &[u8],
        ok: bool,
        how: XattrChange<'_>,
    ) {
        let x = &self.inner.xattrs;
        if name.starts_with(b"system.") {
            // A POSIX ACL changes who may search a directory.
            self.inner.searchers.invalidate(id);
        }
        if ok && !name.starts_with(b"system.") {
            x.changed(token, id, c, name, how);
        } else {
            x.invalidate(id);
        }
    }

    pub async fn listxattr(&self, c: &Creds, id: Id) -> Result<Vec<Vec<u8>>> {
        let i = &self.inner;
        if let Some((_, list)) = self.cached_xattrs(c, id).await {
            return Ok(list.iter().map(|x| x.name.clone()).collect());
        }
        match i.on_home(c, id, Op::ListXattr { id }).await? {
            Reply::Names(n) => Ok(n),
            other => Err(unexpected("listxattr", &other)),
        }
    }

    /// Every xattr of `id` with its value (`None`: the caller may not read it), in one
    /// round trip to the inode's head, which leases `id` to this session as a getxattr
    /// does; or from the cache.
    pub async fn getxattrs(&self, c: &Creds, id: Id) -> Result<Vec<Xattr>> {
        if let Some(l) = self.inner.xattrs.get(id, c) {
            return Ok(l.to_vec());
        }
        self.fetch_xattrs(c, id).await
    }

    pub async fn removexattr(&self, c: &Creds, id: Id, name: &[u8]) -> Result<()> {
        let token = self.inner.xattrs.begin();
        let r = self.on_inode(c, id, Op::RemoveXattr { id, name: name.to_vec() }).await;
        self.inner.attrs.invalidate(id);
        self.own_xattr_change(token, c, id, name, r.is_ok(), XattrChange::Removed);
        r.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proto::Timespec;

    fn attr(perm: u32, uid: u32, gid: u32) -> Attr {
        let t = Timespec { sec: 0, nsec: 0 };
        Attr {
            id: Id(1),
            kind: FileType::Regular,
            perm,
            nlink: 1,
            uid,
            gid,
            size: 0,
            blocks: 0,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            change: 0,
        }
    }

    fn errno(r: Option<Result<Vec<u8>>>) -> Option<Errno> {
        r.map(|r| r.unwrap_err().errno)
    }

    #[test]
    fn a_cached_list_answers_as_the_brick_would() {
        let user = Creds { uid: 5, gid: 5, groups: vec![] };
        let dos = Xattr { name: b"user.DOSATTRIB".to_vec(), value: Some(b"x".to_vec().into()) };
        let hidden = Xattr { name: b"security.NTACL".to_vec(), value: None };
        let list = vec![dos, hidden];
        let a = attr(0o640, 5, 7);
        let ans = |c: &Creds, owner: &Creds, a: Option<&Attr>, n: &[u8]| {
            answer(c, owner, &list, a, a.map(|a| a.kind), n)
        };
        assert_eq!(ans(&user, &user, Some(&a), b"user.DOSATTRIB").unwrap().unwrap(), b"x");
        assert_eq!(ans(&user, &user, None, b"user.DOSATTRIB").unwrap().unwrap(), b"x");
        assert_eq!(errno(ans(&user, &user, Some(&a), b"security.NTACL")), Some(Errno::EPERM));
        assert_eq!(errno(ans(&user, &user, Some(&a), b"trusted.x")), Some(Errno::EPERM));
        assert_eq!(errno(ans(&user, &user, Some(&a), b"user.y")), Some(Errno::ENODATA));
        assert!(ans(&user, &user, None, b"user.y").is_none(), "attributes not cached");
        let other = Creds { uid: 6, gid: 6, groups: vec![] };
        assert!(ans(&other, &user, Some(&a), b"user.y").is_none(), "no read permission");
        assert!(ans(&other, &user, Some(&a), b"user.DOSATTRIB").is_none(), "no read permission");
        let a644 = attr(0o644, 5, 7);
        assert_eq!(errno(ans(&other, &user, Some(&a644), b"user.y")), Some(Errno::ENODATA));
        assert_eq!(ans(&other, &user, Some(&a644), b"user.DOSATTRIB").unwrap().unwrap(), b"x");
        let root = Creds::root();
        assert_eq!(ans(&root, &user, None, b"user.DOSATTRIB").unwrap().unwrap(), b"x");
        assert!(
            ans(&root, &user, None, b"security.NTACL").is_none(),
            "the owner could not read it"
        );
        assert_eq!(errno(ans(&root, &user, None, b"security.y")), Some(Errno::ENODATA));
        assert!(ans(&root, &user, None, b"system.other").is_none(), "ENOTSUP is the brick's");
        let acl = b"system.posix_acl_access";
        assert_eq!(errno(ans(&root, &user, Some(&a), acl)), Some(Errno::ENODATA), "no ACL");
        assert_eq!(errno(ans(&other, &user, Some(&a), acl)), Some(Errno::ENODATA), "no ACL");
        assert!(ans(&root, &user, None, acl).is_none(), "type unknown");
        let link = Attr { kind: FileType::Symlink, ..attr(0o777, 0, 0) };
        assert!(ans(&root, &user, Some(&link), acl).is_none(), "EOPNOTSUPP on a symlink");
    }
}
