//! Helpers for end-to-end tests: they run the real `saker` binary as a user would.

#![allow(dead_code)]

pub mod browser;
pub mod hpc;
mod service;
pub mod slurm;
pub mod tmpfs;

#[allow(unused_imports)] // each test binary uses what it needs
pub use service::Service;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The binary under test: `SAKER_BIN` (the release build, in CI) or this build's.
pub fn saker() -> Command {
    let bin = std::env::var_os("SAKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_saker")));
    let mut command = Command::new(bin);
    command.env_remove("SAKER_DIR");
    command
}

pub fn run(command: &mut Command) -> Output {
    let output = command.output().expect("saker runs");
    if !output.stderr.is_empty() {
        eprintln!(
            "--- saker stderr ---\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output
}

/// All result lines of a pilot directory, parsed.
pub fn results(dir: &Path) -> Vec<Value> {
    let output = run(saker()
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(dir));
    assert!(output.status.success(), "saker results failed");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a json result line"))
        .collect()
}

/// Pid of the agent process for `node` of the pilot in `dir` (started by the pilot).
///
/// A task the agent is starting shows the agent's command line until it execs (it
/// shares the agent's memory after `vfork`): a process whose parent matches too is such
/// a child, not the agent. (Taking one for the agent once killed a task instead: it
/// failed with signal 9 and the chaos test counted a failure.)
pub fn agent_pid(dir: &Path, node: u32) -> Option<u32> {
    let pattern = format!("agent --dir {} --node {node} ", dir.display());
    let mut matching = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&pattern) {
            matching.push((pid, parent_pid(pid)));
        }
    }
    matching
        .iter()
        .find(|(_, parent)| !matching.iter().any(|(pid, _)| Some(*pid) == *parent))
        .map(|(pid, _)| *pid)
}

/// The parent of process `pid`, from `/proc/PID/stat` (the field after the command
/// name, which may itself hold spaces and parentheses).
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Sends SIGKILL to process `pid`: no goodbye, whatever it runs is mid-flight.
pub fn sigkill(pid: u32) {
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "kill -KILL {pid}");
}

/// Polls `done` every 20 ms until it holds, failing the test after `timeout`: a
/// bounded wait for a condition, never a blind sleep.
pub fn wait_for(what: &str, timeout: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`wait_for`] a value: polls `found` until it gives one.
pub fn wait_until_some<T>(
    what: &str,
    timeout: std::time::Duration,
    mut found: impl FnMut() -> Option<T>,
) -> T {
    let mut value = None;
    wait_for(what, timeout, || {
        value = found();
        value.is_some()
    });
    value.expect("found")
}

/// Exactly `count` results, and no task among them twice.
pub fn assert_one_result_per_task(records: &[Value], count: usize) {
    assert_eq!(records.len(), count, "one result per task");
    let tasks: std::collections::BTreeSet<u64> = records
        .iter()
        .map(|r| r["task"].as_u64().expect("a task id"))
        .collect();
    assert_eq!(tasks.len(), count, "no task accepted twice");
}

/// Whether `pid` runs (a zombie has finished: nobody may be reaping orphans here).
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// `key=value` of one line of words (a probe's or a rank's report).
/// Every rank's `probe rank=…` line in a job's output. A launcher that merges its
/// ranks' streams (Hydra) may put another rank's line right after a write that had
/// no newline yet, so a line is found where it starts, not only at a line's start.
pub fn probe_lines(stdout: &str) -> Vec<&str> {
    stdout
        .match_indices("probe rank=")
        .map(|(at, _)| stdout[at..].lines().next().unwrap_or_default())
        .collect()
}

pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// (array index, agent node) of every execution a test's tasks logged so far, one
/// `INDEX NODE` line each (a line being written is skipped).
pub fn executions(log: &Path) -> Vec<(u32, u32)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (index, node) = line.split_once(' ')?;
            Some((index.parse().ok()?, node.parse().ok()?))
        })
        .collect()
}

/// Pids of processes whose command line holds all of `words`.
pub fn processes(words: &[&str]) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if words.iter().all(|word| cmdline.contains(word)) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Standby roots waiting: `--take-over` processes but the root holding the lock (a
/// standby that took over keeps its command line).
pub fn standbys(dir: &Path) -> Vec<u32> {
    let root = root_pid(dir);
    processes(&["pilot ", &dir.display().to_string(), "--take-over"])
        .into_iter()
        .filter(|pid| Some(*pid) != root)
        .collect()
}

/// The pid in `root.lock` (`PID HOST NODE`, as the root writes it): the root serving.
pub fn root_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("root.lock"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The MPI test program built with `kind`'s compiler wrapper, or `None` (the test
/// then passes after saying it did not run) when that MPI is not installed, unless
/// `SAKER_REQUIRE_MPI=1` (scripts/test.sh), where it fails.
pub fn mpi_probe(kind: &str, dir: &Path) -> Option<PathBuf> {
    let compiler = format!("mpicc.{kind}");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/probe.c");
    let binary = dir.join(format!("probe-{kind}"));
    match Command::new(&compiler)
        .args(["-O2", "-Wall", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
    {
        Ok(status) => {
            assert!(status.success(), "{compiler} failed on probe.c");
            Some(binary)
        }
        Err(error) => {
            assert!(
                std::env::var("SAKER_REQUIRE_MPI").as_deref() != Ok("1"),
                "SAKER_REQUIRE_MPI=1 but {compiler} cannot run ({error}): install \
                 openmpi-bin libopenmpi-dev mpich libmpich-dev"
            );
            eprintln!("skipped: {compiler} is not installed ({error})");
            None
        }
    }
}
