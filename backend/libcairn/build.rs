//! Give libcairn.so the SONAME of its ABI version, so that programs linked with `-lcairn`
//! record `libcairn.so.<CAIRN_ABI_VERSION>` and an incompatible library is never picked up.

fn main() {
    // Keep in step with CAIRN_ABI_VERSION in src/types.rs (checked by tests/header.rs).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcairn.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
