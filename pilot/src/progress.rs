//! Progress for `saker run`: a bar on a terminal, plain periodic lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::ProgressMode;
use saker_client::StatusReport;

#[derive(Debug)]
pub struct Progress {
    mode: Mode,
    total: u64,
    started: Instant,
    last_line: Instant,
}

#[derive(Debug)]
enum Mode {
    Bar(ProgressBar),
    Lines { every: Duration },
    Quiet,
}

impl Progress {
    pub fn new(requested: ProgressMode, total: u64) -> Self {
        let mode = match requested {
            ProgressMode::None => Mode::Quiet,
            ProgressMode::Lines => Mode::Lines {
                every: Duration::from_secs(5),
            },
            ProgressMode::Bar => Mode::Bar(bar(total)),
            ProgressMode::Auto if std::io::stderr().is_terminal() => Mode::Bar(bar(total)),
            ProgressMode::Auto => Mode::Lines {
                every: Duration::from_secs(10),
            },
        };
        Progress {
            mode,
            total,
            started: Instant::now(),
            last_line: Instant::now(),
        }
    }

    /// How often to poll the pilot for a fresh status.
    pub fn interval(&self) -> Duration {
        match self.mode {
            Mode::Bar(_) => Duration::from_millis(100),
            Mode::Lines { .. } | Mode::Quiet => Duration::from_millis(500),
        }
    }

    pub fn update(&mut self, status: &StatusReport) {
        let done = status.succeeded + status.failed + status.cancelled;
        match &self.mode {
            Mode::Bar(bar) => {
                bar.set_position(done);
                bar.set_message(counts(status));
            }
            Mode::Lines { every } => {
                if self.last_line.elapsed() >= *every {
                    self.last_line = Instant::now();
                    eprintln!("{}", self.line(status, done));
                }
            }
            Mode::Quiet => {}
        }
    }

    pub fn finish(&mut self, status: &StatusReport) {
        let done = status.succeeded + status.failed + status.cancelled;
        match &self.mode {
            Mode::Bar(bar) => {
                bar.set_position(done);
                bar.set_message(counts(status));
                bar.finish();
            }
            Mode::Lines { .. } => eprintln!("{}", self.line(status, done)),
            Mode::Quiet => {}
        }
    }

    fn line(&self, status: &StatusReport, done: u64) -> String {
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = if elapsed > 0.0 {
            done as f64 / elapsed
        } else {
            0.0
        };
        let eta = if rate > 0.0 && done < self.total {
            format!(", eta {:.0}s", (self.total - done) as f64 / rate)
        } else {
            String::new()
        };
        format!(
            "saker: {done}/{} done ({}) {rate:.0}/s{eta}",
            self.total,
            counts(status)
        )
    }
}

fn counts(status: &StatusReport) -> String {
    format!(
        "ok {} failed {} running {} queued {}",
        status.succeeded, status.failed, status.running, status.queued
    )
}

fn bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(10));
    let style =
        ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {per_sec} eta {eta} | {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
