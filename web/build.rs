//! Tells `ui.rs` whether the generated wasm bundle (`scripts/build-wasm.sh` writes
//! `web/ui/pkg/`) is there to embed. Without it the server still builds, and the
//! bundle's routes answer `503 ui_not_built` instead of failing the build of a fresh
//! checkout.

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(berth_ui_pkg)");
    // A directory here makes cargo re-run this script when any file under it changes,
    // so building the bundle later flips the cfg on the next `cargo build`.
    println!("cargo:rerun-if-changed=ui");
    let pkg = Path::new("ui/pkg");
    if pkg.join("berth_wasm_bg.wasm").is_file() && pkg.join("berth_wasm.js").is_file() {
        println!("cargo:rustc-cfg=berth_ui_pkg");
    }
}
