//! Build `tests/c/abi_test.c` against the `libcairn.so` cargo just built and run its
//! server-less checks through the real shared library (`abi_test --offline`). The full run
//! (`abi_test SERVERS VOLUME`) needs a cluster; set CAIRN_TEST_SERVERS and
//! CAIRN_TEST_VOLUME to include it.

use std::path::PathBuf;
use std::process::Command;

fn target_profile_dir() -> PathBuf {
    // .../target/debug/deps/c_abi-HASH -> .../target/debug
    std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf()
}

fn run(args: &[String], build: &std::path::Path) -> (bool, String) {
    let out = Command::new(build.join("abi_test")).args(args).output().expect("run abi_test");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn c_program_links_and_passes() {
    let profile_dir = target_profile_dir();
    let so = profile_dir.join("libcairn.so");
    assert!(so.exists(), "{} not built", so.display());
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let build = std::env::temp_dir().join(format!("cairn-abi-test-{}", std::process::id()));
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(&here)
        .arg(format!("BUILD={}", build.display()))
        .arg(format!("TARGET_DIR={}", profile_dir.parent().unwrap().display()))
        .arg(format!("PROFILE={}", profile_dir.file_name().unwrap().to_str().unwrap()))
        .output()
        .expect("make");
    assert!(
        out.status.success(),
        "building abi_test failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (ok, text) = run(&["--offline".into()], &build);
    assert!(ok && text.contains(" passed, 0 failed"), "abi_test --offline:\n{text}");
    let (ok, text) = run(&[], &build);
    assert!(!ok && text.contains("usage"), "usage error expected:\n{text}");
    if let (Ok(s), Ok(v)) =
        (std::env::var("CAIRN_TEST_SERVERS"), std::env::var("CAIRN_TEST_VOLUME"))
    {
        let (ok, text) = run(&[s, v], &build);
        assert!(ok && text.contains(" passed, 0 failed"), "abi_test against the cluster:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&build);
}
