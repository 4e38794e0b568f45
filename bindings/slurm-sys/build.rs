//! Finds Slurm's headers and, if they are there, generates bindings with bindgen.
//!
//! * `SLURM_INCLUDE_DIR`: the directory that holds `slurm/slurm.h` (default
//!   `/usr/include`; a path ending in `…/slurm` that holds `slurm.h` works too).
//! * `SLURM_LIB_DIR`: where `libslurm.so` is, if the linker does not search there.
//! * `SAKER_REQUIRE_SLURM=1`: fail the build instead of building without libslurm.
//! * `SAKER_LIBSLURM=0`: build without libslurm even where its headers are (the
//!   wheel's binary, scripts/wheel.sh: it must start where libslurm is not
//!   installed). Wins over `SAKER_REQUIRE_SLURM`.
//!
//! Found: `bindings.rs` in `OUT_DIR`, `-lslurm`, `cfg(saker_slurm)`, and
//! `DEP_SLURM_AVAILABLE=1` for the build scripts of crates that depend on this one.
//! Not found: one warning, an empty crate, no link flag, `DEP_SLURM_AVAILABLE=0`.
//!
//! A missing header is not watched (Cargo would re-run the script on every build): after
//! installing Slurm's headers, change one of the variables above or touch this file.

use std::env;
use std::path::{Path, PathBuf};

const DEFAULT_INCLUDE_DIR: &str = "/usr/include";

/// Every item the safe wrapper uses, and nothing else: ≈1k lines of bindings instead
/// of ≈11k, and a Slurm release that changes an unrelated declaration cannot break us.
const FUNCTIONS: &[&str] = &[
    "slurm_init",
    "slurm_get_errno",
    "slurm_strerror",
    "slurm_hostlist_create",
    "slurm_hostlist_shift",
    "slurm_hostlist_destroy",
    "slurm_load_job",
    "slurm_load_job_user",
    "slurm_free_job_info_msg",
    "slurm_job_cpus_allocated_on_node_id",
    "slurm_job_state_string",
    "slurm_init_job_desc_msg",
    "slurm_submit_batch_job",
    "slurm_free_submit_response_response_msg",
    "slurm_kill_job",
];
const TYPES: &[&str] = &[
    "job_info_msg_t",
    "slurm_job_info_t",
    "job_desc_msg_t",
    "submit_response_msg_t",
    "slurm_err_t",
    "saker_slurm_constants",
];
const VARIABLES: &[&str] = &[
    "INFINITE",
    "NO_VAL",
    "NO_VAL16",
    "SHOW_ALL",
    "SHOW_DETAIL",
    "SLURM_SUCCESS",
    "SLURM_ERROR",
    "JOB_STATE_BASE",
];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(saker_slurm)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=wrapper.h");
    for variable in [
        "SLURM_INCLUDE_DIR",
        "SLURM_LIB_DIR",
        "SAKER_REQUIRE_SLURM",
        "SAKER_LIBSLURM",
    ] {
        println!("cargo::rerun-if-env-changed={variable}");
    }
    if env::var("SAKER_LIBSLURM").is_ok_and(|value| value == "0") {
        skip(false, "SAKER_LIBSLURM=0");
        return;
    }
    let required = env::var("SAKER_REQUIRE_SLURM").is_ok_and(|value| value == "1");

    let include_dir = env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_INCLUDE_DIR));
    // Built without the headers, the crate is built again once they are installed
    // (a machine set up after its first build), not left without libslurm.
    println!(
        "cargo::rerun-if-changed={}",
        include_dir.join("slurm/slurm.h").display()
    );
    let Some(include_dir) = find_include_dir(&include_dir) else {
        skip(
            required,
            &format!(
                "Slurm headers not found ({}/slurm/slurm.h; set SLURM_INCLUDE_DIR, or install \
                 libslurm-dev)",
                include_dir.display()
            ),
        );
        return;
    };

    // With bindgen's `runtime` feature libclang is loaded with dlopen; a machine with
    // Slurm's headers but no libclang still builds (without libslurm) instead of
    // stopping at bindgen's panic.
    if std::panic::catch_unwind(bindgen::clang_version).is_err() {
        skip(
            required,
            "libclang not found (install libclang-dev, or set LIBCLANG_PATH)",
        );
        return;
    }

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{}", include_dir.display()))
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        // Slurm's comments are not Rust docs: rustdoc would run their indented lines
        // as doctests.
        .generate_comments(false);
    for function in FUNCTIONS {
        builder = builder.allowlist_function(function);
    }
    for type_name in TYPES {
        builder = builder.allowlist_type(type_name);
    }
    for variable in VARIABLES {
        builder = builder.allowlist_var(variable);
    }
    let bindings = match builder.generate() {
        Ok(bindings) => bindings,
        Err(error) => panic!(
            "bindgen failed on {}/slurm/slurm.h: {error}",
            include_dir.display()
        ),
    };
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(error) = bindings.write_to_file(out_dir.join("bindings.rs")) {
        panic!(
            "cannot write {}: {error}",
            out_dir.join("bindings.rs").display()
        );
    }

    if let Some(lib_dir) = env::var_os("SLURM_LIB_DIR") {
        println!(
            "cargo::rustc-link-search=native={}",
            Path::new(&lib_dir).display()
        );
    }
    println!("cargo::rustc-link-lib=dylib=slurm");
    println!("cargo::rustc-cfg=saker_slurm");
    println!("cargo::metadata=available=1");
}

/// The directory to pass as `-I`: one with `slurm/slurm.h` in it (`slurm.h` includes
/// `<slurm/slurm_errno.h>`).
fn find_include_dir(given: &Path) -> Option<PathBuf> {
    if given.join("slurm").join("slurm.h").is_file() {
        return Some(given.to_path_buf());
    }
    if given.join("slurm.h").is_file() && given.file_name().is_some_and(|name| name == "slurm") {
        return given.parent().map(Path::to_path_buf);
    }
    None
}

fn skip(required: bool, reason: &str) {
    if required {
        panic!("SAKER_REQUIRE_SLURM=1 but {reason}");
    }
    println!("cargo::warning={reason}; building without libslurm");
    println!("cargo::metadata=available=0");
}
