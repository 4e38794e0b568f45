//! Standby roots inside a Slurm allocation (scripts/slurm-cluster/up.sh): each
//! standby is a one-task step on another node, the root a child of the batch
//! script's `saker pilot`, which holds the allocation when the root dies. Killed or
//! silent, the root is replaced and the pilot finishes every task.
//!
//! Without a cluster these tests report that they did not run and pass, unless
//! `SAKER_REQUIRE_SLURM=1` (set by scripts/test.sh).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::slurm::{cluster, sbatch, template, wait_for_state};
use common::{alive, assert_one_result_per_task, results, run, saker, wait_for};

const TASKS: u32 = 600;

fn status(pilot: &Path) -> String {
    let output = saker()
        .args(["status", "--dir"])
        .arg(pilot)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The number after `word` in a status text ("succeeded 12").
fn count(status: &str, word: &str) -> u32 {
    let mut words = status.split_whitespace();
    words.find(|w| *w == word);
    words.next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// The root holding the pilot's lock: `PID HOST NODE`.
fn root(pilot: &Path) -> (u32, String) {
    let holder = std::fs::read_to_string(pilot.join("root.lock")).unwrap();
    let mut words = holder.split_whitespace();
    let pid = words.next().unwrap().parse().unwrap();
    let node = words.nth(1).unwrap_or_default().to_owned();
    (pid, node)
}

/// Submits `TASKS` tasks, each appending `index node` to `ran` when it ends.
fn submit(pilot: &Path, ran: &Path) {
    let line = format!(
        "sleep 0.05; echo {{index}} $SLURMD_NODENAME >> '{}'",
        ran.display()
    );
    let output = run(saker()
        .args(["submit", "--array", &format!("1-{TASKS}"), "--dir"])
        .arg(pilot)
        .args(["--", "sh", "-c", &line]));
    assert!(output.status.success());
}

/// Which nodes ran each index.
fn ran_on(ran: &Path) -> BTreeMap<u32, Vec<String>> {
    let mut runs: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(ran).unwrap_or_default().lines() {
        let mut fields = line.split_whitespace();
        let (Some(index), Some(node)) = (fields.next(), fields.next()) else {
            continue;
        };
        if let Ok(index) = index.parse() {
            runs.entry(index).or_default().push(node.to_owned());
        }
    }
    runs
}

/// Waits for every task, checks each ran and has one accepted result, shuts the
/// pilot down and checks the job completed with nothing left behind.
fn finish(pilot: &Path, ran: &Path, job: &str, log: &Path) {
    let wait = run(saker().args(["wait", "--dir"]).arg(pilot));
    let job_log = || std::fs::read_to_string(log).unwrap_or_default();
    assert!(wait.status.success(), "job log:\n{}", job_log());
    assert!(
        String::from_utf8_lossy(&wait.stdout).contains(&format!("succeeded {TASKS} failed 0")),
        "{}",
        String::from_utf8_lossy(&wait.stdout)
    );
    assert_one_result_per_task(&results(pilot), TASKS as usize);
    let runs = ran_on(ran);
    assert_eq!(
        runs.keys().copied().collect::<BTreeSet<u32>>(),
        (1..=TASKS).collect(),
        "every task ran"
    );
    // What ran when the root died was adopted; what had ended was held by its agent
    // until a root wrote it.
    let twice: Vec<&u32> = runs
        .iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(index, _)| index)
        .collect();
    assert!(twice.is_empty(), "tasks that ran twice: {twice:?}");
    let nodes: BTreeSet<&String> = runs.values().flatten().collect();
    assert_eq!(nodes.len(), 3, "tasks ran on {nodes:?}");

    let shutdown = run(saker().args(["shutdown", "--dir"]).arg(pilot));
    assert!(shutdown.status.success());
    let state = wait_for_state(job, Duration::from_secs(60), log);
    assert_eq!(state, "COMPLETED", "job log:\n{}", job_log());
    // The job's end took every step with it; no root or standby of this pilot is left.
    let pilot_text = pilot.display().to_string();
    wait_for("no root or standby left", Duration::from_secs(30), || {
        !std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(" pilot --dir ") && cmdline.contains(&pilot_text)
        })
    });
}

/// The service template with `STANDBY=1` keeps one standby on another node; the root is SIGKILLed
/// mid-run; the standby takes over at once, the batch script holds the allocation,
/// and the pilot finishes every task on all three nodes.
#[test]
fn the_service_templates_standby_takes_over_from_a_killed_root() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let ran = dir.path().join("ran");
    let log = dir.path().join("job.log");
    let standby = Path::new("1");
    let job = sbatch(
        &template("service.sbatch"),
        3,
        &[("PILOT", &pilot), ("STANDBY", standby)],
        &log,
    );
    wait_for("3 agents and a standby", Duration::from_secs(120), || {
        let status = status(&pilot);
        status.contains("agents    3") && status.contains("standbys  1:")
    });
    let (first, first_node) = root(&pilot);
    let status_before = status(&pilot);
    assert!(
        !status_before.contains(&format!("standbys  1: {first_node} ")),
        "the standby is on another node than the root's ({first_node}):\n{status_before}"
    );

    submit(&pilot, &ran);
    wait_for("a quarter of the tasks", Duration::from_secs(120), || {
        count(&status(&pilot), "succeeded") >= TASKS / 4
    });
    common::sigkill(first);
    wait_for("a standby to take over", Duration::from_secs(30), || {
        status(&pilot).contains("a standby that took over")
    });
    let (second, second_node) = root(&pilot);
    assert_ne!(second, first);
    assert_ne!(second_node, first_node, "the standby ran on another node");

    finish(&pilot, &ran, &job, &log);
    let job_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        job_log.contains("holds the allocation until the pilot stops"),
        "{job_log}"
    );
}

/// A root that hangs (SIGSTOP) keeps its lock: the standby on another node hears
/// nothing for three heartbeat timeouts and fences it through a step on its node,
/// then takes over.
#[test]
fn a_silent_root_is_fenced_on_its_node_and_replaced() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let ran = dir.path().join("ran");
    let log = dir.path().join("job.log");
    let script = dir.path().join("standby.sbatch");
    std::fs::write(
        &script,
        "#!/bin/bash\n\
         #SBATCH --exclusive\n\
         set -euo pipefail\n\
         exec \"$SAKER\" pilot --dir \"$PILOT\" --standby 1 \
         --heartbeat-interval 250ms --heartbeat-timeout 1s\n",
    )
    .unwrap();
    let job = sbatch(&script, 3, &[("PILOT", &pilot)], &log);
    wait_for("3 agents and a standby", Duration::from_secs(120), || {
        let status = status(&pilot);
        status.contains("agents    3") && status.contains("standbys  1:")
    });
    let (first, first_node) = root(&pilot);
    submit(&pilot, &ran);
    wait_for("a quarter of the tasks", Duration::from_secs(120), || {
        count(&status(&pilot), "succeeded") >= TASKS / 4
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    wait_for("the silent root fenced", Duration::from_secs(60), || {
        !alive(first)
    });
    wait_for("a standby to take over", Duration::from_secs(30), || {
        status(&pilot).contains("a standby that took over")
    });
    let (_, second_node) = root(&pilot);
    assert_ne!(second_node, first_node, "the standby ran on another node");
    // The notice goes to the standby's stderr, which its step forwards to the log
    // after the fence itself may be done: wait for it rather than read once.
    let standby_logs = || -> String {
        (0..2)
            .map(|n| {
                std::fs::read_to_string(pilot.join(format!("logs/standby-{n}.log")))
                    .unwrap_or_default()
            })
            .collect()
    };
    let said = format!("pid {first} on {first_node}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !standby_logs().contains(&said) {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby says it fenced the root on its node:\n{}",
            standby_logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    finish(&pilot, &ran, &job, &log);
}

/// The root is SIGKILLed while tasks run on all three nodes: the standby adopts them
/// from their agents, and each task starts once (counted by the tasks themselves).
#[test]
fn a_standby_in_an_allocation_adopts_running_tasks_and_none_starts_twice() {
    if !cluster() {
        return;
    }
    const LONG: u32 = 24;
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let started = dir.path().join("started");
    let log = dir.path().join("job.log");
    let job = sbatch(
        &template("service.sbatch"),
        3,
        &[("PILOT", &pilot), ("STANDBY", Path::new("1"))],
        &log,
    );
    wait_for("3 agents and a standby", Duration::from_secs(120), || {
        let status = status(&pilot);
        status.contains("agents    3") && status.contains("standbys  1:")
    });
    // 12 slots: twelve run, twelve wait in the agents' queues.
    let line = format!(
        "echo {{index}} $SLURMD_NODENAME >> '{}'; sleep 6",
        started.display()
    );
    let output = run(saker()
        .args(["submit", "--array", &format!("1-{LONG}"), "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &line]));
    assert!(output.status.success());
    wait_for("twelve tasks to start", Duration::from_secs(60), || {
        ran_on(&started).len() == 12
    });
    let (first, _) = root(&pilot);
    common::sigkill(first);
    wait_for("a standby to take over", Duration::from_secs(30), || {
        status(&pilot).contains("a standby that took over")
    });
    let wait = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(wait.status.success(), "{wait:?}");
    assert_one_result_per_task(&results(&pilot), LONG as usize);
    let runs = ran_on(&started);
    assert_eq!(runs.len(), LONG as usize, "{runs:?}");
    assert!(
        runs.values().all(|nodes| nodes.len() == 1),
        "each task started once: {runs:?}"
    );
    let after = status(&pilot);
    assert!(after.contains("adopted   12 running"), "{after}");
    let shutdown = run(saker().args(["shutdown", "--dir"]).arg(&pilot));
    assert!(shutdown.status.success());
    assert_eq!(
        wait_for_state(&job, Duration::from_secs(60), &log),
        "COMPLETED"
    );
}
