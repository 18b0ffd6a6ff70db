//! Argument plumbing shared by the entry points: the mounted volume and credentials of a
//! call, attributes and byte strings copied out to the caller, byte strings copied in.

use crate::cairn_fs_t;
use crate::ffi::{self, put, Error, Res};
use crate::types::{cairn_attr_t, cairn_creds_t};
use libc::c_void;

/// # Safety
/// `fs` is NULL or a live pointer from `cairn_mount`.
pub(crate) unsafe fn fs_ref<'a>(fs: *mut cairn_fs_t) -> Res<&'a cairn_fs_t> {
    // SAFETY: forwarded contract.
    let fs = unsafe { fs.as_ref() }.ok_or_else(|| Error::inval("fs is NULL"))?;
    fs.check_pid()?;
    Ok(fs)
}

/// The common preamble: the mounted volume and the caller's credentials.
pub(crate) unsafe fn fs_creds<'a>(
    fs: *mut cairn_fs_t,
    c: *const cairn_creds_t,
) -> Res<(&'a cairn_fs_t, cairn_client::Creds)> {
    // SAFETY: forwarded contract.
    Ok((unsafe { fs_ref(fs) }?, unsafe { ffi::creds(c) }?))
}

pub(crate) unsafe fn put_attr(p: *mut cairn_attr_t, a: &cairn_client::Attr) {
    // SAFETY: forwarded contract.
    unsafe { put(p, cairn_attr_t::from(a)) }
}

/// Copy a byte string into a caller buffer with the getxattr(2) size-probe convention:
/// NULL `buf` (or `size` 0) returns the length; a short buffer gives -ERANGE.
pub(crate) unsafe fn copy_out(data: &[u8], buf: *mut c_void, size: usize, nul: bool) -> Res<usize> {
    if buf.is_null() || size == 0 {
        return Ok(data.len());
    }
    if size < data.len() {
        return Err(Error::new(
            libc::ERANGE,
            format!("buffer of {size} bytes, need {}", data.len()),
        ));
    }
    // SAFETY: buf holds `size` >= data.len() bytes per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, data.len());
        if nul && size > data.len() {
            *(buf as *mut u8).add(data.len()) = 0;
        }
    }
    Ok(data.len())
}

/// # Safety
/// `p` is NULL (only with `len` 0) or valid for reads of `len` bytes.
pub(crate) unsafe fn bytes_in<'a>(p: *const c_void, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::inval(format!("{what} is NULL with length {len}")));
    }
    if len > isize::MAX as usize {
        return Err(Error::inval(format!("{what}: length {len} too large")));
    }
    // SAFETY: non-NULL, `len` bytes per the contract.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}
