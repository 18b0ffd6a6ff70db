//! Names and attributes: lookups, getattr/setattr, the calls that make a name (create,
//! mknod, mkdir, symlink, link) or remove or move one (unlink, rmdir, rename), readlink.

use crate::args::{copy_out, fs_creds, put_attr};
use crate::cairn_fs_t;
use crate::ffi::{cstr, guard_count, guard_int, name_arg, out, show, Error};
use crate::types::{self, *};
use cairn_client::{Id, SetAttr, SetTime};
use libc::{c_char, c_int, c_void};

/// Look `name` up in directory `dir`; fill `*attr` (may be NULL).
#[no_mangle]
pub unsafe extern "C" fn cairn_lookup(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_lookup", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let dir = Id::from(dir);
        let a = fs.block_on(fs.vol.lookup(&c, dir, n)).map_err(|e| {
            Error::remote(e, format!("{}: lookup {:?} in {dir}", fs.label, show(n)))
        })?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// The parent of directory `dir` (the root's is the root), as the bricks know it now; fill
/// `*attr` (may be NULL). Fails (ESTALE) if `dir` is not a directory of the volume.
#[no_mangle]
pub unsafe extern "C" fn cairn_lookup_parent(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_lookup_parent", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let dir = Id::from(dir);
        let a = fs.block_on(fs.vol.lookup_parent(&c, dir)).map_err(|e| {
            Error::remote(e, format!("{}: lookup of the parent of {dir}", fs.label))
        })?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Resolve a '/'-separated path relative to the volume root (leading '/' optional; symlinks
/// are not followed); fill `*attr`.
#[no_mangle]
pub unsafe extern "C" fn cairn_lookup_path(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    path: *const c_char,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_lookup_path", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let p = unsafe { cstr(path, "path") }?;
        let a = fs
            .block_on(fs.vol.resolve(&c, p))
            .map_err(|e| Error::remote(e, format!("{}: resolve {:?}", fs.label, show(p))))?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Attributes of `id`.
#[no_mangle]
pub unsafe extern "C" fn cairn_getattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_getattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let attr = unsafe { out(attr, "attr") }?;
        let id = Id::from(id);
        let a = fs
            .block_on(fs.vol.getattr(&c, id))
            .map_err(|e| Error::remote(e, format!("{}: getattr {id}", fs.label)))?;
        *attr = (&a).into();
        Ok(())
    })
}

/// Change the fields of `id` selected by `mask` (CAIRN_SETATTR_*) to the values in `*in`
/// (mode: permission bits only; size truncates or extends). `*out` (may be NULL) receives
/// the attributes after the change.
#[no_mangle]
pub unsafe extern "C" fn cairn_setattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    attr_in: *const cairn_attr_t,
    mask: u32,
    attr_out: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_setattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let all = CAIRN_SETATTR_MODE
            | CAIRN_SETATTR_UID
            | CAIRN_SETATTR_GID
            | CAIRN_SETATTR_SIZE
            | CAIRN_SETATTR_ATIME
            | CAIRN_SETATTR_MTIME
            | CAIRN_SETATTR_ATIME_NOW
            | CAIRN_SETATTR_MTIME_NOW;
        if mask & !all != 0 {
            return Err(Error::inval(format!("unknown setattr mask bits {:#x}", mask & !all)));
        }
        let needs_in = mask & !(CAIRN_SETATTR_ATIME_NOW | CAIRN_SETATTR_MTIME_NOW) != 0;
        let zero: cairn_attr_t = unsafe { std::mem::zeroed() };
        let a = match unsafe { attr_in.as_ref() } {
            Some(a) => *a,
            None if !needs_in => zero,
            None => return Err(Error::inval("attr is NULL")),
        };
        let set = |bit: u32| mask & bit != 0;
        let time = |now: u32, at: u32, t: libc::timespec| {
            if set(now) {
                Some(SetTime::Now)
            } else if set(at) {
                Some(SetTime::At(types::from_ts(t)))
            } else {
                None
            }
        };
        let sa = SetAttr {
            perm: set(CAIRN_SETATTR_MODE).then_some(a.mode & 0o7777),
            uid: set(CAIRN_SETATTR_UID).then_some(a.uid),
            gid: set(CAIRN_SETATTR_GID).then_some(a.gid),
            size: set(CAIRN_SETATTR_SIZE).then_some(a.size),
            atime: time(CAIRN_SETATTR_ATIME_NOW, CAIRN_SETATTR_ATIME, a.atime),
            mtime: time(CAIRN_SETATTR_MTIME_NOW, CAIRN_SETATTR_MTIME, a.mtime),
        };
        let id = Id::from(id);
        let r = fs
            .block_on(fs.vol.setattr(&c, id, &sa))
            .map_err(|e| Error::remote(e, format!("{}: setattr {id} {sa:?}", fs.label)))?;
        unsafe { put_attr(attr_out, &r) };
        Ok(())
    })
}

/// Create a regular file `name` in `dir` with permission bits `mode & 07777`. Without
/// CAIRN_CREATE_EXCL an existing regular file is returned as is (O_CREAT semantics).
#[no_mangle]
pub unsafe extern "C" fn cairn_create(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
    mode: u32,
    flags: u32,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_create", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        if flags & !CAIRN_CREATE_EXCL != 0 {
            return Err(Error::inval(format!("unknown create flags {flags:#x}")));
        }
        let dir = Id::from(dir);
        let a = fs
            .block_on(fs.vol.create(&c, dir, n, mode & 0o7777, flags & CAIRN_CREATE_EXCL != 0))
            .map_err(|e| {
                Error::remote(e, format!("{}: create {:?} in {dir}", fs.label, show(n)))
            })?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Create a special file: `mode` carries the type (S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK or
/// S_IFREG) and permission bits; `rdev` the device number for S_IFCHR/S_IFBLK.
#[no_mangle]
pub unsafe extern "C" fn cairn_mknod(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
    mode: u32,
    rdev: u64,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_mknod", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let kind = cairn_client::FileType::from_mode(mode)
            .filter(|k| {
                !matches!(k, cairn_client::FileType::Directory | cairn_client::FileType::Symlink)
            })
            .ok_or_else(|| {
                Error::inval(format!(
                    "mknod {:?}: unsupported file type in mode {mode:#o}",
                    show(n)
                ))
            })?;
        let dir = Id::from(dir);
        let a = fs
            .block_on(fs.vol.mknod(&c, dir, n, kind, mode & 0o7777, rdev))
            .map_err(|e| Error::remote(e, format!("{}: mknod {:?} in {dir}", fs.label, show(n))))?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Create directory `name` in `dir`.
#[no_mangle]
pub unsafe extern "C" fn cairn_mkdir(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
    mode: u32,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_mkdir", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let dir = Id::from(dir);
        let a = fs
            .block_on(fs.vol.mkdir(&c, dir, n, mode & 0o7777))
            .map_err(|e| Error::remote(e, format!("{}: mkdir {:?} in {dir}", fs.label, show(n))))?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Create symlink `name` in `dir` pointing to `target`.
#[no_mangle]
pub unsafe extern "C" fn cairn_symlink(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
    target: *const c_char,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_symlink", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let t = unsafe { cstr(target, "target") }?;
        if t.is_empty() {
            return Err(Error::new(libc::ENOENT, "symlink: empty target"));
        }
        let dir = Id::from(dir);
        let a = fs.block_on(fs.vol.symlink(&c, dir, n, t)).map_err(|e| {
            Error::remote(e, format!("{}: symlink {:?} in {dir}", fs.label, show(n)))
        })?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Read the target of symlink `id` into `buf`; returns its length (without NUL; a NUL is
/// appended when there is room). `buf` NULL returns the length; a short buffer -ERANGE.
#[no_mangle]
pub unsafe extern "C" fn cairn_readlink(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    buf: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    guard_count("cairn_readlink", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let id = Id::from(id);
        let t = fs
            .block_on(fs.vol.readlink(&c, id))
            .map_err(|e| Error::remote(e, format!("{}: readlink {id}", fs.label)))?;
        unsafe { copy_out(&t, buf as *mut c_void, size, true) }
    })
}

/// Add a hard link `dir/name` to `id`; `*attr` gets the file's new attributes.
#[no_mangle]
pub unsafe extern "C" fn cairn_link(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    dir: cairn_id_t,
    name: *const c_char,
    attr: *mut cairn_attr_t,
) -> c_int {
    guard_int("cairn_link", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let (id, dir) = (Id::from(id), Id::from(dir));
        let a = fs.block_on(fs.vol.link(&c, id, dir, n)).map_err(|e| {
            Error::remote(e, format!("{}: link {id} as {:?} in {dir}", fs.label, show(n)))
        })?;
        unsafe { put_attr(attr, &a) };
        Ok(())
    })
}

/// Remove the non-directory entry `name` from `dir`.
#[no_mangle]
pub unsafe extern "C" fn cairn_unlink(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
) -> c_int {
    guard_int("cairn_unlink", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let dir = Id::from(dir);
        fs.block_on(fs.vol.unlink(&c, dir, n))
            .map_err(|e| Error::remote(e, format!("{}: unlink {:?} in {dir}", fs.label, show(n))))
    })
}

/// Remove the empty directory `name` from `dir`.
#[no_mangle]
pub unsafe extern "C" fn cairn_rmdir(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    name: *const c_char,
) -> c_int {
    guard_int("cairn_rmdir", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { name_arg(name, "name") }?;
        let dir = Id::from(dir);
        fs.block_on(fs.vol.rmdir(&c, dir, n))
            .map_err(|e| Error::remote(e, format!("{}: rmdir {:?} in {dir}", fs.label, show(n))))
    })
}

/// Rename `src_dir/src` to `dst_dir/dst`; `flags` is 0 or one of CAIRN_RENAME_NOREPLACE,
/// CAIRN_RENAME_EXCHANGE.
#[no_mangle]
pub unsafe extern "C" fn cairn_rename(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    src_dir: cairn_id_t,
    src: *const c_char,
    dst_dir: cairn_id_t,
    dst: *const c_char,
    flags: u32,
) -> c_int {
    guard_int("cairn_rename", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let s = unsafe { name_arg(src, "src") }?;
        let d = unsafe { name_arg(dst, "dst") }?;
        if flags & !(CAIRN_RENAME_NOREPLACE | CAIRN_RENAME_EXCHANGE) != 0
            || flags == CAIRN_RENAME_NOREPLACE | CAIRN_RENAME_EXCHANGE
        {
            return Err(Error::inval(format!("bad rename flags {flags:#x}")));
        }
        let (sd, dd) = (Id::from(src_dir), Id::from(dst_dir));
        fs.block_on(fs.vol.rename(&c, sd, s, dd, d, flags)).map_err(|e| {
            Error::remote(
                e,
                format!("{}: rename {:?} in {sd} to {:?} in {dd}", fs.label, show(s), show(d)),
            )
        })
    })
}
