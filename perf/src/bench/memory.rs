//! Row 4: memory of the root per queued task, and how long queueing takes, for one
//! big array and for as many single-task jobs. The pilot has no agents, so every
//! task stays queued and nothing but the queue grows.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::{TempDir, resident_bytes};
use crate::report::{Measure, Row, Target, Unit};

/// Single-task jobs per submit request (what `saker submit` sends per request).
const SINGLES_PER_REQUEST: u64 = 10_000;

/// Submitting singles stops after this long; the row then covers what was queued.
const SINGLES_BUDGET: Duration = Duration::from_secs(180);

pub(super) const QUEUE_ONLY: PilotShape = PilotShape {
    agents: 0,
    slots: None,
    sync: false,
    heartbeat: None,
    extra: &[],
};

pub(super) fn true_spec() -> TaskSpec {
    TaskSpec::new(vec!["/bin/true".to_owned()])
}

/// What one memory measurement found.
#[derive(Debug)]
struct Queued {
    tasks: u64,
    submit: Duration,
    rss_before: u64,
    rss_after: u64,
}

impl Queued {
    fn bytes_per_task(&self) -> f64 {
        (self.rss_after as f64 - self.rss_before as f64) / self.tasks as f64
    }

    fn rss_detail(&self) -> String {
        let mebibytes = |bytes: u64| bytes as f64 / f64::from(1u32 << 20);
        format!(
            "RSS {:.1} -> {:.1} MiB",
            mebibytes(self.rss_before),
            mebibytes(self.rss_after)
        )
    }
}

pub fn run_array(setup: &Setup) -> Result<Vec<Row>> {
    let count = setup.sizes.memory_array_tasks;
    let array: ArraySpec = format!("1-{count}").parse().context("array spec")?;
    let queued = with_queue_only_pilot(setup, async move |pilot: &RunningPilot| {
        let request = JobRequest {
            spec: true_spec(),
            array: Some(array),
            inline_output: None,
        };
        let rss_before = resident_bytes(pilot.root_pid())?;
        let started = Instant::now();
        pilot.client.submit(vec![request]).await?;
        let submit = started.elapsed();
        let rss_after = resident_bytes(pilot.root_pid())?;
        check_queued(pilot, count).await?;
        Ok(Queued {
            tasks: count,
            submit,
            rss_before,
            rss_after,
        })
    })?;
    Ok(vec![
        Row {
            benchmark: Benchmark::MemoryArray,
            name: format!("memory, array of {count}"),
            saker: Measure::new(queued.bytes_per_task(), Unit::BytesPerTask)
                .with_detail(queued.rss_detail()),
            baseline: None,
            target: Target::AtMost(150.0),
        },
        Row {
            benchmark: Benchmark::MemoryArray,
            name: format!("submit, array of {count}"),
            saker: Measure::new(queued.submit.as_secs_f64(), Unit::Seconds),
            baseline: None,
            target: Target::AtMost(1.0),
        },
    ])
}

/// Rows 4b: a task file of N `/bin/true` lines through `saker submit FILE` (plain
/// lines go as `submit_lines` batches), beside the same N jobs as whole specs in
/// requests of 10,000 (the general `submit`), each on a fresh queue-only pilot, runs
/// alternated (lines, specs, lines, specs); medians.
pub fn run_singles(setup: &Setup) -> Result<Vec<Row>> {
    let wanted = setup.sizes.memory_single_tasks;
    let rounds = if setup.quick { 1 } else { 2 };
    let file = TempDir::new("task-file").context("a directory for the task file")?;
    let path = file.path().join("tasks.txt");
    std::fs::write(&path, "/bin/true\n".repeat(wanted as usize)).context("the task file")?;
    let (mut lines, mut specs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        lines.push(with_queue_only_pilot(
            setup,
            async |pilot: &RunningPilot| {
                let rss_before = resident_bytes(pilot.root_pid())?;
                let started = Instant::now();
                let status = std::process::Command::new(&setup.saker)
                    .args(["submit", "--dir"])
                    .arg(pilot.dir())
                    .arg(&path)
                    .stdout(std::process::Stdio::null())
                    .status()
                    .context("running saker submit")?;
                let submit = started.elapsed();
                if !status.success() {
                    bail!("saker submit of the task file failed: {status}");
                }
                let rss_after = resident_bytes(pilot.root_pid())?;
                check_queued(pilot, wanted).await?;
                Ok(Queued {
                    tasks: wanted,
                    submit,
                    rss_before,
                    rss_after,
                })
            },
        )?);
        specs.push(with_queue_only_pilot(
            setup,
            async |pilot: &RunningPilot| {
                let rss_before = resident_bytes(pilot.root_pid())?;
                let (tasks, submit) = submit_singles(pilot, wanted).await?;
                let rss_after = resident_bytes(pilot.root_pid())?;
                check_queued(pilot, tasks).await?;
                Ok(Queued {
                    tasks,
                    submit,
                    rss_before,
                    rss_after,
                })
            },
        )?);
    }
    let median = |runs: &mut Vec<Queued>| {
        runs.sort_by_key(|run| run.submit);
        runs.swap_remove((runs.len() - 1) / 2)
    };
    let (lines, specs) = (median(&mut lines), median(&mut specs));
    let spec_tasks = specs.tasks;
    let mut spec_detail = format!(
        "{} requests of whole specs",
        spec_tasks.div_ceil(SINGLES_PER_REQUEST)
    );
    if spec_tasks < wanted {
        spec_detail.push_str(&format!(", stopped after {SINGLES_BUDGET:?} of {wanted}"));
    }
    Ok(vec![
        Row {
            benchmark: Benchmark::MemorySingles,
            name: format!("memory, {wanted} single jobs (task file)"),
            saker: Measure::new(lines.bytes_per_task(), Unit::BytesPerTask)
                .with_detail(lines.rss_detail()),
            baseline: Some(
                Measure::new(specs.bytes_per_task(), Unit::BytesPerTask)
                    .with_detail(format!("whole specs: {}", specs.rss_detail())),
            ),
            target: Target::AtMost(200.0),
        },
        Row {
            benchmark: Benchmark::MemorySingles,
            name: format!("submit, {wanted}-line task file"),
            saker: Measure::new(lines.submit.as_secs_f64(), Unit::Seconds).with_detail(format!(
                "`saker submit FILE`, spawn to exit; {:.0} jobs/s",
                wanted as f64 / lines.submit.as_secs_f64()
            )),
            baseline: Some(
                Measure::new(specs.submit.as_secs_f64(), Unit::Seconds).with_detail(spec_detail),
            ),
            target: Target::AtMost(1.0),
        },
    ])
}

/// Submits up to `wanted` single-task `/bin/true` jobs in requests of
/// [`SINGLES_PER_REQUEST`], as `saker submit` sends a task file, and stops early once
/// [`SINGLES_BUDGET`] has been spent submitting. Returns the tasks submitted and the
/// time spent in the submit calls.
pub(super) async fn submit_singles(pilot: &RunningPilot, wanted: u64) -> Result<(u64, Duration)> {
    let mut submit = Duration::ZERO;
    let mut tasks = 0;
    while tasks < wanted && submit < SINGLES_BUDGET {
        let batch = SINGLES_PER_REQUEST.min(wanted - tasks);
        let requests: Vec<JobRequest> = (0..batch)
            .map(|_| JobRequest::single(true_spec()))
            .collect();
        let started = Instant::now();
        pilot.client.submit(requests).await?;
        submit += started.elapsed();
        tasks += batch;
    }
    Ok((tasks, submit))
}

/// Starts a root without agents, runs `measure` against it, and always stops it.
fn with_queue_only_pilot<F>(setup: &Setup, measure: F) -> Result<Queued>
where
    F: AsyncFnOnce(&RunningPilot) -> Result<Queued>,
{
    client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "memory", QUEUE_ONLY).await?;
        let outcome = measure(&pilot).await;
        let stopped = pilot.shutdown().await;
        let queued = outcome?;
        stopped?;
        Ok(queued)
    })
}

/// Checks that the pilot holds exactly `tasks` queued tasks, none started.
pub(super) async fn check_queued(pilot: &RunningPilot, tasks: u64) -> Result<()> {
    let status = pilot.client.status().await?;
    if status.queued != tasks || status.running != 0 {
        bail!(
            "expected {tasks} queued tasks, the pilot reports {} queued and {} running",
            status.queued,
            status.running
        );
    }
    Ok(())
}
