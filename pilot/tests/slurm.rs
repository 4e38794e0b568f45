//! On a real Slurm cluster (scripts/slurm-cluster/up.sh; CI's test script starts it
//! and exports SLURM_CONF): batch scripts from sbatch-templates/ obtain nodes with
//! `sbatch`, and the pilot spans them.
//!
//! Without a cluster (`SLURM_CONF` unset) these tests report that they did not run and
//! pass, unless `SAKER_REQUIRE_SLURM=1` (set by scripts/test.sh), where they fail.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::slurm::{
    allocated_nodes, cluster, job_fields, saker_bin, sbatch, slurm_agent_on, template,
    wait_for_agents, wait_for_state,
};
use common::{assert_one_result_per_task, results};

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
    assert_one_result_per_task(&records, 10_000);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let hosts: BTreeSet<&str> = records
        .iter()
        .map(|r| r["node"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3, "tasks ran on every node: {hosts:?}");
    let allocated: BTreeSet<String> = allocated_nodes(&job).into_iter().collect();
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

    let status = wait_for_agents(&pilot, 2, &log);
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

/// One line of the executions log: `index node-id node start-ns end-ns`.
struct Execution {
    index: u64,
    node: String,
    start_ns: u128,
}

/// The complete lines of the executions log (one may still be half written).
fn executions(log: &Path) -> Vec<Execution> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() != 5 {
                return None;
            }
            Some(Execution {
                index: fields[0].parse().ok()?,
                node: fields[2].to_string(),
                start_ns: fields[3].parse().ok()?,
            })
        })
        .collect()
}

fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn a_killed_agent_on_one_node_is_replaced_and_no_task_is_lost() {
    if !cluster() {
        return;
    }
    const TASKS: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let executions_log = dir.path().join("executions.log");
    let log = dir.path().join("job.log");
    // Each task logs its index, node id, node and when it started and ended.
    let script = dir.path().join("array.sbatch");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n\
             #SBATCH --exclusive\n\
             set -euo pipefail\n\
             exec \"$SAKER\" run --progress lines --dir \"$PILOT\" \
             --heartbeat-interval 500ms --heartbeat-timeout 2s --array 1-{TASKS} -- \
             sh -c 'start=$(date +%s%N); sleep 0.05; \
             echo {{index}} $SAKER_NODE $SLURMD_NODENAME $start $(date +%s%N) >> \"$EXECUTIONS\"'\n"
        ),
    )
    .unwrap();
    let job = sbatch(
        &script,
        3,
        &[("PILOT", &pilot), ("EXECUTIONS", &executions_log)],
        &log,
    );
    let job_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // Once every node runs tasks, kill the agent of a node other than the root's.
    // (The job may wait for nodes while other tests' jobs hold them.)
    let deadline = Instant::now() + Duration::from_secs(600);
    while job_fields(&job).get("JobState").map(String::as_str) == Some("PENDING") {
        assert!(Instant::now() < deadline, "job {job} never started");
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let nodes: BTreeSet<String> = executions(&executions_log)
            .into_iter()
            .map(|e| e.node)
            .collect();
        if nodes.len() == 3 {
            break;
        }
        let state = job_fields(&job)
            .get("JobState")
            .cloned()
            .unwrap_or_default();
        assert!(
            Instant::now() < deadline && ["RUNNING", "CONFIGURING"].contains(&state.as_str()),
            "tasks never ran on 3 nodes (only {nodes:?}); job {state}; log:\n{}",
            job_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let nodes = allocated_nodes(&job);
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    let batch_host = job_fields(&job)["BatchHost"].clone();
    let victim = nodes
        .iter()
        .rev()
        .find(|n| **n != batch_host)
        .unwrap()
        .clone();
    let survivors: BTreeSet<String> = nodes.iter().filter(|n| **n != victim).cloned().collect();
    let (pid, node_id) = slurm_agent_on(&pilot, &victim)
        .unwrap_or_else(|| panic!("no agent of {} on {victim}", pilot.display()));
    let killed_at = unix_ns();
    let done_before = executions(&executions_log).len() as u64;
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(
        done_before < TASKS / 2,
        "the kill came late: {done_before} tasks had run"
    );
    // The root starts another agent on the node, in a step of its own, after a
    // backoff (the node lives).
    let deadline = Instant::now() + Duration::from_secs(60);
    let replaced_at = loop {
        match slurm_agent_on(&pilot, &victim) {
            Some((other, _)) if other != pid => break unix_ns(),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no agent was started again on {victim}; job log:\n{}",
            job_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    let state = wait_for_state(&job, Duration::from_secs(300), &log);
    assert_eq!(state, "COMPLETED", "job log:\n{}", job_log());

    let records = results(&pilot);
    assert_eq!(records.len() as u64, TASKS, "one result per task");
    assert_one_result_per_task(&records, TASKS as usize);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    // The attempts that died with the agent are in their tasks' history.
    let lost: Vec<&serde_json::Value> = records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .collect();
    assert!(!lost.is_empty(), "the killed agent held work");
    for note in lost {
        assert_eq!(note["end"], "lost", "{note}");
        let reason = note["reason"].as_str().unwrap();
        assert!(
            reason.starts_with(&format!("agent {node_id} on {victim}")),
            "{reason}"
        );
    }

    let executed = executions(&executions_log);
    let indices: BTreeSet<u64> = executed.iter().map(|e| e.index).collect();
    assert_eq!(indices, (1..=TASKS).collect(), "every task ran");
    // Between the kill and the new agent only the other nodes start work (a task the
    // old agent had started may log a little later: its process group outlives it);
    // after it, the node is used again.
    let grace = Duration::from_secs(1).as_nanos();
    let late: Vec<&Execution> = executed
        .iter()
        .filter(|e| e.node == victim && e.start_ns > killed_at + grace && e.start_ns < replaced_at)
        .collect();
    assert!(
        late.is_empty(),
        "{} tasks started on {victim} while it had no agent, e.g. index {}",
        late.len(),
        late[0].index
    );
    let again = executed
        .iter()
        .filter(|e| e.node == victim && e.start_ns > replaced_at)
        .count();
    assert!(
        again > 0,
        "{victim} took no work after its agent was replaced"
    );
    let between: BTreeSet<&String> = executed
        .iter()
        .filter(|e| e.start_ns > killed_at + grace && e.start_ns < replaced_at)
        .map(|e| &e.node)
        .collect();
    assert!(
        between.iter().all(|node| survivors.contains(*node)),
        "the other nodes took over: {between:?}"
    );
    let after = executed
        .iter()
        .filter(|e| e.start_ns > killed_at + grace)
        .count();
    assert!(
        after as u64 >= TASKS / 2,
        "only {after} tasks ran after the kill"
    );
}
