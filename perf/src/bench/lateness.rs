//! Scheduled starts: 1,000 `/bin/true` jobs due in the same second on a free pilot of
//! 16 slots (`not_before`, submitted 2 s ahead in one request). Lateness = a task's
//! `start_time` − its due time, p50 and p99 with hdrhistogram, beside 16 threads that
//! sleep until the same kind of due time and then spawn the 1,000 processes directly:
//! how late the last ones start at best on this machine.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use saker_client::results::Timestamp;
use saker_client::spec::{JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

const TRUE: &str = "/bin/true";
const SLOTS: u32 = 16;
const TASKS: u64 = 1_000;
/// How far ahead the jobs are submitted: they are all queued well before they are due.
const AHEAD: Duration = Duration::from_secs(2);

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let baseline = raw_lateness().context("raw lateness")?;
    let shape = PilotShape {
        agents: 1,
        slots: Some(SLOTS),
        sync: true,
        heartbeat: None,
        extra: &[],
    };
    let measured = client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "lateness", shape).await?;
        let outcome = measure(&pilot).await;
        let stopped = pilot.shutdown().await;
        let histogram = outcome?;
        stopped?;
        anyhow::Ok(histogram)
    })?;
    Ok([("p50", 0.50), ("p99", 0.99)]
        .into_iter()
        .map(|(label, quantile)| Row {
            benchmark: Benchmark::Lateness,
            name: format!("scheduled start lateness {label}, {TASKS} due at once"),
            saker: Measure::new(
                measured.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            ),
            baseline: Some(
                Measure::new(
                    baseline.value_at_quantile(quantile) as f64,
                    Unit::Microseconds,
                )
                .with_detail("16 threads spawning at the due time"),
            ),
            target: Target::None,
        })
        .collect())
}

async fn measure(pilot: &RunningPilot) -> Result<Histogram<u64>> {
    pilot.warm_up().await?;
    let due = Timestamp::from_unix_micros(unix_micros() + AHEAD.as_micros() as u64);
    let jobs: Vec<JobRequest> = (0..TASKS)
        .map(|_| {
            let mut spec = TaskSpec::new(vec![TRUE.to_owned()]);
            spec.not_before = Some(due);
            JobRequest::single(spec)
        })
        .collect();
    let submitted = pilot.client.submit(jobs).await?;
    let report = pilot
        .client
        .wait(Some(submitted.iter().map(|job| job.job).collect()))
        .await?;
    if report.succeeded != TASKS {
        bail!("{} of {TASKS} due tasks succeeded", report.succeeded);
    }
    let mut results = pilot.client.results(0, false).await?;
    let mut histogram = raw::latency_histogram();
    let mut seen = 0;
    while let Some(record) = results.next().await? {
        let Some(start) = record.start_time else {
            continue;
        };
        if record.job.0 == 1 {
            continue; // the warm-up
        }
        let late = start.unix_micros().saturating_sub(due.unix_micros());
        raw::record(&mut histogram, Duration::from_micros(late));
        seen += 1;
    }
    if seen != TASKS {
        bail!("{seen} of {TASKS} results had a start time");
    }
    Ok(histogram)
}

/// 16 threads wait for a common due time, then spawn and await `/bin/true` until
/// 1,000 have started; each start's delay after the due time is a sample.
fn raw_lateness() -> Result<Histogram<u64>> {
    let due = Instant::now() + Duration::from_millis(200);
    let remaining = AtomicU64::new(TASKS);
    let samples = std::sync::Mutex::new(raw::latency_histogram());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SLOTS)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    while remaining
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                            left.checked_sub(1)
                        })
                        .is_ok()
                    {
                        let late = Instant::now().saturating_duration_since(due);
                        raw::record(&mut samples.lock().unwrap_or_else(|p| p.into_inner()), late);
                        raw::spawn_and_wait(Path::new(TRUE), &[])?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(outcome) => outcome?,
                Err(_) => bail!("a baseline thread panicked"),
            }
        }
        Ok(())
    })?;
    Ok(samples.into_inner().unwrap_or_else(|p| p.into_inner()))
}
