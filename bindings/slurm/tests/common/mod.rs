//! What both cluster test files need: skipping without a cluster (failing under
//! `SAKER_REQUIRE_SLURM=1`), `scontrol` as the reference, scratch directories, jobs
//! cancelled on drop, and deadline-bounded waits on a job's state. Each file passes the
//! functions it tests (libslurm's or the commands').

#![allow(dead_code)] // each test file uses its own part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use saker_slurm::{BatchRequest, JobInfo, SlurmError, SlurmJobId};

pub const SKIP_CLUSTER: &str = "skipped: no Slurm cluster (start scripts/slurm-cluster/up.sh)";
pub const WAIT: Duration = Duration::from_secs(60);

pub fn required() -> bool {
    std::env::var("SAKER_REQUIRE_SLURM").is_ok_and(|value| value == "1")
}

/// Whether a cluster is configured (`SLURM_CONF`); fails instead of skipping under
/// `SAKER_REQUIRE_SLURM=1`.
pub fn cluster_configured_or_skip() -> bool {
    if std::env::var_os("SLURM_CONF").is_some() {
        return true;
    }
    assert!(
        !required(),
        "SAKER_REQUIRE_SLURM=1 but SLURM_CONF is unset: run scripts/slurm-cluster/up.sh \
         and `source .slurm-cluster/env.sh`"
    );
    eprintln!("{SKIP_CLUSTER}");
    false
}

pub fn run(program: &str, arguments: &[&str]) -> String {
    let output = Command::new(program)
        .args(arguments)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("scontrol prints UTF-8")
}

/// `scontrol show job -o ID` as a map (`-o`: one line of `Key=Value` fields).
pub fn scontrol_job(job_id: SlurmJobId) -> HashMap<String, String> {
    run("scontrol", &["show", "job", "-o", &job_id.to_string()])
        .split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

pub fn field<'a>(job: &'a HashMap<String, String>, key: &str) -> &'a str {
    job.get(key)
        .unwrap_or_else(|| panic!("scontrol printed no {key}: {job:?}"))
}

/// scontrol's local-time stamps (`2026-11-22T10:10:51`) as a `SystemTime`, via date(1).
pub fn scontrol_time(text: &str) -> SystemTime {
    let seconds: u64 = run("date", &["-d", text, "+%s"])
        .trim()
        .parse()
        .expect("date +%s prints a number");
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
}

/// Within a second of scontrol's time (its stamps have whole seconds).
pub fn assert_close(ours: Option<SystemTime>, theirs: SystemTime, what: &str) {
    let ours = ours.unwrap_or_else(|| panic!("{what}: we have none, scontrol has {theirs:?}"));
    let gap = ours
        .duration_since(theirs)
        .unwrap_or_else(|error| error.duration());
    assert!(
        gap <= Duration::from_secs(1),
        "{what}: {ours:?} vs scontrol {theirs:?}"
    );
}

/// A scratch directory for job output, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("saker-slurm-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create scratch directory");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A submitted job, cancelled on drop (with the second field) so that a failed test
/// frees its nodes.
pub struct Job(pub SlurmJobId, pub fn(SlurmJobId));

impl Drop for Job {
    fn drop(&mut self) {
        (self.1)(self.0);
    }
}

/// A five-minute job named `PREFIX-NAME`, writing its output into `directory`.
pub fn request(
    prefix: &str,
    script: &str,
    nodes: u32,
    directory: &Path,
    name: &str,
) -> BatchRequest {
    BatchRequest {
        name: Some(format!("{prefix}-{name}")),
        time_limit_minutes: Some(5),
        working_directory: Some(directory.to_path_buf()),
        stdout: Some(directory.join("slurm-%j.out")),
        ..BatchRequest::new(script, nodes)
    }
}

/// Polls `job_info` until `done` holds (or panics after [`WAIT`]).
pub fn wait_until(
    job_info: fn(SlurmJobId) -> Result<JobInfo, SlurmError>,
    job_id: SlurmJobId,
    what: &str,
    done: impl Fn(&JobInfo) -> bool,
) -> JobInfo {
    let deadline = Instant::now() + WAIT;
    loop {
        let info = job_info(job_id).unwrap_or_else(|error| panic!("job_info: {error:?}"));
        if done(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "job {job_id} not {what} after {WAIT:?}: {info:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn ended(info: &JobInfo) -> bool {
    !matches!(
        info.state.as_str(),
        "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"
    )
}
