//! Slurm row 2: `/bin/true` tasks per second through the MTC template on 3 nodes ×
//! 4 slots, beside the same task file run by `saker run` on this machine with 4 slots.
//!
//! Both sides run the same task file (N lines `{"argv":["/bin/true"]}`, so N
//! single-task jobs: the template's input is a task file) with the same journal mode
//! (fsynced, the template's), and both rates are N ÷ (last task end − first task
//! start) from the pilot's own results, so start-up on either side is not in them;
//! the Slurm side's `sbatch` → job end wall time is shown beside its rate.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Setup;
use super::slurm_startup::{IDLE_TIMEOUT, NODES};
use crate::options::Benchmark;
use crate::process::{TempDir, run_to_completion};
use crate::report::{Measure, Row, Target, Unit};
use crate::slurm::{self, Batch, JobState, SlurmJob};
use crate::span::{Span, read_results};

/// Slots per node: the cluster's nodes each advertise 4 CPUs, and the template's
/// `--exclusive` gives the pilot all of them.
const SLOTS_PER_NODE: u32 = 4;

/// One task-file line: the spec of one `/bin/true` task.
const TASK_LINE: &str = "{\"argv\":[\"/bin/true\"]}\n";

/// Longest either side may take to run all tasks.
const RUN_TIMEOUT: Duration = Duration::from_secs(1200);

/// How often the batch job's state is looked at: rarely, since every `scontrol`
/// takes CPU from the tasks being measured. The sbatch → end time is this coarse.
const JOB_POLL: Duration = Duration::from_millis(200);

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let tasks = setup.sizes.slurm_throughput_tasks;
    let template = slurm::template("mtc.sbatch")?;
    let saker = std::path::absolute(&setup.saker).context("locating the saker binary")?;
    slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
    let directory = TempDir::new("slurm-throughput").context("creating a temporary directory")?;
    let task_file = directory.path().join("tasks.jsonl");
    write_task_file(&task_file, tasks)?;

    let local_dir = directory.path().join("local");
    let local_wall = run_locally(&saker, &task_file, &local_dir)?;
    let local = checked_span(&saker, &local_dir, tasks, 1)?;

    let pilot_dir = directory.path().join("pilot");
    let log = directory.path().join("job.log");
    let env: [(&str, &OsStr); 3] = [
        ("TASKS", task_file.as_os_str()),
        ("PILOT", pilot_dir.as_os_str()),
        ("SAKER", saker.as_os_str()),
    ];
    let batch = Batch {
        script: &template,
        nodes: NODES,
        time_limit_minutes: 30,
        log: &log,
        env: &env,
    };
    // The local run took a while: someone may have submitted since.
    slurm::wait_for_idle_cluster(IDLE_TIMEOUT)?;
    let submitted = Instant::now();
    let mut job = SlurmJob::submit(&batch)?;
    let state = job.wait_final(RUN_TIMEOUT, JOB_POLL)?;
    let slurm_wall = submitted.elapsed();
    if state != JobState::Completed {
        bail!("job {} ended {state}:\n{}", job.id(), job.log_tail(20));
    }
    let spread = checked_span(&saker, &pilot_dir, tasks, NODES as usize)?;

    Ok(vec![Row {
        benchmark: Benchmark::SlurmThroughput,
        name: format!("slurm throughput, {NODES} nodes × {SLOTS_PER_NODE} slots"),
        saker: Measure::new(spread.rate(), Unit::PerSecond).with_detail(format!(
            "{:.2} s; sbatch→end {:.2} s",
            spread.duration().as_secs_f64(),
            slurm_wall.as_secs_f64()
        )),
        baseline: Some(
            Measure::new(local.rate(), Unit::PerSecond).with_detail(format!(
                "1 node × {SLOTS_PER_NODE}, {:.2} s; run {:.2} s",
                local.duration().as_secs_f64(),
                local_wall.as_secs_f64()
            )),
        ),
        target: Target::None,
    }])
}

/// `count` lines of [`TASK_LINE`].
fn write_task_file(path: &Path, count: u64) -> Result<()> {
    let mut file =
        BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?);
    for _ in 0..count {
        file.write_all(TASK_LINE.as_bytes())?;
    }
    file.flush()
        .with_context(|| format!("writing {}", path.display()))
}

/// `saker run --local --slots 4 --dir DIR TASKS`; returns its wall time.
fn run_locally(saker: &Path, task_file: &Path, pilot_dir: &Path) -> Result<Duration> {
    let stderr = pilot_dir.with_extension("stderr");
    let mut command = Command::new(saker);
    command
        .args(["run", "--local", "--progress", "none", "--slots"])
        .arg(SLOTS_PER_NODE.to_string())
        .arg("--dir")
        .arg(pilot_dir)
        .arg(task_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&stderr).context("creating saker's log")?);
    run_to_completion(&mut command, &stderr, RUN_TIMEOUT)
}

/// The span of the results in `pilot_dir`, which must hold `tasks` results from
/// `nodes` distinct nodes.
fn checked_span(saker: &Path, pilot_dir: &Path, tasks: u64, nodes: usize) -> Result<Span> {
    let span = Span::of(&read_results(saker, pilot_dir)?)
        .with_context(|| format!("results in {}", pilot_dir.display()))?;
    if span.tasks != tasks {
        bail!(
            "{} holds {} results, not {tasks}",
            pilot_dir.display(),
            span.tasks
        );
    }
    if span.nodes.len() != nodes {
        bail!(
            "tasks in {} ran on {:?}, not on {nodes} node(s)",
            pilot_dir.display(),
            span.nodes
        );
    }
    Ok(span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_client::spec::{SpecDefaults, TaskSpec};
    use saker_client::taskfile::TaskFile;

    #[test]
    fn task_file_holds_one_true_spec_per_line() {
        let directory = TempDir::new("taskfile").unwrap();
        let path = directory.path().join("tasks.jsonl");
        write_task_file(&path, 5).unwrap();
        let lines: Vec<_> = TaskFile::open(&path, SpecDefaults::default())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(lines.len(), 5);
        assert!(
            lines
                .iter()
                .all(|line| line.spec == TaskSpec::new(vec!["/bin/true".to_owned()]))
        );
    }
}
