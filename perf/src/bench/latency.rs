//! Row 2: submit→result latency of single no-op tasks, one at a time, beside the
//! latency of spawning and awaiting the same program directly.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use saker_root::spec::{JobRequest, TaskSpec};

use super::{Setup, client_runtime, journal_label};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

const TRUE: &str = "/bin/true";

/// Quantiles reported, with their absolute target in microseconds.
const QUANTILES: [(&str, f64, Option<f64>); 3] = [
    ("p50", 0.50, Some(1_000.0)),
    ("p99", 0.99, Some(3_000.0)),
    ("p999", 0.999, None),
];

pub fn run(setup: &Setup, sync: bool) -> Result<Vec<Row>> {
    let samples = setup.sizes.latency_samples;
    let baseline =
        raw::spawn_latency(Path::new(TRUE), &[], samples).context("raw spawn latency")?;
    let shape = PilotShape {
        agents: 1,
        slots: Some(u32::try_from(setup.cores).unwrap_or(u32::MAX)),
        sync,
        heartbeat: None,
        extra: &[],
    };
    let measured = client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "latency", shape).await?;
        let outcome = measure(&pilot, samples).await;
        let stopped = pilot.shutdown().await;
        let histogram = outcome?;
        stopped?;
        anyhow::Ok(histogram)
    })?;
    let benchmark = if sync {
        Benchmark::LatencySync
    } else {
        Benchmark::Latency
    };
    Ok(QUANTILES
        .into_iter()
        .map(|(label, quantile, target)| Row {
            benchmark,
            name: format!("latency {label} ({})", journal_label(sync)),
            saker: Measure::new(
                measured.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            ),
            baseline: Some(Measure::new(
                baseline.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            )),
            target: target.map_or(Target::None, Target::AtMost),
        })
        .collect())
}

/// Submits one `/bin/true` task at a time and waits for it, `samples` times.
async fn measure(pilot: &RunningPilot, samples: u64) -> Result<Histogram<u64>> {
    pilot.warm_up().await?;
    let mut histogram = raw::latency_histogram();
    for _ in 0..samples {
        let request = JobRequest::single(TaskSpec::new(vec![TRUE.to_owned()]));
        let started = Instant::now();
        pilot.run_job(request).await?;
        raw::record(&mut histogram, started.elapsed());
    }
    Ok(histogram)
}
