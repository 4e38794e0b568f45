//! Data-aware placement, MATRIX's comparison: writer/reader pairs on a local pilot of
//! 4 agents × 2 slots. Each writer leaves a 4 MiB data item in its node's scratch;
//! its reader (after it, reading it) runs where it is (locality on: a 5 s wait) or
//! wherever a slot is free (locality off), in which case the item is copied from its
//! holder through the root. Rows: makespan and bytes moved between nodes, with
//! locality beside without. Runs alternate on, off, on, off; medians are reported.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{JobRef, JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::report::{Measure, Row, Target, Unit};

/// Bytes of each data item.
const ITEM: u64 = 4 << 20;
const RUNS: usize = 2;

const ON: PilotShape = PilotShape {
    agents: 4,
    slots: Some(8),
    sync: true,
    heartbeat: None,
    extra: &["--locality-wait", "5s"],
};

const OFF: PilotShape = PilotShape {
    extra: &["--locality-wait", "0"],
    ..ON
};

/// Writer `i` and its reader, for `pairs` pairs.
fn jobs(pairs: u64) -> Vec<JobRequest> {
    let mut jobs = Vec::new();
    for i in 0..pairs {
        let item = format!("w{i}");
        let write = format!("head -c {ITEM} /dev/zero > \"$SAKER_SCRATCH/{item}\"");
        let mut writer = TaskSpec::new(vec!["sh".into(), "-c".into(), write]);
        writer.name = Some(item.clone());
        writer.writes = vec![item.clone()];
        let read = format!("cat \"$SAKER_SCRATCH/{item}\" > /dev/null");
        let mut reader = TaskSpec::new(vec!["sh".into(), "-c".into(), read]);
        reader.after = vec![JobRef::Name(item.clone())];
        reader.reads = vec![item];
        jobs.push(JobRequest::single(writer));
        jobs.push(JobRequest::single(reader));
    }
    jobs
}

/// One run on a fresh pilot: makespan and bytes moved.
async fn measure(setup: &Setup, shape: PilotShape, pairs: u64) -> Result<(Duration, u64)> {
    let pilot = RunningPilot::start(&setup.saker, "data", shape).await?;
    let outcome = async {
        pilot.warm_up().await?;
        let started = Instant::now();
        let submitted = pilot
            .client
            .submit(jobs(pairs))
            .await
            .context("submitting")?;
        let ids = submitted.iter().map(|job| job.job).collect();
        let report = pilot.client.wait(Some(ids)).await?;
        let elapsed = started.elapsed();
        if report.succeeded != 2 * pairs {
            bail!("{} of {} tasks succeeded", report.succeeded, 2 * pairs);
        }
        let moved = pilot.client.status().await?.data_moved_bytes;
        anyhow::Ok((elapsed, moved))
    }
    .await;
    let stopped = pilot.shutdown().await;
    let measured = outcome?;
    stopped?;
    Ok(measured)
}

fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let pairs = setup.sizes.data_pairs.max(4);
    client_runtime()?.block_on(async {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            on.push(measure(setup, ON, pairs).await?);
            off.push(measure(setup, OFF, pairs).await?);
        }
        let makespan = |runs: &[(Duration, u64)]| {
            median(runs.iter().map(|(time, _)| time.as_secs_f64()).collect())
        };
        let moved = |runs: &[(Duration, u64)]| {
            median(
                runs.iter()
                    .map(|(_, bytes)| *bytes as f64 / f64::from(1 << 20))
                    .collect(),
            )
        };
        let all = |runs: &[(Duration, u64)]| {
            let times: Vec<String> = runs
                .iter()
                .map(|(time, bytes)| format!("{:.2} s/{} MiB", time.as_secs_f64(), bytes >> 20))
                .collect();
            times.join(", ")
        };
        let written = (pairs * ITEM) >> 20;
        Ok(vec![
            Row {
                benchmark: Benchmark::Data,
                name: format!("data fan-in makespan, {pairs} writer→reader pairs of 4 MiB"),
                saker: Measure::new(makespan(&on), Unit::Seconds)
                    .with_detail(format!("locality on: {}", all(&on))),
                baseline: Some(
                    Measure::new(makespan(&off), Unit::Seconds)
                        .with_detail(format!("locality off: {}", all(&off))),
                ),
                target: Target::RatioAtMost(1.0),
            },
            Row {
                benchmark: Benchmark::Data,
                name: format!("data moved between nodes, of {written} MiB written"),
                saker: Measure::new(moved(&on), Unit::Mebibytes)
                    .with_detail("locality on".to_owned()),
                baseline: Some(
                    Measure::new(moved(&off), Unit::Mebibytes)
                        .with_detail("locality off".to_owned()),
                ),
                target: Target::AtMost(0.0),
            },
        ])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_reads_its_own_writers_item_after_it() {
        let jobs = jobs(3);
        assert_eq!(jobs.len(), 6);
        assert_eq!(jobs[2].spec.writes, vec!["w1".to_owned()]);
        assert_eq!(jobs[3].spec.reads, vec!["w1".to_owned()]);
        assert_eq!(jobs[3].spec.after, vec![JobRef::Name("w1".into())]);
    }
}
