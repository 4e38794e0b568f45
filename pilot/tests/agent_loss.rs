//! Losing an agent mid-run: its work is replayed on the others and every task still
//! has exactly one accepted result.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{agent_pid, assert_one_result_per_task, results, saker, sigkill};

#[test]
fn a_killed_agent_loses_no_task_and_none_is_accepted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    let script = format!("sleep 0.05; echo {{index}} >> {}", log.display());
    let mut run = saker()
        .args([
            "run",
            "--progress",
            "none",
            "--no-sync",
            "--agents",
            "4",
            "--slots",
            "8",
        ])
        .args(["--array", "1-600", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once work is flowing, kill agent 2 outright: no goodbye, tasks mid-flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&log).map_or(0, |l| l.lines().count()) < 100 {
        assert!(Instant::now() < deadline, "no progress before the kill");
        std::thread::sleep(Duration::from_millis(10));
    }
    sigkill(agent_pid(&pilot, 2).expect("agent 2 is running"));

    let status = run.wait().unwrap();
    assert!(status.success(), "the other agents finish the work");
    let records = results(&pilot);
    assert_eq!(records.len(), 600, "one result per task");
    assert_one_result_per_task(&records, 600);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let executed: Vec<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let distinct: BTreeSet<u32> = executed.iter().copied().collect();
    assert_eq!(distinct, (1..=600).collect(), "every task ran");
    assert!(executed.len() >= 600);
    // The attempts that died with the agent are in their tasks' history, with why.
    let replayed: Vec<&serde_json::Value> = records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .collect();
    assert!(!replayed.is_empty(), "the killed agent held work");
    for note in replayed {
        assert_eq!(note["end"], "lost");
        let reason = note["reason"].as_str().unwrap();
        assert!(reason.starts_with("agent 2 on "), "{reason}");
    }
}

/// `--max-replays 0`: an attempt lost with its agent is not run again; its task fails
/// and says why, while the rest of the work finishes on the other agent.
#[test]
fn with_no_replays_allowed_a_lost_attempt_fails_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let marker = dir.path().join("on-agent-1");
    let log = dir.path().join("executions.log");
    // The first task on agent 1 hangs (until the agent is killed); the others finish
    // at once, on the agent started in its place too.
    let script = format!(
        "echo {{index}} >> {log}; if [ \"$SAKER_NODE\" = 1 ] && [ ! -e {marker} ]; then touch {marker}; sleep 60; fi",
        log = log.display(),
        marker = marker.display()
    );
    let mut run = saker()
        .args(["run", "--progress", "none", "--no-sync", "--agents", "2"])
        .args(["--slots", "2", "--max-replays", "0"])
        .args(["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"])
        .args(["--array", "1-300", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("a task on agent 1", Duration::from_secs(30), || {
        marker.exists()
    });
    sigkill(agent_pid(&pilot, 1).expect("agent 1 is running"));

    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(1), "some tasks failed");
    let records = results(&pilot);
    assert_one_result_per_task(&records, 300);
    let failed: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["state"] == "failed").collect();
    assert!(!failed.is_empty());
    for record in &failed {
        let reason = record["reason"].as_str().unwrap_or_default();
        assert!(reason.starts_with("agent 1 on "), "{record}");
        assert!(reason.ends_with("; no replays left"), "{record}");
        assert_eq!(
            record["history"].as_array().unwrap().len(),
            0,
            "not replayed"
        );
    }
    let executed: Vec<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    for record in &failed {
        let index = record["index"].as_u64().unwrap() as u32;
        assert!(
            executed.iter().filter(|&&i| i == index).count() <= 1,
            "task {index} ran again"
        );
    }
}

/// The processes whose parent is `pid` and whose command is `comm`.
fn children_named(pid: u32, comm: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if name.trim() == comm && common::parent_pid(child) == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// A batch system ending an allocation (`scancel`, its time limit) SIGTERMs the
/// processes of the agents' step deepest first, the tasks before their agent (Slurm's
/// `proctrack/linuxproc`). An agent that gets the CPU in between (its `slurmstepd`
/// preempted on a loaded machine) reports its tasks killed by SIGTERM before it is
/// killed too: here the gap is made on purpose, 20 ms. Those tasks were stopped from
/// outside, not failed: they are replayed on the other agent and every task succeeds.
#[test]
fn tasks_sigtermed_just_before_their_agent_are_replayed_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let mut run = saker()
        .args(["run", "--progress", "none", "--no-sync", "--agents", "2"])
        .args(["--slots", "8"])
        .args(["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"])
        .args(["--array", "1-16", "--dir"])
        .arg(&pilot)
        .args(["--", "sleep", "1"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut agent = None;
    let mut tasks = Vec::new();
    common::wait_for("tasks running on agent 1", Duration::from_secs(30), || {
        agent = agent_pid(&pilot, 1);
        tasks = agent.map_or_else(Vec::new, |pid| children_named(pid, "sleep"));
        !tasks.is_empty()
    });
    // (A task that ended meanwhile is simply not signalled.)
    let signal = |pids: &[u32]| {
        std::process::Command::new("kill")
            .arg("-TERM")
            .args(pids.iter().map(u32::to_string))
            .status()
            .unwrap()
            .success()
    };
    signal(&tasks);
    std::thread::sleep(Duration::from_millis(20));
    assert!(signal(&[agent.unwrap()]), "agent 1 is killed");

    let status = run.wait().unwrap();
    let records = results(&pilot);
    let not_succeeded: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(
        status.success() && not_succeeded.is_empty(),
        "every task succeeds; these did not: {not_succeeded:#?}"
    );
    assert_one_result_per_task(&records, 16);
    // Each replayed attempt was lost with its agent (agent 1; or agent 0, declared
    // lost by mistake on a starved machine), or stopped from outside (when agent 1
    // reported it before its own SIGTERM, as it nearly always does here).
    for note in records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
    {
        assert_eq!(note["end"], "lost", "{note}");
        let reason = note["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("agent ") || reason.contains("(SIGTERM) from outside"),
            "{reason}"
        );
    }
}

/// The root supervises the agents it started: one killed with SIGKILL is started
/// again (after a backoff of about a second) and its node takes work again.
#[test]
fn a_killed_local_agent_is_started_again_and_its_node_used_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nodes.log");
    let service = common::Service::start_args(dir.path(), &["--agents", "2", "--slots", "2"]);
    let pilot = service.pilot.clone();
    let first =
        common::wait_until_some("agent 1", Duration::from_secs(30), || agent_pid(&pilot, 1));
    sigkill(first);
    let second = common::wait_until_some("another agent 1", Duration::from_secs(30), || {
        agent_pid(&pilot, 1).filter(|pid| *pid != first)
    });
    assert_ne!(second, first);
    common::wait_for("two agents again", Duration::from_secs(30), || {
        let status = common::run(saker().args(["status", "--dir"]).arg(&pilot));
        String::from_utf8_lossy(&status.stdout).contains("agents    2 ")
    });
    // Work reaches the new agent 1.
    let script = format!("echo $SAKER_NODE >> {}; sleep 0.2", log.display());
    let submitted = common::run(
        saker()
            .args(["submit", "--array", "1-40", "--dir"])
            .arg(&pilot)
            .args(["--", "sh", "-c", &script]),
    );
    assert!(submitted.status.success());
    let waited = common::run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success());
    let nodes: BTreeSet<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(nodes.contains("1"), "node 1 ran tasks again: {nodes:?}");
    drop(service);
}

/// With work queued and no agent connected (here a pilot started with none), `status`
/// says so, and so does `wait` on stderr once it has lasted 5 s, rather than waiting
/// in silence.
#[test]
fn a_pilot_with_work_and_no_agent_says_so_in_status_and_wait() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let service = common::Service::start_args(dir.path(), &["--agents", "0"]);
    let pilot = service.pilot.clone();
    let submitted = common::run(
        saker()
            .args(["submit", "--array", "1-3", "--dir"])
            .arg(&pilot)
            .args(["--", "true"]),
    );
    assert!(submitted.status.success());
    let status = common::run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("agents    0 "), "{status}");
    assert!(
        status.contains("no agent connected for ")
            && status.contains("3 queued tasks wait for one"),
        "{status}"
    );

    let mut waiter = saker()
        .args(["wait", "--dir"])
        .arg(&pilot)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = waiter.stderr.take().unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let warning = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = said
            .recv_timeout(left)
            .expect("wait said nothing of the missing agents");
        if line.starts_with("saker wait: no agent connected for") {
            break line;
        }
    };
    assert!(warning.contains("3 queued tasks wait for one"), "{warning}");
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "wait goes on waiting: {warning}"
    );
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    drop(service);
}
