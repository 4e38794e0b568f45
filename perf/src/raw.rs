//! The baselines: the same commands saker runs, spawned and awaited directly.
//!
//! Processes are started with `std::process::Command` (stdin, stdout and stderr on
//! `/dev/null`, nothing else set), which on Linux/glibc is `posix_spawn` — a
//! `clone(CLONE_VM | CLONE_VFORK)` and `exec` — followed by `waitpid`. That is the
//! floor for a command task: what any runtime must pay per task on this machine.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;

/// Spawns `program args` once and waits for it; an unsuccessful exit is an error.
pub fn spawn_and_wait(program: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("spawning {}", program.display()))?;
    if !status.success() {
        bail!("{} exited with {status}", program.display());
    }
    Ok(())
}

/// Runs `program args` `total` times with `concurrency` threads, each spawning,
/// waiting and repeating until the shared count is used up. Returns the wall time
/// from the first spawn to the last exit.
pub fn spawn_loop(
    program: &Path,
    args: &[&str],
    total: u64,
    concurrency: usize,
) -> Result<Duration> {
    let remaining = AtomicU64::new(total);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    while remaining
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                            left.checked_sub(1)
                        })
                        .is_ok()
                    {
                        spawn_and_wait(program, args)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(outcome) => outcome?,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        anyhow::Ok(())
    })?;
    Ok(started.elapsed())
}

/// A histogram of microseconds from 1 µs to 10 minutes, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy `1 <= low`, `high >= 2 * low`, sigfig <= 5.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Records a duration in microseconds, clamped into the histogram's range.
pub fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(micros.clamp(1, histogram.high()));
}

/// Spawn-to-exit latency of `samples` sequential runs of `program args`.
pub fn spawn_latency(program: &Path, args: &[&str], samples: u64) -> Result<Histogram<u64>> {
    let mut histogram = latency_histogram();
    for _ in 0..samples {
        let started = Instant::now();
        spawn_and_wait(program, args)?;
        record(&mut histogram, started.elapsed());
    }
    Ok(histogram)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::TempDir;

    #[test]
    fn spawn_loop_runs_exactly_the_requested_count() {
        let directory = TempDir::new("raw").unwrap();
        let log = directory.path().join("log");
        let script = format!("echo x >> {}", log.display());
        spawn_loop(Path::new("/bin/sh"), &["-c", &script], 25, 4).unwrap();
        let lines = std::fs::read_to_string(&log).unwrap().lines().count();
        assert_eq!(lines, 25);
    }

    #[test]
    fn a_failing_command_fails_the_baseline() {
        let error = spawn_loop(Path::new("/bin/false"), &[], 3, 2).unwrap_err();
        assert!(error.to_string().contains("exited with"), "{error:#}");
        assert!(spawn_latency(Path::new("/nonexistent/program"), &[], 1).is_err());
    }

    #[test]
    fn latency_histogram_holds_every_sample() {
        let histogram = spawn_latency(Path::new("/bin/true"), &[], 5).unwrap();
        assert_eq!(histogram.len(), 5);
        assert!(histogram.min() >= 1);
    }
}
