//! A SIGKILLed agent's running tasks die with it: its reaper kills their process
//! groups as soon as the agent is gone, before the root replays them elsewhere.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{agent_pid, alive, run, saker, wait_for};

struct PilotProcess(std::process::Child);

impl Drop for PilotProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Task processes by node: each attempt writes "node shell-pid background-pid".
fn task_pids(dir: &Path) -> BTreeMap<u32, Vec<u32>> {
    let mut by_node: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "tmp") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let fields: Vec<u32> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        if let [node, shell, background] = fields[..] {
            by_node.entry(node).or_default().extend([shell, background]);
        }
    }
    by_node
}

/// The reaper started by process `parent`.
fn reaper_of(parent: u32) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let is_child = status
            .lines()
            .any(|l| l.strip_prefix("PPid:").map(str::trim) == Some(&parent.to_string()));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if is_child && cmdline.ends_with(b"\0reaper\0") {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_killed_agents_running_tasks_die_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pilot_dir = dir.path().join("pilot");
    let pids = dir.path().join("pids");
    std::fs::create_dir(&pids).unwrap();
    let mut pilot = PilotProcess(
        saker()
            .args([
                "pilot",
                "--no-sync",
                "--agents",
                "2",
                "--slots",
                "4",
                "--dir",
            ])
            .arg(&pilot_dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("two agents", Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&pilot_dir));
        String::from_utf8_lossy(&status.stdout).contains("agents    2")
    });

    // Each task is a shell (the group leader) with a background child; both must die.
    let script = format!(
        "sleep 300 & f={}/$SAKER_ATTEMPT_ID; echo $SAKER_NODE $$ $! > $f.tmp; mv $f.tmp $f; wait",
        pids.display()
    );
    let submitted = run(saker()
        .args(["submit", "--array", "1-8", "--dir"])
        .arg(&pilot_dir)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());
    // Two slots per agent: each runs two tasks (the rest wait as prefetch).
    wait_for("two tasks on each agent", Duration::from_secs(30), || {
        let by_node = task_pids(&pids);
        [0, 1]
            .iter()
            .all(|n| by_node.get(n).is_some_and(|p| p.len() == 4))
    });
    let by_node = task_pids(&pids);
    let victims = by_node[&1].clone();
    let bystanders = by_node[&0].clone();
    assert!(victims.iter().chain(&bystanders).all(|&p| alive(p)));

    let agent = agent_pid(&pilot_dir, 1).expect("agent 1 runs");
    let reaper = reaper_of(agent).expect("agent 1 started its reaper");
    let killed = Command::new("kill")
        .args(["-KILL", &agent.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Well within the heartbeat timeout (5 s): the reaper acts on the agent's death
    // itself, not on the root noticing it.
    wait_for(
        "agent 1's tasks to be killed",
        Duration::from_secs(4),
        || victims.iter().all(|&p| !alive(p)),
    );
    wait_for("agent 1's reaper to exit", Duration::from_secs(4), || {
        !alive(reaper)
    });
    assert!(
        bystanders.iter().all(|&p| alive(p)),
        "agent 0's tasks run on"
    );

    let stopped = run(saker().args(["shutdown", "--dir"]).arg(&pilot_dir));
    assert!(stopped.status.success());
    wait_for("the pilot to stop", Duration::from_secs(30), || {
        pilot.0.try_wait().unwrap().is_some()
    });
    assert!(pilot.0.wait().unwrap().success());
    wait_for(
        "agent 0's tasks to be stopped",
        Duration::from_secs(10),
        || bystanders.iter().all(|&p| !alive(p)),
    );
}
