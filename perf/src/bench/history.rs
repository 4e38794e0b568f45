//! What a pilot's history costs: the root's memory per finished task (array tasks and
//! task-file lines), and looking results up by task while the history grows no more.
//!
//! Memory is the growth of the root's `VmRSS` over a second round of N tasks, after a
//! first round of the same, each read once the idle root's RSS has settled: the
//! first round's freed memory (queues, attempts, job definitions) is reused by the
//! second or given back, so what remains is what finished work keeps.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use saker_client::Client;
use saker_client::spec::{ArraySpec, Commands, JobLines, JobRequest, TaskSpec};

use super::memory::true_spec;
use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::resident_bytes;
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

/// Lookups per second the issue asks for, and for how long they are sent.
const LOOKUP_RATE: u64 = 10_000;

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let count = setup.sizes.history_tasks;
    let lookup_time = if setup.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    };
    let shape = PilotShape {
        agents: 1,
        slots: Some(u32::try_from(setup.cores).unwrap_or(u32::MAX)),
        sync: false,
        heartbeat: None,
        extra: &[],
    };
    client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "history", shape).await?;
        let outcome = measure(&pilot, count, lookup_time).await;
        let stopped = pilot.shutdown().await;
        let rows = outcome?;
        stopped?;
        Ok(rows)
    })
}

async fn measure(pilot: &RunningPilot, count: u64, lookup_time: Duration) -> Result<Vec<Row>> {
    pilot.warm_up().await?;
    let array = growth(pilot, count, Kind::Array).await?;
    let lines = growth(pilot, count, Kind::Lines).await?;
    let finished = pilot.client.status().await?.succeeded;
    let client = Arc::new(
        Client::connect(pilot.dir(), "saker-perf history")
            .await
            .context("a second client")?,
    );
    let (lookups, lookup_rate) =
        open_loop(&client, Lookup::Result { finished }, lookup_time).await?;
    let (statuses, status_rate) = open_loop(&client, Lookup::Status, lookup_time).await?;
    let memory_row = |name: String, growth: Growth| Row {
        benchmark: Benchmark::History,
        name,
        saker: Measure::new(growth.bytes_per_task(count), Unit::BytesPerTask)
            .with_detail(growth.detail()),
        baseline: None,
        target: Target::AtMost(16.0),
    };
    let mut rows = vec![
        memory_row(
            format!("memory per finished task, arrays of {count}"),
            array,
        ),
        memory_row(
            format!("memory per finished task, {count} task-file lines"),
            lines,
        ),
    ];
    for (label, quantile, target) in [("p50", 0.5, None), ("p99", 0.99, Some(5_000.0))] {
        rows.push(Row {
            benchmark: Benchmark::History,
            name: format!("result lookup {label}, {LOOKUP_RATE}/s of {finished} results"),
            saker: Measure::new(
                lookups.value_at_quantile(quantile) as f64,
                Unit::Microseconds,
            )
            .with_detail(format!("sent at {lookup_rate:.0}/s")),
            baseline: Some(
                Measure::new(
                    statuses.value_at_quantile(quantile) as f64,
                    Unit::Microseconds,
                )
                .with_detail(format!("`status` at {status_rate:.0}/s")),
            ),
            target: target.map_or(Target::None, Target::AtMost),
        });
    }
    Ok(rows)
}

#[derive(Clone, Copy)]
enum Kind {
    /// One array job of N tasks.
    Array,
    /// N single-task jobs, as `saker submit FILE` sends a task file.
    Lines,
}

struct Growth {
    before: u64,
    after: u64,
}

impl Growth {
    fn bytes_per_task(&self, count: u64) -> f64 {
        (self.after as f64 - self.before as f64) / count as f64
    }

    fn detail(&self) -> String {
        let mebibytes = |bytes: u64| bytes as f64 / f64::from(1u32 << 20);
        format!(
            "RSS {:.1} -> {:.1} MiB over the second round",
            mebibytes(self.before),
            mebibytes(self.after)
        )
    }
}

/// Runs two rounds of `count` tasks of `kind` to the end; the RSS before and after
/// the second.
async fn growth(pilot: &RunningPilot, count: u64, kind: Kind) -> Result<Growth> {
    round(pilot, count, kind).await?;
    let before = settled_resident_bytes(pilot.root_pid()).await?;
    round(pilot, count, kind).await?;
    let after = settled_resident_bytes(pilot.root_pid()).await?;
    Ok(Growth { before, after })
}

/// The root's RSS once it stops changing: an idle root gives the memory its queue
/// held back to the system just after the last result (on a thread of its own), and
/// the figure wanted is what it holds once idle, not the moment the wait returned.
async fn settled_resident_bytes(pid: u32) -> Result<u64> {
    let mut last = resident_bytes(pid)?;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = resident_bytes(pid)?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

async fn round(pilot: &RunningPilot, count: u64, kind: Kind) -> Result<()> {
    let jobs = match kind {
        Kind::Array => {
            let array: ArraySpec = format!("1-{count}").parse().context("array spec")?;
            let request = JobRequest {
                spec: true_spec(),
                array: Some(array),
                inline_output: None,
            };
            pilot.client.submit(vec![request]).await?.len()
        }
        Kind::Lines => {
            let mut commands = Commands::new();
            for _ in 0..count {
                commands.push(["/bin/true"], Default::default())?;
            }
            let lines = JobLines {
                template: TaskSpec::new(Vec::new()),
                inline_output: None,
                commands,
            };
            pilot.client.submit_lines(&lines).await?.count as usize
        }
    };
    let report = pilot.client.wait(None).await?;
    if jobs == 0 || report.failed != 0 || report.cancelled != 0 {
        bail!("a round of {count} tasks did not all succeed: {report:?}");
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Lookup {
    /// `result` of a task drawn uniformly from the first `finished`.
    Result { finished: u64 },
    /// `status`: a request that reads no history.
    Status,
}

/// Sends `lookup` at [`LOOKUP_RATE`] for `time`, each on its own without waiting for
/// the others (open loop), and returns each answer's latency and the rate achieved.
async fn open_loop(
    client: &Arc<Client>,
    lookup: Lookup,
    time: Duration,
) -> Result<(Histogram<u64>, f64)> {
    let total = LOOKUP_RATE * time.as_secs();
    let interval = Duration::from_nanos(1_000_000_000 / LOOKUP_RATE);
    let mut histogram = raw::latency_histogram();
    let mut in_flight = tokio::task::JoinSet::new();
    // A fixed-seed xorshift: the same tasks in every run.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let started = Instant::now();
    for sent in 0..total {
        let due = started + interval * u32::try_from(sent).unwrap_or(u32::MAX);
        if due > Instant::now() {
            tokio::time::sleep_until(due.into()).await;
        }
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let client = Arc::clone(client);
        in_flight.spawn(async move {
            let asked = Instant::now();
            match lookup {
                Lookup::Result { finished } => {
                    let task = 1 + state % finished.max(1);
                    let record = client.result(task).await?;
                    if record.task.0 != task {
                        bail!("asked for task {task}, got {}", record.task);
                    }
                }
                Lookup::Status => {
                    client.status().await?;
                }
            }
            Ok(asked.elapsed())
        });
        while let Some(done) = in_flight.try_join_next() {
            raw::record(&mut histogram, done.context("a lookup task")??);
        }
    }
    while let Some(done) = in_flight.join_next().await {
        raw::record(&mut histogram, done.context("a lookup task")??);
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    Ok((histogram, rate))
}
