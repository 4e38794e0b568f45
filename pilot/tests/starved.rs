//! Real starvation, not a simulated one: an agent SIGSTOPped past its heartbeat
//! timeout (it gets no CPU at all) is declared lost by mistake, which costs replays
//! only, never a failed task, within `--max-replays`; and a pilot beside busy loops
//! that keep every core loaded finishes all its work (docs/faults.md).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use common::{agent_pid, alive, assert_one_result_per_task, executions, results, saker, wait_for};

/// The two tests load the machine on purpose: one at a time, so the busy loops of one
/// do not starve the other's pilot, whose heartbeats are short, past what it asserts.
fn one_at_a_time() -> nix::fcntl::Flock<std::fs::File> {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("starved.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .unwrap()
}

/// A pilot run, killed when dropped (a failed assertion would otherwise leave it),
/// its stderr in a file to show when something fails.
struct Run {
    child: Child,
    stderr: PathBuf,
}

impl Run {
    fn start(command: &mut Command, stderr: PathBuf) -> Run {
        let file = std::fs::File::create(&stderr).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap();
        Run { child, stderr }
    }

    /// Its exit status, failing the test if it has not exited within `timeout`.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let mut status = None;
        wait_for("the pilot to exit", timeout, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process stopped with SIGSTOP, continued when dropped (even on a failed
/// assertion: a stopped agent would never exit).
struct Stopped(Pid);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        let pid = Pid::from_raw(pid as i32);
        kill(pid, Signal::SIGSTOP).unwrap();
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Busy loops, one process each, killed when dropped (also on a failed assertion).
struct Hogs(Vec<Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` for stopped…).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim().chars().next()
}

const TASKS: u32 = 600;
const STARVED: u32 = 1;
const TIMEOUT: Duration = Duration::from_secs(1);

/// The run exited 0, every task has one accepted result and succeeded, and every
/// index ran; the results, for more checks.
fn every_task_succeeded_once(
    pilot: &Path,
    log: &Path,
    tasks: u32,
    status: ExitStatus,
    run: &Run,
) -> Vec<Value> {
    let records = results(pilot);
    let not_succeeded: Vec<&Value> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(
        status.success() && not_succeeded.is_empty(),
        "every task succeeds ({status}); these did not: {not_succeeded:#?}\n--- stderr ---\n{}",
        run.stderr()
    );
    assert_one_result_per_task(&records, tasks as usize);
    let ran: BTreeSet<u32> = executions(log).iter().map(|e| e.0).collect();
    assert_eq!(ran, (1..=tasks).collect(), "every index ran");
    records
}

/// Agent 1 of 3 gets no CPU for three heartbeat timeouts while its tasks run: the root
/// declares it lost and replays what it held, the agent finds its link closed when it
/// runs again, and registers again as a new life of its node (runtime-semantics.md,
/// "Liveness"). Every task succeeds once, some after a replay, and the woken agent
/// runs work again.
#[test]
fn an_agent_starved_past_its_heartbeat_timeout_costs_replays_only() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    let script = format!(
        "sleep 0.05; echo {{index}} $SAKER_NODE >> {}",
        log.display()
    );
    let mut run = Run::start(
        saker()
            .args(["run", "--progress", "none", "--no-sync"])
            .args(["--agents", "3", "--slots", "6"])
            .args(["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"])
            .args(["--array", &format!("1-{TASKS}"), "--dir"])
            .arg(&pilot)
            .args(["--", "sh", "-c", &script]),
        dir.path().join("stderr.log"),
    );
    wait_for("work on every agent", Duration::from_secs(60), || {
        let nodes: BTreeSet<u32> = executions(&log).iter().map(|e| e.1).collect();
        nodes.len() == 3
    });
    let agent = agent_pid(&pilot, STARVED).expect("agent 1 runs");

    // The fault: the agent's process is stopped outright; its tasks (process groups of
    // their own) and its reaper run on. Three timeouts, then it runs again.
    let stopped = Stopped::new(agent);
    wait_for("agent 1 to be stopped", Duration::from_secs(5), || {
        state(agent) == Some('T')
    });
    let before = executions(&log).len();
    std::thread::sleep(3 * TIMEOUT);
    drop(stopped);
    let during = executions(&log).len() - before;
    assert!(
        during > 0,
        "the other agents worked while agent 1 was stopped"
    );

    let status = run.wait(Duration::from_secs(120));
    let records = every_task_succeeded_once(&pilot, &log, TASKS, status, &run);

    // The fault happened: attempts agent 1 held were lost with it and replayed, within
    // the default bound of 3 replays. (Another agent declared lost by mistake on a
    // loaded machine costs replays too, never a task.)
    let history: Vec<&Value> = records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .collect();
    let starved_prefix = format!("agent {STARVED} on ");
    let lost_with_agent_1: Vec<&Value> = history
        .iter()
        .copied()
        .filter(|note| {
            note["reason"]
                .as_str()
                .unwrap()
                .starts_with(&starved_prefix)
        })
        .collect();
    assert!(
        !lost_with_agent_1.is_empty(),
        "agent 1 held work when it was declared lost"
    );
    for note in &history {
        assert_eq!(note["end"], "lost", "{note}");
        assert!(
            note["reason"].as_str().unwrap().starts_with("agent "),
            "{note}"
        );
    }
    for record in &records {
        assert!(
            record["history"].as_array().unwrap().len() <= 3,
            "within --max-replays: {record}"
        );
    }

    // The woken agent registered again as a new life of node 1: the root gave it work
    // after it had declared it lost, and accepted its results. (Timestamps are RFC 3339
    // in UTC with six fractional digits, all of the root's clock: they sort as text.)
    let declared_lost = lost_with_agent_1
        .iter()
        .map(|note| note["end_time"].as_str().unwrap())
        .max()
        .unwrap();
    let after_rejoin = records
        .iter()
        .filter(|r| r["node_id"] == STARVED)
        .filter(|r| r["dispatch_time"].as_str() > Some(declared_lost))
        .count();
    assert!(
        after_rejoin > 0,
        "agent 1 ran work again after its loss at {declared_lost}\n--- stderr ---\n{}",
        run.stderr()
    );
    // And it ended with the pilot, as every agent does.
    wait_for("agent 1 to exit", Duration::from_secs(15), || !alive(agent));
    eprintln!(
        "{} attempts replayed ({} held by agent 1); agent 1 ran {after_rejoin} tasks after \
         its loss; {} executions for {TASKS} tasks",
        history.len(),
        lost_with_agent_1.len(),
        executions(&log).len()
    );
}

/// Twice as many busy loops as cores, for the whole run: the root, the agents and the
/// tasks get a fraction of a core each. With the default heartbeats every task still
/// succeeds, once.
#[test]
fn a_pilot_beside_cpu_hogs_loses_nothing() {
    const TASKS: u32 = 300;
    let _alone = one_at_a_time();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hogs = Hogs(
        (0..2 * cores)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    let script = format!(
        "sleep 0.05; echo {{index}} $SAKER_NODE >> {}",
        log.display()
    );
    let started = Instant::now();
    let mut run = Run::start(
        saker()
            .args(["run", "--progress", "none", "--no-sync", "--agents", "2"])
            .args(["--array", &format!("1-{TASKS}"), "--dir"])
            .arg(&pilot)
            .args(["--", "sh", "-c", &script]),
        dir.path().join("stderr.log"),
    );
    let status = run.wait(Duration::from_secs(120));
    let elapsed = started.elapsed();
    for hog in &hogs.0 {
        assert!(alive(hog.id()), "the busy loops ran for the whole run");
    }
    drop(hogs);

    every_task_succeeded_once(&pilot, &log, TASKS, status, &run);
    eprintln!("{TASKS} tasks beside {} busy loops: {elapsed:?}", 2 * cores);
}
