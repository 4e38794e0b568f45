//! `saker_slurm::commands` (squeue, sbatch, scancel in place of libslurm: the wheel's
//! binary) against a real Slurm cluster, checked against `scontrol` and, in a build
//! with libslurm, against libslurm's answers for the same job.
//!
//! Runs in every build (the commands need no libslurm). Needs the project's cluster
//! (`scripts/slurm-cluster/up.sh`, `source .slurm-cluster/env.sh`); without
//! `SLURM_CONF` each test prints "skipped" and passes, unless `SAKER_REQUIRE_SLURM=1`
//! (CI), which makes it fail.

use std::path::Path;
use std::time::{Duration, Instant};

use saker_slurm::commands::{cancel, job_info, submit_batch, user_jobs};
use saker_slurm::{BatchRequest, JobInfo, SlurmError, SlurmJobId};

mod common;

use common::{
    Job, Scratch, WAIT, assert_close, cluster_configured_or_skip as cluster_or_skip, ended, field,
    scontrol_job, scontrol_time,
};

const SIGTERM: u16 = 15;

fn request(script: &str, nodes: u32, directory: &Path, name: &str) -> BatchRequest {
    common::request("saker-cmd", script, nodes, directory, name)
}

fn submit(request: &BatchRequest) -> Job {
    let id = submit_batch(request).unwrap_or_else(|error| panic!("sbatch failed: {error:?}"));
    Job(id, |id| {
        let _ = cancel(id, None);
    })
}

fn wait_for(job_id: SlurmJobId, what: &str, done: impl Fn(&JobInfo) -> bool) -> JobInfo {
    common::wait_until(job_info, job_id, what, done)
}

#[test]
fn squeue_agrees_with_scontrol_and_libslurm_then_scancel_cancels() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("commands-info");
    let job = submit(&request("#!/bin/sh\nsleep 30\n", 2, &scratch.0, "info|x"));
    let info = wait_for(job.0, "running", |info| info.state == "RUNNING");
    let theirs = scontrol_job(job.0);
    assert_eq!(info.job_id, job.0);
    assert_eq!(info.name, "saker-cmd-info|x");
    assert_eq!(info.name, field(&theirs, "JobName"));
    assert_eq!(info.partition, field(&theirs, "Partition"));
    assert_eq!(info.nodes.len(), 2);
    assert_eq!(
        info.batch_host.as_deref(),
        Some(field(&theirs, "BatchHost"))
    );
    assert_eq!(info.time_limit, Some(Duration::from_secs(300)));
    assert_close(
        info.start_time,
        scontrol_time(field(&theirs, "StartTime")),
        "start",
    );
    assert_close(
        info.end_time,
        scontrol_time(field(&theirs, "EndTime")),
        "end",
    );
    assert_eq!(info.num_cpus.to_string(), field(&theirs, "NumCPUs"));
    if saker_slurm::available() {
        // The same job through libslurm: the same answer, but for CPUs per node.
        let libslurm = saker_slurm::job_info(job.0).expect("libslurm's job info");
        assert_eq!(
            JobInfo {
                cpus_per_node: Vec::new(),
                ..libslurm
            },
            info
        );
    }

    cancel(job.0, None).expect("scancel a running job");
    let info = wait_for(job.0, "ended", ended);
    assert_eq!(info.state, "CANCELLED");
    assert!(
        matches!(cancel(job.0, None), Err(SlurmError::JobFinished { job_id }) if job_id == job.0),
        "{:?}",
        cancel(job.0, None)
    );
}

#[test]
fn unknown_job_is_reported_as_such() {
    if !cluster_or_skip() {
        return;
    }
    let job_id = SlurmJobId(999_999_999);
    assert!(matches!(job_info(job_id), Err(SlurmError::UnknownJob { job_id: id }) if id == job_id));
    assert!(
        matches!(cancel(job_id, None), Err(SlurmError::UnknownJob { job_id: id }) if id == job_id)
    );
}

#[test]
fn own_jobs_are_listed_with_their_names_and_states() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("commands-own");
    let first = submit(&request("#!/bin/sh\nsleep 30\n", 1, &scratch.0, "own-1"));
    let second = submit(&BatchRequest {
        dependency: Some(format!("afterany:{}", first.0)),
        ..request("#!/bin/sh\ntrue\n", 1, &scratch.0, "own-2")
    });
    let jobs = user_jobs().expect("squeue --me");
    let listed = |job: &Job| {
        jobs.iter()
            .find(|info| info.job_id == job.0)
            .unwrap_or_else(|| panic!("job {} not listed: {jobs:?}", job.0))
    };
    assert_eq!(listed(&first).name, "saker-cmd-own-1");
    assert!(matches!(
        listed(&first).state.as_str(),
        "PENDING" | "RUNNING"
    ));
    assert_eq!(listed(&second).name, "saker-cmd-own-2");
    assert_eq!(listed(&second).state, "PENDING");
    let dependency = scontrol_job(second.0)["Dependency"].clone();
    assert!(
        dependency.starts_with(&format!("afterany:{}", first.0)),
        "{dependency}"
    );
}

#[test]
fn a_refused_submission_carries_slurms_reason() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("commands-invalid");
    let request = BatchRequest {
        partition: Some("no-such-partition".to_owned()),
        ..request("#!/bin/sh\ntrue\n", 1, &scratch.0, "invalid")
    };
    match submit_batch(&request) {
        Err(SlurmError::Command { command, message }) => {
            assert_eq!(command, "sbatch");
            assert!(message.contains("partition"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A signal (not a cancel) reaches the batch script; the given environment is the
/// job's, and `SBATCH_*` in it are no options.
#[test]
fn signal_and_environment_reach_the_batch_script() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("commands-signal");
    let marker = scratch.0.join("got-term");
    let dump = scratch.0.join("environment");
    let script = format!(
        "#!/bin/sh\ntrap 'echo drained > {marker}; exit 0' TERM\nenv > {dump}.tmp\n\
         mv {dump}.tmp {dump}\nsleep 30 &\nwait\n",
        marker = marker.display(),
        dump = dump.display(),
    );
    let job = submit(&BatchRequest {
        environment: Some(vec![
            "SAKER_TEST_VALUE=a=b c".to_owned(),
            "PATH=/usr/bin:/bin".to_owned(),
            "SBATCH_PARTITION=no-such-partition".to_owned(),
        ]),
        ..request(&script, 1, &scratch.0, "signal")
    });
    let deadline = Instant::now() + WAIT;
    while !dump.exists() {
        assert!(Instant::now() < deadline, "script never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let environment = std::fs::read_to_string(&dump).expect("the job wrote its environment");
    assert!(
        environment
            .lines()
            .any(|line| line == "SAKER_TEST_VALUE=a=b c"),
        "{environment}"
    );
    assert!(!environment.contains("SBATCH_PARTITION"), "{environment}");
    assert!(
        environment
            .lines()
            .any(|line| line.starts_with("SLURM_CONF=")),
        "{environment}"
    );
    cancel(job.0, Some(SIGTERM)).expect("signal a running job");
    let info = wait_for(job.0, "ended", ended);
    assert_eq!(
        info.state, "COMPLETED",
        "the script handled TERM and exited 0"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).expect("the trap ran"),
        "drained\n"
    );
}
