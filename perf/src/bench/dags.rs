//! DAG shapes from MATRIX's evaluation, with 10 ms sleep tasks on a pilot of 16 slots:
//! fan-out (one task, then every other after it), fan-in (every task but one, then
//! the last after all of them), and pipelines (16 chains, each task after the one
//! before it). Each row's makespan efficiency (ideal / measured) stands beside the
//! same count of independent tasks (a bag) submitted the same way in the same run, so
//! the ratio is what the dependencies cost.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{JobRef, JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::find_in_path;
use crate::report::{Measure, Row, Target, Unit};

const SLOTS: u32 = 16;
const TASK: Duration = Duration::from_millis(10);
/// Chains of the pipeline shape: one per slot.
const CHAINS: u64 = SLOTS as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Bag,
    FanOut,
    FanIn,
    Pipeline,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Bag => "bag of tasks",
            Shape::FanOut => "fan-out",
            Shape::FanIn => "fan-in",
            Shape::Pipeline => "pipeline",
        }
    }

    /// The jobs of the shape, one task each, named by position.
    fn jobs(self, count: u64, sleep: &str) -> Vec<JobRequest> {
        (0..count)
            .map(|i| {
                let mut spec = TaskSpec::new(vec![sleep.to_owned(), "0.01".to_owned()]);
                spec.name = Some(format!("t{i}"));
                spec.after = match self {
                    Shape::Bag => Vec::new(),
                    Shape::FanOut if i > 0 => vec![JobRef::Name("t0".into())],
                    Shape::FanIn if i == count - 1 => (0..count - 1)
                        .map(|j| JobRef::Name(format!("t{j}")))
                        .collect(),
                    Shape::Pipeline if i >= CHAINS => {
                        vec![JobRef::Name(format!("t{}", i - CHAINS))]
                    }
                    _ => Vec::new(),
                };
                JobRequest::single(spec)
            })
            .collect()
    }

    /// The best makespan on `SLOTS` slots: the waves the shape forces.
    fn ideal(self, count: u64) -> Duration {
        let waves = |tasks: u64| tasks.div_ceil(u64::from(SLOTS));
        let steps = match self {
            Shape::Bag | Shape::Pipeline => waves(count),
            Shape::FanOut | Shape::FanIn => 1 + waves(count - 1),
        };
        TASK * u32::try_from(steps).unwrap_or(u32::MAX)
    }
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let count = setup.sizes.dag_tasks.max(2 * CHAINS);
    let sleep = find_in_path("sleep")?.to_string_lossy().into_owned();
    let shape = PilotShape {
        agents: 1,
        slots: Some(SLOTS),
        sync: true,
        heartbeat: None,
        extra: &[],
    };
    client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "dags", shape).await?;
        let outcome = async {
            pilot.warm_up().await?;
            let mut rows = Vec::new();
            let efficiency = |shape: Shape, elapsed: Duration| {
                Measure::new(
                    shape.ideal(count).as_secs_f64() / elapsed.as_secs_f64(),
                    Unit::Efficiency,
                )
                .with_detail(format!("{:.3} s", elapsed.as_secs_f64()))
            };
            for shape in [Shape::FanOut, Shape::FanIn, Shape::Pipeline] {
                // The bag right before each shape: both see the same machine.
                let bag = makespan(&pilot, Shape::Bag.jobs(count, &sleep)).await?;
                let elapsed = makespan(&pilot, shape.jobs(count, &sleep)).await?;
                rows.push(Row {
                    benchmark: Benchmark::Dags,
                    name: format!("dag {} of {count} × 10 ms", shape.name()),
                    saker: efficiency(shape, elapsed),
                    baseline: Some(efficiency(Shape::Bag, bag).with_detail(format!(
                        "{:.3} s, {count} independent tasks",
                        bag.as_secs_f64()
                    ))),
                    target: Target::RatioAtLeast(0.9),
                });
            }
            anyhow::Ok(rows)
        }
        .await;
        let stopped = pilot.shutdown().await;
        let rows = outcome?;
        stopped?;
        Ok(rows)
    })
}

/// From submitting `jobs` (one request) to every task of them succeeded.
async fn makespan(pilot: &RunningPilot, jobs: Vec<JobRequest>) -> Result<Duration> {
    let expected = jobs.len() as u64;
    let started = Instant::now();
    let submitted = pilot
        .client
        .submit(jobs)
        .await
        .context("submitting a DAG")?;
    let ids = submitted.iter().map(|job| job.job).collect();
    let report = pilot.client.wait(Some(ids)).await?;
    let elapsed = started.elapsed();
    if report.succeeded != expected {
        bail!(
            "{} of {expected} tasks succeeded ({} failed, {} cancelled)",
            report.succeeded,
            report.failed,
            report.cancelled
        );
    }
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_wait_as_their_names_say_and_their_ideal_counts_forced_waves() {
        let fan_in = Shape::FanIn.jobs(5, "sleep");
        assert_eq!(fan_in[4].spec.after.len(), 4);
        assert!(fan_in[..4].iter().all(|job| job.spec.after.is_empty()));
        let pipeline = Shape::Pipeline.jobs(40, "sleep");
        assert!(pipeline[..16].iter().all(|job| job.spec.after.is_empty()));
        assert_eq!(pipeline[20].spec.after, vec![JobRef::Name("t4".into())]);
        assert_eq!(Shape::Bag.ideal(32), TASK * 2);
        assert_eq!(Shape::FanOut.ideal(33), TASK * 3);
    }
}
