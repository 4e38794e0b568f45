//! saker-slurm against a real Slurm cluster, checked against `scontrol`.
//!
//! Needs the project's cluster: `bash scripts/slurm-cluster/up.sh` then
//! `source .slurm-cluster/env.sh` (exports `SLURM_CONF`); `scripts/test.sh` does both.
//! * `SLURM_CONF` unset: each cluster test prints
//!   "skipped: no Slurm cluster (start scripts/slurm-cluster/up.sh)" and passes,
//!   unless `SAKER_REQUIRE_SLURM=1`, which makes it fail instead (CI sets it, so a
//!   broken cluster set-up cannot pass as green).
//! * Tests that need only libslurm (hostlists, the missing-configuration guard) skip the
//!   same way when this build has no libslurm.
//!
//! Jobs are real: they hold nodes, so each is cancelled on drop (even when an
//! assertion fails), and waits poll the controller with a deadline.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use saker_slurm::{
    BatchRequest, JobInfo, SlurmError, SlurmJobId, cancel, expand_hostlist,
    expand_hostlist_fallback, job_info, submit_batch, user_jobs,
};

mod common;

use common::{
    Job, Scratch, WAIT, assert_close, ended, field, required, run, scontrol_job, scontrol_time,
};

/// Whether this build links libslurm; fails instead of skipping under
/// `SAKER_REQUIRE_SLURM=1`.
fn libslurm_or_skip() -> bool {
    if saker_slurm::available() {
        return true;
    }
    assert!(
        !required(),
        "SAKER_REQUIRE_SLURM=1 but saker-slurm was built without libslurm \
         (install libslurm-dev and libclang-dev, then `touch bindings/slurm-sys/build.rs`)"
    );
    eprintln!("skipped: this build has no libslurm (install libslurm-dev and libclang-dev)");
    false
}

/// Whether a cluster is configured and this build links libslurm.
fn cluster_or_skip() -> bool {
    common::cluster_configured_or_skip() && libslurm_or_skip()
}

fn scontrol_hostnames(expression: &str) -> Vec<String> {
    run("scontrol", &["show", "hostnames", expression])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// scontrol's `TimeLimit` (`UNLIMITED`, `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`).
fn scontrol_duration(text: &str) -> Option<Duration> {
    if text == "UNLIMITED" {
        return None;
    }
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().expect("days"), clock),
        None => (0, text),
    };
    let seconds = clock
        .split(':')
        .map(|part| part.parse::<u64>().expect("clock field"))
        .fold(0, |total, part| total * 60 + part);
    Some(Duration::from_secs(days * 86_400 + seconds))
}

fn request(script: &str, nodes: u32, directory: &Path, name: &str) -> BatchRequest {
    common::request("saker-test", script, nodes, directory, name)
}

fn submit(request: &BatchRequest) -> Job {
    let id = submit_batch(request).unwrap_or_else(|error| panic!("submit failed: {error:?}"));
    Job(id, |id| {
        let _ = cancel(id, None);
    })
}

fn wait_for(job_id: SlurmJobId, what: &str, done: impl Fn(&JobInfo) -> bool) -> JobInfo {
    common::wait_until(job_info, job_id, what, done)
}

// ------------------------------------------------------------------ hostlists

/// Expressions with libslurm's own answer (`scontrol show hostnames` uses libslurm).
const EXPRESSIONS: &[&str] = &[
    "n[1-4]",
    "n[01-10,12]",
    "a1,b[2-3]",
    "rack[1-2]-node[1-2]",
    "n[8-10]",
    "n[1-2][3-4][5-6]",
    "n[1-2]x[3-4]y[5]",
    "n3,n1,n3",
    "n[1-3] m[5,7]",
    "[1-3]",
    "n[98-101],login1",
];

#[test]
fn hostlist_expansion_equals_scontrol() {
    if !cluster_or_skip() {
        return;
    }
    for expression in EXPRESSIONS {
        let expected = scontrol_hostnames(expression);
        assert_eq!(
            expand_hostlist(expression).unwrap(),
            expected,
            "{expression:?}"
        );
        assert_eq!(
            saker_slurm::hostlist::expand(expression).unwrap(),
            expected,
            "{expression:?}"
        );
    }
}

/// Every combination of a few prefixes, ranges, separators and suffix groups: the
/// fallback must give exactly libslurm's hosts, or fail where libslurm fails, except
/// on the two kinds of malformed input where libslurm returns something anyway.
#[test]
fn fallback_agrees_with_libslurm() {
    if !libslurm_or_skip() {
        return;
    }
    let prefixes = ["n", "", "rack1-node", "c.0", "n0"];
    let groups = [
        "",
        "[1]",
        "[1-3]",
        "[01-10]",
        "[8-10]",
        "[05,7]",
        "[1-2,4-5]",
        "[098-102]",
        "[0-0]",
        "[3-1]",
        "[]",
        "[1-]",
        "[x]",
        "[1,,2]",
    ];
    let tails = ["", "-ib", "x[1-2]", ".a[3,5]b[0-1]", "]", "[", "[1-2"];
    let (mut agreed, mut guessed, mut dropped) = (0, 0, 0);
    for prefix in prefixes {
        for group in groups {
            for tail in tails {
                for second in ["", ",m[2-3]", " z"] {
                    let first = format!("{prefix}{group}{tail}");
                    let expression = format!("{first}{second}");
                    let ours = expand_hostlist_fallback(&expression);
                    let theirs = expand_hostlist(&expression);
                    match (&ours, &theirs) {
                        (Ok(ours), Ok(theirs)) if ours == theirs => agreed += 1,
                        (Err(_), Err(_)) => agreed += 1,
                        // libslurm guesses: `[1-]` is `[1]`, unpaired brackets are text.
                        (Err(_), Ok(_)) if guessed_by_libslurm(&expression) => guessed += 1,
                        // libslurm bug: a bad range in the third-from-last (or earlier)
                        // bracket group of an element silently drops that element.
                        (Err(SlurmError::InvalidHostlist { .. }), Ok(theirs))
                            if first.matches('[').count() >= 3
                                && *theirs == expand_hostlist_fallback(second).unwrap() =>
                        {
                            dropped += 1
                        }
                        _ => panic!("{expression:?}: fallback {ours:?}, libslurm {theirs:?}"),
                    }
                }
            }
        }
    }
    assert_eq!(agreed + guessed + dropped, 5 * 14 * 7 * 3);
    assert!(
        agreed > 900 && guessed > 0 && dropped > 0,
        "{agreed} {guessed} {dropped}"
    );
}

/// Malformed input on which libslurm returns hosts anyway: a range with an empty end
/// (`[1-]`), or brackets that do not pair up.
fn guessed_by_libslurm(expression: &str) -> bool {
    let mut depth = 0_i32;
    for byte in expression.bytes() {
        match byte {
            b'[' => depth += 1,
            b']' => depth -= 1,
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return true;
        }
    }
    depth != 0 || expression.contains("-]")
}

#[test]
fn libslurm_rejects_what_the_fallback_rejects() {
    if !libslurm_or_skip() {
        return;
    }
    for expression in [
        "n[3-1]",
        "n[]",
        "n[1-2]-ib",
        "a[1-2]b[3-4]c",
        "n[1-65537]",
        "n[1,,2]",
    ] {
        assert!(
            matches!(
                expand_hostlist(expression),
                Err(SlurmError::HostlistRejected { .. })
            ),
            "{expression:?}"
        );
        assert!(
            matches!(
                expand_hostlist_fallback(expression),
                Err(SlurmError::InvalidHostlist { .. })
            ),
            "{expression:?}"
        );
    }
}

// --------------------------------------------------- configuration guard

/// libslurm ends the process (fatal) when it finds no configuration; we must return
/// NoConfig instead. Runs this test binary again without SLURM_CONF to see it survive.
#[test]
fn missing_configuration_is_an_error_not_an_exit() {
    if !libslurm_or_skip() {
        return;
    }
    if std::env::var_os("SAKER_SLURM_TEST_NO_CONFIG").is_some() {
        // The child: no configuration anywhere.
        assert!(matches!(job_info(SlurmJobId(1)), Err(SlurmError::NoConfig)));
        assert!(matches!(
            cancel(SlurmJobId(1), None),
            Err(SlurmError::NoConfig)
        ));
        let request = BatchRequest::new("#!/bin/sh\ntrue\n", 1);
        assert!(matches!(submit_batch(&request), Err(SlurmError::NoConfig)));
        println!("child survived");
        return;
    }
    if ["/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf"]
        .iter()
        .any(|path| Path::new(path).exists())
    {
        eprintln!("skipped: this machine has a default Slurm configuration");
        return;
    }
    let output = Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "missing_configuration_is_an_error_not_an_exit",
            "--nocapture",
        ])
        .env_remove("SLURM_CONF")
        .env_remove("SLURM_CONF_SERVER")
        .env("SAKER_SLURM_TEST_NO_CONFIG", "1")
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("child survived"),
        "child: {:?}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

// ------------------------------------------------------------------ jobs

#[test]
fn submitted_job_matches_scontrol_then_cancels() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("job");
    let job = submit(&request("#!/bin/sh\nsleep 30\n", 2, &scratch.0, "info"));
    let info = wait_for(job.0, "running", |info| info.state == "RUNNING");
    let theirs = scontrol_job(job.0);

    assert_eq!(info.job_id, job.0);
    assert_eq!(info.name, field(&theirs, "JobName"));
    assert_eq!(info.partition, field(&theirs, "Partition"));
    assert_eq!(info.state, field(&theirs, "JobState"));
    assert_eq!(info.nodes.len(), 2);
    assert_eq!(info.nodes, scontrol_hostnames(field(&theirs, "NodeList")));
    assert_eq!(
        info.batch_host.as_deref(),
        Some(field(&theirs, "BatchHost"))
    );
    assert_eq!(info.batch_host.as_ref(), info.nodes.first());
    assert_eq!(info.time_limit, Some(Duration::from_secs(300)));
    assert_eq!(
        info.time_limit,
        scontrol_duration(field(&theirs, "TimeLimit"))
    );
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
    assert_eq!(
        info.end_time
            .zip(info.start_time)
            .map(|(end, start)| end.duration_since(start).ok()),
        Some(Some(Duration::from_secs(300))),
        "end = start + time limit"
    );
    assert_eq!(info.num_cpus.to_string(), field(&theirs, "NumCPUs"));
    assert_eq!(info.cpus_per_node.len(), 2, "{info:?}");
    assert_eq!(info.cpus_per_node.iter().sum::<u32>(), info.num_cpus);

    cancel(job.0, None).expect("cancel a running job");
    let deadline = Instant::now() + WAIT;
    while field(&scontrol_job(job.0), "JobState") != "CANCELLED" {
        assert!(
            Instant::now() < deadline,
            "not CANCELLED: {:?}",
            scontrol_job(job.0)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let info = wait_for(job.0, "ended", ended);
    assert_eq!(info.state, "CANCELLED");
    assert!(matches!(
        cancel(job.0, None),
        Err(SlurmError::JobFinished { job_id }) if job_id == job.0
    ));
}

#[test]
fn unknown_job_is_reported_as_such() {
    if !cluster_or_skip() {
        return;
    }
    // Far above Slurm's default MaxJobId (67,043,328): never a real job here.
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
    let scratch = Scratch::new("own");
    let first = submit(&request("#!/bin/sh\nsleep 30\n", 1, &scratch.0, "own-1"));
    let second = submit(&BatchRequest {
        dependency: Some(format!("afterany:{}", first.0)),
        ..request("#!/bin/sh\ntrue\n", 1, &scratch.0, "own-2")
    });
    let jobs = user_jobs().expect("this user's jobs");
    for (job, name) in [(&first, "saker-test-own-1"), (&second, "saker-test-own-2")] {
        let listed = jobs
            .iter()
            .find(|info| info.job_id == job.0)
            .unwrap_or_else(|| panic!("job {} not listed: {jobs:?}", job.0));
        assert_eq!(listed.name, name);
        assert!(
            matches!(listed.state.as_str(), "PENDING" | "RUNNING"),
            "{listed:?}"
        );
    }
    // The second waits for the first (30 s): PENDING for both views.
    assert_eq!(
        jobs.iter()
            .find(|info| info.job_id == second.0)
            .unwrap()
            .state,
        "PENDING"
    );
    assert_eq!(field(&scontrol_job(second.0), "JobState"), "PENDING");
}

#[test]
fn dependency_reaches_the_controller() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("dependency");
    let first = submit(&request("#!/bin/sh\nsleep 30\n", 1, &scratch.0, "first"));
    let second = submit(&BatchRequest {
        dependency: Some(format!("afterany:{}", first.0)),
        ..request("#!/bin/sh\ntrue\n", 1, &scratch.0, "second")
    });
    let theirs = scontrol_job(second.0);
    let dependency = field(&theirs, "Dependency");
    assert!(
        dependency.starts_with(&format!("afterany:{}", first.0)),
        "Dependency={dependency}"
    );
    assert_eq!(field(&theirs, "JobState"), "PENDING");
    assert_eq!(job_info(second.0).expect("pending job").state, "PENDING");
}

#[test]
fn invalid_submission_carries_slurms_reason() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("invalid");
    let request = BatchRequest {
        partition: Some("no-such-partition".to_owned()),
        ..request("#!/bin/sh\ntrue\n", 1, &scratch.0, "invalid")
    };
    match submit_batch(&request) {
        Err(SlurmError::Call { call, source }) => {
            assert_eq!(call, "slurm_submit_batch_job");
            assert!(source.code > 0 && !source.message.is_empty(), "{source:?}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A signal (not a cancel) reaches the batch script, which may then drain and exit.
#[test]
fn signal_reaches_the_batch_script() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("signal");
    let marker = scratch.0.join("got-term");
    let script = format!(
        "#!/bin/sh\ntrap 'echo drained > {}; exit 0' TERM\necho started > {}.started\n\
         sleep 30 &\nwait\n",
        marker.display(),
        marker.display()
    );
    let job = submit(&request(&script, 1, &scratch.0, "signal"));
    let started = marker.with_extension("started");
    let deadline = Instant::now() + WAIT;
    while !started.exists() {
        assert!(Instant::now() < deadline, "script never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    cancel(job.0, Some(libc::SIGTERM)).expect("signal a running job");
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

/// `JobInfo::from_env` on the environment Slurm really gives a batch script agrees with
/// what the controller says about the job.
#[test]
fn environment_of_a_real_job_matches_job_info() {
    if !cluster_or_skip() {
        return;
    }
    let scratch = Scratch::new("environment");
    let dump = scratch.0.join("environment");
    let script = format!("#!/bin/sh\nenv > {}.tmp\nmv {0}.tmp {0}\n", dump.display());
    let job = submit(&BatchRequest {
        ntasks_per_node: Some(2),
        ..request(&script, 3, &scratch.0, "environment")
    });
    let info = wait_for(job.0, "ended", ended);
    assert_eq!(info.state, "COMPLETED");
    let environment: HashMap<String, String> = std::fs::read_to_string(&dump)
        .expect("the job wrote its environment")
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
    let from_env = JobInfo::from_env(|name| environment.get(name).cloned()).expect("from_env");
    assert_eq!(from_env.job_id, job.0);
    assert_eq!(from_env.name, info.name);
    assert_eq!(from_env.partition, info.partition);
    assert_eq!(from_env.nodes, info.nodes);
    assert_eq!(from_env.nodes.len(), 3);
    assert_eq!(from_env.cpus_per_node, info.cpus_per_node);
    assert_eq!(from_env.num_cpus, info.num_cpus);
}
