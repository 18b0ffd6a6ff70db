//! The volume's space and inode counts: `cairn_statfs`.

use crate::args::fs_creds;
use crate::cairn_fs_t;
use crate::ffi::{guard_int, out, Error};
use crate::types::*;
use libc::c_int;

/// Space and inode counts of the whole volume.
#[no_mangle]
pub unsafe extern "C" fn cairn_statfs(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    st: *mut cairn_statfs_t,
) -> c_int {
    guard_int("cairn_statfs", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let st = unsafe { out(st, "statfs") }?;
        let s = fs
            .block_on(fs.vol.statfs(&c))
            .map_err(|e| Error::remote(e, format!("{}: statfs", fs.label)))?;
        *st = s.into();
        Ok(())
    })
}
