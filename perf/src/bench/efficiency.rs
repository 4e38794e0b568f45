//! Row 3: how close a pilot with 16 slots comes to the ideal makespan of many short
//! sleep tasks, beside 16 raw concurrent spawn loops running the same command.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};

use super::{Setup, client_runtime};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::find_in_path;
use crate::raw;
use crate::report::{Measure, Row, Target, Unit};

/// Slots of the pilot, and concurrent loops of the baseline.
pub const SLOTS: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepTask {
    TenMs,
    HundredMs,
}

impl SleepTask {
    fn duration(self) -> Duration {
        match self {
            SleepTask::TenMs => Duration::from_millis(10),
            SleepTask::HundredMs => Duration::from_millis(100),
        }
    }

    /// The argument of coreutils `sleep`.
    fn argument(self) -> &'static str {
        match self {
            SleepTask::TenMs => "0.01",
            SleepTask::HundredMs => "0.1",
        }
    }

    fn target(self) -> f64 {
        match self {
            SleepTask::TenMs => 0.97,
            SleepTask::HundredMs => 0.99,
        }
    }

    fn benchmark(self) -> Benchmark {
        match self {
            SleepTask::TenMs => Benchmark::Efficiency10ms,
            SleepTask::HundredMs => Benchmark::Efficiency100ms,
        }
    }
}

/// Tasks whose ideal makespan on `slots` slots is at least `makespan`: whole waves.
pub fn task_count(makespan: Duration, task: Duration, slots: u32) -> u64 {
    let waves = makespan.as_nanos().div_ceil(task.as_nanos());
    u64::try_from(waves).unwrap_or(u64::MAX) * u64::from(slots)
}

/// Ideal makespan of `count` tasks of `task` on `slots` slots: count × d / slots.
fn ideal(count: u64, task: Duration, slots: u32) -> Duration {
    task.mul_f64(count as f64 / f64::from(slots))
}

pub fn run(setup: &Setup, task: SleepTask) -> Result<Vec<Row>> {
    let makespan = Duration::from_millis(setup.sizes.efficiency_makespan_ms);
    let count = task_count(makespan, task.duration(), SLOTS);
    let ideal = ideal(count, task.duration(), SLOTS);
    let sleep = find_in_path("sleep")?;
    let raw_elapsed = raw::spawn_loop(&sleep, &[task.argument()], count, SLOTS as usize)
        .context("raw sleep loop")?;
    let array: ArraySpec = format!("1-{count}").parse().context("array spec")?;
    let request = JobRequest {
        spec: TaskSpec::new(vec![
            sleep.to_string_lossy().into_owned(),
            task.argument().to_owned(),
        ]),
        array: Some(array),
        inline_output: None,
    };
    let shape = PilotShape {
        agents: 1,
        slots: Some(SLOTS),
        sync: true,
        heartbeat: None,
        extra: &[],
    };
    let saker_elapsed = client_runtime()?.block_on(async {
        let pilot = RunningPilot::start(&setup.saker, "efficiency", shape).await?;
        let outcome = pilot.time_job(request).await;
        let stopped = pilot.shutdown().await;
        let elapsed = outcome?;
        stopped?;
        anyhow::Ok(elapsed)
    })?;
    if saker_elapsed.is_zero() || raw_elapsed.is_zero() {
        bail!("a makespan of zero cannot be right");
    }
    let efficiency = |elapsed: Duration| {
        Measure::new(
            ideal.as_secs_f64() / elapsed.as_secs_f64(),
            Unit::Efficiency,
        )
        .with_detail(format!("{:.3} s", elapsed.as_secs_f64()))
    };
    Ok(vec![Row {
        benchmark: task.benchmark(),
        name: format!("efficiency {} ms × {count}", task.duration().as_millis()),
        saker: efficiency(saker_elapsed),
        baseline: Some(efficiency(raw_elapsed)),
        target: Target::RatioAtLeast(task.target()),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fill_the_ideal_makespan_in_whole_waves() {
        let two_seconds = Duration::from_secs(2);
        assert_eq!(
            task_count(two_seconds, Duration::from_millis(10), 16),
            3_200
        );
        assert_eq!(task_count(two_seconds, Duration::from_millis(100), 16), 320);
        assert_eq!(
            task_count(Duration::from_millis(500), Duration::from_millis(100), 16),
            80
        );
        assert_eq!(
            ideal(3_200, Duration::from_millis(10), 16),
            Duration::from_secs(2)
        );
    }
}
