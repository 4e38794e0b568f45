//! The benchmarks, one module per row group. Each measures its baseline right
//! before its saker figure, so both see the same machine state.

mod efficiency;
mod latency;
mod memory;
mod slurm_startup;
mod slurm_throughput;
mod throughput;

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::options::{Benchmark, Sizes};
use crate::process::load_average;
use crate::report::{Context as RunContext, Report, Row};
use crate::slurm;

/// What every benchmark needs to know about the run.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The saker binary under test.
    pub saker: PathBuf,
    pub sizes: Sizes,
    /// Cores of this machine (`available_parallelism`); saker's default slot count.
    pub cores: usize,
    pub quick: bool,
}

/// Runs `selection` in order. A benchmark that fails is reported as a failure; the
/// others still run. One that cannot run on this machine (a Slurm row without a
/// cluster) is reported as skipped.
pub fn run_selected(setup: &Setup, selection: &[Benchmark]) -> Report {
    let load_before = load_average();
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    for &benchmark in selection {
        if let Some(reason) = unavailable(benchmark) {
            eprintln!("saker-perf: skipping {}: {reason}", benchmark.id());
            skipped.push((benchmark, reason.to_owned()));
            continue;
        }
        eprintln!("saker-perf: running {} …", benchmark.id());
        match run_one(setup, benchmark) {
            Ok(measured) => rows.extend(measured),
            Err(error) => {
                eprintln!("saker-perf: {} failed: {error:#}", benchmark.id());
                failures.push((benchmark, format!("{error:#}")));
            }
        }
    }
    Report {
        context: RunContext {
            cores: setup.cores,
            saker: setup.saker.display().to_string(),
            quick: setup.quick,
            load_before,
            load_after: load_average(),
        },
        rows,
        failures,
        skipped,
    }
}

/// Why `benchmark` cannot run here, if it cannot: the Slurm rows need a cluster.
fn unavailable(benchmark: Benchmark) -> Option<&'static str> {
    match benchmark {
        Benchmark::SlurmStartup | Benchmark::SlurmThroughput if !slurm::cluster_configured() => {
            Some(slurm::NO_CLUSTER)
        }
        _ => None,
    }
}

fn run_one(setup: &Setup, benchmark: Benchmark) -> Result<Vec<Row>> {
    match benchmark {
        Benchmark::Throughput => throughput::run(setup, false),
        Benchmark::ThroughputSync => throughput::run(setup, true),
        Benchmark::Latency => latency::run(setup, false),
        Benchmark::LatencySync => latency::run(setup, true),
        Benchmark::Efficiency10ms => efficiency::run(setup, efficiency::SleepTask::TenMs),
        Benchmark::Efficiency100ms => efficiency::run(setup, efficiency::SleepTask::HundredMs),
        Benchmark::MemoryArray => memory::run_array(setup),
        Benchmark::MemorySingles => memory::run_singles(setup),
        Benchmark::SlurmStartup => slurm_startup::run(setup),
        Benchmark::SlurmThroughput => slurm_throughput::run(setup),
    }
}

/// A single-threaded tokio runtime for one benchmark's client: the fewest threads
/// competing with the pilot for the machine's cores.
fn client_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a tokio runtime")
}

/// "(fsync)" or "(no-sync)", for row names.
fn journal_label(sync: bool) -> &'static str {
    if sync { "fsync" } else { "no-sync" }
}
