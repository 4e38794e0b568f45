//! Row 2: submit→result latency of single no-op tasks, one at a time, beside the
//! latency of spawning and awaiting the same program directly.
//!
//! Measured two ways a client learns of a result: a `submit` that carries its own
//! `wait` (one request, answered once the task ended: a script's `submit --wait`), and
//! a results stream opened once and followed after a plain `submit` (a workflow
//! engine's executor: Parsl, the Python `Pilot`).
//! Both run in the same pilot, alternating in blocks, so drift of the machine falls on
//! both alike.
//!
//! The followed way also says where each task's time went, stage by stage, from the
//! timestamps the runtime records in its result (submitted, dispatched, received by the
//! agent, started, ended, accepted) and the client's own send and arrival times. All
//! clocks are this machine's.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use saker_client::spec::{JobRequest, TaskSpec};

use super::{Setup, client_runtime, journal_label};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::raw;
use crate::relay;
use crate::report::{Measure, Row, Target, Unit};

const TRUE: &str = "/bin/true";

/// Quantiles reported, with their target: p50 at most the raw spawn's plus this many
/// µs, p99 at most this many µs.
const QUANTILES: [(&str, f64, Target); 3] = [
    ("p50", 0.50, Target::BaselinePlus(250.0)),
    ("p99", 0.99, Target::AtMost(2_000.0)),
    ("p999", 0.999, Target::None),
];

/// A task's way through the pilot, in order: each stage ends where the next begins.
const STAGES: [&str; 7] = [
    "client -> root",
    "queued in the root",
    "root -> agent",
    "agent -> process start",
    "process",
    "agent -> root",
    "root -> client",
];

pub fn run(setup: &Setup, sync: bool) -> Result<Vec<Row>> {
    let samples = setup.sizes.latency_samples;
    let baseline =
        raw::spawn_latency(Path::new(TRUE), &[], samples).context("raw spawn latency")?;
    // The same spawn asked through three processes: the floor of a pilot's four hops.
    let relayed = relay::this_binary()
        .and_then(|binary| relay::latency(&binary, Path::new(TRUE), samples))
        .context("spawn latency through a relay of processes")?;
    let shape = PilotShape {
        agents: 1,
        slots: Some(u32::try_from(setup.cores).unwrap_or(u32::MAX)),
        sync,
        heartbeat: None,
        extra: &[],
    };
    let (waited, followed, stages) = client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "latency", shape).await?;
        let outcome = measure(&pilot, samples).await;
        let stopped = pilot.shutdown().await;
        let histograms = outcome?;
        stopped?;
        anyhow::Ok(histograms)
    })?;
    let benchmark = if sync {
        Benchmark::LatencySync
    } else {
        Benchmark::Latency
    };
    let ways = [("", &waited), (", results followed", &followed)];
    let label = journal_label(sync);
    let stage_rows = STAGES.iter().zip(&stages).map(|(stage, measured)| Row {
        benchmark,
        name: format!("latency stage p50 ({label}): {stage}"),
        saker: Measure::new(measured.value_at_quantile(0.5) as f64, Unit::Microseconds),
        baseline: None,
        target: Target::None,
    });
    // Beside the relay floor: what the pilot adds over its hops' own cost.
    let floor_rows = [("p50", 0.50), ("p99", 0.99)].map(|(label, quantile)| Row {
        benchmark,
        name: format!(
            "latency {label} ({label_}), beside spawn+wait through 3 processes",
            label_ = journal_label(sync)
        ),
        saker: Measure::new(
            waited.value_at_quantile(quantile) as f64,
            Unit::Microseconds,
        ),
        baseline: Some(Measure::new(
            relayed.value_at_quantile(quantile) as f64,
            Unit::Microseconds,
        )),
        target: Target::None,
    });
    Ok(ways
        .into_iter()
        .flat_map(|(way, measured)| {
            QUANTILES
                .into_iter()
                .map(move |(label, quantile, target)| (way, measured, label, quantile, target))
        })
        .map(|(way, measured, label, quantile, target)| Row {
            benchmark,
            name: format!("latency {label} ({}{way})", journal_label(sync)),
            saker: Measure::new(
                measured.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            ),
            baseline: Some(Measure::new(
                baseline.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            )),
            target,
        })
        .chain(floor_rows)
        .chain(stage_rows)
        .collect())
}

/// Samples taken one way before switching to the other.
const BLOCK: u64 = 100;

/// Submits one `/bin/true` task at a time and waits for its result, `samples` times
/// each way (`wait`, and a followed results stream), alternating in blocks.
async fn measure(
    pilot: &RunningPilot,
    samples: u64,
) -> Result<(Histogram<u64>, Histogram<u64>, Vec<Histogram<u64>>)> {
    pilot.warm_up().await?;
    let mut waited = raw::latency_histogram();
    let mut followed = raw::latency_histogram();
    let mut stages: Vec<Histogram<u64>> = STAGES.iter().map(|_| raw::latency_histogram()).collect();
    let mut stream = pilot.client.follow_new().await?;
    let mut done = 0;
    while done < samples {
        let block = BLOCK.min(samples - done);
        for _ in 0..block {
            let started = Instant::now();
            pilot.run_job(true_job()).await?;
            raw::record(&mut waited, started.elapsed());
        }
        // The stream carried the results just waited for too: pass them first.
        for _ in 0..block {
            stream.next().await?.context("the results stream ended")?;
        }
        for _ in 0..block {
            let started = Instant::now();
            let sent = unix_micros();
            let job = pilot.client.submit(vec![true_job()]).await?[0].job;
            loop {
                let record = stream.next().await?.context("the results stream ended")?;
                if record.job == job {
                    anyhow::ensure!(
                        record.state == saker_client::results::TerminalState::Succeeded,
                        "job {}: {:?}",
                        job.0,
                        record.state
                    );
                    record_stages(&mut stages, sent, &record, unix_micros());
                    break;
                }
            }
            raw::record(&mut followed, started.elapsed());
        }
        done += block;
    }
    Ok((waited, followed, stages))
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// Adds one task's stages (see [`STAGES`]) to `stages`; a task missing a timestamp
/// adds none.
fn record_stages(
    stages: &mut [Histogram<u64>],
    sent: u64,
    record: &saker_client::results::ResultRecord,
    arrived: u64,
) {
    let (Some(dispatched), Some(received), Some(started), Some(accepted)) = (
        record.dispatch_time,
        record.received_time,
        record.start_time,
        record.accept_time,
    ) else {
        return;
    };
    let times = [
        sent,
        record.submit_time.unix_micros(),
        dispatched.unix_micros(),
        received.unix_micros(),
        started.unix_micros(),
        record.end_time.unix_micros(),
        accepted.unix_micros(),
        arrived,
    ];
    for (stage, pair) in stages.iter_mut().zip(times.windows(2)) {
        let micros = pair[1].saturating_sub(pair[0]);
        stage.saturating_record(micros.clamp(1, stage.high()));
    }
}

fn true_job() -> JobRequest {
    JobRequest::single(TaskSpec::new(vec![TRUE.to_owned()]))
}
