//! On a real Slurm cluster (scripts/slurm-cluster/up.sh; CI's test script starts it
//! and exports SLURM_CONF): batch scripts from sbatch-templates/ obtain nodes with
//! `sbatch`, and the pilot spans them.
//!
//! Without a cluster (`SLURM_CONF` unset) these tests report that they did not run and
//! pass, unless `SAKER_REQUIRE_SLURM=1` (set by scripts/test.sh), where they fail.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::results;

fn cluster() -> bool {
    if std::env::var_os("SLURM_CONF").is_some() {
        return true;
    }
    assert!(
        std::env::var("SAKER_REQUIRE_SLURM").as_deref() != Ok("1"),
        "SAKER_REQUIRE_SLURM=1 but SLURM_CONF is unset: start scripts/slurm-cluster/up.sh"
    );
    eprintln!("skipped: no Slurm cluster (start scripts/slurm-cluster/up.sh)");
    false
}

fn saker_bin() -> PathBuf {
    std::env::var_os("SAKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_saker")))
}

fn template(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sbatch-templates")
        .join(name)
}

/// Submits a template; returns the job id.
fn sbatch(template: &Path, nodes: u32, env: &[(&str, &Path)], log: &Path) -> String {
    let mut command = Command::new("sbatch");
    command
        .arg("--parsable")
        .arg(format!("--nodes={nodes}"))
        .arg(format!("--output={}", log.display()))
        .arg(template)
        .env("SAKER", saker_bin());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("sbatch runs");
    assert!(
        output.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

/// `scontrol show job` fields of a job.
fn job_fields(job: &str) -> BTreeMap<String, String> {
    let output = Command::new("scontrol")
        .args(["show", "job", "--oneliner", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn wait_for_state(job: &str, timeout: Duration, log: &Path) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let state = job_fields(job).get("JobState").cloned().unwrap_or_default();
        if [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
        ]
        .contains(&state.as_str())
        {
            return state;
        }
        if Instant::now() > deadline {
            let _ = Command::new("scancel").arg(job).status();
            panic!(
                "job {job} still {state} after {timeout:?}; its output:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_mtc_template_spans_three_nodes_and_runs_every_task_once() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.txt");
    let lines: String = (1..=10_000)
        .map(|i| format!("sh -c 'echo {i} $SLURMD_NODENAME'\n"))
        .collect();
    std::fs::write(&tasks, lines).unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    let job = sbatch(
        &template("mtc.sbatch"),
        3,
        &[("TASKS", &tasks), ("PILOT", &pilot)],
        &log,
    );
    let state = wait_for_state(&job, Duration::from_secs(600), &log);
    assert_eq!(
        state,
        "COMPLETED",
        "job log:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );

    // From outside the allocation, as a user on the login node would.
    let records = results(&pilot);
    assert_eq!(records.len(), 10_000);
    let tasks: BTreeSet<u64> = records
        .iter()
        .map(|r| r["task"].as_u64().unwrap())
        .collect();
    assert_eq!(tasks.len(), 10_000, "exactly one result per task");
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let hosts: BTreeSet<&str> = records
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3, "tasks ran on every node: {hosts:?}");
    let allocated = job_fields(&job)["NodeList"].clone();
    let expanded = Command::new("scontrol")
        .args(["show", "hostnames", &allocated])
        .output()
        .unwrap();
    let allocated: BTreeSet<String> = String::from_utf8_lossy(&expanded.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        hosts.iter().map(|h| h.to_string()).collect::<BTreeSet<_>>(),
        allocated
    );
    // Each task really ran where its result says: it printed the node Slurm gave it.
    for record in &records {
        let printed = record["stdout"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        assert_eq!(printed, record["node"].as_str().unwrap());
    }
}

fn saker() -> Command {
    Command::new(saker_bin())
}

#[test]
fn the_service_template_takes_work_from_outside_until_shut_down() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    let job = sbatch(&template("service.sbatch"), 2, &[("PILOT", &pilot)], &log);

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let status = saker()
            .args(["status", "--dir"])
            .arg(&pilot)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&status.stdout).to_string();
        if text.contains("agents    2") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the service pilot never had 2 agents; job log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.contains(&format!("slurm     job {job} on 2 nodes")),
        "{status}"
    );

    let submit = saker()
        .args(["submit", "--wait", "--array", "1-200", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", "echo {index}"])
        .output()
        .unwrap();
    assert!(
        submit.status.success(),
        "{}",
        String::from_utf8_lossy(&submit.stderr)
    );
    assert!(String::from_utf8_lossy(&submit.stdout).contains("succeeded 200 failed 0"));

    let mut follow = saker()
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(&pilot)
        .output()
        .unwrap();
    assert!(follow.status.success());
    follow.stdout.retain(|b| *b != b'\r');
    assert_eq!(String::from_utf8_lossy(&follow.stdout).lines().count(), 200);

    let shutdown = saker()
        .args(["shutdown", "--dir"])
        .arg(&pilot)
        .output()
        .unwrap();
    assert!(shutdown.status.success());
    let state = wait_for_state(&job, Duration::from_secs(60), &log);
    assert_eq!(
        state,
        "COMPLETED",
        "job log:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

#[test]
fn the_campaign_template_leaves_what_cannot_fit_to_its_continuation() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Each task declares a 2-minute limit; the first allocation has 1 minute.
    let tasks = dir.path().join("tasks.txt");
    let lines: String = (1..=20)
        .map(|i| format!("{{\"argv\": [\"sh\", \"-c\", \"echo {i}\"], \"time_limit\": \"2m\"}}\n"))
        .collect();
    std::fs::write(&tasks, lines).unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("first.log");
    let started = Instant::now();
    let mut command = Command::new("sbatch");
    command
        .args(["--parsable", "--nodes=2", "--time=1"])
        .arg(format!("--output={}", log.display()))
        .arg(template("campaign.sbatch"))
        .env("SAKER", saker_bin())
        .env("TASKS", &tasks)
        .env("PILOT", &pilot)
        .env("MARGIN", "10s")
        .env("CHAIN_TIME", "5m")
        .env_remove("SAKER_CHAIN_INDEX");
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = String::from_utf8_lossy(&output.stdout).trim().to_string();

    let state = wait_for_state(&first, Duration::from_secs(120), &log);
    let first_log = std::fs::read_to_string(&log).unwrap();
    assert_eq!(state, "COMPLETED", "{first_log}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "it left well before its limit"
    );
    assert!(first_log.contains("20 tasks did not finish"), "{first_log}");
    // One job per task-file line.
    assert!(
        first_log.contains("never started: job 1: 1, job 2: 1"),
        "{first_log}"
    );
    assert!(first_log.contains("… 15 more jobs"), "{first_log}");
    let next = first_log
        .lines()
        .find_map(|l| l.strip_prefix("saker: submitted continuation job "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no continuation submitted:\n{first_log}"))
        .to_string();

    let next_log = pilot.join("logs").join(format!("continuation-{next}.out"));
    let state = wait_for_state(&next, Duration::from_secs(180), &next_log);
    let next_text = std::fs::read_to_string(&next_log).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{next_text}");
    assert!(
        next_text.contains("resumed 20 jobs (20 tasks, 0 already finished)"),
        "{next_text}"
    );
    let records = results(&pilot);
    assert_eq!(records.len(), 20);
    assert!(
        records
            .iter()
            .all(|r| r["state"] == "succeeded" && r["attempts"] == 1)
    );
}
