//! Standby roots (`saker pilot --standby N`): the root holds a lock on its pilot
//! directory; a standby waits for it, and when the root dies takes over, adopting
//! its agents. Every task still has exactly one accepted result.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Service, agent_pid, assert_one_result_per_task, processes, results, run, saker, sigkill,
    standbys, wait_for,
};

fn executed(log: &Path) -> Vec<u32> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.parse().ok())
        .collect()
}

/// Microseconds into its day of an RFC 3339 time in a result line
/// (`2026-11-28T11:42:36.533438Z`); a test does not span midnight twice.
fn micros(time: &serde_json::Value) -> i64 {
    let text = time.as_str().expect("a time");
    let clock = text.split('T').nth(1).expect("a time of day");
    let clock = clock.trim_end_matches('Z');
    let mut parts = clock.split(':');
    let hours: i64 = parts.next().unwrap().parse().unwrap();
    let minutes: i64 = parts.next().unwrap().parse().unwrap();
    let seconds: f64 = parts.next().unwrap().parse().unwrap();
    (hours * 3600 + minutes * 60) * 1_000_000 + (seconds * 1e6) as i64
}

/// Submits `tasks` tasks that each append their index to `log`.
fn submit_logged(pilot: &Path, log: &Path, tasks: u32) {
    let script = format!("sleep 0.02; echo {{index}} >> {}", log.display());
    let submitted = run(saker()
        .args(["submit", "--array", &format!("1-{tasks}"), "--dir"])
        .arg(pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());
}

/// One accepted result per task, all succeeded, every index run; the results.
fn every_task_succeeded_once(pilot: &Path, log: &Path, tasks: u32) -> Vec<serde_json::Value> {
    let records = results(pilot);
    assert_one_result_per_task(&records, tasks as usize);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let ran: BTreeSet<u32> = executed(log).into_iter().collect();
    assert_eq!(ran, (1..=tasks).collect(), "every task ran");
    records
}

/// Waits until no process names the pilot directory any more.
fn all_gone(pilot: &Path) {
    wait_for(
        "every process of the pilot to end",
        Duration::from_secs(30),
        || processes(&[&pilot.display().to_string()]).is_empty(),
    );
}

#[test]
fn a_standby_takes_over_from_a_killed_root_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executed.log");
    let mut service = Service::start_args(
        dir.path(),
        // Default heartbeats: agents under the root find the new one through its
        // address file, not by timing the old one out.
        // Two standbys: after the takeover one is the old root's, one the new root's;
        // both must end with the pilot.
        &["--agents", "2", "--slots", "2", "--standby", "2"],
    );
    let pilot = service.pilot.clone();
    wait_for("the standbys", Duration::from_secs(30), || {
        standbys(&pilot).len() == 2
    });
    submit_logged(&pilot, &log, 600);
    // A client waiting through the takeover: it reconnects to the new root.
    let mut waiting = saker()
        .args(["wait", "--dir"])
        .arg(&pilot)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for("work to flow", Duration::from_secs(60), || {
        executed(&log).len() >= 150
    });

    // The root dies outright: no goodbye, tasks mid-flight.
    let killed = service.kill_for_standby();
    eprintln!("the standby answers {:?} after the kill", killed.elapsed());
    let mut waited = None;
    wait_for(
        "the waiting client to see the end",
        Duration::from_secs(60),
        || {
            waited = waiting.try_wait().unwrap();
            waited.is_some()
        },
    );
    assert!(
        waited.unwrap().success(),
        "every task ends, and succeeds, and the waiting client saw it through"
    );

    let records = every_task_succeeded_once(&pilot, &log, 600);
    // Nothing ran twice: what ran at the kill was adopted, what had ended was held
    // by its agent until a root wrote it.
    let mut runs = executed(&log);
    runs.sort_unstable();
    let twice: Vec<u32> = runs
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(twice.is_empty(), "tasks that ran twice: {twice:?}");
    // The widest gap between results ending: the takeover, as users see it.
    let mut ends: Vec<i64> = records.iter().map(|r| micros(&r["end_time"])).collect();
    ends.sort_unstable();
    let gap = ends.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    eprintln!("widest gap between results: {} ms", gap / 1000);

    // The new root keeps the pilot's two standbys, and none outlives the pilot.
    wait_for("a new standby", Duration::from_secs(30), || {
        standbys(&pilot).len() == 2
    });
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("(a standby that took over from a root that died)"),
        "{status}"
    );
    assert!(status.contains("standbys  2: "), "{status}");
    drop(service);
    all_gone(&pilot);
}

#[test]
fn a_second_root_is_refused_and_standbys_go_with_a_root_that_stops() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(dir.path(), &["--agents", "1", "--standby", "2"]);
    let pilot = service.pilot.clone();
    wait_for("the standbys", Duration::from_secs(30), || {
        standbys(&pilot).len() == 2
    });
    let second = run(saker().args(["pilot", "--resume", "--dir"]).arg(&pilot));
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("another root (pid {} on ", service.child.id())),
        "{stderr}"
    );
    let done = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert!(done.status.success(), "the first root is unharmed");

    drop(service);
    all_gone(&pilot);
    let journal = std::fs::read_dir(pilot.join("journal")).unwrap().count();
    assert_eq!(journal, 1, "no standby took over: one root, one segment");
}

/// A root stopped with SIGSTOP is alive and keeps its lock: the standby finds it
/// silent past three heartbeat timeouts, kills it, and takes over.
#[test]
fn a_root_that_hangs_is_fenced_and_a_standby_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executed.log");
    let mut service = Service::start_args(
        dir.path(),
        &[
            "--agents",
            "2",
            "--slots",
            "2",
            "--standby",
            "1",
            "--heartbeat-interval",
            "200ms",
            "--heartbeat-timeout",
            "1s",
        ],
    );
    let pilot = service.pilot.clone();
    wait_for("the standby", Duration::from_secs(30), || {
        standbys(&pilot).len() == 1
    });
    submit_logged(&pilot, &log, 300);
    wait_for("work to flow", Duration::from_secs(60), || {
        executed(&log).len() >= 50
    });

    let root = service.child.id();
    let stopped = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(root as i32),
        nix::sys::signal::Signal::SIGSTOP,
    );
    stopped.unwrap();
    let hung = Instant::now();
    // Fenced: killed, not continued (`wait` reaps it; it must end by SIGKILL).
    let status = service.child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the standby killed the hung root"
    );
    eprintln!("fenced {:?} after the root hung", hung.elapsed());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success());
    every_task_succeeded_once(&pilot, &log, 300);
    drop(service);
    all_gone(&pilot);
}

/// Tasks running when the root dies run on, and the standby that takes over adopts
/// them: each task starts once (counted by the tasks themselves) and ends once, the
/// ones that waited in the agents' queues run after them, and the new root says what
/// it adopted. (Before adoption: 12 starts of 8 tasks.)
#[test]
fn a_standby_adopts_running_tasks_and_none_starts_twice() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("started.log");
    let mut service = Service::start_args(
        dir.path(),
        &["--agents", "4", "--slots", "4", "--standby", "1"],
    );
    let pilot = service.pilot.clone();
    wait_for("the standby", Duration::from_secs(30), || {
        standbys(&pilot).len() == 1
    });
    // Eight tasks on four slots: four run, four wait in the agents' queues.
    let script = format!("echo {{index}} >> {}; sleep 5", log.display());
    let submitted = run(saker()
        .args(["submit", "--array", "1-8", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());
    let began = Instant::now();
    wait_for("four tasks to start", Duration::from_secs(30), || {
        executed(&log).len() == 4
    });

    service.kill_for_standby();
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "{waited:?}");
    let makespan = began.elapsed();

    let records = results(&pilot);
    assert_one_result_per_task(&records, 8);
    assert!(
        records.iter().all(|r| r["state"] == "succeeded"),
        "{records:?}"
    );
    let mut started = executed(&log);
    started.sort_unstable();
    assert_eq!(
        started,
        (1..=8).collect::<Vec<u32>>(),
        "each task started once"
    );
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("adopted   4 running, 0 ended while away; 0 stopped, 0 nodes missing"),
        "{status}"
    );
    // Two rounds of 5 s and a takeover; replays would have been a third round.
    eprintln!("makespan {makespan:?}");
    assert!(makespan < Duration::from_secs(13), "{makespan:?}");
    drop(service);
    all_gone(&pilot);
}

/// The standby that took over supervises the agents it adopted as the root it
/// replaced did: one SIGKILLed afterwards is started again, and its node takes work.
#[test]
fn a_standby_that_took_over_starts_a_killed_agent_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nodes.log");
    let mut service = Service::start_args(
        dir.path(),
        &["--agents", "2", "--slots", "2", "--standby", "1"],
    );
    let pilot = service.pilot.clone();
    wait_for("the standby", Duration::from_secs(30), || {
        standbys(&pilot).len() == 1
    });
    service.kill_for_standby();
    let old = agent_pid(&pilot, 1).expect("node 1's agent");
    sigkill(old);
    wait_for("another agent of node 1", Duration::from_secs(30), || {
        agent_pid(&pilot, 1).is_some_and(|pid| pid != old)
    });
    wait_for("both agents", Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&pilot));
        String::from_utf8_lossy(&status.stdout).contains("agents    2 ")
    });
    let script = format!("echo $SAKER_NODE >> {}; sleep 0.5", log.display());
    let submitted = run(saker()
        .args(["submit", "--array", "1-8", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "{waited:?}");
    let nodes: BTreeSet<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(nodes.contains("1"), "node 1 took work again: {nodes:?}");
    drop(service);
    all_gone(&pilot);
}
