//! Row 1: no-op tasks per second through `saker run`, process start to exit, beside
//! the raw spawn rate with the same concurrency. The two are run alternately, a few
//! times each, and compared by their medians: this machine's speed drifts by several
//! per cent from minute to minute, more than the gap being measured.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Setup, Summary, journal_label, summary};
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
    let mut raw_runs = Vec::new();
    let mut saker_runs = Vec::new();
    // Raw, saker, saker, raw, …: each one's runs straddle the other's.
    for round in 0..setup.sizes.throughput_rounds.max(1) {
        for saker in [round % 2 == 1, round % 2 == 0] {
            if saker {
                saker_runs.push(saker_run(setup, tasks, slots, sync)?);
            } else {
                raw_runs.push(
                    raw::spawn_loop(Path::new(TRUE), &[], tasks, slots)
                        .context("raw spawn loop")?,
                );
            }
        }
    }
    let (raw, saker) = (summary(&mut raw_runs), summary(&mut saker_runs));
    let benchmark = if sync {
        Benchmark::ThroughputSync
    } else {
        Benchmark::Throughput
    };
    Ok(vec![Row {
        benchmark,
        name: format!("no-op throughput ({})", journal_label(sync)),
        saker: rate(tasks, &saker),
        baseline: Some(rate(tasks, &raw)),
        target: Target::RatioAtLeast(0.9),
    }])
}

/// The median rate, with the runs behind it: "median of 5, 1712–1804/s".
fn rate(tasks: u64, runs: &Summary) -> Measure {
    let rate = |elapsed: Duration| tasks as f64 / elapsed.as_secs_f64();
    let detail = if runs.count == 1 {
        format!("{:.2} s", runs.median.as_secs_f64())
    } else {
        format!(
            "median of {}, {:.0}–{:.0}/s",
            runs.count,
            rate(runs.maximum),
            rate(runs.minimum)
        )
    };
    Measure::new(rate(runs.median), Unit::PerSecond).with_detail(detail)
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
