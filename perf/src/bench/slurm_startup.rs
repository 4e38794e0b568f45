//! Slurm row 1: from `sbatch` of the service template on 3 nodes to all agents
//! connected and to the first task running, beside the time Slurm itself takes to
//! make the allocation RUNNING.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::results::{JobId, Timestamp};
use saker_client::spec::{JobRequest, TaskSpec};
use saker_client::{CLIENT_ENDPOINT_FILE_NAME, Client};

use super::{Setup, Summary, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::CLIENT_NAME;
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};
use crate::slurm::{self, Batch, JobState, SlurmJob};

/// Nodes of the allocation; the service template starts one agent on each.
pub const NODES: u32 = 3;

/// How often the allocation's state and the pilot's agent count are looked at.
const POLL: Duration = Duration::from_millis(20);

/// How long Slurm and the pilot together may take to have all agents connected.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the job may take to end after the pilot was asked to shut down.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long to wait for other users' jobs to leave the cluster before measuring.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// What one start of the service template took, each from the `sbatch` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Startup {
    /// Until `scontrol` first reported the job RUNNING.
    running: Duration,
    /// Until the pilot's `status` first counted all agents.
    agents: Duration,
    /// Until the first task's `start_time` (as its agent recorded it).
    first_task: Duration,
    /// One `srun` step on all nodes of the running allocation (not from `sbatch`).
    step: Duration,
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let template = slurm::template("service.sbatch")?;
    let saker = std::path::absolute(&setup.saker).context("locating the saker binary")?;
    let runtime = client_runtime()?;
    let repeats = setup.sizes.slurm_startup_repeats.max(1);
    let mut samples = Vec::new();
    for repeat in 1..=repeats {
        let sample = runtime
            .block_on(start_once(&saker, &template))
            .with_context(|| format!("start {repeat} of {repeats}"))?;
        eprintln!("saker-perf: slurm start {repeat}/{repeats}: {sample:?}");
        samples.push(sample);
    }
    let median = |pick: fn(&Startup) -> Duration| -> Summary {
        let mut values: Vec<Duration> = samples.iter().map(pick).collect();
        summary(&mut values)
    };
    let running = median(|sample| sample.running);
    let agents = median(|sample| sample.agents);
    let first_task = median(|sample| sample.first_task);
    let step = median(|sample| sample.step);
    // Saker's own share: per start, the time after Slurm reported RUNNING.
    let agents_after = median(|sample| sample.agents.saturating_sub(sample.running));
    let first_task_after = median(|sample| sample.first_task.saturating_sub(sample.running));
    let seconds = |summary: Summary| Measure::new(summary.median.as_secs_f64(), Unit::Seconds);
    let after_running = |whole: Summary, after: Summary| {
        format!(
            "{}; RUNNING + {}",
            whole.detail(),
            Unit::Seconds.format(after.median.as_secs_f64())
        )
    };
    Ok(vec![
        Row {
            benchmark: Benchmark::SlurmStartup,
            name: format!("slurm start, {NODES} nodes: all agents"),
            saker: seconds(agents).with_detail(after_running(agents, agents_after)),
            baseline: Some(seconds(running).with_detail(format!(
                "RUNNING; srun step {}",
                Unit::Seconds.format(step.median.as_secs_f64())
            ))),
            target: Target::None,
        },
        Row {
            benchmark: Benchmark::SlurmStartup,
            name: format!("slurm start, {NODES} nodes: first task"),
            saker: seconds(first_task).with_detail(after_running(first_task, first_task_after)),
            baseline: Some(seconds(running).with_detail(format!("RUNNING, {}", running.detail()))),
            target: Target::None,
        },
    ])
}

/// Submits the service template, measures, shuts the pilot down and waits for the
/// job to end.
async fn start_once(saker: &Path, template: &Path) -> Result<Startup> {
    slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
    let directory = TempDir::new("slurm-startup").context("creating a temporary directory")?;
    let pilot_dir = directory.path().join("pilot");
    let log = directory.path().join("job.log");
    let endpoint = pilot_dir.join(CLIENT_ENDPOINT_FILE_NAME);
    let env: [(&str, &OsStr); 2] = [
        ("PILOT", pilot_dir.as_os_str()),
        ("SAKER", saker.as_os_str()),
    ];
    let batch = Batch {
        script: template,
        nodes: NODES,
        time_limit_minutes: 15,
        log: &log,
        env: &env,
    };

    let submitted_at = Timestamp::now();
    let submitted = Instant::now();
    // Declared after the directory: the job ends before its directory goes.
    let mut job = SlurmJob::submit(&batch)?;
    let mut running = None;
    let mut agents = None;
    let mut connection: Option<(Client, JobId)> = None;
    let deadline = submitted + START_TIMEOUT;
    loop {
        if running.is_none() {
            match job.state()? {
                JobState::Running => running = Some(submitted.elapsed()),
                JobState::Waiting(_) => {}
                state => bail!(
                    "job {} is {state} before its pilot was up:\n{}",
                    job.id(),
                    job.log_tail(20)
                ),
            }
        }
        if connection.is_none() && endpoint.exists() {
            connection = Some(connect_and_submit(&pilot_dir).await?);
        }
        if let Some((client, _)) = &connection
            && agents.is_none()
            && client.status().await?.agents >= NODES
        {
            agents = Some(submitted.elapsed());
        }
        if let (Some(running), Some(agents)) = (running, agents)
            && let Some((client, task_job)) = connection
        {
            let first_start = first_start(&client, task_job).await?;
            let first_task = first_start
                .unix_micros()
                .checked_sub(submitted_at.unix_micros())
                .map(Duration::from_micros)
                .context("the first task started before sbatch was called")?;
            let step = job.time_step(NODES)?;
            // The pilot may close the connection before answering; the job's end counts.
            let _ = client.shutdown(true).await;
            drop(client);
            let state = job.wait_final(STOP_TIMEOUT, Duration::from_millis(100))?;
            if state != JobState::Completed {
                bail!(
                    "job {} ended {state} after shutdown:\n{}",
                    job.id(),
                    job.log_tail(20)
                );
            }
            return Ok(Startup {
                running,
                agents,
                first_task,
                step,
            });
        }
        if Instant::now() >= deadline {
            bail!(
                "job {}: not all {NODES} agents connected within {START_TIMEOUT:?} \
                 (RUNNING after {running:?}, client socket {}):\n{}",
                job.id(),
                if connection.is_some() { "up" } else { "not up" },
                job.log_tail(20)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Connects as soon as the client socket is published and submits one `/bin/true`
/// task, which starts as soon as the first agent is there.
async fn connect_and_submit(pilot_dir: &Path) -> Result<(Client, JobId)> {
    let client = Client::connect(pilot_dir, CLIENT_NAME)
        .await
        .with_context(|| format!("connecting to the pilot in {}", pilot_dir.display()))?;
    let request = JobRequest::single(TaskSpec::new(vec!["/bin/true".to_owned()]));
    let submitted = client.submit(vec![request]).await?;
    let job = submitted
        .first()
        .context("the pilot answered a submit without a job")?
        .job;
    Ok((client, job))
}

/// Waits for the task of `job` and returns when it started, as its agent recorded.
async fn first_start(client: &Client, job: JobId) -> Result<Timestamp> {
    let report = client.wait(Some(vec![job])).await?;
    if report.succeeded != 1 {
        bail!("the first task did not succeed: {report:?}");
    }
    let mut results = client.results(0, false).await?;
    while let Some(record) = results.next().await? {
        if record.job == job {
            return record
                .start_time
                .context("the first task succeeded without a start time");
        }
    }
    bail!("the pilot streamed no result for job {}", job.0)
}
