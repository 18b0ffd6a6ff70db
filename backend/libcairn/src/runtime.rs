//! The process-wide tokio runtime, the mounted-volume object and mount-time checks.
//!
//! One multi-thread runtime per process, created at the first `cairn_mount` (never at
//! library load: smbd and Ganesha load modules before they fork, and threads do not
//! survive a fork). If a process forks after mounting, the child's first mount leaks the
//! parent's runtime object (its threads do not exist in the child) and builds a new one;
//! `cairn_fs_t`s of the parent are refused in the child with -EBADF.

use crate::ffi::{Error, Res};
use cairn_client::{MountOptions, Volume};
use parking_lot::{Condvar, Mutex};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::{Handle, Runtime};

static RUNTIME: Mutex<Option<(u32, Runtime)>> = Mutex::new(None);

/// The runtime of this process, created (or re-created after a fork) on demand.
pub(crate) fn runtime(threads: u32) -> Res<Handle> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock();
    if let Some((owner, rt)) = slot.as_ref() {
        if *owner == pid {
            return Ok(rt.handle().clone());
        }
    }
    if let Some((_, old)) = slot.take() {
        // Forked child: the parent's worker threads are gone; dropping would wait on them.
        std::mem::forget(old);
    }
    let threads = if threads == 0 {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).min(4)
    } else {
        threads as usize
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("cairn-worker")
        .enable_all()
        .build()
        .map_err(|e| {
            Error::new(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("cannot start the libcairn runtime: {e}"),
            )
        })?;
    let handle = rt.handle().clone();
    *slot = Some((pid, rt));
    Ok(handle)
}

/// Logging to stderr, off unless `CAIRN_LOG` is set (an env-filter such as `debug` or
/// `cairn_client=trace`). Never replaces a subscriber the host process installed.
pub(crate) fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("CAIRN_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// Counts submitted asynchronous operations until their callback has returned, so that
/// unmount can wait for them.
#[derive(Default)]
pub(crate) struct Inflight {
    count: Mutex<usize>,
    zero: Condvar,
}

impl Inflight {
    pub fn begin(&self) {
        *self.count.lock() += 1;
    }
    pub fn end(&self) {
        let mut n = self.count.lock();
        *n -= 1;
        if *n == 0 {
            self.zero.notify_all();
        }
    }
    pub fn wait_idle(&self) {
        let mut n = self.count.lock();
        while *n > 0 {
            self.zero.wait(&mut n);
        }
    }
}

/// The registered invalidation upcall: function pointer, its argument (as an address), and
/// whether it runs before the recall is acknowledged (`cairn_register_invalidate_sync`).
pub(crate) type InvalidateSlot =
    Mutex<Option<(unsafe extern "C" fn(crate::cairn_id_t, u32, *mut libc::c_void), usize, bool)>>;

/// A mounted volume (`cairn_fs_t` in C; opaque).
#[allow(non_camel_case_types)]
pub struct cairn_fs_t {
    pub(crate) vol: Arc<Volume>,
    pub(crate) rt: Handle,
    pub(crate) pid: u32,
    pub(crate) label: String,
    pub(crate) inflight: Arc<Inflight>,
    pub(crate) invalidate: Arc<InvalidateSlot>,
    pub(crate) invalidate_hooked: AtomicBool,
}

impl cairn_fs_t {
    /// Run a backend future to completion on the calling thread.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub(crate) fn check_pid(&self) -> Res<()> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(Error::new(
                libc::EBADF,
                format!("{} was mounted in process {}, not in this process {pid}: a forked child must mount its own cairn_fs_t", self.label, self.pid),
            ));
        }
        Ok(())
    }
}

/// Parse "h1:p,h2:p" (a host without a port gets the default port; IPv6 as "[::1]:p"),
/// each entry a [`cairn_proto::HostPort`].
pub(crate) fn parse_servers(s: &[u8]) -> Res<Vec<String>> {
    let s = std::str::from_utf8(s).map_err(|_| Error::inval("servers: not valid UTF-8"))?;
    if s.trim().is_empty() {
        return Err(Error::inval("servers: empty list (expected \"host:port[,host:port...]\")"));
    }
    let mut out = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(Error::inval(format!("servers {s:?}: empty entry")));
        }
        let hp = item
            .parse::<cairn_proto::HostPort>()
            .map_err(|e| Error::inval(format!("servers {s:?}: {e}")))?;
        out.push(hp.to_string());
    }
    Ok(out)
}

/// Check that at least one server accepts TCP connections before handing the mount to the
/// client, so that an unreachable cluster fails fast with every address and its error
/// named. Blocking; runs on a runtime blocking thread.
pub(crate) fn probe_servers(servers: &[String], volume: &str, timeout: Duration) -> Res<()> {
    let mut failures = Vec::new();
    for s in servers {
        let addrs: Vec<SocketAddr> = match s.to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                failures.push(format!("{s}: cannot resolve: {e}"));
                continue;
            }
        };
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(_) => return Ok(()),
                Err(e) => failures.push(format!("{s} ({a}): {e}")),
            }
        }
    }
    Err(Error::new(
        libc::ENOTCONN,
        format!("volume {volume:?}: cannot reach any server: {}", failures.join("; ")),
    ))
}

/// The credentials file of `cairn_options_t.credentials` (NULL: nothing to do): made the
/// process's (`cairn_proto::tls::set_credentials_path`), once; another file later is
/// refused.
pub(crate) fn use_credentials(path: *const std::ffi::c_char) -> Res<()> {
    static CHOSEN: parking_lot::Mutex<Option<std::path::PathBuf>> = parking_lot::Mutex::new(None);
    if path.is_null() {
        return Ok(());
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    if bytes.is_empty() {
        return Ok(());
    }
    use std::os::unix::ffi::OsStrExt;
    let p = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes));
    let mut chosen = CHOSEN.lock();
    match chosen.as_ref() {
        Some(c) if *c == p => Ok(()),
        Some(c) => Err(Error::inval(format!(
            "options: credentials {}: this process already uses {} (one credential per process)",
            p.display(),
            c.display()
        ))),
        None => {
            cairn_proto::tls::set_credentials_path(&p);
            *chosen = Some(p);
            Ok(())
        }
    }
}

pub(crate) fn mount_options(
    servers: Vec<String>,
    volume: String,
    o: &crate::cairn_options_t,
) -> Res<MountOptions> {
    let client_name = if o.client_name.is_null() {
        "libcairn".to_string()
    } else {
        // SAFETY: the caller passes a NUL-terminated string or NULL.
        unsafe { std::ffi::CStr::from_ptr(o.client_name) }.to_string_lossy().into_owned()
    };
    if o.write_behind && o.write_behind_bytes == 0 {
        return Err(Error::inval("options: write_behind_bytes is 0 with write_behind on"));
    }
    if o.connect_timeout_ms == 0 {
        return Err(Error::inval("options: connect_timeout_ms is 0"));
    }
    Ok(MountOptions {
        servers,
        volume,
        client_name,
        write_behind: o.write_behind,
        write_behind_bytes: o.write_behind_bytes,
        cache_timeout: Duration::from_millis(o.cache_timeout_ms as u64),
        connect_timeout: Duration::from_millis(o.connect_timeout_ms as u64),
        // Quick-read is a FUSE mount option for now; the C ABI has no field for it.
        quick_read: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // Not c"" literals: cbindgen's parser (the header test) does not read them.
    #[allow(clippy::manual_c_str_literals)]
    fn one_credential_per_process() {
        let a = std::ffi::CStr::from_bytes_with_nul(b"/etc/cairn/gateway.pem\0").unwrap();
        let b = std::ffi::CStr::from_bytes_with_nul(b"/etc/cairn/other.pem\0").unwrap();
        use_credentials(std::ptr::null()).unwrap();
        use_credentials(a.as_ptr()).unwrap();
        use_credentials(a.as_ptr()).unwrap();
        let e = use_credentials(b.as_ptr()).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(e.message.contains("one credential per process"), "{}", e.message);
    }

    #[test]
    fn server_lists() {
        let p = |s: &str| parse_servers(s.as_bytes());
        assert_eq!(p("h1:1,h2:2").unwrap(), vec!["h1:1", "h2:2"]);
        assert_eq!(
            p(" h1 , 10.0.0.2:9 ").unwrap(),
            vec!["h1:7420".to_string(), "10.0.0.2:9".into()]
        );
        assert_eq!(p("[::1]:5,[fe80::2]").unwrap(), vec!["[::1]:5", "[fe80::2]:7420"]);
        for bad in ["", ",", "h:", "h:x", "h:0", "h:65536", "::1:5", "[::1]x", "a b:1", "h/x:1"] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "{bad:?}");
            assert!(e.message.starts_with("servers"), "{bad:?}: {}", e.message);
        }
    }

    #[test]
    fn inflight_waits_for_zero() {
        let i = Arc::new(Inflight::default());
        i.begin();
        i.begin();
        let j = i.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            j.end();
            std::thread::sleep(Duration::from_millis(30));
            j.end();
        });
        let start = std::time::Instant::now();
        i.wait_idle();
        assert!(start.elapsed() >= Duration::from_millis(55));
        t.join().unwrap();
    }

    #[test]
    fn one_runtime_per_process() {
        let a = runtime(1).unwrap();
        let b = runtime(3).unwrap();
        assert_eq!(a.id(), b.id(), "the first call decides; later calls reuse it");
    }

    #[test]
    fn callbacks_may_block_on_the_runtime() {
        // aio completions and upcalls run on blocking-pool threads; the synchronous API
        // they may call blocks on the same runtime from there.
        let h = runtime(0).unwrap();
        let h2 = h.clone();
        let v = h.block_on(async move {
            tokio::task::spawn_blocking(move || h2.block_on(async { 41 + 1 })).await.unwrap()
        });
        assert_eq!(v, 42);
    }
}
