//! A real Slurm cluster, driven through its own commands (`sbatch`, `scontrol`,
//! `squeue`, `srun`, `scancel`) the way a user on a login node would.
//!
//! A batch job's processes are children of `slurmd`, not of this benchmark, so the
//! process-group guard of [`crate::process`] cannot end them: [`SlurmJob`] is the
//! guard instead. Dropping it before the job has ended cancels the job and waits for
//! Slurm to finish it, and every job is submitted with a short time limit, so even a
//! benchmark killed outright holds the nodes for minutes, not for the templates' hours.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::process::tail;

/// Why the Slurm rows are skipped on a machine without a cluster.
pub const NO_CLUSTER: &str = "no Slurm cluster";

/// Name given to every job this benchmark submits, so that `squeue` says whose it is.
const JOB_NAME: &str = "saker-perf";

/// How long a dropped job may take to end after `scancel` (the cluster's `KillWait`
/// plus slack).
const CANCEL_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a Slurm cluster is configured for this process (`SLURM_CONF` is set, as
/// `.slurm-cluster/env.sh` does).
pub fn cluster_configured() -> bool {
    std::env::var_os("SLURM_CONF").is_some()
}

/// A batch script of the repository's `sbatch-templates/` directory.
pub fn template(name: &str) -> Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sbatch-templates")
        .join(name);
    path.canonicalize()
        .with_context(|| format!("finding the batch template {}", path.display()))
}

/// A Slurm job id (`sbatch --parsable` prints it; arrays are not used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlurmJobId(pub u32);

impl fmt::Display for SlurmJobId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.0)
    }
}

/// The job id in what `sbatch --parsable` prints: `ID` or `ID;CLUSTER`.
pub fn parse_sbatch_output(stdout: &str) -> Result<SlurmJobId> {
    let first = stdout.trim().split(';').next().unwrap_or_default();
    first
        .parse()
        .map(SlurmJobId)
        .with_context(|| format!("sbatch printed {stdout:?}, not a job id"))
}

/// Where a job is in its life, from `scontrol show job`'s `JobState`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Neither running nor over: `PENDING`, `CONFIGURING`, `REQUEUED`, `SUSPENDED`, …
    /// (the name).
    Waiting(String),
    Running,
    /// The batch script has exited; Slurm is releasing the nodes.
    Completing,
    /// Ended with exit code 0.
    Completed,
    /// Ended otherwise: `FAILED`, `CANCELLED`, `TIMEOUT`, `NODE_FAIL`, … (the name).
    Ended(String),
}

impl JobState {
    /// States after which the job holds no nodes and never runs again.
    const ENDED: [&'static str; 10] = [
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    ];

    pub fn from_name(name: &str) -> JobState {
        match name {
            "RUNNING" => JobState::Running,
            "COMPLETING" => JobState::Completing,
            "COMPLETED" => JobState::Completed,
            ended if JobState::ENDED.contains(&ended) => JobState::Ended(ended.to_owned()),
            waiting => JobState::Waiting(waiting.to_owned()),
        }
    }

    /// Whether the job is over (`COMPLETED` or any other end).
    pub fn is_final(&self) -> bool {
        matches!(self, JobState::Completed | JobState::Ended(_))
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobState::Waiting(name) | JobState::Ended(name) => formatter.write_str(name),
            JobState::Running => formatter.write_str("RUNNING"),
            JobState::Completing => formatter.write_str("COMPLETING"),
            JobState::Completed => formatter.write_str("COMPLETED"),
        }
    }
}

/// The `KEY=VALUE` fields of `scontrol show job --oneliner`. Values containing spaces
/// (a `Command` path, a `Comment`) come out cut at the space; the fields read here
/// (`JobState`, `NodeList`) never contain one.
pub fn parse_job_fields(oneliner: &str) -> BTreeMap<String, String> {
    oneliner
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The `JobState` of a `scontrol show job --oneliner` line.
pub fn parse_job_state(oneliner: &str) -> Result<JobState> {
    let fields = parse_job_fields(oneliner);
    let name = fields
        .get("JobState")
        .with_context(|| format!("no JobState in scontrol's answer {oneliner:?}"))?;
    Ok(JobState::from_name(name))
}

/// What to submit: a batch script on `nodes` nodes, with `env` added to the
/// environment `sbatch` passes on to it.
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    pub script: &'a Path,
    pub nodes: u32,
    /// `--time`, in minutes: the bound on how long a job whose benchmark died can
    /// hold the nodes.
    pub time_limit_minutes: u32,
    /// `--output`: the script's stdout and stderr.
    pub log: &'a Path,
    pub env: &'a [(&'a str, &'a OsStr)],
}

/// A submitted batch job; cancelled on drop unless it was seen to end.
#[derive(Debug)]
pub struct SlurmJob {
    id: SlurmJobId,
    log: PathBuf,
    ended: bool,
}

impl SlurmJob {
    /// `sbatch --parsable` of `batch`; returns once Slurm has accepted the job.
    pub fn submit(batch: &Batch<'_>) -> Result<SlurmJob> {
        let mut command = Command::new("sbatch");
        command
            .arg("--parsable")
            .arg(format!("--job-name={JOB_NAME}"))
            .arg(format!("--nodes={}", batch.nodes))
            .arg(format!("--time={}", batch.time_limit_minutes))
            .arg("--output")
            .arg(batch.log)
            .arg(batch.script)
            .envs(batch.env.iter().copied())
            .stdin(Stdio::null());
        let output = command.output().context("running sbatch")?;
        if !output.status.success() {
            bail!(
                "sbatch exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let id = parse_sbatch_output(&String::from_utf8_lossy(&output.stdout))?;
        Ok(SlurmJob {
            id,
            log: batch.log.to_owned(),
            ended: false,
        })
    }

    pub fn id(&self) -> SlurmJobId {
        self.id
    }

    /// The job's state now (one `scontrol show job`).
    pub fn state(&mut self) -> Result<JobState> {
        let output = Command::new("scontrol")
            .args(["show", "job", "--oneliner", &self.id.to_string()])
            .stdin(Stdio::null())
            .output()
            .context("running scontrol")?;
        if !output.status.success() {
            bail!(
                "scontrol show job {} exited with {}: {}",
                self.id,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let state = parse_job_state(&String::from_utf8_lossy(&output.stdout))?;
        if state.is_final() {
            self.ended = true;
        }
        Ok(state)
    }

    /// Polls the state every `poll` until the job is over; an error after `timeout`.
    pub fn wait_final(&mut self, timeout: Duration, poll: Duration) -> Result<JobState> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.state()?;
            if state.is_final() {
                return Ok(state);
            }
            if Instant::now() >= deadline {
                bail!(
                    "job {} is still {state} after {timeout:?}; its output:\n{}",
                    self.id,
                    self.log_tail(20)
                );
            }
            std::thread::sleep(poll);
        }
    }

    /// The last `count` lines the batch script printed, for error messages.
    pub fn log_tail(&self, count: usize) -> String {
        tail(&self.log, count)
    }

    /// Wall time of `srun --overlap` starting `/bin/true` once on each of `nodes`
    /// nodes of this (running) allocation: what launching one job step costs.
    pub fn time_step(&self, nodes: u32) -> Result<Duration> {
        let started = Instant::now();
        let status = Command::new("srun")
            .arg(format!("--jobid={}", self.id))
            .arg("--overlap")
            .arg(format!("--nodes={nodes}"))
            .arg(format!("--ntasks={nodes}"))
            .arg("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running srun")?;
        let elapsed = started.elapsed();
        if !status.success() {
            bail!(
                "srun --jobid={} --nodes={nodes} /bin/true exited with {status}",
                self.id
            );
        }
        Ok(elapsed)
    }
}

impl Drop for SlurmJob {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let _ = Command::new("scancel")
            .arg(self.id.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // Wait for the job's processes to be gone before its directory is removed.
        let _ = self.wait_final(CANCEL_TIMEOUT, Duration::from_millis(200));
    }
}

/// Waits until no job at all is queued or running on the cluster, so that a
/// measurement neither waits for someone else's nodes nor shares the cores with
/// their tasks. An error after `timeout`.
pub fn wait_for_idle_cluster(timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut announced = false;
    loop {
        let output = Command::new("squeue")
            .args(["--noheader", "--format=%i %u %j %T"])
            .stdin(Stdio::null())
            .output()
            .context("running squeue")?;
        if !output.status.success() {
            bail!(
                "squeue exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let jobs = String::from_utf8_lossy(&output.stdout);
        let jobs: Vec<&str> = jobs
            .lines()
            .filter(|line| !line.trim().is_empty())
            .collect();
        if jobs.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the Slurm cluster stayed busy for {timeout:?}: {}",
                jobs.join("; ")
            );
        }
        if !announced {
            eprintln!(
                "saker-perf: waiting for {} Slurm job(s) to end: {}",
                jobs.len(),
                jobs.join("; ")
            );
            announced = true;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Abridged from Slurm 22.05's `scontrol show job --oneliner`.
    const RUNNING: &str = "JobId=117 JobName=saker-perf UserId=root(0) GroupId=root(0) \
        Priority=4294901757 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None \
        Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:01 \
        TimeLimit=00:15:00 NodeList=n[1-3] BatchHost=n1 NumNodes=3 NumCPUs=12 \
        Command=/work/main/sbatch-templates/service.sbatch\n";

    #[test]
    fn sbatch_parsable_output_gives_the_job_id() {
        assert_eq!(parse_sbatch_output("117\n").unwrap(), SlurmJobId(117));
        assert_eq!(parse_sbatch_output("42;cluster\n").unwrap(), SlurmJobId(42));
        assert!(parse_sbatch_output("Submitted batch job 42\n").is_err());
        assert!(parse_sbatch_output("").is_err());
    }

    #[test]
    fn scontrol_fields_and_state_are_read() {
        let fields = parse_job_fields(RUNNING);
        assert_eq!(fields["NodeList"], "n[1-3]");
        assert_eq!(fields["NumCPUs"], "12");
        assert_eq!(fields["UserId"], "root(0)");
        assert_eq!(parse_job_state(RUNNING).unwrap(), JobState::Running);
        let pending = RUNNING.replace("JobState=RUNNING", "JobState=PENDING");
        assert_eq!(
            parse_job_state(&pending).unwrap(),
            JobState::Waiting("PENDING".to_owned())
        );
        assert!(parse_job_state("slurm_load_jobs error: Invalid job id specified").is_err());
    }

    #[test]
    fn only_ended_states_are_final() {
        for name in [
            "PENDING",
            "CONFIGURING",
            "RUNNING",
            "COMPLETING",
            "SUSPENDED",
        ] {
            assert!(!JobState::from_name(name).is_final(), "{name}");
        }
        assert_eq!(JobState::from_name("COMPLETED"), JobState::Completed);
        for name in ["FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"] {
            let state = JobState::from_name(name);
            assert_eq!(state, JobState::Ended(name.to_owned()));
            assert!(state.is_final());
            assert_eq!(state.to_string(), name);
        }
    }
}
