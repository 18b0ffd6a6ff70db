//! Byte-range locks and share reservations: `cairn_setlock`, `cairn_getlock`, `cairn_share`.

use crate::args::fs_creds;
use crate::cairn_fs_t;
use crate::ffi::{guard_int, out, Error};
use crate::types::*;
use cairn_client::Id;
use libc::c_int;

/// Set (F_RDLCK/F_WRLCK) or release (F_UNLCK) a byte-range lock on `id`. Without `wait` a
/// conflict returns -EAGAIN; with `wait` the call blocks until the lock is granted.
#[no_mangle]
pub unsafe extern "C" fn cairn_setlock(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    lock: *const cairn_lock_t,
    wait: bool,
) -> c_int {
    guard_int("cairn_setlock", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let l = unsafe { lock.as_ref() }.ok_or_else(|| Error::inval("lock is NULL"))?;
        let l = l.to_lock().ok_or_else(|| Error::inval(format!("bad lock type {}", l.r#type)))?;
        let id = Id::from(id);
        let what = format!(
            "{}: setlock {id} {:?} {}+{} owner {:#x}",
            fs.label, l.kind, l.start, l.len, l.owner
        );
        fs.block_on(fs.vol.setlock(&c, id, l, wait)).map_err(|e| Error::remote(e, what))
    })
}

/// Set the share reservation of open `owner` on regular file `id` to `access` / `deny`
/// (CAIRN_SHARE_READ / CAIRN_SHARE_WRITE bits; both 0 releases it). Reservations live
/// on the file's chain head, so every gateway and protocol sees them; `owner` is opaque
/// (an NFSv4 open state, an SMB file handle) and scoped by this mount. A conflict with
/// another opener's access or deny mode is -CAIRN_ESHAREDENIED; the owner's previous
/// reservation then stays. Reservations end with the mount's connection to the server.
#[no_mangle]
pub unsafe extern "C" fn cairn_share(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    owner: u64,
    access: u32,
    deny: u32,
) -> c_int {
    guard_int("cairn_share", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let all = CAIRN_SHARE_READ | CAIRN_SHARE_WRITE;
        if (access | deny) & !all != 0 {
            return Err(Error::inval(format!("bad share mode access {access:#x} deny {deny:#x}")));
        }
        let id = Id::from(id);
        let what = format!("{}: share {id} access {access} deny {deny} owner {owner:#x}", fs.label);
        fs.block_on(fs.vol.share(&c, id, owner, access as u8, deny as u8))
            .map_err(|e| Error::remote(e, what))
    })
}

/// Test for a lock conflicting with `*lock` (F_GETLK): on return `lock->type` is F_UNLCK if
/// none, else `*lock` describes the first conflicting lock.
#[no_mangle]
pub unsafe extern "C" fn cairn_getlock(
    fs: *mut cairn_fs_t,
    creds: *const cairn_creds_t,
    id: cairn_id_t,
    lock: *mut cairn_lock_t,
) -> c_int {
    guard_int("cairn_getlock", || {
        // SAFETY: forwarded contract for all pointers.
        let (fs, c) = unsafe { fs_creds(fs, creds) }?;
        let lk = unsafe { out(lock, "lock") }?;
        let l = lk.to_lock().ok_or_else(|| Error::inval(format!("bad lock type {}", lk.r#type)))?;
        let id = Id::from(id);
        let what = format!("{}: getlock {id} {:?} {}+{}", fs.label, l.kind, l.start, l.len);
        match fs.block_on(fs.vol.getlock(&c, id, l)).map_err(|e| Error::remote(e, what))? {
            Some(conflict) => *lk = cairn_lock_t::from_lock(&conflict),
            None => lk.r#type = libc::F_UNLCK,
        }
        Ok(())
    })
}
