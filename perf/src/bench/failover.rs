//! Failover: from SIGKILL of an agent that is running a task to that task starting
//! on the surviving agent, beside the heartbeat timeout after which the root gives a
//! silent agent up.
//!
//! The pilot has 2 agents with 2 slots each. Long tasks are submitted one at a time
//! until each agent runs one, so the survivor has a free slot for the replay; every
//! task appends `SAKER_NODE SAKER_TASK_ID <wall-clock ns> <pid>` to a log when it
//! starts. Agent 1 is then killed, and the figure is the time from the kill to the
//! log line of one of its tasks started again on agent 0.
//!
//! A task of the killed agent runs on as an orphan (tasks have process groups of
//! their own, so killing the pilot's group does not reach them): every task `exec`s
//! into `sleep`, and whatever the log names that is still that `sleep` is killed at
//! the end, on success and on failure alike.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use saker_client::spec::{JobRequest, TaskSpec};

use super::{Setup, Summary, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{Heartbeat, PilotShape, RunningPilot};
use crate::process::{TempDir, command_line};
use crate::report::{Measure, Row, Target, Unit};

/// The heartbeats of the main measurement: a 1 s timeout.
const FAST: Heartbeat = Heartbeat {
    interval: Duration::from_millis(200),
    timeout: Duration::from_secs(1),
};

/// saker's default heartbeats (measured once, in full runs only).
const DEFAULT: Heartbeat = Heartbeat {
    interval: Duration::from_secs(1),
    timeout: Duration::from_secs(5),
};

const AGENTS: u32 = 2;
/// Slots in all: 2 per agent, so that the survivor has room for the replayed task.
const SLOTS: u32 = 4;
/// The agent that is killed; the other (0) survives.
const VICTIM: u32 = 1;
const SURVIVOR: u32 = 0;

/// How long each task sleeps: longer than any measurement, so none ends by itself.
const TASK_SECONDS: u32 = 300;

/// How long the agents may take to connect, and a submitted task to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the start log is read.
const POLL: Duration = Duration::from_millis(2);

/// Failover may take at most this many heartbeat timeouts.
const TARGET_TIMEOUTS: f64 = 2.0;

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let mut configurations = vec![(FAST, setup.sizes.failover_repeats.max(1))];
    if !setup.quick {
        configurations.push((DEFAULT, 1));
    }
    let runtime = client_runtime()?;
    let mut rows = Vec::new();
    for (heartbeat, repeats) in configurations {
        let mut samples = Vec::new();
        for repeat in 1..=repeats {
            let sample = runtime
                .block_on(kill_once(&setup.saker, heartbeat))
                .with_context(|| {
                    format!(
                        "kill {repeat} of {repeats}, heartbeat timeout {:?}",
                        heartbeat.timeout
                    )
                })?;
            eprintln!(
                "saker-perf: failover {repeat}/{repeats} (timeout {:?}): {:.3} s",
                heartbeat.timeout,
                sample.as_secs_f64()
            );
            samples.push(sample);
        }
        rows.push(row(heartbeat, &summary(&mut samples)));
    }
    Ok(rows)
}

/// The worst failover is the figure: the target is a bound on every one.
fn row(heartbeat: Heartbeat, failover: &Summary) -> Row {
    let timeout = heartbeat.timeout.as_secs_f64();
    let detail = if failover.count == 1 {
        "1 kill".to_owned()
    } else {
        format!(
            "worst of {}; median {}, best {}",
            failover.count,
            Unit::Seconds.format(failover.median.as_secs_f64()),
            Unit::Seconds.format(failover.minimum.as_secs_f64())
        )
    };
    Row {
        benchmark: Benchmark::Failover,
        name: format!("failover, heartbeat timeout {timeout} s"),
        saker: Measure::new(failover.maximum.as_secs_f64(), Unit::Seconds).with_detail(detail),
        baseline: Some(Measure::new(timeout, Unit::Seconds).with_detail(format!(
            "timeout; interval {}",
            Unit::Seconds.format(heartbeat.interval.as_secs_f64())
        ))),
        target: Target::AtMost(TARGET_TIMEOUTS * timeout),
    }
}

/// One pilot, one kill: the time from the kill to the replayed task's start.
async fn kill_once(saker: &Path, heartbeat: Heartbeat) -> Result<Duration> {
    let directory = TempDir::new("failover").context("creating a temporary directory")?;
    let log = directory.path().join("starts.log");
    let shape = PilotShape {
        agents: AGENTS,
        slots: Some(SLOTS),
        sync: true,
        heartbeat: Some(heartbeat),
        extra: &[],
    };
    let pilot = RunningPilot::start_in(saker, directory.path(), shape, false).await?;
    let outcome = measure(&pilot, &log, heartbeat).await;
    let stopped = pilot.shutdown().await;
    // After the pilot: the survivor's tasks are gone with it, the victim's are not.
    kill_orphans(&log);
    let failover = outcome?;
    stopped?;
    Ok(failover)
}

async fn measure(pilot: &RunningPilot, log: &Path, heartbeat: Heartbeat) -> Result<Duration> {
    wait_for_agents(pilot).await?;
    let request = || {
        let script = format!(
            "echo \"$SAKER_NODE $SAKER_TASK_ID $(date +%s%N) $$\" >> '{}'; exec sleep {TASK_SECONDS}",
            log.display()
        );
        JobRequest::single(TaskSpec::new(vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            script,
        ]))
    };
    // One task at a time until both agents run one: the root offers work round-robin,
    // so this takes two. The survivor must keep a free slot for the replay.
    let slots_each = (SLOTS / AGENTS) as usize;
    let mut running: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    while running.len() < AGENTS as usize {
        let seen = read_starts(log).len();
        pilot.client.submit(vec![request()]).await?;
        let started = wait_for_start(log, START_TIMEOUT, |starts| starts.get(seen).cloned())
            .await
            .context("a submitted task did not start")?;
        let tasks = running.entry(started.node).or_default();
        tasks.push(started.task);
        if started.node == SURVIVOR && tasks.len() >= slots_each {
            bail!(
                "agent {SURVIVOR} was given all its {slots_each} slots' work before agent \
                 {VICTIM} had any: no free slot is left for a replay"
            );
        }
    }
    let victim_tasks = running.remove(&VICTIM).unwrap_or_default();
    let victim = pilot
        .agent_pid(VICTIM)
        .with_context(|| format!("no process of agent {VICTIM}"))?;
    let killed_at = unix_nanos(SystemTime::now());
    kill(Pid::from_raw(victim as i32), Signal::SIGKILL)
        .with_context(|| format!("killing agent {VICTIM} (pid {victim})"))?;
    let seen = read_starts(log).len();
    let replay_timeout = heartbeat.timeout.mul_f64(TARGET_TIMEOUTS * 5.0) + START_TIMEOUT;
    let replayed = wait_for_start(log, replay_timeout, |starts| {
        starts[seen..]
            .iter()
            .find(|start| start.node == SURVIVOR && victim_tasks.contains(&start.task))
            .cloned()
    })
    .await
    .with_context(|| {
        format!("no task of agent {VICTIM} ({victim_tasks:?}) started on agent {SURVIVOR}")
    })?;
    let nanos = replayed
        .unix_nanos
        .checked_sub(killed_at)
        .context("the replayed task started before the kill")?;
    Ok(Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

/// Waits until the pilot counts both agents and all their slots.
async fn wait_for_agents(pilot: &RunningPilot) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let status = pilot.client.status().await?;
        if status.agents == AGENTS && status.slots == SLOTS {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} of {AGENTS} agents with {} of {SLOTS} slots after {START_TIMEOUT:?}",
                status.agents,
                status.slots
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One line of the start log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    node: u32,
    task: String,
    unix_nanos: u128,
    pid: u32,
}

fn parse_start(line: &str) -> Option<Start> {
    let mut fields = line.split_whitespace();
    let start = Start {
        node: fields.next()?.parse().ok()?,
        task: fields.next()?.to_owned(),
        unix_nanos: fields.next()?.parse().ok()?,
        pid: fields.next()?.parse().ok()?,
    };
    fields.next().is_none().then_some(start)
}

/// The complete lines of the start log so far (a line being written is skipped).
fn read_starts(log: &Path) -> Vec<Start> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .filter_map(parse_start)
        .collect()
}

/// Polls the start log until `found` picks a start from it.
async fn wait_for_start(
    log: &Path,
    timeout: Duration,
    found: impl Fn(&[Start]) -> Option<Start>,
) -> Result<Start> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(start) = found(&read_starts(log)) {
            return Ok(start);
        }
        if Instant::now() >= deadline {
            bail!("nothing in the start log after {timeout:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Kills every task process the log names that is still that task's `sleep`.
fn kill_orphans(log: &Path) {
    let sleeper = format!("sleep {TASK_SECONDS}");
    for start in read_starts(log) {
        if command_line(start.pid).is_some_and(|line| line == sleeper) {
            let _ = kill(Pid::from_raw(start.pid as i32), Signal::SIGKILL);
        }
    }
}

fn unix_nanos(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_lines_parse_and_partial_lines_are_skipped() {
        assert_eq!(
            parse_start("1 17 1763812345123456789 4242"),
            Some(Start {
                node: 1,
                task: "17".to_owned(),
                unix_nanos: 1_763_812_345_123_456_789,
                pid: 4242,
            })
        );
        assert_eq!(parse_start("1 17 1763812345123456789"), None);
        assert_eq!(parse_start("x 17 1 2"), None);
        assert_eq!(parse_start("1 17 1 2 extra"), None);
        let directory = TempDir::new("failover-test").unwrap();
        let log = directory.path().join("starts.log");
        std::fs::write(&log, "0 1 100 10\n1 2 200 20\n0 3 30").unwrap();
        let starts = read_starts(&log);
        assert_eq!(starts.len(), 2);
        assert_eq!((starts[1].node, starts[1].pid), (1, 20));
    }

    #[test]
    fn the_worst_failover_is_judged_against_twice_the_timeout() {
        let failovers = |millis: &[u64]| {
            let mut values: Vec<Duration> =
                millis.iter().copied().map(Duration::from_millis).collect();
            summary(&mut values)
        };
        let met = row(FAST, &failovers(&[1_100, 1_300, 1_900]));
        assert_eq!(met.saker.value, 1.9);
        assert_eq!(met.met(), Some(true));
        assert_eq!(met.ratio(), Some(1.9));
        assert_eq!(met.name, "failover, heartbeat timeout 1 s");
        let missed = row(FAST, &failovers(&[1_100, 2_100, 1_200]));
        assert_eq!(missed.met(), Some(false));
        assert_eq!(row(DEFAULT, &failovers(&[6_000])).met(), Some(true));
    }
}
