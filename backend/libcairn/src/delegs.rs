//! Delegations for NFS gateways: take, give back, and the recall upcall.

use crate::args::fs_ref;
use crate::cairn_fs_t;
use crate::ffi::{self, guard_int, Error};
use crate::types::*;
use cairn_client::Id;
use libc::{c_int, c_void};
use std::sync::Arc;

/// Take a delegation of regular file `id` for this mount (`write`: exclusive; else shared
/// with other mounts' read delegations), as an NFS gateway does before it hands out an
/// NFSv4 delegation. Until `cairn_deleg_return`, an access of `id` by another client that
/// conflicts (a change for a read delegation, any access for a write one) calls the
/// callback of `cairn_register_recall` and waits for the return (or for the brick to
/// revoke the delegation, 150 s after the recall). -EAGAIN when another client holds a
/// conflicting delegation. Delegations end with the mount's connections.
#[no_mangle]
pub unsafe extern "C" fn cairn_delegate(fs: *mut cairn_fs_t, id: cairn_id_t, write: bool) -> c_int {
    guard_int("cairn_delegate", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let id = Id::from(id);
        let what =
            format!("{}: {} delegation of {id}", fs.label, if write { "write" } else { "read" });
        fs.block_on(fs.vol.delegate(id, write)).map_err(|e| Error::remote(e, what))
    })
}

/// Give back the delegation of `id` after sending what is buffered of it; the flush's
/// error, if any, is returned (the delegation is given back anyway).
#[no_mangle]
pub unsafe extern "C" fn cairn_deleg_return(fs: *mut cairn_fs_t, id: cairn_id_t) -> c_int {
    guard_int("cairn_deleg_return", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let id = Id::from(id);
        fs.block_on(fs.vol.deleg_return(id))
            .map_err(|e| Error::remote(e, format!("{}: return delegation of {id}", fs.label)))
    })
}

/// Register the delegation-recall upcall (`cb` NULL removes it). `cb` runs on a library
/// thread; it may call libcairn (except cairn_unmount). Without one, a recall is answered
/// by giving the delegation back at once.
#[no_mangle]
pub unsafe extern "C" fn cairn_register_recall(
    fs: *mut cairn_fs_t,
    cb: cairn_recall_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_register_recall", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let Some(f) = cb else {
            fs.vol.on_recall(None);
            return Ok(());
        };
        let (inflight, rt, arg) = (fs.inflight.clone(), fs.rt.clone(), arg as usize);
        fs.vol.on_recall(Some(Arc::new(move |id: Id| {
            inflight.begin();
            let inflight = inflight.clone();
            rt.spawn_blocking(move || {
                // SAFETY: a C function pointer registered by the caller with its argument.
                ffi::run_callback(None, || unsafe { f(id.into(), arg as *mut c_void) });
                inflight.end();
            });
        })));
        Ok(())
    })
}
