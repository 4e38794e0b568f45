//! Durability overhead: the no-op throughput row's `saker run` with the journal
//! fsynced (the default) beside the same run with `--no-sync`, alternated in one run
//! so that both see the same machine.

use std::time::Duration;

use anyhow::Result;

use super::throughput::saker_run;
use super::{Setup, Summary, summary};
use crate::options::Benchmark;
use crate::report::{Measure, Row, Target, Unit};

/// The most the fsynced journal may cost: 5 % of the no-sync rate.
const MAX_OVERHEAD: f64 = 0.05;

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let tasks = setup.sizes.throughput_tasks;
    let slots = setup.cores;
    let mut fsynced = Vec::new();
    let mut unsynced = Vec::new();
    // No-sync, fsync, fsync, no-sync, …: each mode's runs straddle the other's, so a
    // drift in the machine's load over the row weighs on both alike.
    for round in 0..setup.sizes.durability_rounds.max(1) {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for sync in order {
            let elapsed = saker_run(setup, tasks, slots, sync)?;
            eprintln!(
                "saker-perf: durability round {}: {} {:.2} s",
                round + 1,
                if sync { "fsync" } else { "no-sync" },
                elapsed.as_secs_f64()
            );
            if sync {
                fsynced.push(elapsed);
            } else {
                unsynced.push(elapsed);
            }
        }
    }
    let (fsynced, unsynced) = (summary(&mut fsynced), summary(&mut unsynced));
    let rate = |elapsed: Duration| tasks as f64 / elapsed.as_secs_f64();
    let (fsync_rate, no_sync_rate) = (rate(fsynced.median), rate(unsynced.median));
    let overhead = 1.0 - fsync_rate / no_sync_rate;
    let detail = |summary: &Summary| {
        format!(
            "{}: {:.0}–{:.0}/s",
            runs(summary),
            rate(summary.maximum),
            rate(summary.minimum)
        )
    };
    Ok(vec![Row {
        benchmark: Benchmark::Durability,
        name: "durability: fsync vs no-sync".to_owned(),
        saker: Measure::new(fsync_rate, Unit::PerSecond).with_detail(format!(
            "overhead {:.1} %, {}",
            overhead * 100.0,
            detail(&fsynced)
        )),
        baseline: Some(
            Measure::new(no_sync_rate, Unit::PerSecond)
                .with_detail(format!("no-sync, {}", detail(&unsynced))),
        ),
        target: Target::RatioAtLeast(1.0 - MAX_OVERHEAD),
    }])
}

/// "median of 2" or "1 run".
fn runs(summary: &Summary) -> String {
    if summary.count == 1 {
        "1 run".to_owned()
    } else {
        format!("median of {}", summary.count)
    }
}
