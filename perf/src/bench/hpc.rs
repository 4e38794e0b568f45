//! HPC jobs: how long an MPI job takes from its start on the nodes to the last rank's
//! `MPI_Init` returning, 3 nodes × 2 ranks, beside the same launcher starting the same
//! daemons through a plain remote shell of its own (the launcher's own cost) and, for
//! context, with its local defaults (no remote daemons at all); and how long an HPC
//! job that arrives while every slot runs small tasks waits to start, beside the
//! ideal (the small tasks' run time: what one already running may have left).
//!
//! The MPI program is `pilot/tests/mpi/probe.c`, built here with each MPI's compiler
//! wrapper; every rank prints when its `MPI_Init` returned (`init_unix_us`). In local
//! mode three agents act as nodes, so the baseline's remote shell runs the daemon on
//! the same machine too, with the same launcher options Saker gives (see
//! `docs/hpc-jobs.md`). Saker's figure starts when the first node took its part of
//! the job (the result's `start_time`), so pilot start-up is not in it; the
//! baseline's starts when the launcher is spawned. Runs alternate (Saker, baseline).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use saker_client::results::ResultRecord;
use saker_client::spec::{JobRequest, MpiKind, TaskSpec};

use super::{Setup, Summary, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};

/// What Saker may add to the launcher's own time.
const LAUNCH_MARGIN: Duration = Duration::from_millis(20);

/// The remote shell of the baseline: runs the command here, each "host" with an
/// OpenMPI session directory of its own (as Saker's agents give their daemons).
const PLAIN_RSH: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in -l|-p|-o|-i|-F) shift 2 ;; -*) shift ;; *) break ;; esac
done
host=$1; shift
export OMPI_MCA_orte_tmpdir_base="$(dirname "$0")/session-$host"
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
exec /bin/sh -c "$*"
"#;

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let directory = TempDir::new("hpc").context("creating a temporary directory")?;
    let rsh = directory.path().join("plain-rsh");
    std::fs::write(&rsh, PLAIN_RSH)?;
    make_executable(&rsh)?;
    let rounds = if setup.quick { 3 } else { 7 };
    let mut rows = Vec::new();
    for kind in [MpiKind::Openmpi, MpiKind::Mpich] {
        let probe = build_probe(kind, directory.path())?;
        let (mut saker, mut own, mut local) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=rounds {
            saker.push(saker_launch(setup, kind, &probe, directory.path(), round)?);
            own.push(launcher_alone(kind, &probe, Some(&rsh))?);
            local.push(launcher_alone(kind, &probe, None)?);
            eprintln!(
                "saker-perf: hpc {} round {round}/{rounds}: saker {:.1} ms, launcher {:.1} ms",
                kind.name(),
                ms(saker[saker.len() - 1]),
                ms(own[own.len() - 1])
            );
        }
        rows.extend(launch_rows(
            kind,
            &summary(&mut saker),
            &summary(&mut own),
            &summary(&mut local),
        ));
    }
    rows.push(start_delay(setup)?);
    rows.push(mixed_utilization(setup)?);
    if crate::slurm::cluster_configured() {
        for kind in [MpiKind::Openmpi, MpiKind::Mpich] {
            let probe = build_probe(kind, directory.path())?;
            rows.push(agents_beside_srun(
                setup,
                kind,
                &probe,
                directory.path(),
                rounds,
            )?);
        }
    } else {
        eprintln!("saker-perf: hpc: no Slurm cluster, so no row beside srun");
    }
    Ok(rows)
}

/// On 3 Slurm nodes (a service pilot): the MPI job through Saker's agents beside the
/// same job as one `srun` step in the same allocation (`--launcher srun`: PMIx for
/// OpenMPI, PMI-2 for MPICH), alternated; start on the nodes → last `MPI_Init`.
fn agents_beside_srun(
    setup: &Setup,
    kind: MpiKind,
    probe: &Path,
    directory: &Path,
    rounds: u32,
) -> Result<Row> {
    let (job, pilot) = service_pilot(setup, directory, kind.name())?;
    let mut submitted = 0;
    let (mut agents, mut srun) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (launcher, samples) in [("agents", &mut agents), ("srun", &mut srun)] {
            let output = Command::new(&setup.saker)
                .args(["submit", "--wait", "--time-limit", "60s", "--dir"])
                .arg(&pilot)
                .args([
                    "--nodes",
                    "3",
                    "--ranks-per-node",
                    "2",
                    "--mpi",
                    kind.name(),
                ])
                .args(["--launcher", launcher, "--"])
                .arg(probe)
                .output()?;
            if !output.status.success() {
                bail!("{launcher}: {}", String::from_utf8_lossy(&output.stderr));
            }
            submitted += 1;
            let results = Command::new(&setup.saker)
                .args(["results", "--format", "jsonl", "--dir"])
                .arg(&pilot)
                .output()?;
            let text = String::from_utf8_lossy(&results.stdout);
            let line = text
                .lines()
                .nth(submitted - 1)
                .context("the job's result")?;
            let record: ResultRecord = serde_json::from_str(line)?;
            let start = record.start_time.context("no start time")?.unix_micros();
            samples.push(Duration::from_micros(
                last_init(&record.stdout)?.saturating_sub(start),
            ));
        }
    }
    stop_service_pilot(setup, &pilot, job)?;
    let (agents, srun) = (summary(&mut agents), summary(&mut srun));
    Ok(Row {
        benchmark: Benchmark::Hpc,
        name: format!(
            "slurm, {} 3×2 ranks: agents beside an srun step",
            kind.name()
        ),
        saker: Measure::new(agents.median.as_secs_f64(), Unit::Seconds)
            .with_detail(agents.detail()),
        baseline: Some(
            Measure::new(srun.median.as_secs_f64(), Unit::Seconds)
                .with_detail(format!("srun step, same allocation; {}", srun.detail())),
        ),
        target: Target::RatioAtMost(1.0),
    })
}

/// A service pilot on 3 Slurm nodes, once all its agents are in: its job and
/// directory (`name` tells pilots of one run apart).
pub(super) fn service_pilot(
    setup: &Setup,
    directory: &Path,
    name: &str,
) -> Result<(crate::slurm::SlurmJob, PathBuf)> {
    use crate::slurm::{Batch, SlurmJob, template};
    let pilot = directory.join(format!("slurm-pilot-{name}"));
    let log = directory.join(format!("slurm-pilot-{name}.log"));
    let saker = setup.saker.as_os_str();
    let env = [("PILOT", pilot.as_os_str()), ("SAKER", saker)];
    let job = SlurmJob::submit(&Batch {
        script: &template("service.sbatch")?,
        nodes: 3,
        time_limit_minutes: 10,
        log: &log,
        env: &env,
    })?;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let status = Command::new(&setup.saker)
            .args(["status", "--dir"])
            .arg(&pilot)
            .output()?;
        if String::from_utf8_lossy(&status.stdout).contains("agents    3") {
            return Ok((job, pilot));
        }
        if std::time::Instant::now() > deadline {
            bail!("the pilot never had 3 agents:\n{}", job.log_tail(20));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Shuts a service pilot down and waits for its Slurm job to end.
pub(super) fn stop_service_pilot(
    setup: &Setup,
    pilot: &Path,
    mut job: crate::slurm::SlurmJob,
) -> Result<()> {
    let _ = Command::new(&setup.saker)
        .args(["shutdown", "--dir"])
        .arg(pilot)
        .output();
    job.wait_final(Duration::from_secs(60), Duration::from_millis(200))?;
    Ok(())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn launch_rows(kind: MpiKind, saker: &Summary, own: &Summary, local: &Summary) -> Vec<Row> {
    let seconds = |summary: &Summary| summary.median.as_secs_f64();
    let detail = |summary: &Summary| summary.detail();
    vec![
        Row {
            benchmark: Benchmark::Hpc,
            name: format!(
                "{} 3×2 ranks: start on the nodes → last MPI_Init",
                kind.name()
            ),
            saker: Measure::new(seconds(saker), Unit::Seconds).with_detail(detail(saker)),
            baseline: Some(
                Measure::new(seconds(own), Unit::Seconds)
                    .with_detail(format!("launcher, plain remote shell; {}", detail(own))),
            ),
            target: Target::AtMost(seconds(own) + LAUNCH_MARGIN.as_secs_f64()),
        },
        Row {
            benchmark: Benchmark::Hpc,
            name: format!(
                "{} 3×2 ranks, beside the launcher's local defaults",
                kind.name()
            ),
            saker: Measure::new(seconds(saker), Unit::Seconds).with_detail(detail(saker)),
            baseline: Some(
                Measure::new(seconds(local), Unit::Seconds)
                    .with_detail(format!("6 local ranks, no daemons; {}", detail(local))),
            ),
            target: Target::None,
        },
    ]
}

pub(super) fn build_probe(kind: MpiKind, directory: &Path) -> Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pilot/tests/mpi/probe.c");
    let binary = directory.join(format!("probe-{}", kind.name()));
    let compiler = format!("mpicc.{}", kind.name());
    let status = Command::new(&compiler)
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .with_context(|| {
            format!("running {compiler}: install openmpi-bin libopenmpi-dev mpich libmpich-dev")
        })?;
    if !status.success() {
        bail!("{compiler} failed on {}", source.display());
    }
    Ok(binary)
}

/// The latest `init_unix_us` of six ranks in a launcher's (or result's) output.
pub(super) fn last_init(stdout: &str) -> Result<u64> {
    let inits: Vec<u64> = stdout
        .lines()
        .filter(|line| line.starts_with("probe rank="))
        .filter_map(|line| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix("init_unix_us="))?
                .parse()
                .ok()
        })
        .collect();
    if inits.len() != 6 {
        bail!(
            "expected 6 ranks' init times, got {}:\n{stdout}",
            inits.len()
        );
    }
    Ok(inits.into_iter().max().unwrap_or(0))
}

/// One `saker run` of the job on 3 local agents: from its start on the nodes to
/// the last rank's `MPI_Init`.
fn saker_launch(
    setup: &Setup,
    kind: MpiKind,
    probe: &Path,
    directory: &Path,
    round: u32,
) -> Result<Duration> {
    let pilot = directory.join(format!("pilot-{}-{round}", kind.name()));
    let output = Command::new(&setup.saker)
        .args([
            "run",
            "--progress",
            "none",
            "--no-sync",
            "--agents",
            "3",
            "--slots",
            "6",
        ])
        .arg("--dir")
        .arg(&pilot)
        .args([
            "--nodes",
            "3",
            "--ranks-per-node",
            "2",
            "--mpi",
            kind.name(),
            "--",
        ])
        .arg(probe)
        .stdin(Stdio::null())
        .output()
        .context("running saker")?;
    if !output.status.success() {
        bail!(
            "saker run failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let results = Command::new(&setup.saker)
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(&pilot)
        .output()
        .context("reading the result")?;
    let text = String::from_utf8_lossy(&results.stdout);
    let record: ResultRecord =
        serde_json::from_str(text.lines().next().context("no result")?).context("a result")?;
    let start = record.start_time.context("the job has no start time")?;
    let last = last_init(&record.stdout)?;
    let _ = std::fs::remove_dir_all(&pilot);
    Ok(Duration::from_micros(
        last.saturating_sub(start.unix_micros()),
    ))
}

/// The launcher alone: through `rsh` on three named hosts, or with its local
/// defaults when `rsh` is `None`; from its spawn to the last rank's `MPI_Init`.
fn launcher_alone(kind: MpiKind, probe: &Path, rsh: Option<&Path>) -> Result<Duration> {
    let mut command = match (kind, rsh) {
        (MpiKind::Openmpi, Some(rsh)) => {
            let mut command = Command::new("mpirun.openmpi");
            command.args(["--host", "saker-m0:2,saker-m1:2,saker-m2:2", "-np", "6"]);
            for (key, value) in [
                ("plm", "rsh"),
                ("if_base_do_not_resolve", "1"),
                ("plm_rsh_no_tree_spawn", "1"),
                ("orte_leave_session_attached", "1"),
                ("btl", "self,tcp"),
                ("btl_tcp_if_include", "lo"),
                ("oob_tcp_if_include", "lo"),
            ] {
                command.args(["--mca", key, value]);
            }
            command.args(["--mca", "plm_rsh_agent"]).arg(rsh);
            command
        }
        (MpiKind::Openmpi, None) => {
            let mut command = Command::new("mpirun.openmpi");
            command.args(["-np", "6", "--oversubscribe"]);
            command
        }
        (MpiKind::Mpich, Some(rsh)) => {
            let mut command = Command::new("mpiexec.mpich");
            command
                .args(["-launcher", "ssh", "-launcher-exec"])
                .arg(rsh);
            command.args([
                "-hosts",
                "saker-m0,saker-m1,saker-m2",
                "-n",
                "6",
                "-ppn",
                "2",
            ]);
            command
        }
        (MpiKind::Mpich, None) => {
            let mut command = Command::new("mpiexec.mpich");
            command.args(["-n", "6"]);
            command
        }
        (MpiKind::None | MpiKind::Pmi, _) => bail!("not an MPI launcher"),
    };
    if kind == MpiKind::Openmpi && rustix::process::geteuid().is_root() {
        command.arg("--allow-run-as-root");
    }
    command.arg(probe).stdin(Stdio::null());
    let spawned = unix_micros();
    let output = command.output().context("running the launcher")?;
    if !output.status.success() {
        bail!(
            "the launcher failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let last = last_init(&String::from_utf8_lossy(&output.stdout))?;
    Ok(Duration::from_micros(last.saturating_sub(spawned)))
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros() as u64)
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Small tasks of this length keep every slot busy while the job waits.
const SMALL_TASK: Duration = Duration::from_millis(200);

/// An HPC job (2 nodes × 2 cores) submitted while 4 agents × 2 slots run and queue
/// 0.2 s tasks (time limit 1 s): from its submission to its start, beside the ideal.
fn start_delay(setup: &Setup) -> Result<Row> {
    let repeats = if setup.quick { 2 } else { 5 };
    let runtime = client_runtime()?;
    let mut delays = Vec::new();
    for _ in 0..repeats {
        delays.push(runtime.block_on(delay_once(&setup.saker))?);
        eprintln!("saker-perf: hpc delay {:?}", delays[delays.len() - 1]);
    }
    let delay = summary(&mut delays);
    Ok(Row {
        benchmark: Benchmark::Hpc,
        name: "HPC job behind a full load of 0.2 s tasks: submit → start".into(),
        saker: Measure::new(delay.median.as_secs_f64(), Unit::Seconds).with_detail(delay.detail()),
        baseline: Some(
            Measure::new(SMALL_TASK.as_secs_f64(), Unit::Seconds)
                .with_detail("ideal: a running task's length"),
        ),
        target: Target::RatioAtMost(2.0),
    })
}

async fn delay_once(saker: &Path) -> Result<Duration> {
    let shape = PilotShape {
        agents: 4,
        slots: Some(8),
        sync: false,
        heartbeat: None,
        extra: &[],
    };
    let pilot = RunningPilot::start(saker, "hpc-delay", shape).await?;
    pilot.warm_up().await?;
    let mut small = TaskSpec::new(vec![
        "sleep".into(),
        format!("{}", SMALL_TASK.as_secs_f64()),
    ]);
    small.time_limit = Some(Duration::from_secs(1));
    let load = JobRequest {
        array: Some("1-400".parse().context("an array")?),
        ..JobRequest::single(small)
    };
    pilot.client.submit(vec![load]).await?;
    // Every slot busy before the job arrives.
    loop {
        let status = pilot.client.status().await?;
        if status.running >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut job = TaskSpec::new(vec!["true".into()]);
    job.nodes = 2;
    job.ranks_per_node = Some(2);
    let submitted = pilot.client.submit(vec![JobRequest::single(job)]).await?;
    let id = submitted.first().context("no job")?.job;
    pilot.client.wait(Some(vec![id])).await?;
    let mut results = pilot.client.results(0, false).await?;
    let mut delay = None;
    while let Some(record) = results.next().await? {
        if record.job == id {
            if record.attempts > 1 {
                eprintln!(
                    "saker-perf: hpc: the job needed {} attempts: {:?}",
                    record.attempts, record.history
                );
            }
            let start = record.start_time.context("no start")?.unix_micros();
            delay = Some(Duration::from_micros(
                start.saturating_sub(record.submit_time.unix_micros()),
            ));
        }
    }
    pilot.shutdown().await?;
    delay.context("the HPC job's result")
}

/// Small tasks and HPC jobs together on 4 agents × 2 slots: `SMALL` tasks of
/// `sleep 0.05` (1 core) and `GANGS` jobs of 2 nodes × 2 cores running `sleep 0.5`, all
/// with time limits, submitted at once; efficiency = ideal makespan (their
/// core-seconds over the 8 cores) ÷ submit → all done.
fn mixed_utilization(setup: &Setup) -> Result<Row> {
    const SMALL: u32 = 400;
    const GANGS: u32 = 4;
    let core_seconds = f64::from(SMALL) * 0.05 + f64::from(GANGS) * 4.0 * 0.5;
    let ideal = core_seconds / 8.0;
    let runtime = client_runtime()?;
    let repeats = if setup.quick { 1 } else { 3 };
    let mut makespans = Vec::new();
    for _ in 0..repeats {
        makespans.push(runtime.block_on(async {
            let shape = PilotShape {
                agents: 4,
                slots: Some(8),
                sync: false,
                heartbeat: None,
                extra: &[],
            };
            let pilot = RunningPilot::start(&setup.saker, "hpc-mixed", shape).await?;
            pilot.warm_up().await?;
            let mut small = TaskSpec::new(vec!["sleep".into(), "0.05".into()]);
            small.time_limit = Some(Duration::from_secs(2));
            let mut jobs = Vec::new();
            let per_gang = SMALL / GANGS;
            for _ in 0..GANGS {
                jobs.push(JobRequest {
                    array: Some(format!("1-{per_gang}").parse().context("an array")?),
                    ..JobRequest::single(small.clone())
                });
                let mut gang = TaskSpec::new(vec!["sleep".into(), "0.5".into()]);
                gang.nodes = 2;
                gang.ranks_per_node = Some(2);
                gang.time_limit = Some(Duration::from_secs(2));
                jobs.push(JobRequest::single(gang));
            }
            let started = std::time::Instant::now();
            pilot.client.submit(jobs).await?;
            let report = pilot.client.wait(None).await?;
            let elapsed = started.elapsed();
            pilot.shutdown().await?;
            if report.failed + report.cancelled > 0 {
                bail!("{report:?}");
            }
            anyhow::Ok(elapsed)
        })?);
    }
    let makespan = summary(&mut makespans);
    Ok(Row {
        benchmark: Benchmark::Hpc,
        name: format!("{SMALL} small tasks + {GANGS} HPC jobs on 4×2 slots: efficiency"),
        saker: Measure::new(ideal / makespan.median.as_secs_f64(), Unit::Efficiency)
            .with_detail(format!("makespan {}", makespan.detail())),
        baseline: Some(Measure::new(1.0, Unit::Efficiency).with_detail(format!(
            "ideal: {core_seconds} core-s on 8 cores = {ideal:.2} s"
        ))),
        target: Target::RatioAtLeast(0.85),
    })
}
