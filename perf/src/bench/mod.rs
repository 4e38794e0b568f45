//! The benchmarks, one module per row group. Each measures its baseline right
//! before its saker figure, so both see the same machine state.

mod agents;
mod dag_edges;
mod dags;
mod data;
mod durability;
mod efficiency;
mod failover;
mod fetch;
mod history;
mod hpc;
mod latency;
mod lateness;
mod memory;
mod mpi;
mod python;
mod report;
mod resume;
mod rust_api;
mod slurm_elastic;
mod slurm_policies;
mod slurm_startup;
mod slurm_throughput;
mod takeover;
mod takeover_running;
mod throughput;

use std::path::PathBuf;
use std::time::Duration;

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
        Benchmark::SlurmStartup
        | Benchmark::SlurmThroughput
        | Benchmark::SlurmElastic
        | Benchmark::SlurmPolicies
        | Benchmark::SnakemakeSlurm
        | Benchmark::MapreduceSlurm
            if !slurm::cluster_configured() =>
        {
            Some(slurm::NO_CLUSTER)
        }
        Benchmark::FetchLinks if !crate::links::available() => {
            Some("cannot shape the loopback with tc (needs root)")
        }
        _ => None,
    }
}

fn run_one(setup: &Setup, benchmark: Benchmark) -> Result<Vec<Row>> {
    match benchmark {
        Benchmark::Throughput => throughput::run(setup, false),
        Benchmark::ThroughputSync => throughput::run(setup, true),
        Benchmark::Durability => durability::run(setup),
        Benchmark::Latency => latency::run(setup, false),
        Benchmark::LatencySync => latency::run(setup, true),
        Benchmark::Efficiency10ms => efficiency::run(setup, efficiency::SleepTask::TenMs),
        Benchmark::Dags => dags::run(setup),
        Benchmark::DagEdges => dag_edges::run(setup),
        Benchmark::Data => data::run(setup),
        Benchmark::Fetch => fetch::run(setup),
        Benchmark::FetchLinks => fetch::run_links(setup),
        Benchmark::AgentsTree => agents::run_tree_efficiency(setup),
        Benchmark::AgentsMany => agents::run_many(setup),
        Benchmark::AgentsDepth => agents::run_depth(setup),
        Benchmark::Lateness => lateness::run(setup),
        Benchmark::Efficiency100ms => efficiency::run(setup, efficiency::SleepTask::HundredMs),
        Benchmark::MemoryArray => memory::run_array(setup),
        Benchmark::MemorySingles => memory::run_singles(setup),
        Benchmark::History => history::run(setup),
        Benchmark::Report => report::run(setup),
        Benchmark::Failover => failover::run(setup),
        Benchmark::Resume => resume::run(setup),
        Benchmark::Takeover => takeover::run(setup),
        Benchmark::TakeoverRunning | Benchmark::ResumeRunning => {
            takeover_running::run(setup, benchmark)
        }
        Benchmark::SlurmStartup => slurm_startup::run(setup),
        Benchmark::SlurmThroughput => slurm_throughput::run(setup),
        Benchmark::SlurmElastic => slurm_elastic::run(setup),
        Benchmark::SlurmPolicies => slurm_policies::run(setup),
        Benchmark::Python => python::run(setup, benchmark, "python_rows.py", &[]),
        Benchmark::Objects => python::run(setup, benchmark, "objects_rows.py", &[]),
        Benchmark::Joblib => python::run(setup, benchmark, "joblib_rows.py", &[]),
        Benchmark::Snakemake => python::run(setup, benchmark, "snakemake_rows.py", &[]),
        Benchmark::SnakemakeSlurm => python::run(setup, benchmark, "snakemake_slurm_rows.py", &[]),
        Benchmark::MapreduceSlurm => python::run(setup, benchmark, "mapreduce_rows.py", &[]),
        Benchmark::Hpc => hpc::run(setup),
        Benchmark::Mpi => mpi::run(setup),
        Benchmark::Rust => rust_api::run(setup),
        Benchmark::Parsl => {
            let mut rows = python::run(setup, benchmark, "parsl_rows.py", &[])?;
            // The same with Parsl's per-task log off for every executor: the executors
            // themselves, without the DataFlowKernel's logging (a full run only).
            if !setup.quick {
                rows.extend(python::run(
                    setup,
                    benchmark,
                    "parsl_rows.py",
                    &["--log-off"],
                )?);
            }
            Ok(rows)
        }
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

/// Median and range of some durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Summary {
    count: usize,
    median: Duration,
    minimum: Duration,
    maximum: Duration,
}

impl Summary {
    /// "median of 3, 0.31–0.36 s" (in ms below 0.1 s: "median of 3, 8.1–9.4 ms"), or
    /// "1 run".
    fn detail(&self) -> String {
        if self.count == 1 {
            return "1 run".to_owned();
        }
        let (minimum, maximum) = (self.minimum.as_secs_f64(), self.maximum.as_secs_f64());
        if maximum < 0.1 {
            format!(
                "median of {}, {:.1}–{:.1} ms",
                self.count,
                minimum * 1000.0,
                maximum * 1000.0
            )
        } else {
            format!("median of {}, {minimum:.2}–{maximum:.2} s", self.count)
        }
    }
}

/// The median (of the middle two for an even count) and the range; `values` must not
/// be empty (every row measures at least once).
fn summary(values: &mut [Duration]) -> Summary {
    values.sort_unstable();
    let count = values.len();
    let middle = count / 2;
    let median = if count % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2
    };
    Summary {
        count,
        median,
        minimum: values[0],
        maximum: values[count - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn summary_takes_the_middle_value_and_the_range() {
        let odd = summary(&mut milliseconds(&[360, 310, 330]));
        assert_eq!(odd.median, Duration::from_millis(330));
        assert_eq!(odd.detail(), "median of 3, 0.31–0.36 s");
        let even = summary(&mut milliseconds(&[400, 100, 300, 200]));
        assert_eq!(even.median, Duration::from_millis(250));
        assert_eq!(
            (even.minimum, even.maximum),
            (Duration::from_millis(100), Duration::from_millis(400))
        );
        assert_eq!(summary(&mut milliseconds(&[7])).detail(), "1 run");
        let fast = summary(&mut milliseconds(&[9, 8, 12]));
        assert_eq!(fast.detail(), "median of 3, 8.0–12.0 ms");
    }
}
