//! A long-lived `saker pilot` in a temporary directory, with a connected client.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{JobRequest, TaskSpec};
use saker_client::{CLIENT_ENDPOINT_FILE_NAME, Client, SubmitWait};

use crate::process::{ProcessGroup, TempDir, command_line, process_group_of, process_ids, tail};

/// Name this benchmark gives itself when it says hello to a pilot.
pub(crate) const CLIENT_NAME: &str = concat!("saker-perf/", env!("CARGO_PKG_VERSION"));

/// How long a pilot may take to publish its client socket.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a pilot may take to stop after a shutdown request.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The shape and journal mode of a pilot (`saker pilot` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PilotShape {
    /// `--agents`; 0 starts a root that only queues.
    pub agents: u32,
    /// `--slots`; `None` leaves saker's default (one per core).
    pub slots: Option<u32>,
    /// Whether the journal is fsynced (no `--no-sync`).
    pub sync: bool,
    /// `--heartbeat-interval` and `--heartbeat-timeout`; `None` leaves saker's
    /// defaults.
    pub heartbeat: Option<Heartbeat>,
    /// Further `saker pilot` flags.
    pub extra: &'static [&'static str],
}

/// Heartbeats on the links of a pilot's agent tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub interval: Duration,
    /// How long a silent link lives before its agent's work is replayed elsewhere.
    pub timeout: Duration,
}

/// A running pilot. Stop it with [`RunningPilot::shutdown`]; dropping it kills its
/// process group and removes its directory (if it made the directory itself).
#[derive(Debug)]
pub struct RunningPilot {
    pub client: Client,
    /// The root process as `client.json` names it.
    root_pid: u32,
    /// The pilot directory (`--dir`).
    pilot_dir: PathBuf,
    stderr: PathBuf,
    // Declared before the directory: the processes die before their directory goes.
    process: ProcessGroup,
    /// The temporary directory the pilot directory is in, held only to be removed on
    /// drop; `None` when the caller owns the directory.
    temporary: Option<TempDir>,
}

impl RunningPilot {
    /// Starts `saker pilot` in a new temporary directory and connects once its
    /// client socket is published.
    pub async fn start(saker: &Path, label: &str, shape: PilotShape) -> Result<RunningPilot> {
        let directory = TempDir::new(label).context("creating a temporary directory")?;
        let mut pilot = RunningPilot::start_in(saker, directory.path(), shape, false).await?;
        pilot.temporary = Some(directory);
        Ok(pilot)
    }

    /// Starts `saker pilot` with its pilot directory at `directory/pilot` and its
    /// log appended to `directory/pilot.stderr`, and connects once its client socket
    /// is published. With `resume`, the pilot continues the journal a previous one
    /// left there (`--resume`). The caller owns (and removes) `directory`.
    pub async fn start_in(
        saker: &Path,
        directory: &Path,
        shape: PilotShape,
        resume: bool,
    ) -> Result<RunningPilot> {
        let pilot_dir = directory.join("pilot");
        let stderr = directory.join("pilot.stderr");
        let mut command = Command::new(saker);
        command
            .arg("pilot")
            .arg("--dir")
            .arg(&pilot_dir)
            .args(["--agents", &shape.agents.to_string()]);
        if let Some(slots) = shape.slots {
            command.args(["--slots", &slots.to_string()]);
        }
        if !shape.sync {
            command.arg("--no-sync");
        }
        if let Some(heartbeat) = shape.heartbeat {
            command
                .arg("--heartbeat-interval")
                .arg(format!("{}ms", heartbeat.interval.as_millis()))
                .arg("--heartbeat-timeout")
                .arg(format!("{}ms", heartbeat.timeout.as_millis()));
        }
        if resume {
            command.arg("--resume");
        }
        command.args(shape.extra);
        let log = File::options()
            .create(true)
            .append(true)
            .open(&stderr)
            .context("creating the pilot's log")?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let endpoint = pilot_dir.join(CLIENT_ENDPOINT_FILE_NAME);
        if endpoint.exists() {
            bail!(
                "{} is left from an earlier pilot; it would be taken for this one's",
                endpoint.display()
            );
        }
        let mut process = ProcessGroup::spawn(&mut command)
            .with_context(|| format!("starting {}", saker.display()))?;
        let deadline = Instant::now() + START_TIMEOUT;
        while !endpoint.exists() {
            if let Some(status) = process.wait_timeout(Duration::ZERO)? {
                bail!(
                    "saker pilot exited with {status} before it was ready:\n{}",
                    tail(&stderr, 20)
                );
            }
            if Instant::now() >= deadline {
                bail!("saker pilot published no client socket within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let root_pid = root_pid(&endpoint)?;
        let client = Client::connect(&pilot_dir, CLIENT_NAME)
            .await
            .with_context(|| format!("connecting to the pilot in {}", pilot_dir.display()))?;
        Ok(RunningPilot {
            client,
            root_pid,
            pilot_dir,
            stderr,
            process,
            temporary: None,
        })
    }

    /// Process id of the root (the process whose memory the root's queue is in).
    /// The pilot directory (`--dir`).
    pub fn dir(&self) -> &Path {
        &self.pilot_dir
    }

    pub fn root_pid(&self) -> u32 {
        self.root_pid
    }

    /// The pilot's process group (root, agents and their reapers).
    pub fn process_group(&self) -> u32 {
        self.process.pid()
    }

    /// Process id of the local agent `node` of this pilot: the process whose command
    /// line is `saker agent --dir DIR --node NODE …`, in this pilot's process group.
    pub fn agent_pid(&self, node: u32) -> Option<u32> {
        let pattern = format!("agent --dir {} --node {node} ", self.pilot_dir.display());
        process_ids().into_iter().find(|&pid| {
            command_line(pid).is_some_and(|line| line.contains(&pattern))
                && process_group_of(pid) == Some(self.process.pid())
        })
    }

    /// Submits one job and waits for all its tasks, in one request (`submit` with
    /// `wait`, as `saker submit --wait` of one job); an unsuccessful task is an error.
    pub async fn run_job(&self, request: JobRequest) -> Result<()> {
        let expected = request.task_count();
        let reply = self
            .client
            .submit_and_wait(vec![request], SubmitWait::Counts)
            .await?;
        let job = reply
            .jobs
            .first()
            .context("the pilot answered a submit without a job")?
            .job;
        let report = reply
            .ended
            .context("the pilot answered a waiting submit without counts")?;
        if report.succeeded != expected {
            bail!(
                "job {}: {} of {expected} tasks succeeded ({} failed, {} cancelled)",
                job.0,
                report.succeeded,
                report.failed,
                report.cancelled
            );
        }
        Ok(())
    }

    /// Runs one `/bin/true` task, so that agents are linked and warm before timing.
    pub async fn warm_up(&self) -> Result<()> {
        self.run_job(JobRequest::single(TaskSpec::new(vec![
            "/bin/true".to_owned(),
        ])))
        .await
        .context("warm-up task")
    }

    /// After a warm-up task, runs `request` to its end: how long that took, from
    /// submit to the `wait` answered (pilot start-up and warm-up not in it).
    pub async fn time_job(&self, request: JobRequest) -> Result<Duration> {
        self.warm_up().await?;
        let started = Instant::now();
        self.run_job(request).await?;
        Ok(started.elapsed())
    }

    /// Asks the pilot to stop (killing running tasks) and waits for the process; kills
    /// its group if it does not stop in time.
    pub async fn shutdown(mut self) -> Result<()> {
        // The pilot may close the connection before answering; the exit is what counts.
        let requested = self.client.shutdown(true).await;
        match wait_async(&mut self.process, STOP_TIMEOUT).await? {
            Some(status) if status.success() => Ok(()),
            Some(status) => bail!(
                "saker pilot exited with {status} after shutdown ({requested:?}):\n{}",
                tail(&self.stderr, 20)
            ),
            None => {
                self.process.stop(Duration::from_secs(5))?;
                bail!("saker pilot did not stop within {STOP_TIMEOUT:?} of a shutdown request")
            }
        }
    }
}

/// Waits up to `timeout` for the process to exit without blocking the runtime.
async fn wait_async(
    process: &mut ProcessGroup,
    timeout: Duration,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = process.wait_timeout(Duration::ZERO)? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn root_pid(endpoint: &Path) -> Result<u32> {
    let text = std::fs::read_to_string(endpoint)
        .with_context(|| format!("reading {}", endpoint.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", endpoint.display()))?;
    value["pid"]
        .as_u64()
        .and_then(|pid| u32::try_from(pid).ok())
        .with_context(|| format!("{} names no pid", endpoint.display()))
}
