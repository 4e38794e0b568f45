//! Resume: how long `saker pilot --resume` takes to answer clients again after a
//! root that queued a million tasks stopped, for one array and for as many single
//! jobs, beside the same on a journal that holds no job.
//!
//! Each journal is written by the real binary: a root without agents
//! (`saker pilot --agents 0 --no-sync`) is sent the jobs as the memory rows send them,
//! checked to hold them all queued, and shut down. `saker pilot --dir D --resume
//! --agents 0` (journal fsynced, the default) is then timed from its spawn until its
//! client socket answers a `status`, which must count every task queued again.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{ArraySpec, JobRequest};

use super::memory::{QUEUE_ONLY, check_queued, submit_singles, true_spec};
use super::{Setup, Summary, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};

/// Resumes of each journal (the median is reported).
const REPEATS: usize = 3;

/// The most a resume may take, in seconds.
const TARGET_SECONDS: f64 = 3.0;

/// The resumed root: no agents, journal fsynced as by default.
const RESUMED: PilotShape = PilotShape {
    agents: 0,
    slots: None,
    sync: true,
    heartbeat: None,
    extra: &[],
};

/// What the journal holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Jobs {
    /// Nothing submitted: the baseline.
    None,
    /// One array job of this many tasks.
    Array(u64),
    /// This many single-task jobs, in requests of 10,000.
    Singles(u64),
}

/// A stopped pilot's directory and what its journal holds.
#[derive(Debug)]
struct Journal {
    directory: TempDir,
    tasks: u64,
    bytes: u64,
}

/// How long the resumes of one journal took.
#[derive(Debug)]
struct Resumed {
    tasks: u64,
    bytes: u64,
    times: Summary,
}

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let count = setup.sizes.resume_tasks;
    let runtime = client_runtime()?;
    let resumes = |jobs: Jobs| -> Result<Resumed> {
        runtime
            .block_on(measure(&setup.saker, jobs))
            .with_context(|| format!("resuming a journal of {jobs:?}"))
    };
    let empty = resumes(Jobs::None)?;
    let array = resumes(Jobs::Array(count))?;
    let singles = resumes(Jobs::Singles(count))?;
    let baseline = Measure::new(empty.times.median.as_secs_f64(), Unit::Seconds)
        .with_detail(format!("no jobs, {}", empty.times.detail()));
    let row = |name: String, resumed: &Resumed| Row {
        benchmark: Benchmark::Resume,
        name,
        saker: Measure::new(resumed.times.median.as_secs_f64(), Unit::Seconds).with_detail(
            format!(
                "{}; journal {}",
                resumed.times.detail(),
                size(resumed.bytes)
            ),
        ),
        baseline: Some(baseline.clone()),
        target: Target::AtMost(TARGET_SECONDS),
    };
    let mut singles_name = format!("resume, {} single jobs", singles.tasks);
    if singles.tasks < count {
        singles_name.push_str(&format!(" (of {count}: submit budget spent)"));
    }
    Ok(vec![
        row(format!("resume, array of {}", array.tasks), &array),
        row(singles_name, &singles),
    ])
}

/// Writes a journal holding `jobs`, then resumes it [`REPEATS`] times.
async fn measure(saker: &Path, jobs: Jobs) -> Result<Resumed> {
    let journal = write_journal(saker, jobs).await?;
    let mut times = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        times.push(resume_once(saker, &journal).await?);
    }
    Ok(Resumed {
        tasks: journal.tasks,
        bytes: journal.bytes,
        times: summary(&mut times),
    })
}

/// Starts a root without agents, queues `jobs` on it and shuts it down.
async fn write_journal(saker: &Path, jobs: Jobs) -> Result<Journal> {
    let directory = TempDir::new("resume").context("creating a temporary directory")?;
    let pilot = RunningPilot::start_in(saker, directory.path(), QUEUE_ONLY, false).await?;
    let outcome = async {
        let tasks = match jobs {
            Jobs::None => 0,
            Jobs::Array(count) => {
                let array: ArraySpec = format!("1-{count}").parse().context("array spec")?;
                let request = JobRequest {
                    spec: true_spec(),
                    array: Some(array),
                    inline_output: None,
                };
                pilot.client.submit(vec![request]).await?;
                count
            }
            Jobs::Singles(count) => submit_singles(&pilot, count).await?.0,
        };
        check_queued(&pilot, tasks).await?;
        anyhow::Ok(tasks)
    }
    .await;
    let stopped = pilot.shutdown().await;
    let tasks = outcome?;
    stopped?;
    let bytes = directory_bytes(&directory.path().join("pilot").join("journal"))?;
    Ok(Journal {
        directory,
        tasks,
        bytes,
    })
}

/// From spawning `saker pilot --resume` to its answer to `status`; then stops it.
async fn resume_once(saker: &Path, journal: &Journal) -> Result<Duration> {
    let started = Instant::now();
    let pilot = RunningPilot::start_in(saker, journal.directory.path(), RESUMED, true).await?;
    let status = pilot.client.status().await;
    let elapsed = started.elapsed();
    let checked = match status {
        Ok(status) if status.queued == journal.tasks && status.running == 0 => Ok(()),
        Ok(status) => Err(anyhow::anyhow!(
            "the resumed pilot reports {} queued and {} running, not {} queued",
            status.queued,
            status.running,
            journal.tasks
        )),
        Err(error) => Err(error.into()),
    };
    let stopped = pilot.shutdown().await;
    checked?;
    stopped?;
    Ok(elapsed)
}

/// "12.3 MiB", or "4.2 KiB" below a mebibyte.
fn size(bytes: u64) -> String {
    let bytes = bytes as f64;
    if bytes < f64::from(1u32 << 20) {
        format!("{:.1} KiB", bytes / 1024.0)
    } else {
        format!("{:.1} MiB", bytes / f64::from(1u32 << 20))
    }
}

/// Total size of the files directly in `directory` (the journal's segments).
fn directory_bytes(directory: &Path) -> Result<u64> {
    let mut bytes = 0;
    for entry in
        std::fs::read_dir(directory).with_context(|| format!("listing {}", directory.display()))?
    {
        let metadata = entry?.metadata()?;
        if metadata.is_file() {
            bytes += metadata.len();
        }
    }
    if bytes == 0 {
        bail!("{} holds no journal", directory.display());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_sizes_read_for_people() {
        assert_eq!(size(4_300), "4.2 KiB");
        assert_eq!(size(30_094_131), "28.7 MiB");
    }
}
