//! What a dependency edge costs the scheduling core, measured on `saker_core::Core`
//! in this process (no pilot, no I/O, no clock): submit N single-task jobs with E
//! `after` edges and run them to completion on one node whose every attempt succeeds
//! at once, beside the same N jobs without edges. Runs alternate, baseline first
//! (baseline, edges, baseline, edges, …), and each figure is a median.
//!
//! Two shapes: a fan-in (E jobs, then one job after all of them) and a random DAG
//! (each job after up to 4 distinct earlier jobs, drawn uniformly with a fixed seed).
//!
//! - Time per edge: (median run with edges − median without) / E, submission and run
//!   to completion together; the baseline column is the run without edges per job.
//! - Heap per edge: live heap bytes, *counted* by saker-perf's allocator
//!   ([`crate::heap`], not a resident-set delta), from before the submissions to after
//!   them, with edges minus without, / E: what the edges hold while their jobs wait
//!   (each is freed when the job it names ends).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_core::{
    AttemptOutcome, Core, CoreConfig, Dependency, DependencyKind, JobId, JobSpec, NodeId,
    Resources, Time,
};

use super::Setup;
use crate::heap;
use crate::options::Benchmark;
use crate::report::{Measure, Row, Target, Unit};

/// Cores of the one node: how many attempts one round of dispatch hands out.
const NODE_CORES: u32 = 1024;
/// Earlier jobs each job of the random DAG waits for (fewer for the first few).
const RANDOM_FAN: usize = 4;

/// Jobs and their dependencies, in submission order (job `i` has id `i + 1`).
struct Dag {
    name: String,
    after: Vec<Vec<Dependency>>,
    edges: u64,
}

fn after_ok(index: usize) -> Dependency {
    Dependency {
        job: JobId(u32::try_from(index + 1).unwrap_or(u32::MAX)),
        kind: DependencyKind::Success,
    }
}

impl Dag {
    /// `edges` jobs, then one after all of them.
    fn fan_in(edges: u64) -> Dag {
        let count = usize::try_from(edges).unwrap_or(usize::MAX);
        let mut after = vec![Vec::new(); count];
        after.push((0..count).map(after_ok).collect());
        Dag {
            name: format!("fan-in of {}", thousands(edges)),
            after,
            edges,
        }
    }

    /// About `edges` edges: each job after up to [`RANDOM_FAN`] distinct earlier ones.
    fn random(edges: u64, seed: u64) -> Dag {
        let jobs = usize::try_from(edges).unwrap_or(usize::MAX) / RANDOM_FAN + 1;
        let mut state = seed;
        let mut after: Vec<Vec<Dependency>> = Vec::with_capacity(jobs);
        let mut total = 0;
        for job in 0..jobs {
            let mut picked: Vec<usize> = Vec::with_capacity(RANDOM_FAN);
            if job <= RANDOM_FAN {
                picked.extend(0..job);
            } else {
                while picked.len() < RANDOM_FAN {
                    let earlier = (splitmix(&mut state) % job as u64) as usize;
                    if !picked.contains(&earlier) {
                        picked.push(earlier);
                    }
                }
            }
            total += picked.len() as u64;
            after.push(picked.into_iter().map(after_ok).collect());
        }
        Dag {
            name: format!(
                "random DAG of {} jobs, {} edges",
                thousands(jobs as u64),
                thousands(total)
            ),
            after,
            edges: total,
        }
    }

    fn jobs(&self) -> u64 {
        self.after.len() as u64
    }
}

/// SplitMix64: a fixed, dependency-free generator, so every run draws the same DAG.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 1234567 as "1,234,567".
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (position, digit) in digits.chars().enumerate() {
        if position > 0 && (digits.len() - position).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One run: the time to submit every job and to run them all, and the heap the core
/// grew by with every job submitted.
#[derive(Debug, Clone, Copy)]
struct Measured {
    elapsed: Duration,
    heap: usize,
}

fn run_once(dag: &Dag, with_edges: bool) -> Result<Measured> {
    let mut core = Core::new(CoreConfig::default());
    let (node, now) = (NodeId(1), Time::ZERO);
    let before = heap::live_bytes();
    let started = Instant::now();
    for after in &dag.after {
        let after: &[Dependency] = if with_edges { after } else { &[] };
        core.handle_submit_after(JobSpec::single(), after, now)
            .context("submitting a job")?;
    }
    let heap = heap::live_bytes().saturating_sub(before);
    let all = Resources::cores(NODE_CORES);
    core.handle_node_joined(node, all, now)?;
    core.handle_credit(node, all, now)?;
    let mut attempts = Vec::new();
    loop {
        while core.poll_event().is_some() {}
        while let Some(dispatch) = core.poll_dispatch() {
            attempts.extend(dispatch.assignments.iter().map(|a| a.attempt));
        }
        if attempts.is_empty() {
            break;
        }
        let done = u32::try_from(attempts.len()).unwrap_or(u32::MAX);
        for attempt in attempts.drain(..) {
            core.handle_result(attempt, AttemptOutcome::Succeeded, now);
        }
        core.handle_credit(node, Resources::cores(done), now)?;
    }
    while core.poll_event().is_some() {}
    let elapsed = started.elapsed();
    if core.counts().succeeded != dag.jobs() {
        bail!(
            "{} of {} jobs succeeded; the rest never became ready",
            core.counts().succeeded,
            dag.jobs()
        );
    }
    Ok(Measured { elapsed, heap })
}

fn median<T: Copy + Ord>(values: &mut [T]) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let edges = setup.sizes.dag_edges;
    let rounds = if setup.quick { 1 } else { 3 };
    let mut rows = Vec::new();
    for dag in [Dag::fan_in(edges), Dag::random(edges, 14)] {
        let (mut plain, mut linked) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            plain.push(run_once(&dag, false)?);
            linked.push(run_once(&dag, true)?);
        }
        let time =
            |runs: &[Measured]| median(&mut runs.iter().map(|m| m.elapsed).collect::<Vec<_>>());
        let bytes =
            |runs: &[Measured]| median(&mut runs.iter().map(|m| m.heap).collect::<Vec<_>>());
        let (plain_time, linked_time) = (time(&plain), time(&linked));
        let (plain_heap, linked_heap) = (bytes(&plain), bytes(&linked));
        let (jobs, edges) = (dag.jobs() as f64, dag.edges as f64);
        let runs = format!("median of {rounds}");
        let per_edge = (linked_time.as_secs_f64() - plain_time.as_secs_f64()) * 1e9 / edges;
        rows.push(Row {
            benchmark: Benchmark::DagEdges,
            name: format!("core time per edge, {}", dag.name),
            saker: Measure::new(per_edge, Unit::NanosPerEdge).with_detail(format!(
                "{runs}: {:.3} s with edges",
                linked_time.as_secs_f64()
            )),
            baseline: Some(
                Measure::new(plain_time.as_secs_f64() * 1e9 / jobs, Unit::NanosPerJob)
                    .with_detail(format!("{:.3} s without", plain_time.as_secs_f64())),
            ),
            // An edge costs the core at most what two jobs without edges do.
            target: Target::RatioAtMost(2.0),
        });
        let heap_per_edge = (linked_heap as f64 - plain_heap as f64) / edges;
        rows.push(Row {
            benchmark: Benchmark::DagEdges,
            name: format!("core heap per edge, {}", dag.name),
            saker: Measure::new(heap_per_edge, Unit::BytesPerEdge).with_detail(format!(
                "counted; {:.1} MiB with edges",
                linked_heap as f64 / 1_048_576.0
            )),
            baseline: Some(
                Measure::new(plain_heap as f64 / jobs, Unit::BytesPerTask).with_detail(format!(
                    "{:.1} MiB without",
                    plain_heap as f64 / 1_048_576.0
                )),
            ),
            // An edge holds at most half what a job does.
            target: Target::RatioAtMost(0.5),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_edges_they_say_and_run_to_the_end() {
        let fan_in = Dag::fan_in(10);
        assert_eq!((fan_in.jobs(), fan_in.edges), (11, 10));
        assert_eq!(fan_in.after[10].len(), 10);
        let random = Dag::random(400, 1);
        assert_eq!(random.jobs(), 101);
        assert!(random.after.iter().enumerate().all(|(job, after)| {
            let mut ids: Vec<u32> = after.iter().map(|d| d.job.0).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.len() == after.len() && ids.iter().all(|&id| (id as usize) <= job)
        }));
        assert_eq!(random.edges, (1 + 2 + 3 + 4) + 4 * 96);
        for dag in [fan_in, random] {
            for with_edges in [false, true] {
                run_once(&dag, with_edges).expect("every job runs");
            }
        }
        assert_eq!(thousands(1_000_001), "1,000,001");
        assert_eq!(thousands(999), "999");
    }
}
