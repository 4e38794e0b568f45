//! The Rust API's rows: `saker-perf-rust` (perf/rust-api/) is a Saker application
//! that measures typed tasks on an embedded pilot of its own and, in the same run,
//! the same batches over one raw QUIC stream; it prints the rows as JSON lines in
//! the format of [`super::python`].

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::Setup;
use crate::options::Benchmark;
use crate::report::Row;

/// `saker-perf-rust`: `SAKER_PERF_RUST` or the binary beside this one.
fn program() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("SAKER_PERF_RUST") {
        return Ok(PathBuf::from(path));
    }
    let beside = std::env::current_exe()
        .context("finding saker-perf's own path")?
        .with_file_name("saker-perf-rust");
    if !beside.exists() {
        bail!(
            "{} is missing: cargo build --release -p saker-perf-rust (or set SAKER_PERF_RUST)",
            beside.display()
        );
    }
    Ok(beside)
}

/// The task rows (one agent), the actor rows (sixteen agents), then the object rows
/// (one agent).
pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let mut rows = run_mode(setup, "rows")?;
    rows.extend(run_mode(setup, "actors")?);
    rows.extend(run_mode(setup, "objects")?);
    Ok(rows)
}

fn run_mode(setup: &Setup, mode: &str) -> Result<Vec<Row>> {
    let program = program()?;
    let mut command = Command::new(&program);
    command.arg(mode);
    if setup.quick {
        command.arg("--quick");
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    super::python::rows(Benchmark::Rust, &String::from_utf8_lossy(&output.stdout))
}
