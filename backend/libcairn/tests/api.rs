//! Argument validation and error reporting through the exported C functions, without a
//! server: NULL pointers, malformed server lists, an unreachable cluster.

use cairn::*;
use std::ffi::{CStr, CString};
use std::net::TcpListener;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    unsafe { CStr::from_ptr(cairn_last_error_message()) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A loopback port where nothing listens.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn mount(servers: &str, volume: &str, opts: *const cairn_options_t) -> (i32, *mut cairn_fs_t) {
    let mut fs: *mut cairn_fs_t = std::ptr::dangling_mut();
    let (s, v) = (c(servers), c(volume));
    let rc = unsafe { cairn_mount(s.as_ptr(), v.as_ptr(), opts, &mut fs) };
    (rc, fs)
}

#[test]
fn mount_null_arguments_are_einval() {
    let mut fs = null_mut();
    let v = c("vol");
    assert_eq!(unsafe { cairn_mount(null(), v.as_ptr(), null(), &mut fs) }, -libc::EINVAL);
    assert!(last_error().contains("servers is NULL"), "{}", last_error());
    assert!(fs.is_null(), "*out is cleared on failure");
    let s = c("127.0.0.1:7420");
    assert_eq!(unsafe { cairn_mount(s.as_ptr(), null(), null(), &mut fs) }, -libc::EINVAL);
    assert!(last_error().contains("volume is NULL"), "{}", last_error());
    assert_eq!(unsafe { cairn_mount(s.as_ptr(), v.as_ptr(), null(), null_mut()) }, -libc::EINVAL);
}

#[test]
fn bad_server_strings_are_einval_with_a_message() {
    for (servers, needle) in [
        ("", "empty list"),
        ("  ", "empty list"),
        ("h1:7420,,h2:7420", "empty entry"),
        ("host:notaport", "notaport"),
        ("host:0", "host:0"),
        ("host:70000", "70000"),
        (":7420", "empty host"),
        ("fe80::1:7420", "fe80::1:7420"),
        ("[::1", "[::1"),
    ] {
        let (rc, fs) = mount(servers, "vol", null());
        assert_eq!(rc, -libc::EINVAL, "servers {servers:?}");
        assert!(fs.is_null());
        let msg = last_error();
        assert!(
            msg.starts_with("cairn_mount: ") && msg.contains(needle),
            "servers {servers:?}: {msg}"
        );
        assert!(msg.contains("EINVAL"), "errno named: {msg}");
    }
    for volume in ["", "a/b", "a b"] {
        let (rc, _) = mount("127.0.0.1:7420", volume, null());
        assert_eq!(rc, -libc::EINVAL, "volume {volume:?}");
        assert!(last_error().contains("bad volume name"), "{}", last_error());
    }
}

#[test]
fn options_must_come_from_options_init() {
    let mut o = std::mem::MaybeUninit::<cairn_options_t>::uninit();
    unsafe { cairn_options_init(o.as_mut_ptr()) };
    let mut o = unsafe { o.assume_init() };
    assert_eq!(o.version, CAIRN_OPTIONS_VERSION);
    assert!(o.write_behind && o.write_behind_bytes > 0 && o.connect_timeout_ms > 0);
    assert!(o.client_name.is_null());
    o.version = 0;
    assert_eq!(mount("127.0.0.1:7420", "vol", &o).0, -libc::EINVAL);
    assert!(last_error().contains("cairn_options_init"), "{}", last_error());
    unsafe { cairn_options_init(&mut o) };
    o.connect_timeout_ms = 0;
    assert_eq!(mount("127.0.0.1:7420", "vol", &o).0, -libc::EINVAL);
}

/// A program built against options version 1 (no `credentials` field) still mounts: only
/// the version 1 layout is read.
#[test]
fn options_version_1_are_still_accepted() {
    #[repr(C)]
    struct V1 {
        version: u32,
        write_behind: bool,
        write_behind_bytes: usize,
        cache_timeout_ms: u32,
        connect_timeout_ms: u32,
        runtime_threads: u32,
        client_name: *const libc::c_char,
    }
    let v1 = Box::new(V1 {
        version: 1,
        write_behind: true,
        write_behind_bytes: 1 << 20,
        cache_timeout_ms: 1000,
        connect_timeout_ms: 500,
        runtime_threads: 0,
        client_name: std::ptr::null(),
    });
    let o = &*v1 as *const V1 as *const cairn_options_t;
    let (rc, _) = mount(&format!("127.0.0.1:{}", closed_port()), "vol", o);
    assert_eq!(rc, -libc::ENOTCONN, "{}", last_error());
}

#[test]
fn unreachable_cluster_is_enotconn_naming_every_address() {
    let (p1, p2) = (closed_port(), closed_port());
    let servers = format!("127.0.0.1:{p1},localhost:{p2}");
    let mut o = std::mem::MaybeUninit::<cairn_options_t>::uninit();
    unsafe { cairn_options_init(o.as_mut_ptr()) };
    let mut o = unsafe { o.assume_init() };
    o.connect_timeout_ms = 2000;
    let t = std::time::Instant::now();
    let (rc, fs) = mount(&servers, "vol1", &o);
    assert_eq!(rc, -libc::ENOTCONN, "{}", last_error());
    assert!(fs.is_null());
    let msg = last_error();
    for needle in [
        format!("127.0.0.1:{p1}"),
        format!("localhost:{p2}"),
        "vol1".into(),
        "refused".into(),
        "ENOTCONN".into(),
    ] {
        assert!(msg.contains(&needle), "message lacks {needle:?}: {msg}");
    }
    assert!(t.elapsed() < std::time::Duration::from_secs(10), "fails fast");
}

#[test]
fn a_failing_backend_never_unwinds_into_c() {
    // Something listens but is not a cairnd: the mount must fail with a negative errno
    // and a message, whatever the client does with the garbage (including a panic).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            drop(s);
        }
    });
    let mut o = std::mem::MaybeUninit::<cairn_options_t>::uninit();
    unsafe { cairn_options_init(o.as_mut_ptr()) };
    let mut o = unsafe { o.assume_init() };
    o.connect_timeout_ms = 1000;
    let (rc, fs) = mount(&format!("127.0.0.1:{port}"), "vol", &o);
    assert!(rc < 0, "mount of a non-cairnd must fail, got {rc}");
    assert!(fs.is_null());
    assert!(!last_error().is_empty());
    drop(server);
}

#[test]
fn null_fs_is_einval_everywhere() {
    let root = cairn_id_root();
    let mut attr = std::mem::MaybeUninit::<cairn_attr_t>::uninit();
    let mut buf = [0u8; 16];
    let n = c("x");
    unsafe {
        assert_eq!(cairn_getattr(null_mut(), null(), root, attr.as_mut_ptr()), -libc::EINVAL);
        assert!(last_error().contains("fs is NULL"), "{}", last_error());
        assert_eq!(
            cairn_lookup(null_mut(), null(), root, n.as_ptr(), attr.as_mut_ptr()),
            -libc::EINVAL
        );
        assert_eq!(
            cairn_create(null_mut(), null(), root, n.as_ptr(), 0o644, 0, null_mut()),
            -libc::EINVAL
        );
        assert_eq!(cairn_unlink(null_mut(), null(), root, n.as_ptr()), -libc::EINVAL);
        assert_eq!(
            cairn_read(null_mut(), null(), root, 0, buf.as_mut_ptr().cast(), 16),
            -(libc::EINVAL as isize)
        );
        assert_eq!(
            cairn_write(null_mut(), null(), root, 0, buf.as_ptr().cast(), 16),
            -(libc::EINVAL as isize)
        );
        assert_eq!(
            cairn_getxattr(null_mut(), null(), root, n.as_ptr(), null_mut(), 0),
            -(libc::EINVAL as isize)
        );
        assert_eq!(cairn_statfs(null_mut(), null(), null_mut()), -libc::EINVAL);
        assert_eq!(cairn_release(null_mut(), root), -libc::EINVAL);
        assert_eq!(cairn_volume_id(null_mut(), buf.as_mut_ptr()), -libc::EINVAL);
        assert_eq!(cairn_register_invalidate(null_mut(), None, null_mut()), -libc::EINVAL);
        assert_eq!(cairn_register_map_change(null_mut(), None, null_mut()), -libc::EINVAL);
        assert!(last_error().contains("cairn_register_map_change"), "{}", last_error());
        assert_eq!(cairn_unmount(null_mut()), -libc::EINVAL);
    }
}

static CALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
unsafe extern "C" fn must_not_run(_: i32, _: *mut libc::c_void) {
    CALLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn refused_aio_never_calls_back() {
    let mut buf = [0u8; 16];
    let rc = unsafe {
        cairn_aio_read(
            null_mut(),
            null(),
            cairn_id_root(),
            0,
            buf.as_mut_ptr().cast(),
            16,
            Some(must_not_run),
            null_mut(),
        )
    };
    assert_eq!(rc, -libc::EINVAL);
    let rc = unsafe {
        cairn_aio_fsync(null_mut(), null(), cairn_id_root(), false, Some(must_not_run), null_mut())
    };
    assert_eq!(rc, -libc::EINVAL);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!CALLED.load(std::sync::atomic::Ordering::SeqCst));
}

#[test]
fn ids_versions_and_thread_local_errors() {
    assert_eq!(cairn_abi_version(), CAIRN_ABI_VERSION);
    let (mut maj, mut min, mut pat) = (-1, -1, -1);
    let v =
        unsafe { CStr::from_ptr(cairn_version(&mut maj, &mut min, &mut pat)) }.to_str().unwrap();
    assert_eq!(v, format!("{maj}.{min}.{pat}"));
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        unsafe { CStr::from_ptr(cairn_version(null_mut(), null_mut(), null_mut())) }
            .to_str()
            .unwrap(),
        v
    );

    let root = cairn_id_root();
    assert_eq!(root.bytes[15], 1);
    assert!(root.bytes[..15].iter().all(|&b| b == 0));
    let mut hex = [0 as libc::c_char; 33];
    assert_eq!(unsafe { cairn_id_to_hex(root, hex.as_mut_ptr(), 33) }, 0);
    let h = unsafe { CStr::from_ptr(hex.as_ptr()) }.to_str().unwrap().to_string();
    assert_eq!(h, "00000000000000000000000000000001");
    assert_eq!(unsafe { cairn_id_to_hex(root, hex.as_mut_ptr(), 32) }, -libc::EINVAL);
    let id_hex = c("0123456789abcdef0011223344556677");
    let mut id = cairn_id_t { bytes: [0; 16] };
    assert_eq!(unsafe { cairn_id_from_hex(id_hex.as_ptr(), &mut id) }, 0);
    assert_eq!(id.bytes[0], 0x01);
    assert_eq!(id.bytes[15], 0x77);
    assert_eq!(last_error(), "", "a success clears the message");

    let bad = c("not-hex");
    assert_eq!(unsafe { cairn_id_from_hex(bad.as_ptr(), &mut id) }, -libc::EINVAL);
    assert!(last_error().contains("not-hex"));
    // The message is per thread: another thread sees its own (empty) slot.
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");
    assert!(last_error().contains("not-hex"));
}
