//! `saker top`: a live view of a running pilot in the terminal — counts, rates, the
//! nodes and how busy each is, where tasks' time goes stage by stage, and the latest
//! failures — redrawn in place until `q`.
//!
//! It is a client like any other: `status` on a timer, and a results stream followed
//! for failures (their reasons are in the results, not in `status`). It redraws on
//! the timer, not per result. Keys are read on
//! a thread of their own (crossterm's reads block), which also turns a resize into a
//! redraw. The terminal is restored however the view ends: `q`, an error, a panic.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Gauge, Paragraph, Row, Table};
use saker_client::StatusReport;
use saker_client::results::{ResultRecord, TerminalState};
use tokio::sync::mpsc;

use crate::cli::TopArgs;

/// Failures listed, newest first.
const FAILURES_SHOWN: usize = 10;

pub async fn top(args: TopArgs) -> Result<ExitCode> {
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        anyhow::bail!("saker top draws in a terminal; for a snapshot, use saker status");
    }
    let every = saker_client::spec::parse_duration(&args.interval)
        .with_context(|| format!("--interval {:?}", args.interval))?
        .max(Duration::from_millis(100));
    // Connected before the screen is taken: a wrong directory prints as usual.
    let client = crate::commands::connect(&args.dir).await?;
    let mut results = Some(client.follow_new().await?);
    let mut view = View {
        status: Some(client.status().await?),
        ..View::default()
    };

    let mut terminal = ratatui::try_init().context("taking over the terminal")?;
    let _restore = Restore;
    let mut keys = read_keys();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    terminal.draw(|frame| view.render(frame))?;
    loop {
        // Redrawn on the clock and on resizes only: results may stream in by the
        // thousand a second, and each is only noted.
        let redraw = tokio::select! {
            _ = tick.tick() => {
                match client.status().await {
                    Ok(status) => {
                        view.status = Some(status);
                        view.problem = None;
                    }
                    Err(error) => view.problem = Some(format!("pilot unreachable: {error}")),
                }
                true
            }
            key = keys.recv() => match key {
                Some(Input::Quit) | None => break,
                Some(Input::Redraw) => true,
            },
            record = next_result(&mut results) => {
                match record {
                    Ok(Some(record)) => view.note(&record),
                    Ok(None) => results = None,
                    Err(error) => {
                        results = None;
                        view.problem = Some(format!("results stream ended: {error}"));
                    }
                }
                false
            }
        };
        if redraw {
            terminal.draw(|frame| view.render(frame))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The next result of the stream, or never once it has ended.
async fn next_result(
    stream: &mut Option<saker_client::ResultStream>,
) -> Result<Option<ResultRecord>, saker_client::ClientError> {
    match stream {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Gives the terminal back (raw mode off, main screen) when the view ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        // Nothing better to do if the terminal is gone.
        let _ = ratatui::try_restore();
    }
}

#[derive(Debug)]
enum Input {
    Quit,
    Redraw,
}

/// Keys from a thread of their own; the channel closes if reading fails.
fn read_keys() -> mpsc::UnboundedReceiver<Input> {
    let (sender, receiver) = mpsc::unbounded_channel();
    // Without a key thread the sender is dropped, the channel closes and the view
    // ends at once.
    let _ = std::thread::Builder::new()
        .name("saker-top-keys".into())
        .spawn(move || {
            while let Ok(event) = event::read() {
                let input = match event {
                    Event::Key(key) if key.kind == KeyEventKind::Press => match key.code {
                        KeyCode::Char('q') | KeyCode::Esc => Input::Quit,
                        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                            Input::Quit
                        }
                        _ => continue,
                    },
                    Event::Resize(..) => Input::Redraw,
                    _ => continue,
                };
                if sender.send(input).is_err() {
                    return;
                }
            }
        });
    receiver
}

#[derive(Debug, Default)]
struct View {
    status: Option<StatusReport>,
    /// Failed and cancelled results seen since the view started, newest first.
    failures: VecDeque<String>,
    failed_seen: u64,
    problem: Option<String>,
}

impl View {
    fn note(&mut self, record: &ResultRecord) {
        if record.state == TerminalState::Succeeded {
            return;
        }
        self.failed_seen += 1;
        let why = match (&record.reason, record.exit_code, record.signal) {
            (Some(reason), _, _) => reason.clone(),
            (None, Some(code), _) => format!("exit {code}"),
            (None, None, Some(signal)) => format!("signal {signal}"),
            (None, None, None) => "no reason given".to_owned(),
        };
        let node = record.node.as_deref().unwrap_or("-");
        let line = format!(
            "task {} (job {}) {} on {node}: {why}",
            record.task.0,
            record.job.0,
            record.state.as_str()
        );
        self.failures.push_front(line);
        self.failures.truncate(FAILURES_SHOWN);
    }

    fn render(&self, frame: &mut Frame) {
        let Some(status) = &self.status else {
            return;
        };
        let node_rows = status.nodes.len().min(16) as u16;
        let stage_rows = status.stages.len() as u16;
        let [summary, load, nodes, stages, failures] = Layout::vertical([
            Constraint::Length(7),
            Constraint::Length(3),
            Constraint::Length(node_rows + 3),
            Constraint::Length(stage_rows + 3),
            Constraint::Min(3),
        ])
        .areas(frame.area());

        let mut lines = vec![
            Line::from(format!(
                "agents {}   slots {} ({} busy)   jobs {}",
                status.agents, status.slots, status.busy_slots, status.jobs
            )),
            Line::from(format!(
                "tasks  queued {}   running {}   succeeded {}   failed {}   cancelled {}",
                status.queued, status.running, status.succeeded, status.failed, status.cancelled
            )),
            Line::from(format!(
                "rate   {:.1} tasks/s now, {:.1} over the last minute   retried {}  replayed {}",
                status.rate, status.rate_minute, status.retries, status.replays
            )),
            Line::from(format!(
                "data   {} items, {} held   {} moved between nodes, {} through the root, {} relayed   {} recomputed",
                status.items,
                bytes(status.data_held_bytes),
                bytes(status.data_moved_bytes),
                bytes(status.data_root_bytes),
                bytes(status.data_relayed_bytes),
                status.data_recomputes
            )),
        ];
        if status.data_memory_bound > 0 {
            lines.push(Line::from(format!(
                "objects {} of {} in memory   {} moved to scratch ({})   {} copies dropped ({})",
                bytes(status.data_memory_bytes),
                bytes(status.data_memory_bound),
                status.data_spills,
                bytes(status.data_spilled_bytes),
                status.data_drops,
                bytes(status.data_dropped_bytes)
            )));
        }
        if let Some(problem) = &self.problem {
            lines.push(Line::styled(problem.clone(), Style::new().fg(Color::Red)));
        }
        let title = format!(" saker top: pilot {}   (q to quit) ", status.pilot_id);
        frame.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(title)),
            summary,
        );

        let busy = if status.slots == 0 {
            0.0
        } else {
            f64::from(status.busy_slots) / f64::from(status.slots)
        };
        frame.render_widget(
            Gauge::default()
                .block(Block::bordered().title(" busy slots "))
                .gauge_style(Style::new().fg(Color::Green))
                .ratio(busy.clamp(0.0, 1.0))
                .label(format!("{}/{}", status.busy_slots, status.slots)),
            load,
        );

        let header = Row::new(["NODE", "HOST", "CORES", "BUSY", "LOAD", "HELD", "FETCHED"])
            .style(Style::new().add_modifier(Modifier::BOLD));
        let rows = status.nodes.iter().map(|node| {
            let bar_width = 20usize;
            let filled = (node.busy.min(node.cores) as usize * bar_width)
                .checked_div(node.cores as usize)
                .unwrap_or(0);
            Row::new([
                node.node.to_string(),
                node.hostname.clone(),
                node.cores.to_string(),
                node.busy.to_string(),
                format!("{}{}", "#".repeat(filled), ".".repeat(bar_width - filled)),
                bytes(node.held_bytes),
                bytes(node.fetched_bytes),
            ])
        });
        let widths = [
            Constraint::Length(6),
            Constraint::Min(12),
            Constraint::Length(6),
            Constraint::Length(6),
            Constraint::Length(22),
            Constraint::Length(10),
            Constraint::Length(10),
        ];
        frame.render_widget(
            Table::new(rows, widths)
                .header(header)
                .block(Block::bordered().title(" nodes ")),
            nodes,
        );

        let header = Row::new(["STAGE", "TASKS", "P50", "P90", "P99", "MAX"])
            .style(Style::new().add_modifier(Modifier::BOLD));
        let rows = status.stages.iter().map(|stage| {
            Row::new([
                stage.stage.clone(),
                stage.count.to_string(),
                crate::commands::micros(stage.p50_us),
                crate::commands::micros(stage.p90_us),
                crate::commands::micros(stage.p99_us),
                crate::commands::micros(stage.max_us),
            ])
        });
        frame.render_widget(
            Table::new(rows, [Constraint::Length(10); 6])
                .header(header)
                .block(Block::bordered().title(" where time goes ")),
            stages,
        );

        let lines: Vec<Line> = if self.failures.is_empty() {
            vec![Line::from("none since this view started")]
        } else {
            self.failures
                .iter()
                .map(|f| Line::from(f.clone()))
                .collect()
        };
        let title = format!(" recent failures ({} seen) ", self.failed_seen);
        frame.render_widget(
            Paragraph::new(lines).block(Block::bordered().title(title)),
            failures,
        );
    }
}

/// Bytes for a person: `512 B`, `3.0 MiB`, `1.2 GiB`.
fn bytes(count: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if count < 1024 {
        return format!("{count} B");
    }
    let mut value = count as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
