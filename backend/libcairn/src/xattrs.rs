//! Extended attributes: get, set, list, all at once (`cairn_getxattrs`) and remove.

use crate::args::{bytes_in, copy_out, fs_creds};
use crate::cairn_fs_t;
use crate::ffi::{cstr, guard_count, guard_int, show, Error, Res};
use crate::types::*;
use cairn_client::Id;
use libc::{c_char, c_int, c_void};

/// Value of xattr `name` of `id`; returns its size. `value` NULL (or `size` 0) only returns
/// the size; a short buffer gives -ERANGE; a missing attribute -ENODATA.
#[no_mangle]
pub unsafe extern "C" fn cairn_getxattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
) -> libc::ssize_t {
    guard_count("cairn_getxattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { xattr_name(name) }?;
        let id = Id::from(id);
        let v = fs.block_on(fs.vol.getxattr(&c, id, n)).map_err(|e| {
            Error::remote(e, format!("{}: getxattr {:?} of {id}", fs.label, show(n)))
        })?;
        unsafe { copy_out(&v, value, size, false) }
    })
}

/// Set xattr `name` of `id`; `flags` 0, CAIRN_XATTR_CREATE or CAIRN_XATTR_REPLACE.
#[no_mangle]
pub unsafe extern "C" fn cairn_setxattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    name: *const c_char,
    value: *const c_void,
    size: usize,
    flags: u32,
) -> c_int {
    guard_int("cairn_setxattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { xattr_name(name) }?;
        let v = unsafe { bytes_in(value, size, "value") }?;
        if flags & !(CAIRN_XATTR_CREATE | CAIRN_XATTR_REPLACE) != 0
            || flags == CAIRN_XATTR_CREATE | CAIRN_XATTR_REPLACE
        {
            return Err(Error::inval(format!("bad setxattr flags {flags:#x}")));
        }
        let id = Id::from(id);
        fs.block_on(fs.vol.setxattr(&c, id, n, v, flags))
            .map_err(|e| Error::remote(e, format!("{}: setxattr {:?} of {id}", fs.label, show(n))))
    })
}

/// Names of the xattrs of `id`, each NUL-terminated, back to back (as listxattr(2)); returns
/// the total size, with the same size-probe convention as cairn_getxattr.
#[no_mangle]
pub unsafe extern "C" fn cairn_listxattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    list: *mut c_char,
    size: usize,
) -> libc::ssize_t {
    guard_count("cairn_listxattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let id = Id::from(id);
        let names = fs
            .block_on(fs.vol.listxattr(&c, id))
            .map_err(|e| Error::remote(e, format!("{}: listxattr {id}", fs.label)))?;
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(&n);
            all.push(0);
        }
        unsafe { copy_out(&all, list as *mut c_void, size, false) }
    })
}

/// Every xattr of `id` with its value, in one round trip (what cairn_listxattr and a
/// cairn_getxattr of each name answer): `cb` is called once per attribute; one the caller
/// may not read comes with `value` NULL. Returns how many were passed to `cb`. The head of
/// `id` leases it to this mount as for cairn_getxattr, so a change by another client
/// recalls it (the invalidation upcall) and a caller may keep the answer until then.
#[no_mangle]
pub unsafe extern "C" fn cairn_getxattrs(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    cb: cairn_xattr_cb,
    arg: *mut c_void,
) -> libc::ssize_t {
    guard_count("cairn_getxattrs", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        let id = Id::from(id);
        let all = fs
            .block_on(fs.vol.getxattrs(&c, id))
            .map_err(|e| Error::remote(e, format!("{}: getxattrs {id}", fs.label)))?;
        let mut count = 0;
        for x in &all {
            let Ok(name) = std::ffi::CString::new(x.name.clone()) else { continue };
            let (v, n) = match &x.value {
                Some(v) => (v.as_ptr() as *const c_void, v.len()),
                None => (std::ptr::null(), 0),
            };
            count += 1;
            // SAFETY: a C callback with the caller's argument; name and v outlive the call.
            if unsafe { cb(name.as_ptr(), v, n, arg) } != 0 {
                break;
            }
        }
        Ok(count)
    })
}

/// Remove xattr `name` of `id` (-ENODATA if absent).
#[no_mangle]
pub unsafe extern "C" fn cairn_removexattr(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    name: *const c_char,
) -> c_int {
    guard_int("cairn_removexattr", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let n = unsafe { xattr_name(name) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.removexattr(&c, id, n)).map_err(|e| {
            Error::remote(e, format!("{}: removexattr {:?} of {id}", fs.label, show(n)))
        })
    })
}

unsafe fn xattr_name<'a>(p: *const c_char) -> Res<&'a [u8]> {
    // SAFETY: forwarded contract.
    let n = unsafe { cstr(p, "xattr name") }?;
    if n.is_empty() || n.len() > 255 {
        return Err(Error::new(
            if n.is_empty() { libc::EINVAL } else { libc::ERANGE },
            format!("bad xattr name {:?}", show(n)),
        ));
    }
    Ok(n)
}
