//! The ABI never changes silently: the checked-in `include/cairn.h` must be exactly what
//! cbindgen generates from the current sources, and it must compile as C and C++.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn checked_in_header_matches_cbindgen() {
    let dir = crate_dir();
    let tmp = std::env::temp_dir().join(format!("cairn-header-{}.h", std::process::id()));
    let out = Command::new("cbindgen")
        .current_dir(&dir)
        .args(["--config", "cbindgen.toml", "--crate", "libcairn", "--output"])
        .arg(&tmp)
        .arg(".")
        .output()
        .expect("cbindgen (0.24, /usr/bin/cbindgen) must be installed to check the ABI header");
    assert!(out.status.success(), "cbindgen failed: {}", String::from_utf8_lossy(&out.stderr));
    let generated = std::fs::read_to_string(&tmp).unwrap();
    let _ = std::fs::remove_file(&tmp);
    let checked_in = std::fs::read_to_string(dir.join("include/cairn.h")).unwrap();
    if generated != checked_in {
        let first = generated
            .lines()
            .zip(checked_in.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(generated.lines().count().min(checked_in.lines().count()));
        panic!(
            "include/cairn.h is out of date (first difference at line {}): the C ABI changed. \
             Review the change, bump CAIRN_ABI_VERSION if it is incompatible, and run \
             `make -C backend/libcairn header`.",
            first + 1
        );
    }
}

#[test]
fn soname_follows_abi_version() {
    let build = std::fs::read_to_string(crate_dir().join("build.rs")).unwrap();
    let want = format!("-soname,libcairn.so.{}", cairn::CAIRN_ABI_VERSION);
    assert!(build.contains(&want), "build.rs must set {want}");
    let pc = std::fs::read_to_string(crate_dir().join("cairn.pc.in")).unwrap();
    assert!(pc.contains("-lcairn") && pc.contains("@prefix@"), "cairn.pc.in template");
}

fn compiles(compiler: &str, args: &[&str], header: &Path) -> bool {
    let out = match Command::new(compiler).args(args).arg(header).output() {
        Ok(o) => o,
        Err(e) => panic!("{compiler}: {e}"),
    };
    if !out.status.success() {
        eprintln!("{compiler} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    out.status.success()
}

#[test]
fn header_compiles_as_c_and_cpp() {
    let h = crate_dir().join("include/cairn.h");
    let strict = [
        "-std=c11",
        "-D_POSIX_C_SOURCE=200809L",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        "-fsyntax-only",
        "-x",
        "c",
    ];
    assert!(compiles("cc", &strict, &h));
    assert!(compiles("c++", &["-Wall", "-Werror", "-fsyntax-only", "-x", "c++"], &h));
}
