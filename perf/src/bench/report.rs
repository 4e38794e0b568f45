//! `saker report` at scale: the page of a finished pilot of N `/bin/true` tasks
//! (submitted as task-file lines, run on this machine's cores), how long writing it
//! takes beside `saker results --format jsonl` reading the same journal, its size, and
//! how long headless chromium takes to load it beside an empty page.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use saker_client::spec::{Commands, JobLines, TaskSpec};

use super::{Setup, client_runtime, summary};
use crate::options::Benchmark;
use crate::pilot::{PilotShape, RunningPilot};
use crate::process::TempDir;
use crate::report::{Measure, Row, Target, Unit};

/// The most writing the page may take, in seconds (a million results).
const WRITE_TARGET_SECONDS: f64 = 10.0;
/// The largest page, in MiB.
const SIZE_TARGET_MIB: f64 = 3.0;
/// The most chromium may take to load and lay out the page, in seconds.
const RENDER_TARGET_SECONDS: f64 = 5.0;

pub fn run(setup: &Setup) -> Result<Vec<Row>> {
    let count = setup.sizes.report_tasks;
    let repeats = if setup.quick { 1 } else { 3 };
    let directory = TempDir::new("report").context("creating a temporary directory")?;
    let shape = PilotShape {
        agents: 1,
        slots: Some(u32::try_from(setup.cores).unwrap_or(u32::MAX)),
        sync: false,
        heartbeat: None,
        extra: &[],
    };
    client_runtime()?.block_on(async {
        let pilot = RunningPilot::start_in(&setup.saker, directory.path(), shape, false).await?;
        let ran = run_tasks(&pilot, count).await;
        let stopped = pilot.shutdown().await;
        ran?;
        stopped
    })?;
    let dir = directory.path().join("pilot");
    let page = directory.path().join("report.html");
    // Alternated: report, results, report, results …
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..repeats {
        writes.push(timed(
            Command::new(&setup.saker)
                .arg("report")
                .arg("--dir")
                .arg(&dir)
                .arg("-o")
                .arg(&page),
        )?);
        reads.push(timed(
            Command::new(&setup.saker)
                .args(["results", "--format", "jsonl", "--dir"])
                .arg(&dir),
        )?);
    }
    let size = std::fs::metadata(&page)?.len() as f64 / f64::from(1u32 << 20);
    let write = summary(&mut writes);
    let read = summary(&mut reads);
    let mut rows = vec![
        Row {
            benchmark: Benchmark::Report,
            name: format!("report of {count} results: written in"),
            saker: Measure::new(write.median.as_secs_f64(), Unit::Seconds)
                .with_detail(write.detail()),
            baseline: Some(
                Measure::new(read.median.as_secs_f64(), Unit::Seconds)
                    .with_detail(format!("`results --format jsonl`, {}", read.detail())),
            ),
            target: Target::AtMost(WRITE_TARGET_SECONDS),
        },
        Row {
            benchmark: Benchmark::Report,
            name: format!("report of {count} results: page size"),
            saker: Measure::new(size, Unit::Mebibytes),
            baseline: None,
            target: Target::AtMost(SIZE_TARGET_MIB),
        },
    ];
    match chromium() {
        Some(browser) => {
            let empty = directory.path().join("empty.html");
            std::fs::write(&empty, "<!DOCTYPE html><title>empty</title>")?;
            let mut loads = Vec::new();
            let mut baselines = Vec::new();
            for k in 0..repeats {
                let profile = directory.path().join(format!("profile-{k}"));
                loads.push(render(&browser, &page, &profile)?);
                baselines.push(render(&browser, &empty, &profile)?);
            }
            let load = summary(&mut loads);
            let baseline = summary(&mut baselines);
            rows.push(Row {
                benchmark: Benchmark::Report,
                name: format!("report of {count} results: chromium loads it in"),
                saker: Measure::new(load.median.as_secs_f64(), Unit::Seconds)
                    .with_detail(load.detail()),
                baseline: Some(
                    Measure::new(baseline.median.as_secs_f64(), Unit::Seconds)
                        .with_detail(format!("an empty page, {}", baseline.detail())),
                ),
                target: Target::AtMost(RENDER_TARGET_SECONDS),
            });
        }
        None => eprintln!("saker-perf report: chromium is not installed; its row is left out"),
    }
    Ok(rows)
}

async fn run_tasks(pilot: &RunningPilot, count: u64) -> Result<()> {
    let mut commands = Commands::new();
    for _ in 0..count {
        commands.push(["/bin/true"], Default::default())?;
    }
    let lines = JobLines {
        template: TaskSpec::new(Vec::new()),
        inline_output: None,
        commands,
    };
    pilot.client.submit_lines(&lines).await?;
    let report = pilot.client.wait(None).await?;
    if report.succeeded != count {
        bail!("{count} tasks did not all succeed: {report:?}");
    }
    Ok(())
}

/// Runs `command` to a successful end, its output discarded; how long it took.
fn timed(command: &mut Command) -> Result<Duration> {
    let started = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} exited with {status}");
    }
    Ok(started.elapsed())
}

fn chromium() -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from(
        std::env::var_os("SAKER_CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()),
    );
    path.exists().then_some(path)
}

/// Headless chromium's time to load `page` and print its DOM (start-up included;
/// the empty page's row is that start-up).
fn render(browser: &Path, page: &Path, profile: &Path) -> Result<Duration> {
    timed(
        Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("file://{}", page.display())),
    )
}
