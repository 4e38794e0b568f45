//! Takeover: from SIGKILL of a pilot's root to its standby accepting results again,
//! as the results show it: the widest gap between consecutive results' end times,
//! beside the heartbeat timeout that agents would otherwise wait out.
//!
//! The pilot is `saker pilot --agents 8 --slots 8 --standby 1` (one slot an agent,
//! default heartbeats, journal fsynced). Once `status` counts every agent and the
//! standby has listed itself in `DIR/standby/`, one array of `/bin/true` tasks is
//! submitted; when a quarter of them have results the root process (and only it: the
//! pilot's process group also holds the agents and the standby) is SIGKILLed. The
//! standby takes the root's lock and resumes from the journal, and the agents join it.
//! The benchmark reconnects through the pilot directory (the new root rewrites
//! `client.json`), waits for the array, reads every result and checks that each task
//! has exactly one, succeeded.
//!
//! At the end the new root is asked to shut down, and the pilot's process group must
//! empty by itself (the new root, its replacement standby and the agents are all in
//! it: the root spawned them, and the standby that took over spawned its own). What
//! is left after [`STOP_TIMEOUT`] is named in the row's detail and killed with the
//! group when the [`RunningPilot`] is dropped.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use saker_client::results::TerminalState;
use saker_client::spec::{ArraySpec, JobRequest};
use saker_client::standbys::{STANDBY_DIR, Standby};
use saker_client::{Client, StatusReport};

use super::memory::true_spec;
use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{CLIENT_NAME, PilotShape, RunningPilot};
use crate::process::{TempDir, command_line, process_ids, tail};
use crate::report::{Measure, Row, Target, Unit};

const AGENTS: u32 = 8;

/// The pilot: one slot an agent, saker's default heartbeats, journal fsynced.
const SHAPE: PilotShape = PilotShape {
    agents: AGENTS,
    slots: Some(AGENTS),
    sync: true,
    heartbeat: None,
    extra: &["--standby", "1"],
};

/// saker's default heartbeat timeout (the pilot runs with the defaults): how long an
/// agent would wait for a silent root without the address-file watch.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// The widest gap between results may be at most this many seconds (issue 31).
const TARGET_SECONDS: f64 = 3.0;

/// The root is killed once this fraction of the tasks (1 / N) have results.
const KILL_AT_PART: u64 = 4;

/// How long the agents and the standby may take to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the standby may take to answer clients after the kill.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// One connection attempt to the new root at most (it may be listening but busy).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the tasks may take to reach the kill, and all of them to end.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the pilot's processes may take to end after the shutdown request.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// How often `status` is polled before the kill, and the new root tried after it.
const POLL: Duration = Duration::from_millis(10);
const RETRY: Duration = Duration::from_millis(5);

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let tasks = setup.sizes.takeover_tasks;
    let runtime = client_runtime()?;
    let takeover = runtime
        .block_on(measure(&setup.saker, tasks))
        .with_context(|| format!("a takeover under {tasks} tasks on {AGENTS} agents"))?;
    eprintln!("saker-perf: takeover: {takeover:?}");
    Ok(vec![row(&takeover)])
}

/// What one takeover showed.
#[derive(Debug, Clone, PartialEq)]
struct Takeover {
    tasks: u64,
    /// Results the root had accepted when it was killed.
    before_kill: u64,
    /// The widest gap between consecutive results' end times.
    widest_gap: Duration,
    /// Where that gap starts, relative to the kill, in seconds (negative: before it).
    gap_from_kill: f64,
    /// From the kill to the new root answering `status`.
    answered: Duration,
    /// Results whose accepted attempt was not the task's first. An attempt in flight
    /// at the kill leaves no trace here: dispatches are not journaled, so the new root
    /// queues its task afresh and its replay is the task's first known attempt.
    retried: u64,
    /// Results of attempts that started before the kill and were accepted after it
    /// (adopted from the old root's agents rather than replayed).
    across: u64,
    /// Results the new root received for tasks that already had one (`status`).
    duplicates: u64,
    /// Command lines of the pilot's processes left after its shutdown.
    left: Vec<String>,
}

/// The widest gap is the figure, beside the heartbeat timeout.
fn row(takeover: &Takeover) -> Row {
    let mut detail = format!(
        "widest gap between results ending, from {:+.2} s of the kill; new root answered \
         {} after it; {} results of a second attempt, {} started before the kill and \
         accepted after, {} duplicates",
        takeover.gap_from_kill,
        Unit::Seconds.format(takeover.answered.as_secs_f64()),
        takeover.retried,
        takeover.across,
        takeover.duplicates,
    );
    if !takeover.left.is_empty() {
        detail.push_str(&format!(
            "; {} processes left after shutdown",
            takeover.left.len()
        ));
    }
    Row {
        benchmark: Benchmark::Takeover,
        name: format!(
            "takeover, {} tasks on {AGENTS} agents, root killed at {}",
            takeover.tasks, takeover.before_kill
        ),
        saker: Measure::new(takeover.widest_gap.as_secs_f64(), Unit::Seconds).with_detail(detail),
        baseline: Some(
            Measure::new(HEARTBEAT_TIMEOUT.as_secs_f64(), Unit::Seconds).with_detail(
                "heartbeat timeout: what agents would wait without the address-file watch",
            ),
        ),
        target: Target::AtMost(TARGET_SECONDS),
    }
}

/// One pilot, one kill of its root.
async fn measure(saker: &Path, tasks: u64) -> Result<Takeover> {
    let directory = TempDir::new("takeover").context("creating a temporary directory")?;
    let pilot = RunningPilot::start_in(saker, directory.path(), SHAPE, false).await?;
    let measured = kill_and_take_over(&pilot, tasks)
        .await
        .map_err(|error| error.context(logs(directory.path())));
    // The old root is dead: its `RunningPilot::shutdown` would wait for it and then kill
    // the group, new root included. The new one is asked, and the group checked.
    let (outcome, left) = match measured {
        Ok((takeover, client)) => {
            let left = stop(&client, &pilot).await;
            (Ok(takeover), left)
        }
        Err(error) => (Err(error), Vec::new()),
    };
    for line in &left {
        eprintln!("saker-perf: takeover: left after shutdown: {line}");
    }
    // Dropping the pilot kills what is left of its group and reaps the old root.
    drop(pilot);
    let mut takeover = outcome?;
    takeover.left = left;
    Ok(takeover)
}

async fn kill_and_take_over(pilot: &RunningPilot, tasks: u64) -> Result<(Takeover, Client)> {
    wait_until_ready(pilot).await?;
    let array: ArraySpec = format!("1-{tasks}").parse().context("array spec")?;
    let submitted = pilot
        .client
        .submit(vec![JobRequest {
            spec: true_spec(),
            array: Some(array),
            inline_output: None,
        }])
        .await?;
    let job = submitted
        .first()
        .context("the pilot answered a submit without a job")?
        .job;

    let kill_at = (tasks / KILL_AT_PART).max(1);
    let deadline = Instant::now() + RUN_TIMEOUT;
    let before_kill = loop {
        let status = pilot.client.status().await?;
        if status.succeeded >= kill_at {
            break status.succeeded;
        }
        if status.failed + status.cancelled > 0 {
            bail!(
                "{} tasks failed and {} were cancelled before the kill",
                status.failed,
                status.cancelled
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "{} of {kill_at} results after {RUN_TIMEOUT:?}",
                status.succeeded
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let root = pilot.root_pid();
    let killed_unix = unix_micros(SystemTime::now());
    let killed = Instant::now();
    kill(Pid::from_raw(root as i32), Signal::SIGKILL)
        .with_context(|| format!("killing the root (pid {root})"))?;

    let (client, _) = reconnect(pilot.dir(), root).await?;
    let answered = killed.elapsed();
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(TAKEOVER_TIMEOUT);
    let report = tokio::time::timeout(remaining, client.wait(Some(vec![job])))
        .await
        .with_context(|| format!("the array had not ended {remaining:?} after the takeover"))??;
    if report.succeeded != tasks {
        bail!(
            "{} of {tasks} tasks succeeded ({} failed, {} cancelled)",
            report.succeeded,
            report.failed,
            report.cancelled
        );
    }
    let status = client.status().await?;

    let mut stream = client.results(1, false).await?;
    let mut ends = Vec::with_capacity(tasks as usize);
    let mut seen = BTreeSet::new();
    let mut retried = 0;
    let mut across = 0;
    let mut unsuccessful = 0;
    while let Some(record) = stream.next().await? {
        if record.job != job {
            continue;
        }
        seen.insert(record.task);
        ends.push(record.end_time.unix_micros());
        retried += u64::from(record.attempts > 1);
        let started = record.start_time.map(|time| time.unix_micros());
        let accepted = record.accept_time.unwrap_or(record.end_time).unix_micros();
        across +=
            u64::from(started.is_some_and(|start| start < killed_unix) && accepted > killed_unix);
        unsuccessful += u64::from(record.state != TerminalState::Succeeded);
    }
    check_results(tasks, ends.len() as u64, seen.len() as u64, unsuccessful)?;
    let (gap_start, gap_end) =
        widest_gap(&mut ends).context("fewer than two results: no gap to measure")?;
    let takeover = Takeover {
        tasks,
        before_kill,
        widest_gap: Duration::from_micros(gap_end - gap_start),
        gap_from_kill: (gap_start as f64 - killed_unix as f64) / 1e6,
        answered,
        retried,
        across,
        duplicates: status.duplicates,
        left: Vec::new(),
    };
    Ok((takeover, client))
}

/// Every acknowledged task ends with exactly one accepted, successful result.
fn check_results(tasks: u64, results: u64, distinct: u64, unsuccessful: u64) -> Result<()> {
    if results != tasks || distinct != tasks {
        bail!("{results} results for {distinct} distinct tasks; {tasks} tasks were submitted");
    }
    if unsuccessful > 0 {
        bail!("{unsuccessful} of {tasks} results are not `succeeded`");
    }
    Ok(())
}

/// The two consecutive end times (microseconds) furthest apart, once sorted.
fn widest_gap(ends: &mut [u64]) -> Option<(u64, u64)> {
    ends.sort_unstable();
    ends.windows(2)
        .map(|pair| (pair[0], pair[1]))
        .max_by_key(|&(start, end)| end - start)
}

/// Waits until `status` counts every agent and slot and the standby is waiting.
async fn wait_until_ready(pilot: &RunningPilot) -> Result<()> {
    wait_for_pilot(&pilot.client, pilot.dir(), AGENTS, AGENTS, 1).await
}

/// Waits until `status` counts `agents` agents and `slots` slots, and at least
/// `standbys` standbys wait in `dir`.
pub(super) async fn wait_for_pilot(
    client: &Client,
    dir: &Path,
    agents: u32,
    slots: u32,
    standbys: usize,
) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let status = client.status().await?;
        let waiting = if standbys > 0 {
            standbys_waiting(dir)
        } else {
            0
        };
        if status.agents == agents && status.slots == slots && waiting >= standbys {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} of {agents} agents, {} of {slots} slots and {waiting} of {standbys} \
                 standbys after {START_TIMEOUT:?}",
                status.agents,
                status.slots
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Standbys listed in `DIR/standby/` whose process is alive.
fn standbys_waiting(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir.join(STANDBY_DIR)) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| {
            serde_json::from_slice::<Standby>(&std::fs::read(entry.path()).ok()?).ok()
        })
        .filter(|standby| command_line(standby.pid).is_some_and(|line| !line.is_empty()))
        .count()
}

/// Connects to the root that answers for `dir` after `old_root` died: retried until
/// `client.json` names a root that answers `status`.
pub(super) async fn reconnect(dir: &Path, old_root: u32) -> Result<(Client, StatusReport)> {
    let deadline = Instant::now() + TAKEOVER_TIMEOUT;
    loop {
        let attempt = async {
            let client = Client::connect(dir, CLIENT_NAME).await?;
            let status = client.status().await?;
            anyhow::Ok((client, status))
        };
        let last = match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(Ok((client, status))) => match &status.root {
                // The old root is dead: whoever answers is a new one. Say so if not.
                Some(root) if root.pid == old_root => {
                    format!("status names the killed root (pid {old_root})")
                }
                _ => return Ok((client, status)),
            },
            Ok(Err(error)) => format!("{error:#}"),
            Err(_) => format!("no answer within {CONNECT_TIMEOUT:?}"),
        };
        if Instant::now() >= deadline {
            bail!("no root answered within {TAKEOVER_TIMEOUT:?} of the kill; last: {last}");
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Asks the new root to stop and waits until no process of the pilot's group is left
/// but the old root (a zombie until the group is reaped); returns what is left then.
pub(super) async fn stop(client: &Client, pilot: &RunningPilot) -> Vec<String> {
    // The root may close the connection before answering; what is left is what counts.
    let deadline = Instant::now() + STOP_TIMEOUT;
    let _ = tokio::time::timeout(STOP_TIMEOUT, client.shutdown(true)).await;
    let group = pilot.process_group();
    loop {
        let left = group_members(group, pilot.root_pid());
        if left.is_empty() || Instant::now() >= deadline {
            return left
                .into_iter()
                .map(|pid| format!("{pid}: {}", command_line(pid).unwrap_or_default()))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Live (not zombie) processes of process group `group` but `except`.
fn group_members(group: u32, except: u32) -> Vec<u32> {
    process_ids()
        .into_iter()
        .filter(|&pid| pid != except)
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| parse_state_and_group(&stat))
                .is_some_and(|(state, pgrp)| pgrp == group && state != 'Z' && state != 'X')
        })
        .collect()
}

/// The state letter and process group of a `/proc/PID/stat` line.
fn parse_state_and_group(stat: &str) -> Option<(char, u32)> {
    // The command name is parenthesised and may hold spaces; state, ppid, pgrp follow.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// The ends of the pilot's logs (the killed root's and the standbys'), for errors.
fn logs(directory: &Path) -> String {
    let mut text = format!(
        "killed root's log:\n{}",
        tail(&directory.join("pilot.stderr"), 10)
    );
    let logs = directory.join("pilot").join("logs");
    for number in 0..2 {
        let log = logs.join(format!("standby-{number}.log"));
        if log.exists() {
            text.push_str(&format!("\nstandby-{number}.log:\n{}", tail(&log, 10)));
        }
    }
    text
}

fn unix_micros(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |elapsed| {
        u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takeover(gap_millis: u64) -> Takeover {
        Takeover {
            tasks: 20_000,
            before_kill: 5_000,
            widest_gap: Duration::from_millis(gap_millis),
            gap_from_kill: -0.05,
            answered: Duration::from_millis(40),
            retried: 8,
            across: 0,
            duplicates: 0,
            left: Vec::new(),
        }
    }

    #[test]
    fn the_widest_gap_is_judged_against_three_seconds_beside_the_heartbeat_timeout() {
        let met = row(&takeover(1_200));
        assert_eq!(met.saker.value, 1.2);
        assert_eq!(met.met(), Some(true));
        assert_eq!(met.ratio(), Some(1.2 / 5.0));
        assert_eq!(
            met.name,
            "takeover, 20000 tasks on 8 agents, root killed at 5000"
        );
        let detail = met.saker.detail.as_deref().unwrap();
        assert!(detail.contains("from -0.05 s of the kill"), "{detail}");
        assert!(detail.contains("answered 40.00 ms after it"), "{detail}");
        assert!(detail.contains("8 results of a second attempt"), "{detail}");
        assert!(!detail.contains("left after shutdown"), "{detail}");
        assert_eq!(met.baseline.as_ref().map(|b| b.value), Some(5.0));
        assert_eq!(row(&takeover(3_000)).met(), Some(true));
        assert_eq!(row(&takeover(3_001)).met(), Some(false));
        let mut leaky = takeover(200);
        leaky.left = vec!["4242: saker agent".to_owned()];
        let detail = row(&leaky).saker.detail.unwrap();
        assert!(
            detail.ends_with("; 1 processes left after shutdown"),
            "{detail}"
        );
    }

    #[test]
    fn the_widest_gap_is_between_neighbours_once_sorted() {
        assert_eq!(widest_gap(&mut [30, 10, 2_500, 20, 40]), Some((40, 2_500)));
        assert_eq!(widest_gap(&mut [5]), None);
        assert_eq!(widest_gap(&mut []), None);
    }

    #[test]
    fn each_task_must_have_one_successful_result() {
        assert!(check_results(3, 3, 3, 0).is_ok());
        assert!(check_results(3, 4, 3, 0).is_err(), "a doubled result");
        assert!(check_results(3, 2, 2, 0).is_err(), "a lost result");
        assert!(
            check_results(3, 3, 2, 0).is_err(),
            "a doubled and a lost one"
        );
        assert!(check_results(3, 3, 3, 1).is_err(), "a failed one");
    }

    #[test]
    fn stat_lines_give_state_and_group() {
        let stat = "4242 (saker pilot) S 1 4200 4200 0 -1 4194560 …";
        assert_eq!(parse_state_and_group(stat), Some(('S', 4200)));
        assert_eq!(parse_state_and_group("7 (x) Z 1 9 9"), Some(('Z', 9)));
        assert_eq!(parse_state_and_group("garbage"), None);
    }
}
