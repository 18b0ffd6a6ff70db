//! Map-change upcall (`cairn_register_map_change`): a pNFS metadata server recalls the
//! layouts whose chain head or mirrors a new volume map changed (FSAL_CAIRN, `fsal/mds.c`).

use crate::ffi::{self, guard_int};
use crate::fs_ref;
use crate::runtime::cairn_fs_t;
use libc::{c_int, c_void};
use std::sync::Arc;

/// Map-change upcall: the mount installed a newer volume map (a brick went down or came
/// back, a heal finished, a brick or set was added, a rebalance moved placement), of epoch
/// `epoch`; `cairn_layout` already answers from it. Runs on a library thread.
pub type cairn_map_change_cb = Option<unsafe extern "C" fn(epoch: u64, arg: *mut c_void)>;

/// Register (or, with `cb` NULL, remove) the map-change upcall. It is called from a
/// library thread once per newer map the mount installs (maps come as pushes from the
/// bricks, or are fetched when a brick says the mount's is stale), after the map is
/// installed; two calls may run at once or out of order, so a caller compares what it
/// cares about with `cairn_layout` rather than trusting `epoch` alone. It may call other
/// libcairn functions except cairn_unmount. Replaces any upcall registered before.
#[no_mangle]
pub unsafe extern "C" fn cairn_register_map_change(
    fs: *mut cairn_fs_t,
    cb: cairn_map_change_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_register_map_change", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let Some(f) = cb else {
            fs.vol.on_map_change(None);
            return Ok(());
        };
        let (inflight, rt, arg) = (fs.inflight.clone(), fs.rt.clone(), arg as usize);
        fs.vol.on_map_change(Some(Arc::new(move |epoch: u64| {
            inflight.begin();
            let inflight = inflight.clone();
            rt.spawn_blocking(move || {
                // SAFETY: a C function pointer registered by the caller with its argument.
                ffi::run_callback(None, || unsafe { f(epoch, arg as *mut c_void) });
                inflight.end();
            });
        })));
        Ok(())
    })
}
