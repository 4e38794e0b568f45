//! Elastic policies row (Falkon's comparison): the node-seconds Slurm charges for a
//! bursty workload under each provisioning policy, beside the ideal (the tasks'
//! core-seconds over the cores of a node), and the workload's makespan. Each repeat
//! runs the four policies in a rotated order.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};
use saker_core::provision::Policy;

use super::slurm_startup::IDLE_TIMEOUT;
use super::{Setup, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};
use crate::slurm::{self, parse_job_fields};

const POLICIES: [Policy; 4] = [
    Policy::One,
    Policy::Additive,
    Policy::Exponential,
    Policy::All,
];
/// The workload: bursts of one-second tasks, each submitted a gap after the last
/// finished (long enough for idle allocations to be released).
const BURSTS: u32 = 3;
const TASKS_PER_BURST: u32 = 96;
const GAP: Duration = Duration::from_secs(12);
const POLL: Duration = Duration::from_millis(200);
const TIMEOUT: Duration = Duration::from_secs(300);

/// The pilot's flags: up to 3 one-node allocations, decisions every second, release
/// after 5 s idle.
fn flags(policy: Policy) -> &'static [&'static str] {
    macro_rules! with_policy {
        ($name:literal) => {
            &[
                "--elastic",
                "--max-nodes",
                "3",
                "--max-pending",
                "3",
                "--policy",
                $name,
                "--time",
                "10m",
                "--grow-after",
                "5s",
                "--idle-release",
                "5s",
                "--cores-per-node",
                "4",
                "--provision-interval",
                "1s",
            ]
        };
    }
    match policy {
        Policy::One => with_policy!("one"),
        Policy::Additive => with_policy!("additive"),
        Policy::Exponential => with_policy!("exponential"),
        Policy::All => with_policy!("all"),
    }
}

/// What one run of the workload under one policy cost.
#[derive(Debug, Clone, Copy)]
struct Cost {
    /// Node-seconds of the allocations, as Slurm counts their run time.
    node_seconds: f64,
    /// The tasks' run time over the cores of a node.
    ideal: f64,
    makespan: Duration,
    allocations: usize,
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let repeats = setup.sizes.slurm_startup_repeats.clamp(1, 2);
    let runtime = client_runtime()?;
    let mut costs: Vec<Vec<Cost>> = vec![Vec::new(); POLICIES.len()];
    for repeat in 0..repeats as usize {
        for turn in 0..POLICIES.len() {
            let which = (repeat + turn) % POLICIES.len();
            let policy = POLICIES[which];
            slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
            let cost = runtime
                .block_on(workload(&setup.saker, policy))
                .with_context(|| format!("policy {}, repeat {}", policy.as_str(), repeat + 1))?;
            eprintln!("saker-perf: elastic policy {}: {cost:?}", policy.as_str());
            costs[which].push(cost);
        }
    }
    Ok(POLICIES
        .iter()
        .zip(costs)
        .map(|(policy, costs)| row(*policy, &costs))
        .collect())
}

fn row(policy: Policy, costs: &[Cost]) -> Row {
    let seconds = |f: fn(&Cost) -> f64| -> Vec<Duration> {
        costs
            .iter()
            .map(|c| Duration::from_secs_f64(f(c)))
            .collect()
    };
    let used = summary(&mut seconds(|c| c.node_seconds));
    let ideal = summary(&mut seconds(|c| c.ideal));
    let makespan = summary(&mut costs.iter().map(|c| c.makespan).collect::<Vec<_>>());
    let allocations: Vec<String> = costs.iter().map(|c| c.allocations.to_string()).collect();
    Row {
        benchmark: Benchmark::SlurmPolicies,
        name: format!(
            "elastic policy {}: node-seconds, {BURSTS} bursts of {TASKS_PER_BURST} × 1 s",
            policy.as_str()
        ),
        saker: Measure::new(used.median.as_secs_f64(), Unit::NodeSeconds).with_detail(format!(
            "makespan {:.1} s, allocations {}, median of {}, {:.0}–{:.0}",
            makespan.median.as_secs_f64(),
            allocations.join("/"),
            used.count,
            used.minimum.as_secs_f64(),
            used.maximum.as_secs_f64(),
        )),
        baseline: Some(
            Measure::new(ideal.median.as_secs_f64(), Unit::NodeSeconds)
                .with_detail("ideal: task core-seconds / 4 cores a node"),
        ),
        target: Target::None,
    }
}

/// The bursts on a new elastic pilot with no node; then every allocation released.
async fn workload(saker: &std::path::Path, policy: Policy) -> Result<Cost> {
    let directory = TempDir::new("slurm-policies").context("creating a temporary directory")?;
    let shape = PilotShape {
        agents: 0,
        slots: None,
        sync: false,
        heartbeat: None,
        extra: flags(policy),
    };
    let pilot = RunningPilot::start_in(saker, directory.path(), shape, false).await?;
    let outcome = bursts(&pilot).await;
    let stopped = pilot.shutdown().await;
    let (jobs, makespan, run_micros) = outcome?;
    stopped?;
    let mut node_seconds = 0.0;
    for job in &jobs {
        node_seconds += charged(*job)?;
    }
    Ok(Cost {
        node_seconds,
        ideal: run_micros as f64 / 1e6 / 4.0,
        makespan,
        allocations: jobs.len(),
    })
}

/// Runs the bursts; returns the Slurm jobs the pilot asked for, the makespan and the
/// tasks' summed run time (µs).
async fn bursts(pilot: &RunningPilot) -> Result<(BTreeSet<u32>, Duration, u64)> {
    let mut jobs = BTreeSet::new();
    let began = Instant::now();
    let mut makespan = Duration::ZERO;
    for burst in 1..=BURSTS {
        let request = JobRequest {
            spec: TaskSpec::new(vec!["sleep".into(), "1".into()]),
            array: Some(
                format!("1-{TASKS_PER_BURST}")
                    .parse::<ArraySpec>()
                    .context("array")?,
            ),
            inline_output: None,
        };
        pilot.client.submit(vec![request]).await?;
        let done = u64::from(burst * TASKS_PER_BURST);
        watch(pilot, &mut jobs, |status| status.succeeded >= done).await?;
        makespan = began.elapsed();
        if burst < BURSTS {
            // The workload's idle gap, not a wait for a condition.
            let gap_end = Instant::now() + GAP;
            while Instant::now() < gap_end {
                watch_once(pilot, &mut jobs).await?;
                tokio::time::sleep(POLL).await;
            }
        }
    }
    watch(pilot, &mut jobs, |status| status.allocations.is_empty()).await?;
    let mut stream = pilot.client.results(1, false).await?;
    let mut run_micros = 0;
    while let Some(record) = stream.next().await? {
        if let Some(start) = record.start_time {
            run_micros += record
                .end_time
                .unix_micros()
                .saturating_sub(start.unix_micros());
        }
    }
    Ok((jobs, makespan, run_micros))
}

/// Polls status until `done` holds, noting the allocations' jobs.
async fn watch(
    pilot: &RunningPilot,
    jobs: &mut BTreeSet<u32>,
    done: impl Fn(&saker_client::StatusReport) -> bool,
) -> Result<()> {
    let started = Instant::now();
    loop {
        if done(&watch_once(pilot, jobs).await?) {
            return Ok(());
        }
        if started.elapsed() > TIMEOUT {
            bail!("not done within {TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn watch_once(
    pilot: &RunningPilot,
    jobs: &mut BTreeSet<u32>,
) -> Result<saker_client::StatusReport> {
    let status = pilot.client.status().await?;
    jobs.extend(status.allocations.iter().filter_map(|a| a.job_id));
    Ok(status)
}

/// The node-seconds Slurm counts for `job` once it has ended: its run time times its
/// nodes (0 for one cancelled while pending).
fn charged(job: u32) -> Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let output = Command::new("scontrol")
            .args(["show", "job", "--oneliner", &job.to_string()])
            .stdin(Stdio::null())
            .output()
            .context("running scontrol")?;
        let fields = parse_job_fields(&String::from_utf8_lossy(&output.stdout));
        let state = fields.get("JobState").map(String::as_str).unwrap_or("");
        if !matches!(state, "PENDING" | "RUNNING" | "COMPLETING" | "CONFIGURING") {
            let run = fields
                .get("RunTime")
                .with_context(|| format!("job {job} has no RunTime"))?;
            let nodes: f64 = fields
                .get("NumNodes")
                .and_then(|n| n.split('-').next()?.parse().ok())
                .unwrap_or(1.0);
            return Ok(run_time_seconds(run)? * nodes);
        }
        if Instant::now() > deadline {
            bail!("job {job} is still {state}");
        }
        std::thread::sleep(POLL);
    }
}

/// Slurm's `RunTime`: `[D-]HH:MM:SS`.
fn run_time_seconds(text: &str) -> Result<f64> {
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().context("days")?, clock),
        None => (0, text),
    };
    let mut seconds = 0u64;
    for part in clock.split(':') {
        seconds = seconds * 60 + part.parse::<u64>().with_context(|| format!("`{text}`"))?;
    }
    Ok((days * 86_400 + seconds) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_run_times_parse() {
        assert_eq!(run_time_seconds("00:00:17").unwrap(), 17.0);
        assert_eq!(run_time_seconds("01:02:03").unwrap(), 3723.0);
        assert_eq!(run_time_seconds("2-00:00:01").unwrap(), 172_801.0);
        assert!(run_time_seconds("soon").is_err());
    }

    #[test]
    fn each_policy_has_its_flags() {
        for policy in POLICIES {
            let flags = flags(policy);
            let at = flags.iter().position(|f| *f == "--policy").unwrap();
            assert_eq!(flags[at + 1], policy.as_str());
        }
    }
}
