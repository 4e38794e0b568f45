//! Agent scale (issue 15): hundreds of agent processes on this one machine, linked
//! into a tree. Three benchmarks: the makespan efficiency of 1-second tasks on 512
//! one-slot agents, start-up, registration and shutdown of 1,000 agents, and the
//! per-task cost of the same number of agents in trees of one, two and three levels.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};

use super::{Setup, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::{command_line, find_in_path, process_group_of, process_ids, resident_bytes};
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

/// How long a tree may take until every agent has registered.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(180);

/// How long the processes of a pilot may linger after the root has exited.
const GONE_TIMEOUT: Duration = Duration::from_secs(10);

const MEBIBYTE: f64 = 1024.0 * 1024.0;

/// Levels of a tree of `agents` under the root with fan-out `fanout` (a k-ary heap,
/// as `saker_actors::node::parent_of` places them).
pub fn levels(agents: u32, fanout: u32) -> u32 {
    let fanout = u64::from(fanout.max(2));
    let (mut levels, mut covered, mut width) = (0, 0u64, 1u64);
    while covered < u64::from(agents) {
        width *= fanout;
        covered += width;
        levels += 1;
    }
    levels
}

fn shape(agents: u32, fanout: &'static [&'static str], sync: bool) -> PilotShape {
    PilotShape {
        agents,
        slots: Some(agents),
        sync,
        heartbeat: None,
        extra: fanout,
    }
}

/// `--fanout F` as a static flag list (the shapes these rows use).
fn fanout_flags(fanout: u32) -> Result<&'static [&'static str]> {
    Ok(match fanout {
        4 => &["--fanout", "4"],
        8 => &["--fanout", "8"],
        16 => &["--fanout", "16"],
        64 => &["--fanout", "64"],
        other => bail!("no flags for fan-out {other}"),
    })
}

/// Starts a pilot of `agents` one-slot agents and waits until all have registered;
/// returns it and the time from spawning `saker pilot` until then.
async fn start_tree(
    setup: &Setup,
    label: &str,
    agents: u32,
    fanout: u32,
    sync: bool,
) -> Result<(RunningPilot, Duration)> {
    let started = Instant::now();
    let pilot = RunningPilot::start(
        &setup.saker,
        label,
        shape(agents, fanout_flags(fanout)?, sync),
    )
    .await?;
    let deadline = started + REGISTER_TIMEOUT;
    loop {
        let status = pilot.client.status().await?;
        if status.agents == agents {
            return Ok((pilot, started.elapsed()));
        }
        if Instant::now() >= deadline {
            bail!(
                "{} of {agents} agents registered within {REGISTER_TIMEOUT:?}",
                status.agents
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn array_job(program: &str, args: &[&str], count: u64) -> Result<JobRequest> {
    let array: ArraySpec = format!("1-{count}").parse().context("array spec")?;
    let mut argv = vec![program.to_owned()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    Ok(JobRequest {
        spec: TaskSpec::new(argv),
        array: Some(array),
        inline_output: None,
    })
}

/// Shuts the pilot down; returns the time until the root has exited (with 0) and
/// no process of its group is left.
async fn stop_tree(pilot: RunningPilot) -> Result<Duration> {
    let group = pilot.process_group();
    let started = Instant::now();
    pilot.shutdown().await?;
    let deadline = Instant::now() + GONE_TIMEOUT;
    loop {
        let left = group_members(group);
        if left.is_empty() {
            return Ok(started.elapsed());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} processes of the pilot outlived its shutdown",
                left.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn group_members(group: u32) -> Vec<u32> {
    process_ids()
        .into_iter()
        .filter(|&pid| process_group_of(pid) == Some(group))
        .collect()
}

/// Mean resident and proportional set size of the pilot's agent processes, in bytes.
/// PSS shares the pages of the binary among the processes that map it: what one more
/// agent costs the machine.
fn agent_memory(pilot: &RunningPilot) -> Result<(f64, f64)> {
    let group = pilot.process_group();
    let agents: Vec<u32> = group_members(group)
        .into_iter()
        .filter(|&pid| command_line(pid).is_some_and(|line| line.contains(" agent --dir ")))
        .collect();
    if agents.is_empty() {
        bail!("no agent process found");
    }
    let (mut rss, mut pss) = (0u64, 0u64);
    for &pid in &agents {
        rss += resident_bytes(pid)?;
        pss += proportional_bytes(pid)?;
    }
    let count = agents.len() as f64;
    Ok((rss as f64 / count, pss as f64 / count))
}

/// `Pss` of `/proc/PID/smaps_rollup`, in bytes.
fn proportional_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let line = text
        .lines()
        .find(|line| line.starts_with("Pss:"))
        .with_context(|| format!("no Pss line in {path}"))?;
    let kibibytes: u64 = line["Pss:".len()..]
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .with_context(|| format!("unreadable Pss line in {path}"))?;
    Ok(kibibytes * 1024)
}

fn median_f64(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// `agents-512`: 1-second `sleep` tasks on N one-slot agents at fan-out 8, so many
/// that the ideal makespan is `waves` seconds, beside N threads running the same
/// `sleep` directly; runs alternate raw, saker, raw, saker.
pub fn run_tree_efficiency(setup: &Setup) -> Result<Vec<Row>> {
    let agents = setup.sizes.agents_tree;
    let waves = setup.sizes.agents_waves;
    let count = u64::from(agents) * waves;
    let ideal = waves as f64;
    let sleep = find_in_path("sleep")?;
    let sleep_text = sleep.to_string_lossy().into_owned();
    let runtime = client_runtime()?;
    let (mut raw_efficiency, mut saker_efficiency) = (Vec::new(), Vec::new());
    let (mut rss, mut pss) = (Vec::new(), Vec::new());
    for _ in 0..setup.sizes.agents_rounds {
        let raw_elapsed =
            raw::spawn_loop(&sleep, &["1"], count, agents as usize).context("raw sleep threads")?;
        raw_efficiency.push(ideal / raw_elapsed.as_secs_f64());
        let request = array_job(&sleep_text, &["1"], count)?;
        let (elapsed, memory) = runtime.block_on(async {
            let (pilot, _) = start_tree(setup, "agents-tree", agents, 8, true).await?;
            let outcome = async {
                let memory = agent_memory(&pilot)?;
                anyhow::Ok((pilot.time_job(request).await?, memory))
            }
            .await;
            let stopped = stop_tree(pilot).await;
            let outcome = outcome?;
            stopped?;
            anyhow::Ok(outcome)
        })?;
        saker_efficiency.push(ideal / elapsed.as_secs_f64());
        rss.push(memory.0);
        pss.push(memory.1);
    }
    let rounds = raw_efficiency.len();
    let efficiency = |values: &mut Vec<f64>| {
        let (low, high) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
        Measure::new(median_f64(values), Unit::Efficiency)
            .with_detail(format!("median of {rounds}, {low:.3}–{high:.3}"))
    };
    let (rss, pss) = (median_f64(&mut rss), median_f64(&mut pss));
    Ok(vec![
        Row {
            benchmark: Benchmark::AgentsTree,
            name: format!("agents {agents} × 1 slot: 1 s tasks × {count}"),
            saker: efficiency(&mut saker_efficiency),
            baseline: Some(efficiency(&mut raw_efficiency)),
            target: Target::AtLeast(0.95),
        },
        Row {
            benchmark: Benchmark::AgentsTree,
            name: format!("agents {agents}: memory per agent (PSS)"),
            saker: Measure::new(pss / MEBIBYTE, Unit::Mebibytes)
                .with_detail(format!("RSS {:.1} MiB", rss / MEBIBYTE)),
            baseline: None,
            target: Target::None,
        },
    ])
}

/// `agents-1000`: N agents at fan-out 8 from spawning `saker pilot` until `status`
/// counts them all, beside N concurrent spawns of `saker --version` (the floor for
/// starting that many processes of this binary); then one `/bin/true` per agent, and
/// the shutdown until the root has exited 0 and no process of the pilot is left.
pub fn run_many(setup: &Setup) -> Result<Vec<Row>> {
    let agents = setup.sizes.agents_many;
    let runtime = client_runtime()?;
    let (mut raw_starts, mut starts, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..setup.sizes.agents_rounds {
        raw_starts.push(
            raw::spawn_loop(
                &setup.saker,
                &["--version"],
                u64::from(agents),
                agents as usize,
            )
            .context("raw spawns of saker --version")?,
        );
        let request = array_job("/bin/true", &[], u64::from(agents))?;
        let (start, stop) = runtime.block_on(async {
            let (pilot, start) = start_tree(setup, "agents-many", agents, 8, false).await?;
            let worked = pilot.run_job(request).await;
            let stop = stop_tree(pilot).await;
            worked?;
            anyhow::Ok((start, stop?))
        })?;
        starts.push(start);
        stops.push(stop);
    }
    let (raw_starts, starts, stops) = (
        summary(&mut raw_starts),
        summary(&mut starts),
        summary(&mut stops),
    );
    let seconds = |summary: &super::Summary| {
        Measure::new(summary.median.as_secs_f64(), Unit::Seconds).with_detail(summary.detail())
    };
    Ok(vec![
        Row {
            benchmark: Benchmark::AgentsMany,
            name: format!("agents {agents}: start → all registered"),
            saker: seconds(&starts),
            baseline: Some(seconds(&raw_starts)),
            target: Target::None,
        },
        Row {
            benchmark: Benchmark::AgentsMany,
            name: format!("agents {agents}: shutdown → all exited"),
            saker: seconds(&stops),
            baseline: None,
            target: Target::None,
        },
    ])
}

/// `agents-depth`: the same short tasks through trees of the same agents in one,
/// two and three levels (and fewer agents in one level, for contrast); per-task cost
/// = (submit → all done) ÷ tasks. Each round runs every shape once, in turn.
pub fn run_depth(setup: &Setup) -> Result<Vec<Row>> {
    const SHAPES: [(u32, u32); 4] = [(64, 64), (64, 8), (64, 4), (16, 16)];
    let tasks = setup.sizes.agents_depth_tasks;
    let runtime = client_runtime()?;
    let mut costs: Vec<Vec<Duration>> = vec![Vec::new(); SHAPES.len()];
    for _ in 0..setup.sizes.agents_rounds {
        for (index, &(agents, fanout)) in SHAPES.iter().enumerate() {
            let request = array_job("/bin/true", &[], tasks)?;
            let elapsed = runtime.block_on(async {
                let (pilot, _) = start_tree(setup, "agents-depth", agents, fanout, false).await?;
                let outcome = pilot.time_job(request).await;
                let stopped = stop_tree(pilot).await;
                let elapsed = outcome?;
                stopped?;
                anyhow::Ok(elapsed)
            })?;
            costs[index].push(elapsed / u32::try_from(tasks).unwrap_or(u32::MAX));
        }
    }
    let micros = |summary: &super::Summary| {
        Measure::new(summary.median.as_secs_f64() * 1e6, Unit::Microseconds)
            .with_detail(summary.detail())
    };
    let summaries: Vec<super::Summary> = costs.iter_mut().map(|c| summary(c)).collect();
    let one_level = micros(&summaries[0]);
    Ok(SHAPES
        .iter()
        .zip(&summaries)
        .map(|(&(agents, fanout), cost)| Row {
            benchmark: Benchmark::AgentsDepth,
            name: format!(
                "per task, {agents} agents in {} level(s), fan-out {fanout}",
                levels(agents, fanout)
            ),
            saker: micros(cost),
            baseline: Some(one_level.clone()),
            target: Target::None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_heap_layout() {
        assert_eq!(levels(64, 64), 1);
        assert_eq!(levels(64, 8), 2);
        assert_eq!(levels(64, 4), 3);
        assert_eq!(levels(512, 8), 3);
        assert_eq!(levels(1000, 8), 4);
        assert_eq!(levels(16, 16), 1);
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median_f64(&mut [0.9, 0.5, 0.7]), 0.7);
        assert_eq!(median_f64(&mut [1.0, 0.25, 0.75, 0.5]), 0.625);
    }
}
