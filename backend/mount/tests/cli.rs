//! The mount helper's command line, run as a real process: errors must be clear, name what
//! is wrong, and use mount(8)'s exit codes (1 usage, 32 mount failure).

use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mount-cairn")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn usage_errors_exit_1() {
    let (rc, err) = run(&[]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("usage: mount.cairn"), "{err}");

    let (rc, err) = run(&["no-colon-here", "/tmp"]);
    assert_eq!(rc, 1);
    assert!(err.contains("bad source 'no-colon-here'"), "{err}");

    let (rc, err) = run(&["h:/v", "/tmp", "-o", "ro,frobnicate"]);
    assert_eq!(rc, 1);
    assert!(err.contains("unknown mount option 'frobnicate'"), "{err}");
}

#[test]
fn bad_mountpoint_exits_32_and_names_it() {
    let (rc, err) = run(&["127.0.0.1:1:/vol", "/nonexistent/cairn-mountpoint"]);
    assert_eq!(rc, 32, "{err}");
    assert!(err.contains("/nonexistent/cairn-mountpoint"), "{err}");

    let f = std::env::temp_dir().join(format!("cairn-mount-test-file-{}", std::process::id()));
    std::fs::write(&f, b"x").unwrap();
    let (rc, err) = run(&["127.0.0.1:1:/vol", f.to_str().unwrap()]);
    std::fs::remove_file(&f).unwrap();
    assert_eq!(rc, 32, "{err}");
    assert!(err.contains("is not a directory"), "{err}");
}

/// A server nobody listens on: the error is reported synchronously, before FUSE is
/// mounted, by the parent process of a background mount and by a foreground one.
#[test]
#[ignore = "needs cairn-client's Volume::mount (still todo!() when mount.cairn was written)"]
fn unreachable_server_is_reported() {
    let dir = std::env::temp_dir().join(format!("cairn-mount-test-mp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for fg in [false, true] {
        let mut args = vec!["127.0.0.1:1:/vol", dir.to_str().unwrap()];
        if fg {
            args.push("-f");
        }
        let (rc, err) = run(&args);
        assert_eq!(rc, 32, "{err}");
        assert!(err.contains("cannot mount volume 'vol' from 127.0.0.1:1"), "{err}");
    }
    std::fs::remove_dir(&dir).unwrap();
}
