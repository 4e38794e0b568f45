//! MPI ranks started by their agents (`--mpi pmi`) on 3 Slurm nodes (a service
//! pilot), with Debian's MPICH and Open MPI:
//!
//! * start on the nodes → last rank past `MPI_Init`, 3 nodes × 2 ranks of the probe
//!   (`pilot/tests/mpi/probe.c`), beside the same job as one `srun` step in the same
//!   allocation (`--mpi=pmi2` for MPICH, `--mpi=pmix` for Open MPI) and beside today's
//!   relay (`mpiexec.mpich` or `mpirun` with the agents as its remote shell); the
//!   three alternate, medians compared;
//! * the rate of 2-rank MPI jobs (the probe on 2 nodes, an array of them), beside
//!   the same jobs as `srun` steps, and beside the same processes started as 2-rank
//!   jobs without any wire-up (`--mpi none`: each rank its own singleton MPI), the
//!   floor of spawning them.
//!
//! * a ring of 2 ranks over a message size sweep (`pilot/tests/mpi/ring.c`) through
//!   PMI and as an srun step: the same sums, and the same bandwidth and hop time.
//!
//! For context, the floor under any launcher: six probes spawned at once, each its
//! own singleton world (MPICH's own `MPI_Init`, no wire-up).
//!
//! Every rank of the probe writes its `MPI_Init` time to a file of its own in the
//! pilot's shared directory (`out=`), whichever way it was started.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::results::ResultRecord;
use saker_client::spec::MpiKind;

use super::hpc::{build_probe, last_init, service_pilot, stop_service_pilot};
use super::{Setup, summary};
use crate::options::Benchmark;
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};

/// One MPI measured: how its probe is built, and how each start is made (`--mpi`,
/// `--launcher`, and what the row calls it): through PMI, as an srun step, through
/// the relay.
struct Mpi {
    name: &'static str,
    kind: MpiKind,
    starts: [(&'static str, &'static str, &'static str); 3],
    /// Retries per job: Open MPI 4.1's TCP BTL now and then crashes a rank in
    /// `MPI_Init` on a loaded machine (pilot/tests/slurm_hpc.rs), whatever started it.
    retries: &'static str,
    /// A variable the agents set for PMI jobs on this node that a baseline lacks,
    /// for one more start: the srun step given it too (a row without a target).
    same_as_pmi: Option<&'static str>,
}

const MPIS: [Mpi; 2] = [
    Mpi {
        name: "MPICH",
        kind: MpiKind::Mpich,
        starts: [
            ("pmi", "agents", "agents serving PMI"),
            ("pmi", "srun", "srun --mpi=pmi2 step"),
            ("mpich", "agents", "mpiexec.mpich through the agents"),
        ],
        retries: "0",
        same_as_pmi: None,
    },
    Mpi {
        name: "Open MPI",
        kind: MpiKind::Openmpi,
        starts: [
            ("pmi", "agents", "agents serving PMI"),
            ("openmpi", "srun", "srun --mpi=pmix step"),
            ("openmpi", "agents", "mpirun through the agents"),
        ],
        retries: "1",
        same_as_pmi: Some("OMPI_MCA_pml=ob1"),
    },
];

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    if !crate::slurm::cluster_configured() {
        eprintln!("saker-perf: mpi: no Slurm cluster, so no row");
        return Ok(Vec::new());
    }
    let directory = TempDir::new("mpi").context("creating a temporary directory")?;
    let (job, pilot) = service_pilot(setup, directory.path(), "mpi")?;
    let mut rows = Vec::new();
    let mut submitted = 0;
    for mpi in &MPIS {
        let measured = build_probe(mpi.kind, directory.path())
            .and_then(|probe| measure(setup, &pilot, mpi, &probe, &mut submitted));
        match measured {
            Ok(more) => rows.extend(more),
            Err(error) => {
                let _ = stop_service_pilot(setup, &pilot, job);
                return Err(error);
            }
        }
    }
    stop_service_pilot(setup, &pilot, job)?;
    Ok(rows)
}

/// `mpi`'s start rows and rate rows; `submitted` counts the pilot's jobs so far.
fn measure(
    setup: &Setup,
    pilot: &Path,
    mpi: &Mpi,
    probe: &Path,
    submitted: &mut usize,
) -> Result<Vec<Row>> {
    let rounds = if setup.quick { 3 } else { 7 };
    let mut starts: Vec<(&str, &str, Option<&str>)> = mpi
        .starts
        .iter()
        .map(|&(kind, launcher, _)| (kind, launcher, None))
        .collect();
    if let Some(variable) = mpi.same_as_pmi {
        starts.push((mpi.starts[1].0, "srun", Some(variable)));
    }
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); starts.len()];
    let mut scripts: Vec<Duration> = Vec::new();
    for round in 1..=rounds {
        for (index, &(kind, launcher, variable)) in starts.iter().enumerate() {
            let out = pilot.join(format!("inits-{}-{round}-{index}", mpi.kind.name()));
            std::fs::create_dir_all(&out)?;
            let mut out_arg = std::ffi::OsString::from("out=");
            out_arg.push(&out);
            let mut command = saker(setup, pilot);
            if let Some(variable) = variable {
                command.args(["--env", variable]);
            }
            command
                .args(["--retries", mpi.retries])
                .args(["--nodes", "3", "--ranks-per-node", "2", "--mpi", kind])
                .args(["--launcher", launcher, "--"])
                .arg(probe)
                .arg(out_arg);
            let what = format!("{}: {kind}/{launcher}", mpi.name);
            let took = to_last_init(setup, pilot, &mut command, &what, &out, submitted)?;
            samples[index].push(took);
        }
        scripts.push(script_start(setup, pilot, mpi, probe, round, submitted)?);
        eprintln!(
            "saker-perf: mpi {} round {round}/{rounds}: pmi {:.1} ms, srun {:.1} ms, relay {:.1} ms, \
             script {:.1} ms",
            mpi.name,
            ms(samples[0][samples[0].len() - 1]),
            ms(samples[1][samples[1].len() - 1]),
            ms(samples[2][samples[2].len() - 1]),
            ms(scripts[scripts.len() - 1]),
        );
    }
    let script = summary(&mut scripts);
    let summaries: Vec<super::Summary> = samples
        .into_iter()
        .map(|mut samples| summary(&mut samples))
        .collect();
    let pmi = &summaries[0];
    let seconds = |summary: &super::Summary| summary.median.as_secs_f64();
    let mut rows = Vec::new();
    let mut baselines = vec![
        (
            &summaries[1],
            mpi.starts[1].2.to_owned(),
            Target::RatioAtMost(0.5),
        ),
        (
            &summaries[2],
            mpi.starts[2].2.to_owned(),
            Target::RatioAtMost(0.5),
        ),
    ];
    if let (Some(variable), Some(same)) = (mpi.same_as_pmi, summaries.get(3)) {
        let label = format!("{} given {variable} too", mpi.starts[1].2);
        baselines.push((same, label, Target::None));
    }
    for (baseline, label, target) in baselines {
        rows.push(Row {
            benchmark: Benchmark::Mpi,
            name: format!(
                "slurm, {} 3×2 ranks → last MPI_Init: PMI beside {label}",
                mpi.name
            ),
            saker: Measure::new(seconds(pmi), Unit::Seconds).with_detail(pmi.detail()),
            baseline: Some(
                Measure::new(seconds(baseline), Unit::Seconds)
                    .with_detail(format!("{label}, same allocation; {}", baseline.detail())),
            ),
            target,
        });
    }
    rows.push(Row {
        benchmark: Benchmark::Mpi,
        name: format!(
            "slurm, {} 3×2 ranks → last MPI_Init: a script's saker mpiexec beside PMI",
            mpi.name
        ),
        saker: Measure::new(seconds(&script), Unit::Seconds).with_detail(format!(
            "--launcher script, the script's shell and the launch relayed by the root; {}",
            script.detail()
        )),
        baseline: Some(
            Measure::new(seconds(pmi), Unit::Seconds)
                .with_detail(format!("--mpi pmi, same allocation; {}", pmi.detail())),
        ),
        target: Target::None,
    });
    let floor = singletons(probe, rounds)?;
    rows.push(Row {
        benchmark: Benchmark::Mpi,
        name: format!(
            "{} 6 ranks → last MPI_Init: PMI beside no wire-up at all",
            mpi.name
        ),
        saker: Measure::new(seconds(pmi), Unit::Seconds).with_detail(pmi.detail()),
        baseline: Some(
            Measure::new(seconds(&floor), Unit::Seconds).with_detail(format!(
                "6 singleton ranks spawned at once here, {}'s own MPI_Init; {}",
                mpi.name,
                floor.detail()
            )),
        ),
        target: Target::None,
    });
    rows.extend(rates(setup, pilot, mpi, probe, submitted)?);
    rows.extend(rings(setup, pilot, mpi)?);
    *submitted += 6;
    Ok(rows)
}

/// One script job whose script starts the probe's 3 × 2 ranks with `saker mpiexec`:
/// from the job's start to its last rank past `MPI_Init`.
fn script_start(
    setup: &Setup,
    pilot: &Path,
    mpi: &Mpi,
    probe: &Path,
    round: u32,
    submitted: &mut usize,
) -> Result<Duration> {
    let out = pilot.join(format!("inits-{}-{round}-script", mpi.kind.name()));
    std::fs::create_dir_all(&out)?;
    let script = format!(
        "exec $SAKER_MPIEXEC '{}' 'out={}'",
        probe.display(),
        out.display()
    );
    let mut command = saker(setup, pilot);
    command
        .args(["--retries", mpi.retries])
        .args(["--nodes", "3", "--ranks-per-node", "2", "--mpi", "pmi"])
        .args(["--launcher", "script", "--shell", "--", &script]);
    let what = format!("{}: script", mpi.name);
    to_last_init(setup, pilot, &mut command, &what, &out, submitted)
}

/// Runs `command` (a `saker submit --wait` of a probe job whose ranks write their
/// lines to `out`): from the job's start to its last rank past `MPI_Init`.
fn to_last_init(
    setup: &Setup,
    pilot: &Path,
    command: &mut Command,
    what: &str,
    out: &Path,
    submitted: &mut usize,
) -> Result<Duration> {
    let output = command.output()?;
    if !output.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&output.stderr));
    }
    *submitted += 1;
    let start = start_of(setup, pilot, *submitted)?;
    let last = last_init(&read_inits(out)?)?;
    Ok(Duration::from_micros(last.saturating_sub(start)))
}

/// The ring of `pilot/tests/mpi/ring.c` on 2 nodes × 1 rank, through PMI and as an
/// srun step, alternated (3 rounds, the best of each): the same sums, and the
/// bandwidth of one link at the sweep's largest message and the time of a hop at
/// its smallest.
fn rings(setup: &Setup, pilot: &Path, mpi: &Mpi) -> Result<Vec<Row>> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pilot/tests/mpi/ring.c");
    let ring = pilot.join(format!("ring-{}", mpi.kind.name()));
    let compiler = format!("mpicc.{}", mpi.kind.name());
    let built = Command::new(&compiler)
        .args(["-O2", "-o"])
        .arg(&ring)
        .arg(&source)
        .status()?;
    if !built.success() {
        bail!("{compiler} failed on {}", source.display());
    }
    let (srun_kind, _, srun_label) = mpi.starts[1];
    let mut best: [Option<Ring>; 2] = [None, None];
    for _round in 0..3 {
        for (index, (kind, launcher)) in [("pmi", "agents"), (srun_kind, "srun")]
            .into_iter()
            .enumerate()
        {
            let output = saker(setup, pilot)
                .args(["--retries", mpi.retries])
                .args(["--nodes", "2", "--ranks-per-node", "1", "--mpi", kind])
                .args(["--launcher", launcher, "--"])
                .arg(&ring)
                .output()?;
            if !output.status.success() {
                bail!(
                    "{} ring/{launcher}: {}",
                    mpi.name,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let text = last_stdout(setup, pilot)?;
            let ring = Ring::read(&text)?;
            best[index] = Some(match best[index].take() {
                Some(other) => other.better(ring),
                None => ring,
            });
        }
    }
    let [Some(pmi), Some(srun)] = best else {
        bail!("no ring ran");
    };
    if pmi.sums != srun.sums {
        bail!(
            "the rings computed different sums: {:?} beside {:?}",
            pmi.sums,
            srun.sums
        );
    }
    let label = format!("{srun_label}, same allocation, same ring; best of 3");
    Ok(vec![
        Row {
            benchmark: Benchmark::Mpi,
            name: format!(
                "slurm, {} ring of 2, 2 MiB messages: PMI beside srun",
                mpi.name
            ),
            saker: Measure::new(pmi.mibps, Unit::MebibytesPerSecond)
                .with_detail(format!("sums equal ({} sizes)", pmi.sums.len())),
            baseline: Some(
                Measure::new(srun.mibps, Unit::MebibytesPerSecond).with_detail(label.clone()),
            ),
            target: Target::RatioAtLeast(0.9),
        },
        Row {
            benchmark: Benchmark::Mpi,
            name: format!(
                "slurm, {} ring of 2, 8-byte messages: a hop, PMI beside srun",
                mpi.name
            ),
            saker: Measure::new(pmi.hop_us, Unit::Microseconds),
            baseline: Some(Measure::new(srun.hop_us, Unit::Microseconds).with_detail(label)),
            target: Target::RatioAtMost(1.1),
        },
    ])
}

/// What rank 0 of a ring printed: each size's sum, the largest size's bandwidth
/// (MiB/s) and the smallest size's time per hop (µs).
#[derive(Debug)]
struct Ring {
    sums: Vec<u64>,
    mibps: f64,
    hop_us: f64,
}

impl Ring {
    fn read(stdout: &str) -> Result<Ring> {
        let field = |line: &str, key: &str| -> Option<f64> {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))?
                .parse()
                .ok()
        };
        let lines: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("ring size="))
            .collect();
        let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
            bail!("no ring lines in:\n{stdout}");
        };
        let sums = lines
            .iter()
            .map(|line| field(line, "sum").map(|sum| sum as u64))
            .collect::<Option<Vec<u64>>>()
            .context("a ring line without its sum")?;
        let hop = field(first, "seconds").zip(field(first, "iters"));
        Ok(Ring {
            sums,
            mibps: field(last, "mibps").context("no bandwidth")?,
            hop_us: hop.map(|(s, i)| s / i * 1e6).context("no hop time")?,
        })
    }

    fn better(self, other: Ring) -> Ring {
        Ring {
            mibps: self.mibps.max(other.mibps),
            hop_us: self.hop_us.min(other.hop_us),
            sums: self.sums,
        }
    }
}

/// The stdout of the last result in `pilot`.
fn last_stdout(setup: &Setup, pilot: &Path) -> Result<String> {
    let results = Command::new(&setup.saker)
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(pilot)
        .output()?;
    let text = String::from_utf8_lossy(&results.stdout);
    let record: ResultRecord = serde_json::from_str(text.lines().last().context("no result")?)?;
    Ok(record.stdout)
}

/// The floor under any launcher: six probes spawned at once on this machine, each
/// its own singleton world (no PMI, no wire-up); spawn → last `MPI_Init`.
fn singletons(probe: &Path, rounds: u32) -> Result<super::Summary> {
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let spawned = unix_micros();
        let children: Vec<_> = (0..6)
            .map(|_| {
                Command::new(probe)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        let mut text = String::new();
        for child in children {
            let output = child.wait_with_output()?;
            text.push_str(&String::from_utf8_lossy(&output.stdout));
        }
        samples.push(Duration::from_micros(
            last_init(&text)?.saturating_sub(spawned),
        ));
    }
    Ok(summary(&mut samples))
}

fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// Jobs per second of 2-rank MPI jobs: through PMI, as srun steps, and the same
/// processes without wire-up; two alternated rounds each, the better kept.
fn rates(
    setup: &Setup,
    pilot: &Path,
    mpi: &Mpi,
    probe: &Path,
    submitted: &mut usize,
) -> Result<Vec<Row>> {
    let jobs: u32 = if setup.quick { 30 } else { 100 };
    // The floor, the same processes without wire-up (each rank a singleton), is
    // MPICH's only: an Open MPI singleton starts an `orted` of its own, and under
    // Slurm's variables it fails outright.
    let mut ways = vec![("pmi", "agents"), (mpi.starts[1].0, "srun")];
    if mpi.kind == MpiKind::Mpich {
        ways.push(("none", "agents"));
    }
    let mut best = vec![0.0f64; ways.len()];
    for _round in 0..2 {
        for (index, (kind, launcher)) in ways.iter().enumerate() {
            let started = Instant::now();
            let output = saker(setup, pilot)
                .args(["--retries", mpi.retries, "--array", &format!("1-{jobs}")])
                .args(["--nodes", "2", "--ranks-per-node", "1", "--mpi", kind])
                .args(["--launcher", launcher, "--"])
                .arg(probe)
                .output()?;
            let elapsed = started.elapsed();
            if !output.status.success() {
                bail!(
                    "{}: {kind}/{launcher}: {}",
                    mpi.name,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            *submitted += jobs as usize;
            let rate = f64::from(jobs) / elapsed.as_secs_f64();
            eprintln!(
                "saker-perf: mpi rate {} {kind}/{launcher}: {rate:.1} jobs/s",
                mpi.name
            );
            best[index] = best[index].max(rate);
        }
    }
    let row = |baseline: f64, label: &str, target: f64| Row {
        benchmark: Benchmark::Mpi,
        name: format!(
            "slurm, 2-rank {} jobs per second: PMI beside {label}",
            mpi.name
        ),
        saker: Measure::new(best[0], Unit::PerSecond)
            .with_detail(format!("{jobs} jobs, submit to all ended")),
        baseline: Some(
            Measure::new(baseline, Unit::PerSecond)
                .with_detail(format!("{label}, same allocation, same jobs")),
        ),
        target: Target::RatioAtLeast(target),
    };
    let mut rows = vec![row(best[1], "srun --overlap steps", 10.0)];
    if let Some(&floor) = best.get(2) {
        rows.push(row(floor, "the same processes without wire-up", 0.5));
    }
    Ok(rows)
}

/// `saker submit --wait` into `pilot`, with a minute's time limit.
fn saker(setup: &Setup, pilot: &Path) -> Command {
    let mut command = Command::new(&setup.saker);
    command
        .args(["submit", "--wait", "--time-limit", "60s", "--dir"])
        .arg(pilot);
    command
}

/// When the `nth` task submitted to `pilot` started on its nodes (µs since the epoch).
fn start_of(setup: &Setup, pilot: &Path, nth: usize) -> Result<u64> {
    let results = Command::new(&setup.saker)
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(pilot)
        .output()?;
    let text = String::from_utf8_lossy(&results.stdout);
    let line = text.lines().nth(nth - 1).context("the job's result")?;
    let record: ResultRecord = serde_json::from_str(line)?;
    Ok(record.start_time.context("no start time")?.unix_micros())
}

/// The probe's lines its ranks wrote to `out`, one file each.
fn read_inits(out: &Path) -> Result<String> {
    let mut text = String::new();
    for entry in std::fs::read_dir(out)? {
        text.push_str(&std::fs::read_to_string(entry?.path())?);
    }
    Ok(text)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
