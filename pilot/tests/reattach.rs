//! An interior agent dies: its children notice by heartbeat, reattach to the nearest
//! live ancestor and keep working; a restarted agent rejoins under its old id. Every
//! task still has exactly one accepted result.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{
    agent_pid, assert_one_result_per_task, executions, results, saker, sigkill, wait_for,
};

/// Fan-out 2 over 7 agents: agent 0 (under the root) has children 2 and 3, and 2 has
/// child 6. Killing 0 leaves 2, 3 and 6 cut off; 2 and 3 reattach to the root and 6
/// follows 2. Agent 1 is then killed and started again by hand: it rejoins.
#[test]
fn orphans_reattach_and_a_restarted_agent_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    let script = format!(
        "sleep 0.03; echo {{index}} $SAKER_NODE >> {}",
        log.display()
    );
    let heartbeat = ["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"];
    let mut run: Child = saker()
        .args(["run", "--progress", "none", "--no-sync"])
        .args(["--agents", "7", "--slots", "7", "--fanout", "2"])
        .args(heartbeat)
        .args(["--array", "1-3000", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("work on every agent", Duration::from_secs(60), || {
        let nodes: BTreeSet<u32> = executions(&log).iter().map(|e| e.1).collect();
        nodes.len() == 7
    });
    sigkill(agent_pid(&pilot, 0).expect("agent 0 runs"));
    let cut = executions(&log).len();
    // Each orphan runs new work after the cut: it found its way back in.
    wait_for("the orphans to work again", Duration::from_secs(30), || {
        let after: BTreeSet<u32> = executions(&log)[cut..].iter().map(|e| e.1).collect();
        [2, 3, 6].iter().all(|n| after.contains(n))
    });

    sigkill(agent_pid(&pilot, 1).expect("agent 1 runs"));
    let mut restarted = saker()
        .args(["agent", "--dir"])
        .arg(&pilot)
        .args(["--node", "1", "--fanout", "2", "--cores", "1"])
        .args(heartbeat)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let restart = executions(&log).len();
    wait_for(
        "the restarted agent to work",
        Duration::from_secs(30),
        || executions(&log)[restart..].iter().any(|e| e.1 == 1),
    );

    let status = run.wait().unwrap();
    let _ = restarted.kill();
    let _ = restarted.wait();
    assert!(status.success(), "every task succeeds");
    let records = results(&pilot);
    assert_eq!(records.len(), 3000, "one result per task");
    assert_one_result_per_task(&records, 3000);
    let ran: BTreeSet<u32> = executions(&log).iter().map(|e| e.0).collect();
    assert_eq!(ran.len(), 3000, "every index ran at least once");
}

/// Agents started by hand as a subtree of their own (`--subtree-base`, as an elastic
/// pilot's allocation starts them) join a root that has none: 100 under the root, 101
/// and 102 under 100. When 100 dies, 101 and 102 reattach to the root (their only
/// other ancestor: never into another subtree) and keep working.
#[test]
fn a_subtree_started_later_joins_the_root_and_survives_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let heartbeat = ["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"];
    let mut args = vec!["--agents", "0"];
    args.extend_from_slice(&heartbeat);
    let service = common::Service::start_args(dir.path(), &args);
    let pilot = service.pilot.clone();
    let log = dir.path().join("executions.log");
    let start = |node: &str| -> Child {
        saker()
            .args(["agent", "--dir"])
            .arg(&pilot)
            .args(["--node", node, "--subtree-base", "100", "--fanout", "2"])
            .args(["--cores", "1"])
            .args(heartbeat)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut head = start("100");
    let mut children = [start("101"), start("102")];
    let script = format!(
        "sleep 0.02; echo {{index}} $SAKER_NODE >> {}",
        log.display()
    );
    let submit = |array: &str| {
        let output = common::run(
            saker()
                .args(["submit", "--wait", "--dir"])
                .arg(&pilot)
                .args(["--array", array, "--", "sh", "-c", &script]),
        );
        assert!(output.status.success(), "the tasks succeed");
    };
    submit("1-150");
    let nodes: BTreeSet<u32> = executions(&log).iter().map(|e| e.1).collect();
    assert_eq!(nodes, BTreeSet::from([100, 101, 102]), "all three worked");

    head.kill().unwrap();
    head.wait().unwrap();
    let cut = executions(&log).len();
    submit("151-300");
    let after: BTreeSet<u32> = executions(&log)[cut..].iter().map(|e| e.1).collect();
    assert!(
        after.contains(&101) && after.contains(&102),
        "the orphans reattached to the root: {after:?}"
    );
    let records = results(&pilot);
    assert_one_result_per_task(&records, 300);
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
