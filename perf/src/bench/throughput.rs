//! Row 1: no-op tasks per second through `saker run`, process start to exit, beside
//! the raw spawn rate with the same concurrency.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Setup, journal_label};
use crate::options::Benchmark;
use crate::process::{TempDir, run_to_completion};
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

const TRUE: &str = "/bin/true";

/// Longest a `saker run` of the throughput row may take before it is killed.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

pub fn run(setup: &Setup, sync: bool) -> Result<Vec<Row>> {
    let tasks = setup.sizes.throughput_tasks;
    let slots = setup.cores;
    let raw_elapsed =
        raw::spawn_loop(Path::new(TRUE), &[], tasks, slots).context("raw spawn loop")?;
    let saker_elapsed = saker_run(setup, tasks, slots, sync)?;
    let rate = |elapsed: Duration| tasks as f64 / elapsed.as_secs_f64();
    let benchmark = if sync {
        Benchmark::ThroughputSync
    } else {
        Benchmark::Throughput
    };
    Ok(vec![Row {
        benchmark,
        name: format!("no-op throughput ({})", journal_label(sync)),
        saker: Measure::new(rate(saker_elapsed), Unit::PerSecond)
            .with_detail(format!("{:.2} s", saker_elapsed.as_secs_f64())),
        baseline: Some(
            Measure::new(rate(raw_elapsed), Unit::PerSecond)
                .with_detail(format!("{:.2} s", raw_elapsed.as_secs_f64())),
        ),
        target: Target::RatioAtLeast(0.9),
    }])
}

/// Runs `saker run --array 1-TASKS -- /bin/true` and returns the time from spawning
/// it to its exit.
pub(super) fn saker_run(setup: &Setup, tasks: u64, slots: usize, sync: bool) -> Result<Duration> {
    let directory = TempDir::new("throughput").context("creating a temporary directory")?;
    let stderr = directory.path().join("saker.stderr");
    let mut command = Command::new(&setup.saker);
    command.arg("run");
    if !sync {
        command.arg("--no-sync");
    }
    command
        .args(["--progress", "none", "--slots", &slots.to_string(), "--dir"])
        .arg(directory.path().join("pilot"))
        .args(["--array", &format!("1-{tasks}"), "--", TRUE])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&stderr).context("creating saker's log")?);
    run_to_completion(&mut command, &stderr, RUN_TIMEOUT)
}
