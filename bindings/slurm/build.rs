//! Mirrors `saker-slurm-sys`'s detection as `cfg(saker_slurm)` for this crate: the
//! `-sys` build script publishes it as `DEP_SLURM_AVAILABLE` (its `links = "slurm"`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(saker_slurm)");
    println!("cargo::rerun-if-env-changed=DEP_SLURM_AVAILABLE");
    if std::env::var("DEP_SLURM_AVAILABLE").is_ok_and(|value| value == "1") {
        println!("cargo::rustc-cfg=saker_slurm");
    }
}
