//! The one place where errors are converted and panics are stopped at the C boundary.
//!
//! Every entry point runs its body through [`guard`]: the body returns `Result<R, Error>`;
//! an `Err` becomes a negative errno and its message is stored in the calling thread's
//! last-error slot; a Rust panic becomes `-EIO` with the panic text, never an unwind into C.

use crate::types::cairn_creds_t;
use cairn_client::{Creds, RemoteError};
use libc::c_char;
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error on its way to C: a positive errno and a message with context.
#[derive(Debug, Clone)]
pub(crate) struct Error {
    pub errno: i32,
    pub message: String,
}

impl Error {
    pub fn new(errno: i32, message: impl Into<String>) -> Error {
        let errno = if errno > 0 { errno } else { libc::EIO };
        Error { errno, message: message.into() }
    }

    pub fn inval(message: impl Into<String>) -> Error {
        Error::new(libc::EINVAL, message)
    }

    /// Wrap a backend error with what the call was doing.
    pub fn remote(e: RemoteError, what: impl Display) -> Error {
        Error::new(e.errno.0, format!("{what}: {}", e))
    }

    pub fn text(&self) -> String {
        let name = cairn_proto::Errno(self.errno).name();
        if self.message.contains(name) {
            self.message.clone()
        } else {
            format!("{} ({name})", self.message)
        }
    }
}

pub(crate) type Res<T> = Result<T, Error>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// Record an error for `cairn_last_error_message` and log it at debug level.
pub(crate) fn record(op: &str, e: &Error) {
    let text = format!("{op}: {}", e.text());
    tracing::debug!(errno = e.errno, "{text}");
    set_last_error(&text);
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

pub(crate) fn panic_error(p: &(dyn std::any::Any + Send)) -> Error {
    Error::new(libc::EIO, format!("internal error (panic): {}", panic_text(p)))
}

/// Run an entry point body: `Ok(v)` → `ok(v)`, `Err(e)` → `err(-errno)` with the message
/// recorded, panic → `err(-EIO)`.
pub(crate) fn guard<T, R>(
    op: &str,
    ok: impl FnOnce(T) -> R,
    err: impl FnOnce(i32) -> R,
    f: impl FnOnce() -> Res<T>,
) -> R {
    set_last_error("");
    let before = trace::begin();
    let result = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(panic_error(p.as_ref())),
    };
    trace::end(before, op, result.as_ref().err().map(|e| e.errno));
    match result {
        Ok(v) => ok(v),
        Err(e) => {
            record(op, &e);
            err(-e.errno)
        }
    }
}

/// The round-trip trace: with `CAIRN_TRACE_RT=FILE` in the environment, every entry point
/// appends `cairn-rt: SECONDS OP ROUND_TRIPS ERRNO` to FILE (SECONDS on CLOCK_MONOTONIC;
/// ROUND_TRIPS the requests this process sent to bricks during the call, exact while one
/// call runs at a time). How `tests/bench/nfs-rt.sh` counts what each NFS operation costs
/// through Ganesha; off (one relaxed load) otherwise.
mod trace {
    use parking_lot::Mutex;
    use std::fs::File;
    use std::io::Write;
    use std::sync::OnceLock;

    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();

    fn file() -> Option<&'static Mutex<File>> {
        FILE.get_or_init(|| {
            let path = std::env::var_os("CAIRN_TRACE_RT")?;
            match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
                Ok(f) => Some(Mutex::new(f)),
                Err(e) => {
                    tracing::error!("libcairn: CAIRN_TRACE_RT {}: {e}", path.to_string_lossy());
                    None
                }
            }
        })
        .as_ref()
    }

    pub(super) fn begin() -> Option<u64> {
        file().map(|_| cairn_client::process_round_trips())
    }

    pub(super) fn end(before: Option<u64>, op: &str, errno: Option<i32>) {
        let (Some(before), Some(f)) = (before, file()) else { return };
        let rt = cairn_client::process_round_trips().saturating_sub(before);
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: ts is a valid timespec to write to.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let line = format!(
            "cairn-rt: {}.{:06} {op} {rt} {}\n",
            ts.tv_sec,
            ts.tv_nsec / 1000,
            errno.unwrap_or(0)
        );
        let _ = f.lock().write_all(line.as_bytes());
    }
}

/// `guard` for calls returning 0 or a negative errno.
pub(crate) fn guard_int(op: &str, f: impl FnOnce() -> Res<()>) -> i32 {
    guard(op, |()| 0, |e| e, f)
}

/// `guard` for calls returning a non-negative count or a negative errno.
pub(crate) fn guard_count(op: &str, f: impl FnOnce() -> Res<usize>) -> libc::ssize_t {
    guard(op, |n| n.min(isize::MAX as usize) as isize, |e| e as isize, f)
}

/// True while a library thread runs a C callback (aio completion or invalidation).
pub(crate) fn in_callback() -> bool {
    IN_CALLBACK.with(|c| c.get())
}

pub(crate) fn run_callback(message: Option<&str>, f: impl FnOnce()) {
    set_last_error(message.unwrap_or(""));
    IN_CALLBACK.with(|c| c.set(true));
    // A C callback cannot panic; a Rust one (tests) must not take down the thread pool.
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_CALLBACK.with(|c| c.set(false));
    if let Err(p) = r {
        tracing::error!("libcairn: callback panicked: {}", panic_text(p.as_ref()));
    }
}

/// Copy C credentials (NULL = root).
///
/// # Safety
/// `c` is NULL or points to a valid `cairn_creds_t` whose `groups` holds `ngroups` entries.
pub(crate) unsafe fn creds(c: *const cairn_creds_t) -> Res<Creds> {
    // SAFETY: the caller guarantees validity of a non-NULL pointer.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return Ok(Creds::root());
    };
    if c.ngroups > 65536 {
        return Err(Error::inval(format!("creds: ngroups {} > 65536", c.ngroups)));
    }
    let groups = if c.ngroups == 0 {
        Vec::new()
    } else if c.groups.is_null() {
        return Err(Error::inval(format!("creds: groups is NULL but ngroups is {}", c.ngroups)));
    } else {
        // SAFETY: non-NULL and, per the contract, `ngroups` entries long.
        unsafe { std::slice::from_raw_parts(c.groups, c.ngroups as usize) }.to_vec()
    };
    Ok(Creds { uid: c.uid, gid: c.gid, groups })
}

/// Borrow a required NUL-terminated C string argument as bytes.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string that outlives the call.
pub(crate) unsafe fn cstr<'a>(p: *const c_char, what: &str) -> Res<&'a [u8]> {
    if p.is_null() {
        return Err(Error::inval(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A single name component, checked as every brick checks it.
///
/// # Safety
/// As [`cstr`].
pub(crate) unsafe fn name_arg<'a>(p: *const c_char, what: &str) -> Res<&'a [u8]> {
    // SAFETY: forwarded contract.
    let n = unsafe { cstr(p, what) }?;
    cairn_proto::valid_name(n)
        .map_err(|e| Error::new(e.errno.0, format!("{what} {:?}: {}", show(n), e.message)))?;
    Ok(n)
}

/// Bytes for messages: lossy UTF-8.
pub(crate) fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A required output pointer.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: forwarded contract.
    unsafe { p.as_mut() }.ok_or_else(|| Error::inval(format!("{what} is NULL")))
}

/// Store into an optional output pointer.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: forwarded contract.
    if let Some(r) = unsafe { p.as_mut() } {
        *r = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: the thread-local slot always holds a valid C string.
        unsafe { CStr::from_ptr(last_error_ptr()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn panic_becomes_eio_with_message() {
        let rc = guard_int("cairn_test", || panic!("boom in the client"));
        assert_eq!(rc, -libc::EIO);
        assert!(
            last().contains("cairn_test: internal error (panic): boom in the client"),
            "{}",
            last()
        );
        assert_eq!(guard_int("cairn_test", || Ok(())), 0);
        assert_eq!(last(), "");
    }

    #[test]
    fn errors_name_the_errno_once() {
        let rc = guard_count("cairn_test", || {
            Err(Error::remote(
                RemoteError::new(cairn_proto::Errno::ENOENT, "no such entry \"x\" in 01"),
                "lookup",
            ))
        });
        assert_eq!(rc, -(libc::ENOENT as isize));
        assert_eq!(last(), "cairn_test: lookup: no such entry \"x\" in 01: ENOENT (2)");
        guard_int("cairn_test", || Err(Error::new(libc::EAGAIN, "busy")));
        assert_eq!(last(), "cairn_test: busy (EAGAIN)");
        // errno 0 or negative from a confused backend still reports a failure
        assert_eq!(guard_int("cairn_test", || Err(Error::new(0, "zero"))), -libc::EIO);
    }

    #[test]
    fn creds_copy_and_validation() {
        // SAFETY: NULL and valid pointers only.
        unsafe {
            assert_eq!(creds(std::ptr::null()).unwrap(), Creds::root());
            let groups = [10u32, 20];
            let c = cairn_creds_t { uid: 5, gid: 6, ngroups: 2, groups: groups.as_ptr() };
            assert_eq!(creds(&c).unwrap(), Creds { uid: 5, gid: 6, groups: vec![10, 20] });
            let c = cairn_creds_t { uid: 5, gid: 6, ngroups: 2, groups: std::ptr::null() };
            assert_eq!(creds(&c).unwrap_err().errno, libc::EINVAL);
            let c = cairn_creds_t { uid: 5, gid: 6, ngroups: 0, groups: std::ptr::null() };
            assert!(creds(&c).unwrap().groups.is_empty());
            let c = cairn_creds_t { uid: 5, gid: 6, ngroups: 70000, groups: groups.as_ptr() };
            assert_eq!(creds(&c).unwrap_err().errno, libc::EINVAL);
        }
    }

    #[test]
    fn names_are_checked_before_any_round_trip() {
        let check = |s: &str| {
            let c = CString::new(s).unwrap();
            // SAFETY: a valid C string.
            unsafe { name_arg(c.as_ptr(), "name") }.map(|n| n.to_vec()).map_err(|e| e.errno)
        };
        assert_eq!(check("ok.txt"), Ok(b"ok.txt".to_vec()));
        assert_eq!(check(""), Err(libc::EINVAL));
        assert_eq!(check("."), Err(libc::EINVAL));
        assert_eq!(check(".."), Err(libc::EINVAL));
        assert_eq!(check("a/b"), Err(libc::EINVAL));
        assert_eq!(check(&"x".repeat(256)), Err(libc::ENAMETOOLONG));
        // SAFETY: NULL is allowed and rejected.
        assert_eq!(unsafe { name_arg(std::ptr::null(), "name") }.unwrap_err().errno, libc::EINVAL);
    }
}
