//! Compiles Saker's PMI-1 library (`bindings/pmi`, std only) into the shared object
//! agents hand their Open MPI ranks, so that every `saker` binary carries it
//! (`pmi::library`). Bare `rustc`, not Cargo: a build script cannot ask Cargo for a
//! cdylib of another package.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let source = manifest.join("../../bindings/pmi/src");
    println!("cargo:rerun-if-changed={}", source.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut command = Command::new(rustc);
    command
        .arg(source.join("lib.rs"))
        .args(["--crate-name", "saker_pmi", "--crate-type", "cdylib"])
        .args([
            "--edition",
            "2024",
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
        ])
        .args(["-C", "strip=debuginfo", "--cap-lints", "allow"])
        .arg("--out-dir")
        .arg(&out);
    if let Ok(target) = std::env::var("TARGET") {
        command.args(["--target", &target]);
    }
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        command.arg("-C").arg(format!("linker={linker}"));
    }
    let status = command.status().expect("run rustc for libsaker_pmi.so");
    assert!(
        status.success(),
        "rustc failed to build libsaker_pmi.so: {status}"
    );
}
