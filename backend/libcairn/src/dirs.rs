//! Listing a directory: `cairn_readdir`, in batches, calling the caller back per entry.

use crate::args::fs_creds;
use crate::cairn_fs_t;
use crate::ffi::{self, put, Error, Res};
use crate::types::{self, *};
use cairn_client::Id;
use libc::{c_int, c_void};

/// List directory `dir` starting after `cookie` (0 = from the start), calling `cb` for each
/// entry on the calling thread until the end or until `cb` returns non-zero. Returns the
/// number of entries passed to `cb`; `*eof` (may be NULL) is true when the end was reached.
/// Resume with the cookie of the last entry seen. With CAIRN_READDIR_PLUS entries carry
/// attributes. "." and ".." are never listed.
#[no_mangle]
pub unsafe extern "C" fn cairn_readdir(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    dir: cairn_id_t,
    cookie: u64,
    flags: u32,
    cb: cairn_readdir_cb,
    arg: *mut c_void,
    eof: *mut bool,
) -> c_int {
    guard("cairn_readdir", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let cb = cb.ok_or_else(|| Error::inval("callback is NULL"))?;
        if flags & !CAIRN_READDIR_PLUS != 0 {
            return Err(Error::inval(format!("unknown readdir flags {flags:#x}")));
        }
        let plus = flags & CAIRN_READDIR_PLUS != 0;
        let dir = Id::from(dir);
        let mut cookie = cookie;
        let mut count: usize = 0;
        loop {
            let (batch, end) =
                fs.block_on(fs.vol.readdir(&c, dir, cookie, READDIR_BATCH, plus)).map_err(|e| {
                    Error::remote(e, format!("{}: readdir {dir} from cookie {cookie}", fs.label))
                })?;
            for e in &batch {
                let owned = types::OwnedDirent::new(e);
                let ent = owned.as_c();
                count += 1;
                cookie = e.cookie;
                // SAFETY: a C callback with the caller's argument; `ent` outlives the call.
                if unsafe { cb(&ent, arg) } != 0 {
                    unsafe { put(eof, false) };
                    return Ok(count);
                }
            }
            if end || batch.is_empty() {
                unsafe { put(eof, true) };
                return Ok(count);
            }
        }
    })
}

const READDIR_BATCH: u32 = 256;

fn guard(op: &str, f: impl FnOnce() -> Res<usize>) -> c_int {
    ffi::guard(op, |n| n.min(c_int::MAX as usize) as c_int, |e| e, f)
}
