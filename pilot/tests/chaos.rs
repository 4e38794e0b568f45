//! Chaos: 20,000 short tasks on 8 agents while agents are SIGKILLed at random moments
//! and some are started again by hand, and the root itself is SIGKILLed once and
//! resumed. Afterwards every task has exactly one accepted result, every task ran at
//! least once, and the journal agrees with `saker results`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{agent_pid, assert_one_result_per_task, results, run, saker, wait_for};
use saker_root::records::Record;

const TASKS: u32 = 20_000;
const AGENTS: u32 = 8;
const HEARTBEAT: [&str; 4] = ["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"];

/// Every child of the test is killed when it ends, pass or fail.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A small deterministic generator (SplitMix64): the schedule of kills is the same on
/// every run, only the moments the processes reach differ.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn executions(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

fn start_pilot(dir: &Path, resume: bool) -> Child {
    let mut command = saker();
    command
        .args(["pilot", "--agents", "8", "--slots", "8", "--fanout", "2"])
        .args(HEARTBEAT)
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    if resume {
        command.arg("--resume");
    }
    let child = command.spawn().unwrap();
    wait_for("the client endpoint", Duration::from_secs(30), || {
        dir.join("client.json").exists()
    });
    child
}

fn restart_agent(dir: &Path, node: u32) -> Child {
    saker()
        .args(["agent", "--dir"])
        .arg(dir)
        .args(["--node", &node.to_string(), "--fanout", "2", "--cores", "1"])
        .args(HEARTBEAT)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn sigkill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// Kills `rounds` random agents, a few hundred milliseconds apart, restarting about
/// half of them; stops early once `stop_at` executions are logged.
fn havoc(rng: &mut Rng, dir: &Path, log: &Path, rounds: u32, stop_at: usize, kept: &mut Children) {
    for _ in 0..rounds {
        if executions(log) >= stop_at {
            return;
        }
        std::thread::sleep(Duration::from_millis(300 + rng.below(500)));
        let node = rng.below(u64::from(AGENTS)) as u32;
        // The pilot's own agent for that node, or one this test started for it.
        let victim = agent_pid(dir, node);
        if let Some(pid) = victim {
            sigkill(pid);
        }
        if rng.below(2) == 0 {
            kept.0.push(restart_agent(dir, node));
        }
    }
}

#[test]
fn random_kills_of_agents_and_the_root_lose_no_task_and_accept_none_twice() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("pilot");
    let log = temp.path().join("executions.log");
    let mut rng = Rng(20_000);
    let mut kept = Children(Vec::new());

    kept.0.push(start_pilot(&dir, false));
    let script = format!("echo {{index}} >> {}", log.display());
    let submitted = run(saker()
        .args(["submit", "--array", &format!("1-{TASKS}"), "--dir"])
        .arg(&dir)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());

    wait_for("work to flow", Duration::from_secs(60), || {
        executions(&log) >= 1_000
    });
    havoc(&mut rng, &dir, &log, 8, 9_000, &mut kept);

    // The root dies mid-run with no chance to flush; its agents are orphans that must
    // never join the resumed root's tree.
    sigkill(kept.0[0].id());
    let _ = kept.0[0].wait();
    let at_root_kill = executions(&log);
    assert!(
        at_root_kill < TASKS as usize,
        "the root was killed mid-run ({at_root_kill} executions)"
    );
    kept.0.push(start_pilot(&dir, true));
    havoc(&mut rng, &dir, &log, 6, 18_000, &mut kept);

    let mut waiter = saker()
        .args(["wait", "--dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while waiter.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the work did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }

    let records = results(&dir);
    let status = run(saker().args(["status", "--dir"]).arg(&dir));
    eprintln!("{}", String::from_utf8_lossy(&status.stdout));
    let _ = run(saker().args(["shutdown", "--dir"]).arg(&dir));

    assert_eq!(records.len(), TASKS as usize, "one result per task");
    assert_one_result_per_task(&records, TASKS as usize);
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    let ran: BTreeSet<u32> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ran, (1..=TASKS).collect(), "every task ran");
    assert!(text.lines().count() >= TASKS as usize);
    let lost: usize = records
        .iter()
        .map(|r| r["history"].as_array().unwrap().len())
        .sum();
    assert!(lost > 0, "the kills cost some attempts");

    // The journal holds exactly the results the clients see.
    let journal = saker_journal::read_all::<Record>(&dir.join("journal")).unwrap();
    let mut journaled: BTreeMap<u64, serde_json::Value> = BTreeMap::new();
    for record in journal.records {
        if let Record::Result(result) = record {
            let previous = journaled.insert(result.task.0, serde_json::to_value(&*result).unwrap());
            assert!(previous.is_none(), "task {} journaled twice", result.task.0);
        }
    }
    let served: BTreeMap<u64, serde_json::Value> = records
        .into_iter()
        .map(|r| (r["task"].as_u64().unwrap(), r))
        .collect();
    assert_eq!(journaled.len(), served.len());
    assert!(
        journaled == served,
        "the journal and `saker results` disagree"
    );
}
