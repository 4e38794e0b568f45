//! A large agent tree on one machine: hundreds of agent processes (three levels at
//! fan-out 8) start, register, run work and shut down cleanly (issue 15).

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{alive, run, saker, wait_for};

const AGENTS: u32 = 256;

/// Pids of the processes whose command line names pilot directory `dir` (root, agents).
fn pilot_processes(dir: &Path) -> Vec<u32> {
    let pattern = format!("--dir {}", dir.display());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&pattern) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

fn registered_agents(dir: &Path) -> Option<u32> {
    let status = saker()
        .args(["status", "--dir"])
        .arg(dir)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("agents"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// 256 agents at fan-out 8 (8 + 64 + 184: three levels) register, each level's tasks
/// run, and a shutdown ends every process, children before their parents: no agent
/// sees its parent vanish (which it logs as a lost parent).
#[test]
fn a_three_level_tree_of_256_agents_starts_works_and_shuts_down_cleanly() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("pilot");
    let started = Instant::now();
    let mut pilot = saker()
        .arg("pilot")
        .args([
            "--agents",
            &AGENTS.to_string(),
            "--slots",
            &AGENTS.to_string(),
        ])
        .args(["--fanout", "8", "--no-sync", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the pilot's client socket", Duration::from_secs(30), || {
        dir.join("client.json").exists()
    });
    wait_for("every agent to register", Duration::from_secs(60), || {
        registered_agents(&dir) == Some(AGENTS)
    });
    eprintln!("{AGENTS} agents registered in {:?}", started.elapsed());

    let submitted = run(saker().args(["submit", "--dir"]).arg(&dir).args([
        "--array",
        &format!("1-{AGENTS}"),
        "--",
        "true",
    ]));
    assert!(submitted.status.success(), "submit failed");
    let waited = run(saker().args(["wait", "--dir"]).arg(&dir));
    assert!(waited.status.success(), "wait failed");
    let records = common::results(&dir);
    common::assert_one_result_per_task(&records, AGENTS as usize);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));

    let stopping = Instant::now();
    let shutdown = run(saker().args(["shutdown", "--dir"]).arg(&dir));
    assert!(shutdown.status.success(), "shutdown failed");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = pilot.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the pilot did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the pilot exited with {status}");
    wait_for(
        "every agent process to end",
        Duration::from_secs(10),
        || pilot_processes(&dir).is_empty(),
    );
    eprintln!("shut down in {:?}", stopping.elapsed());

    let mut lost_parents = Vec::new();
    for entry in std::fs::read_dir(dir.join("logs")).unwrap().flatten() {
        let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if log.contains("lost the parent link") || log.contains("parent lost") {
            lost_parents.push(entry.file_name());
        }
    }
    assert!(
        lost_parents.is_empty(),
        "agents whose parent left before them: {lost_parents:?}"
    );
}
