//! Rates measured from a pilot's own results: the tasks' start and end times as the
//! agents recorded them, read back with `saker results --format jsonl`.
//!
//! Used where the wall time of one process is not the figure wanted — a pilot in a
//! batch job starts after Slurm has allocated its nodes, and the time from `sbatch` to
//! the first task is reported separately — so that the one definition, tasks ÷ (last
//! end − first start), can be applied to a Slurm run and to a local run alike.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use saker_client::results::{ResultRecord, TerminalState, Timestamp};

/// Every result of the pilot in `pilot_dir` (`saker results --format jsonl`; the
/// pilot need not be running).
pub fn read_results(saker: &Path, pilot_dir: &Path) -> Result<Vec<ResultRecord>> {
    let output = Command::new(saker)
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(pilot_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} results", saker.display()))?;
    if !output.status.success() {
        bail!(
            "saker results --dir {} exited with {}: {}",
            pilot_dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8(output.stdout).context("saker results printed non-UTF-8")?;
    parse_results(&text)
}

/// One [`ResultRecord`] per non-blank line.
pub fn parse_results(jsonl: &str) -> Result<Vec<ResultRecord>> {
    jsonl
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            serde_json::from_str(line.trim())
                .with_context(|| format!("result line {} is not a result record", number + 1))
        })
        .collect()
}

/// When a set of tasks ran: from the first start to the last end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub tasks: u64,
    pub first_start: Timestamp,
    pub last_end: Timestamp,
    /// Hostnames of the nodes that ran them.
    pub nodes: BTreeSet<String>,
}

impl Span {
    /// The span of `records`, all of which must have succeeded (a benchmark of
    /// `/bin/true` where one failed measured something else), one per task.
    pub fn of(records: &[ResultRecord]) -> Result<Span> {
        let mut first_start: Option<Timestamp> = None;
        let mut last_end: Option<Timestamp> = None;
        let mut nodes = BTreeSet::new();
        let mut tasks = HashSet::with_capacity(records.len());
        for record in records {
            if !tasks.insert(record.task) {
                bail!("task {} has more than one result", record.task.0);
            }
            if record.state != TerminalState::Succeeded {
                bail!(
                    "task {} {} ({})",
                    record.task.0,
                    record.state.as_str(),
                    record.reason.as_deref().unwrap_or("no reason given")
                );
            }
            let start = record.start_time.with_context(|| {
                format!("task {} succeeded without a start time", record.task.0)
            })?;
            first_start = Some(first_start.map_or(start, |first| first.min(start)));
            last_end = Some(last_end.map_or(record.end_time, |last| last.max(record.end_time)));
            if let Some(node) = &record.node {
                nodes.insert(node.clone());
            }
        }
        let (Some(first_start), Some(last_end)) = (first_start, last_end) else {
            bail!("there are no results");
        };
        if last_end <= first_start {
            bail!(
                "the last task ended ({last_end}) no later than the first started ({first_start})"
            );
        }
        Ok(Span {
            tasks: records.len() as u64,
            first_start,
            last_end,
            nodes,
        })
    }

    /// Last end − first start.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(
            self.last_end
                .unix_micros()
                .saturating_sub(self.first_start.unix_micros()),
        )
    }

    /// Tasks per second over the span.
    pub fn rate(&self) -> f64 {
        self.tasks as f64 / self.duration().as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result line as `saker results --format jsonl` writes it.
    fn line(task: u64, state: &str, node: &str, start: &str, end: &str) -> String {
        format!(
            r#"{{"task":{task},"job":{task},"index":null,"state":"{state}","exit_code":0,"signal":null,"reason":null,"attempts":1,"node":"{node}","executor":0,"submit_time":"2026-11-22T11:05:29.954714Z","start_time":{start},"end_time":"{end}","stdout":"","stderr":"","stdout_path":null,"stderr_path":null,"seq":{task}}}"#
        )
    }

    #[test]
    fn span_runs_from_the_first_start_to_the_last_end() {
        let text = [
            line(
                1,
                "succeeded",
                "n1",
                r#""2026-11-22T11:05:30.000000Z""#,
                "2026-11-22T11:05:30.500000Z",
            ),
            line(
                2,
                "succeeded",
                "n2",
                r#""2026-11-22T11:05:30.250000Z""#,
                "2026-11-22T11:05:32.000000Z",
            ),
            String::new(),
            line(
                3,
                "succeeded",
                "n1",
                r#""2026-11-22T11:05:29.999000Z""#,
                "2026-11-22T11:05:30.001000Z",
            ),
        ]
        .join("\n");
        let records = parse_results(&text).unwrap();
        assert_eq!(records.len(), 3);
        let span = Span::of(&records).unwrap();
        assert_eq!(span.tasks, 3);
        assert_eq!(span.first_start.to_string(), "2026-11-22T11:05:29.999000Z");
        assert_eq!(span.duration(), Duration::from_micros(2_001_000));
        assert!((span.rate() - 3.0 / 2.001).abs() < 1e-9);
        assert_eq!(
            span.nodes.into_iter().collect::<Vec<_>>(),
            vec!["n1".to_owned(), "n2".to_owned()]
        );
    }

    #[test]
    fn failed_or_unstarted_tasks_and_bad_lines_are_errors() {
        let start = r#""2026-11-22T11:05:30.000000Z""#;
        let end = "2026-11-22T11:05:31.000000Z";
        let failed = parse_results(&line(1, "failed", "n1", start, end)).unwrap();
        assert!(
            Span::of(&failed)
                .unwrap_err()
                .to_string()
                .contains("task 1 failed")
        );
        let unstarted = parse_results(&line(1, "succeeded", "n1", "null", end)).unwrap();
        assert!(Span::of(&unstarted).is_err());
        assert!(Span::of(&[]).is_err());
        let error = parse_results(&format!(
            "{}\nnot json\n",
            line(1, "succeeded", "n1", start, end)
        ))
        .unwrap_err();
        assert!(error.to_string().contains("line 2"), "{error:#}");
        let backwards = parse_results(&line(
            1,
            "succeeded",
            "n1",
            start,
            "2026-11-22T11:05:29.000000Z",
        ))
        .unwrap();
        assert!(Span::of(&backwards).is_err());
        let twice = parse_results(
            &[
                line(1, "succeeded", "n1", start, end),
                line(1, "succeeded", "n2", start, end),
            ]
            .join("\n"),
        )
        .unwrap();
        assert!(
            Span::of(&twice)
                .unwrap_err()
                .to_string()
                .contains("more than one result")
        );
    }
}
