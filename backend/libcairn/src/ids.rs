//! The library itself, file ids and the last error: `cairn_abi_version`, `cairn_version`,
//! `cairn_last_error_message`, `cairn_id_*`.

use crate::ffi::{self, cstr, guard_int, out, put, show, Error};
use crate::types::{cairn_id_t, CAIRN_ABI_VERSION};
use cairn_client::Id;
use libc::{c_char, c_int};

/// The CAIRN_ABI_VERSION the library was built with; a caller should refuse to run when it
/// differs from the header's.
#[no_mangle]
pub extern "C" fn cairn_abi_version() -> u32 {
    CAIRN_ABI_VERSION
}

/// The library version as a static string ("0.1.0"); each of `major`, `minor`, `patch` may
/// be NULL.
#[no_mangle]
pub unsafe extern "C" fn cairn_version(
    major: *mut c_int,
    minor: *mut c_int,
    patch: *mut c_int,
) -> *const c_char {
    fn num(s: &str) -> c_int {
        s.parse().unwrap_or(0)
    }
    // SAFETY: each pointer is NULL or valid for a write, per the contract.
    unsafe {
        put(major, num(env!("CARGO_PKG_VERSION_MAJOR")));
        put(minor, num(env!("CARGO_PKG_VERSION_MINOR")));
        put(patch, num(env!("CARGO_PKG_VERSION_PATCH")));
    }
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// Text of the last error of a libcairn call on this thread ("" after a success), naming the
/// call, volume, id or name, and errno. Valid until the next libcairn call on this thread.
/// Inside an aio completion callback it describes that operation's failure.
#[no_mangle]
pub extern "C" fn cairn_last_error_message() -> *const c_char {
    ffi::last_error_ptr()
}

/// The id of the volume's root directory.
#[no_mangle]
pub extern "C" fn cairn_id_root() -> cairn_id_t {
    Id::ROOT.into()
}

/// Format `id` as 32 lowercase hex digits plus NUL into `buf` (`size` >= 33).
#[no_mangle]
pub unsafe extern "C" fn cairn_id_to_hex(id: cairn_id_t, buf: *mut c_char, size: usize) -> c_int {
    guard_int("cairn_id_to_hex", || {
        if buf.is_null() || size < 33 {
            return Err(Error::inval(format!("buffer of {size} bytes, need 33")));
        }
        let hex = Id::from(id).to_hex();
        // SAFETY: buf holds at least 33 bytes per the check above and the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(hex.as_ptr(), buf as *mut u8, 32);
            *buf.add(32) = 0;
        }
        Ok(())
    })
}

/// Parse 32 hex digits into `*out`.
#[no_mangle]
pub unsafe extern "C" fn cairn_id_from_hex(hex: *const c_char, out_id: *mut cairn_id_t) -> c_int {
    guard_int("cairn_id_from_hex", || {
        // SAFETY: forwarded contract.
        let s = unsafe { cstr(hex, "hex") }?;
        let o = unsafe { out(out_id, "out") }?;
        let id = std::str::from_utf8(s)
            .ok()
            .and_then(Id::from_hex)
            .ok_or_else(|| Error::inval(format!("not a 32-digit hex id: {:?}", show(s))))?;
        *o = id.into();
        Ok(())
    })
}
