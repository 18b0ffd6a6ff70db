//! Mounting and the mount's own state: options, `cairn_mount`/`cairn_unmount`, the volume's
//! id and layouts, round-trip counters and the lease-recall (invalidation) upcall.

use crate::args::fs_ref;
use crate::ffi::{self, cstr, guard_count, guard_int, out, put, show, Error};
use crate::types::{self, *};
use crate::{cairn_fs_t, runtime};
use cairn_client::Id;
use libc::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Fill `opts` with the defaults (and `version` = CAIRN_OPTIONS_VERSION).
#[no_mangle]
pub unsafe extern "C" fn cairn_options_init(opts: *mut cairn_options_t) {
    let d = cairn_client::MountOptions::default();
    // SAFETY: opts is NULL or valid for a write.
    unsafe {
        put(
            opts,
            cairn_options_t {
                version: CAIRN_OPTIONS_VERSION,
                write_behind: d.write_behind,
                write_behind_bytes: d.write_behind_bytes,
                cache_timeout_ms: d.cache_timeout.as_millis() as u32,
                connect_timeout_ms: d.connect_timeout.as_millis() as u32,
                runtime_threads: 0,
                client_name: std::ptr::null(),
                credentials: std::ptr::null(),
            },
        )
    };
}

/// Mount `volume` from the cluster reachable at `servers` ("host:port[,host:port...]"; a
/// missing port means 7420). `opts` may be NULL for the defaults. On success `*out` is the
/// mounted volume, to be released with `cairn_unmount`. The first mount of a process starts
/// the library's threads: mount after fork(), never before.
/// Errors: -EINVAL (bad arguments), -ENOTCONN (no server reachable), -ENOENT (no such
/// volume), or what the servers return.
#[no_mangle]
pub unsafe extern "C" fn cairn_mount(
    servers: *const c_char,
    volume: *const c_char,
    opts: *const cairn_options_t,
    fs_out: *mut *mut cairn_fs_t,
) -> c_int {
    guard_int("cairn_mount", || {
        // SAFETY: forwarded contract for every pointer argument.
        let fs_out = unsafe { out(fs_out, "out") }?;
        *fs_out = std::ptr::null_mut();
        let servers = runtime::parse_servers(unsafe { cstr(servers, "servers") }?)?;
        let volume = unsafe { cstr(volume, "volume") }?;
        let volume = std::str::from_utf8(volume)
            .ok()
            .filter(|v| !v.is_empty() && !v.contains(['/', ' ']))
            .ok_or_else(|| Error::inval(format!("bad volume name {:?}", show(volume))))?
            .to_string();
        let mut defaults = std::mem::MaybeUninit::<cairn_options_t>::uninit();
        // SAFETY: opts is NULL or points to options of the version its first field says:
        // only that version's layout is read.
        let o = match unsafe { (opts as *const u32).as_ref() } {
            None => unsafe {
                cairn_options_init(defaults.as_mut_ptr());
                defaults.assume_init()
            },
            Some(&CAIRN_OPTIONS_VERSION) => unsafe { *opts },
            Some(&1) => {
                let v1 = unsafe { *(opts as *const types::cairn_options_v1_t) };
                cairn_options_t {
                    version: CAIRN_OPTIONS_VERSION,
                    write_behind: v1.write_behind,
                    write_behind_bytes: v1.write_behind_bytes,
                    cache_timeout_ms: v1.cache_timeout_ms,
                    connect_timeout_ms: v1.connect_timeout_ms,
                    runtime_threads: v1.runtime_threads,
                    client_name: v1.client_name,
                    credentials: std::ptr::null(),
                }
            }
            Some(v) => {
                return Err(Error::inval(format!(
                    "options version {v} (expected 1 or {CAIRN_OPTIONS_VERSION}): call cairn_options_init"
                )))
            }
        };
        runtime::use_credentials(o.credentials)?;
        let label = format!("volume {volume:?} on {}", servers.join(","));
        let mo = runtime::mount_options(servers.clone(), volume.clone(), &o)?;
        runtime::init_logging();
        let rt = runtime::runtime(o.runtime_threads)?;
        let timeout = mo.connect_timeout;
        let vol = rt.block_on(async move {
            let (s, v) = (servers, volume);
            tokio::task::spawn_blocking(move || runtime::probe_servers(&s, &v, timeout))
                .await
                .map_err(|e| Error::new(libc::EIO, format!("server probe failed: {e}")))??;
            cairn_client::Volume::mount(mo).await.map_err(|e| Error::remote(e, "mount"))
        });
        let vol = vol.map_err(|e| Error::new(e.errno, format!("{label}: {}", e.message)))?;
        tracing::debug!("libcairn: mounted {label}");
        let fs = Box::new(cairn_fs_t {
            vol,
            rt,
            pid: std::process::id(),
            label,
            inflight: Default::default(),
            invalidate: Default::default(),
            invalidate_hooked: Default::default(),
        });
        *fs_out = Box::into_raw(fs);
        Ok(())
    })
}

/// Flush buffered writes, wait for outstanding aio callbacks, close connections and free
/// `fs`. Returns the first deferred write error, if any (fs is freed anyway). Never call it
/// from a libcairn callback (-EDEADLK) or while other threads still use `fs`.
#[no_mangle]
pub unsafe extern "C" fn cairn_unmount(fs: *mut cairn_fs_t) -> c_int {
    guard_int("cairn_unmount", || {
        if fs.is_null() {
            return Err(Error::inval("fs is NULL"));
        }
        if ffi::in_callback() {
            return Err(Error::new(libc::EDEADLK, "cairn_unmount called from a libcairn callback"));
        }
        // SAFETY: a pointer returned by cairn_mount and not yet unmounted.
        let fs = unsafe { Box::from_raw(fs) };
        if let Err(e) = fs.check_pid() {
            std::mem::forget(fs); // its runtime does not exist in this (forked) process
            return Err(e);
        }
        *fs.invalidate.lock() = None;
        fs.vol.on_recall(None);
        fs.vol.on_map_change(None);
        fs.inflight.wait_idle();
        let r = fs.block_on(fs.vol.unmount());
        r.map_err(|e| Error::remote(e, format!("unmount {}", fs.label)))
    })
}

/// Copy the volume's 16-byte id into `out` (16 bytes).
#[no_mangle]
pub unsafe extern "C" fn cairn_volume_id(fs: *mut cairn_fs_t, id_out: *mut u8) -> c_int {
    guard_int("cairn_volume_id", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        if id_out.is_null() {
            return Err(Error::inval("out is NULL"));
        }
        let id = fs.vol.volume_id().to_be_bytes();
        // SAFETY: out holds 16 bytes per the contract.
        unsafe { std::ptr::copy_nonoverlapping(id.as_ptr(), id_out, 16) };
        Ok(())
    })
}

/// Where `id`'s data lives, for pNFS layouts: its replica set and the set's bricks in
/// `id`'s chain order (the first CAIRN_BRICK_UP one is the chain head, which serves its
/// reads and takes its writes), from the volume map this mount holds: no round trip, and
/// `id` need not exist (the set is the one its id names). Ask again when `out->epoch`
/// moves. A set of more than CAIRN_LAYOUT_MAX_BRICKS bricks is cut to that many.
#[no_mangle]
pub unsafe extern "C" fn cairn_layout(
    fs: *mut cairn_fs_t,
    id: cairn_id_t,
    layout: *mut cairn_layout_t,
) -> c_int {
    guard_int("cairn_layout", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let layout = unsafe { out(layout, "layout") }?;
        layout.fill(&fs.vol.placement(Id::from(id)));
        Ok(())
    })
}

/// The bricks of replica set `set` in the chain order that starts at position `rotation`
/// (what `cairn_layout` reported for a file of that set as `set` and `rotation`); -ENOENT
/// for a set the volume does not have, -EINVAL for a rotation past its bricks.
#[no_mangle]
pub unsafe extern "C" fn cairn_set_layout(
    fs: *mut cairn_fs_t,
    set: u32,
    rotation: u32,
    layout: *mut cairn_layout_t,
) -> c_int {
    guard_int("cairn_set_layout", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let layout = unsafe { out(layout, "layout") }?;
        let p = fs
            .vol
            .set_placement(set, rotation)
            .map_err(|e| Error::remote(e, format!("{}: set layout", fs.label)))?;
        layout.fill(&p);
        Ok(())
    })
}

/// Backend round trips (requests sent to bricks) this mount has made so far: returns the
/// total (or a negative errno) and, when `cb` is not NULL, calls it once per request kind
/// (in name order) on the calling thread. For tracing and benchmarks; counters never reset.
#[no_mangle]
pub unsafe extern "C" fn cairn_stats(
    fs: *mut cairn_fs_t,
    cb: cairn_stats_cb,
    arg: *mut c_void,
) -> libc::ssize_t {
    guard_count("cairn_stats", || {
        // SAFETY: forwarded contract.
        let fs = unsafe { fs_ref(fs) }?;
        let st = fs.vol.stats();
        if let Some(f) = cb {
            for (op, n) in &st.by_op {
                let name = std::ffi::CString::new(*op).unwrap_or_default();
                // SAFETY: a C function pointer given by the caller with its argument.
                unsafe { f(name.as_ptr(), *n, arg) };
            }
        }
        Ok(st.round_trips as usize)
    })
}

/// Register (or, with `cb` NULL, remove) the lease-recall upcall. It is called from a
/// library thread with the id whose cached attributes/data (and entries, with
/// CAIRN_INVALIDATE_ENTRIES) must be dropped. It may call other libcairn functions except
/// cairn_unmount, and should return quickly. It may run after the recall was acknowledged
/// (so after the change that caused it completed): for a cache that must never serve
/// what another client changed, use `cairn_register_invalidate_sync`.
#[no_mangle]
pub unsafe extern "C" fn cairn_register_invalidate(
    fs: *mut cairn_fs_t,
    cb: cairn_invalidate_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_register_invalidate", || {
        // SAFETY: forwarded contract.
        register_invalidate(unsafe { fs_ref(fs) }?, cb, arg, false);
        Ok(())
    })
}

/// Like `cairn_register_invalidate`, but the upcall has run before the recall is
/// acknowledged, so before the other client's change completes: a cache it drops (or
/// marks stale) never serves data that change made old. It runs on a library thread that
/// must not block: it must not call any libcairn function and must return at once (take
/// a lock, note the id). Replaces any upcall registered before.
#[no_mangle]
pub unsafe extern "C" fn cairn_register_invalidate_sync(
    fs: *mut cairn_fs_t,
    cb: cairn_invalidate_cb,
    arg: *mut c_void,
) -> c_int {
    guard_int("cairn_register_invalidate_sync", || {
        // SAFETY: forwarded contract.
        register_invalidate(unsafe { fs_ref(fs) }?, cb, arg, true);
        Ok(())
    })
}

fn register_invalidate(fs: &cairn_fs_t, cb: cairn_invalidate_cb, arg: *mut c_void, sync: bool) {
    *fs.invalidate.lock() = cb.map(|f| (f, arg as usize, sync));
    if cb.is_some() && !fs.invalidate_hooked.swap(true, Ordering::SeqCst) {
        let (slot, inflight, rt) = (fs.invalidate.clone(), fs.inflight.clone(), fs.rt.clone());
        fs.vol.on_invalidate(Arc::new(move |id: Id, entries: bool| {
            let guard = slot.lock();
            let (f, arg, sync) = (*guard)?;
            let flags = if entries { CAIRN_INVALIDATE_ENTRIES } else { 0 };
            if sync {
                // Called before the client acknowledges the recall; the guard keeps
                // cairn_unmount (which clears the slot) waiting until it returned.
                // SAFETY: a C function pointer registered by the caller with its argument.
                ffi::run_callback(None, || unsafe { f(id.into(), flags, arg as *mut c_void) });
                return None;
            }
            inflight.begin();
            drop(guard);
            let inflight = inflight.clone();
            rt.spawn_blocking(move || {
                // SAFETY: a C function pointer registered by the caller with its argument.
                ffi::run_callback(None, || unsafe { f(id.into(), flags, arg as *mut c_void) });
                inflight.end();
            });
            None
        }));
    }
}
