//! Elastic row: from a burst of work submitted to an elastic pilot that has no node to
//! the first task running on the allocation it asked for, beside Slurm's own `sbatch`
//! → RUNNING for a one-node job, alternated in the same run.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::results::Timestamp;
use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};

use super::slurm_startup::IDLE_TIMEOUT;
use super::{Setup, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};
use crate::slurm::{self, Batch, JobState, SlurmJob};

const POLL: Duration = Duration::from_millis(20);
const TIMEOUT: Duration = Duration::from_secs(120);

/// The pilot's flags: one-node allocations, decisions every 200 ms.
const ELASTIC: &[&str] = &[
    "--elastic",
    "--max-nodes",
    "1",
    "--time",
    "10m",
    "--grow-after",
    "1s",
    "--idle-release",
    "5s",
    "--provision-interval",
    "200ms",
];

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let repeats = setup.sizes.slurm_startup_repeats.max(1);
    let runtime = client_runtime()?;
    let mut firsts = Vec::new();
    let mut runnings = Vec::new();
    for repeat in 1..=repeats {
        slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
        let first = runtime
            .block_on(burst_once(&setup.saker))
            .with_context(|| format!("elastic burst {repeat} of {repeats}"))?;
        slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
        let running = sbatch_running()?;
        eprintln!(
            "saker-perf: elastic {repeat}/{repeats}: first task {first:?}, sbatch RUNNING {running:?}"
        );
        firsts.push(first);
        runnings.push(running);
    }
    let first = summary(&mut firsts);
    let running = summary(&mut runnings);
    Ok(vec![Row {
        benchmark: Benchmark::SlurmElastic,
        name: "elastic: burst to first task on a new allocation".into(),
        saker: Measure::new(first.median.as_secs_f64(), Unit::Seconds).with_detail(first.detail()),
        baseline: Some(
            Measure::new(running.median.as_secs_f64(), Unit::Seconds)
                .with_detail(format!("sbatch → RUNNING, 1 node, {}", running.detail())),
        ),
        target: Target::None,
    }])
}

/// An elastic pilot with no node is sent 20 one-second tasks; the time until the first
/// starts on the allocation it asks for.
async fn burst_once(saker: &std::path::Path) -> Result<Duration> {
    let directory = TempDir::new("slurm-elastic").context("creating a temporary directory")?;
    let shape = PilotShape {
        agents: 0,
        slots: None,
        sync: false,
        heartbeat: None,
        extra: ELASTIC,
    };
    let pilot = RunningPilot::start_in(saker, directory.path(), shape, false).await?;
    let outcome = async {
        let request = JobRequest {
            spec: TaskSpec::new(vec!["sleep".into(), "1".into()]),
            array: Some("1-20".parse::<ArraySpec>().context("array")?),
            inline_output: None,
        };
        let submitted_at = Timestamp::now();
        let started = Instant::now();
        pilot.client.submit(vec![request]).await?;
        loop {
            if let Some(first) = first_start(&pilot).await? {
                return first
                    .unix_micros()
                    .checked_sub(submitted_at.unix_micros())
                    .map(Duration::from_micros)
                    .context("a task started before the burst");
            }
            if started.elapsed() > TIMEOUT {
                bail!("no task started within {TIMEOUT:?} of the burst");
            }
            tokio::time::sleep(POLL).await;
        }
    }
    .await;
    let stopped = pilot.shutdown().await;
    let first = outcome?;
    stopped?;
    Ok(first)
}

/// The earliest start among results so far.
async fn first_start(pilot: &RunningPilot) -> Result<Option<Timestamp>> {
    if pilot.client.status().await?.succeeded == 0 {
        return Ok(None);
    }
    let mut stream = pilot.client.results(1, false).await?;
    let mut first: Option<Timestamp> = None;
    while let Some(record) = stream.next().await? {
        if let Some(start) = record.start_time {
            first = Some(first.map_or(start, |f| f.min(start)));
        }
    }
    Ok(first)
}

/// `sbatch` of a one-node job to RUNNING (polled every 20 ms); the job is cancelled.
fn sbatch_running() -> Result<Duration> {
    let directory = TempDir::new("slurm-running").context("creating a temporary directory")?;
    let script = directory.path().join("sleep.sh");
    std::fs::write(&script, "#!/bin/bash\nsleep 60\n")?;
    let log = directory.path().join("job.log");
    let env: [(&str, &OsStr); 0] = [];
    let batch = Batch {
        script: &script,
        nodes: 1,
        time_limit_minutes: 5,
        log: &log,
        env: &env,
    };
    let started = Instant::now();
    let mut job = SlurmJob::submit(&batch)?;
    loop {
        match job.state()? {
            JobState::Running => return Ok(started.elapsed()),
            JobState::Waiting(_) => {}
            state => bail!("job {} is {state} before running", job.id()),
        }
        if started.elapsed() > TIMEOUT {
            bail!("job {} not RUNNING within {TIMEOUT:?}", job.id());
        }
        std::thread::sleep(POLL);
    }
}
