//! Durable resume: the root is killed with SIGKILL mid-run; `saker run --resume`
//! rebuilds from the journal, keeps every accepted result, and runs the rest.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Service, results, run, saker};

#[test]
fn a_killed_root_resumes_from_its_journal_without_losing_or_repeating_results() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    let script = format!("sleep 0.02; echo {{index}} >> {}", log.display());
    let mut first = saker()
        .args([
            "run",
            "--progress",
            "none",
            "--agents",
            "2",
            "--slots",
            "4",
            "--array",
            "1-400",
        ])
        .arg("--dir")
        .arg(&pilot)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill the root once work is under way, while most of it is still queued.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let journaled = std::fs::read_to_string(&log).map_or(0, |l| l.lines().count());
        if journaled >= 60 {
            break;
        }
        assert!(Instant::now() < deadline, "the first run made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap(); // SIGKILL: no chance to flush or say goodbye
    first.wait().unwrap();
    // Its agents would notice only after the link idle timeout; stop them now.
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("agent --dir {}", pilot.display())])
        .status();
    let before = results(&pilot);
    assert!(
        !before.is_empty() && before.len() < 400,
        "killed mid-run: {}",
        before.len()
    );

    let resumed = run(saker()
        .args(["run", "--resume", "--progress", "none", "--dir"])
        .arg(&pilot));
    assert!(resumed.status.success());
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("resumed 1 jobs (400 tasks"));

    let after = results(&pilot);
    assert_eq!(after.len(), 400, "one result per task");
    let tasks: BTreeSet<u64> = after.iter().map(|r| r["task"].as_u64().unwrap()).collect();
    assert_eq!(tasks.len(), 400);
    let seqs: Vec<u64> = after.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=400).collect::<Vec<_>>(),
        "no gaps, no duplicates in the stream"
    );
    // Results accepted before the kill are kept as they were.
    assert_eq!(&after[..before.len()], &before[..]);
    // Every task ran at least once (some twice: in flight when the root died).
    let executed: BTreeSet<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(executed, (1..=400).collect());
}

#[test]
fn a_new_pilot_refuses_a_directory_with_a_journal_and_resume_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert!(output.status.success());
    let again = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let nothing = run(saker()
        .args(["run", "--resume", "--progress", "none", "--dir"])
        .arg(&empty));
    assert_eq!(nothing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("not a saker pilot directory"));
}

#[test]
fn a_time_budget_stops_the_run_and_resume_finishes_what_was_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    // Two slots, four tasks, a deadline 6 s in: tasks 1 and 2 end at once, 3 and 4
    // then run until they are stopped at the deadline (until the resume, when the gate
    // file exists). That holds while the pilot takes under ~6 s to start its tasks:
    // loaded CI machines took over 3 s, which 3-second tasks could not tolerate.
    let gate = dir.path().join("resumed");
    let script = format!(
        "[ \"$SAKER_ARRAY_INDEX\" -le 2 ] || [ -e {} ] || sleep 60",
        gate.display()
    );
    let cut = run(saker()
        .args([
            "run",
            "--progress",
            "none",
            "--slots",
            "2",
            "--time-budget",
            "6500ms",
        ])
        .args(["--walltime-margin", "500ms", "--array", "1-4", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert_eq!(
        cut.status.code(),
        Some(3),
        "exit 3: stopped by the walltime"
    );
    let stderr = String::from_utf8_lossy(&cut.stderr);
    assert!(
        stderr.contains("2 tasks did not finish (2 stopped at the deadline"),
        "{stderr}"
    );
    assert_eq!(results(&pilot).len(), 2);

    // Tasks whose time limit cannot fit never start, and the pilot does not wait.
    let unfit = dir.path().join("unfit");
    let started = Instant::now();
    let none = run(saker()
        .args([
            "run",
            "--progress",
            "none",
            "--time-budget",
            "10s",
            "--time-limit",
            "1m",
            "--walltime-margin",
            "1s",
        ])
        .arg("--dir")
        .arg(&unfit)
        .args(["--", "true"]));
    assert_eq!(none.status.code(), Some(3));
    assert!(started.elapsed() < Duration::from_secs(8));
    assert!(String::from_utf8_lossy(&none.stderr).contains("never started: job 1: 1"));

    // A margin that leaves no time is refused up front, with the reason.
    let squeezed = run(saker().args([
        "run",
        "--progress",
        "none",
        "--time-budget",
        "10s",
        "--",
        "true",
    ]));
    assert_eq!(squeezed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&squeezed.stderr).contains("--walltime-margin"));

    std::fs::write(&gate, "").unwrap();
    let resumed = run(saker()
        .args(["run", "--resume", "--progress", "none", "--dir"])
        .arg(&pilot));
    assert!(resumed.status.success());
    let records = results(&pilot);
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
}

#[test]
fn a_resumed_task_keeps_the_retries_it_used_before_the_root_died() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let runs = dir.path().join("runs");
    // Attempt 1 fails; attempt 2 (the first retry) hangs until the root is killed;
    // every later attempt fails. With `--retries 2` the resumed root may run it only
    // twice more (one retry was used), so there are four runs in all, not five.
    let script = format!(
        "echo run >> {runs}; n=$(wc -l < {runs}); \
         if [ \"$n\" -eq 2 ]; then while :; do sleep 0.1; done; fi; exit 1",
        runs = runs.display()
    );
    let mut first = saker()
        .args(["run", "--progress", "none", "--retries", "2", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let count = || std::fs::read_to_string(&runs).map_or(0, |r| r.lines().count());
    common::wait_for("the first retry to start", Duration::from_secs(30), || {
        count() == 2
    });
    first.kill().unwrap();
    first.wait().unwrap();
    for pattern in [
        format!("agent --dir {}", pilot.display()),
        runs.display().to_string(),
    ] {
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", &pattern])
            .status();
    }

    let resumed = run(saker()
        .args(["run", "--resume", "--progress", "none", "--dir"])
        .arg(&pilot));
    assert_eq!(resumed.status.code(), Some(1), "the task failed in the end");
    assert_eq!(count(), 4, "one retry was used before the resume");
    let after = results(&pilot);
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["state"], "failed");
    assert_eq!(after[0]["history"].as_array().unwrap().len(), 2);
}

/// Replaces the credentials of the pilot in `pilot` by ones as sakers before
/// certificate roles wrote them.
fn write_legacy_credentials(pilot: &std::path::Path) {
    let dir = saker_transport::PilotDir::open(pilot).unwrap();
    saker_transport::test_support::write_legacy_credentials(&dir);
}

/// A pilot directory from before certificate roles is resumed: the resumed root
/// renews its credentials (a new CA, no `ca.key`), says so, and its agent links and
/// clients work with the new ones; the results from before are kept.
#[test]
fn a_pilot_from_before_certificate_roles_resumes_with_renewed_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let first = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "before"]));
    assert!(first.status.success());
    write_legacy_credentials(&pilot);
    let log = dir.path().join("root.log");
    let service = Service::start_logged(
        dir.path(),
        &["--agents", "1", "--slots", "1", "--resume"],
        &log,
    );
    let submitted = run(saker()
        .args(["submit", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "after"]));
    assert!(submitted.status.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout),
        "succeeded 2 failed 0 cancelled 0\n"
    );
    let stdout: Vec<String> = results(&pilot)
        .iter()
        .map(|r| r["stdout"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(stdout, ["before\n", "after\n"]);
    assert!(!pilot.join("ca.key").exists());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("predate certificate roles"), "{log}");
    drop(service);
}

/// The root dies with no standby and is resumed while its agents still look for it:
/// they join the resumed root with what they run, and it adopts that work. Each task
/// starts once (counted by the tasks themselves); the resumed root starts no agent
/// for a node whose agent still lives.
#[test]
fn a_resumed_root_adopts_what_its_agents_still_run() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started.log");
    let mut first = Service::start_args(dir.path(), &["--agents", "2", "--slots", "4"]);
    let pilot = first.pilot.clone();
    // Eight tasks on four slots: four run, four wait in the agents' queues.
    let script = format!("echo {{index}} >> {}; sleep 4", started.display());
    let submitted = run(saker()
        .args(["submit", "--array", "1-8", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());
    let lines = || std::fs::read_to_string(&started).map_or(0, |l| l.lines().count());
    common::wait_for("four tasks to start", Duration::from_secs(30), || {
        lines() == 4
    });
    let agents = [common::agent_pid(&pilot, 0), common::agent_pid(&pilot, 1)];

    first.child.kill().unwrap(); // SIGKILL: the agents live on, looking for a root
    first.child.wait().unwrap();
    let _ = std::fs::remove_file(pilot.join("client.json"));
    std::mem::forget(first);
    let resumed = Service::start_args(dir.path(), &["--agents", "2", "--slots", "4", "--resume"]);
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "{waited:?}");

    let after = results(&pilot);
    common::assert_one_result_per_task(&after, 8);
    assert!(after.iter().all(|r| r["state"] == "succeeded"));
    let mut indices: Vec<u32> = std::fs::read_to_string(&started)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    indices.sort_unstable();
    assert_eq!(
        indices,
        (1..=8).collect::<Vec<_>>(),
        "each task started once"
    );
    assert_eq!(
        [common::agent_pid(&pilot, 0), common::agent_pid(&pilot, 1)],
        agents,
        "the same agents, adopted"
    );
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("adopted   4 running, 0 ended while away; 0 stopped, 0 nodes missing"),
        "{status}"
    );
    drop(resumed);
}
