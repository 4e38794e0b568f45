//! The results: rows of saker figure, baseline, ratio and target, printed as one table
//! or as one JSON document.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::options::Benchmark;

/// What a measured value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Tasks (or raw spawns) completed per second.
    PerSecond,
    Microseconds,
    /// Ideal makespan over measured makespan, 0 to 1.
    Efficiency,
    BytesPerTask,
    Seconds,
    Mebibytes,
    /// Nanoseconds one dependency edge adds, and what one job costs without any.
    NanosPerEdge,
    NanosPerJob,
    /// Heap bytes one dependency edge holds while its job waits.
    BytesPerEdge,
    /// Batch allocations' nodes times their run time.
    NodeSeconds,
    /// Bytes moved per second, in MiB/s.
    MebibytesPerSecond,
}

impl Unit {
    fn id(self) -> &'static str {
        match self {
            Unit::PerSecond => "per_second",
            Unit::Microseconds => "microseconds",
            Unit::Efficiency => "efficiency",
            Unit::BytesPerTask => "bytes_per_task",
            Unit::Seconds => "seconds",
            Unit::Mebibytes => "mebibytes",
            Unit::NanosPerEdge => "nanoseconds_per_edge",
            Unit::NanosPerJob => "nanoseconds_per_job",
            Unit::BytesPerEdge => "bytes_per_edge",
            Unit::NodeSeconds => "node_seconds",
            Unit::MebibytesPerSecond => "mebibytes_per_second",
        }
    }

    /// `value` in this unit, for a table cell.
    pub fn format(self, value: f64) -> String {
        match self {
            // Slow rates (a Slurm job per task) would round to 0 or 1.
            Unit::PerSecond if value < 10.0 => format!("{value:.2}/s"),
            Unit::PerSecond => format!("{value:.0}/s"),
            Unit::Microseconds if value >= 1000.0 => format!("{:.2} ms", value / 1000.0),
            // Sub-10 µs figures (a ring's hop) would all print as 0 to 9.
            Unit::Microseconds if value.abs() < 10.0 => format!("{value:.2} µs"),
            Unit::Microseconds => format!("{value:.0} µs"),
            Unit::Efficiency => format!("{value:.3}"),
            Unit::BytesPerTask if value.abs() < 10.0 => format!("{value:.1} B/task"),
            Unit::BytesPerTask => format!("{value:.0} B/task"),
            Unit::Seconds if value < 0.1 => format!("{:.2} ms", value * 1000.0),
            Unit::Seconds => format!("{value:.3} s"),
            Unit::Mebibytes => format!("{value:.1} MiB"),
            Unit::NanosPerEdge => format!("{value:.0} ns/edge"),
            Unit::NanosPerJob => format!("{value:.0} ns/job"),
            Unit::BytesPerEdge => format!("{value:.1} B/edge"),
            Unit::NodeSeconds => format!("{value:.0} node-s"),
            Unit::MebibytesPerSecond => format!("{value:.0} MiB/s"),
        }
    }
}

/// One measured figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    pub value: f64,
    pub unit: Unit,
    /// Context shown after the value, e.g. the wall time behind an efficiency.
    pub detail: Option<String>,
}

impl Measure {
    pub fn new(value: f64, unit: Unit) -> Self {
        Measure {
            value,
            unit,
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    fn cell(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{} ({detail})", self.unit.format(self.value)),
            None => self.unit.format(self.value),
        }
    }

    fn to_json(&self) -> Value {
        json!({ "value": self.value, "unit": self.unit.id(), "detail": self.detail })
    }
}

/// What a row is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// saker / baseline must be at least this (higher is better: rates, efficiency).
    RatioAtLeast(f64),
    /// The saker figure must be at most this, in its own unit (lower is better).
    AtMost(f64),
    /// saker / baseline must be at most this (lower is better: latencies).
    RatioAtMost(f64),
    /// The saker figure must be at least this, in its own unit (a rate to reach).
    AtLeast(f64),
    /// The saker figure must be at most the baseline plus this, in its own unit
    /// (a latency's overhead above the floor it sits on).
    BaselinePlus(f64),
    /// Reported for context only.
    None,
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub benchmark: Benchmark,
    pub name: String,
    pub saker: Measure,
    pub baseline: Option<Measure>,
    pub target: Target,
}

impl Row {
    /// saker / baseline, when there is a non-zero baseline.
    pub fn ratio(&self) -> Option<f64> {
        let baseline = self.baseline.as_ref()?;
        (baseline.value > 0.0).then(|| self.saker.value / baseline.value)
    }

    /// Whether the target was met; `None` when there is nothing to judge.
    pub fn met(&self) -> Option<bool> {
        match self.target {
            Target::RatioAtLeast(minimum) => self.ratio().map(|ratio| ratio >= minimum),
            Target::RatioAtMost(maximum) => self.ratio().map(|ratio| ratio <= maximum),
            Target::AtLeast(minimum) => Some(self.saker.value >= minimum),
            Target::AtMost(maximum) => Some(self.saker.value <= maximum),
            Target::BaselinePlus(extra) => self
                .baseline
                .as_ref()
                .map(|baseline| self.saker.value <= baseline.value + extra),
            Target::None => None,
        }
    }

    fn target_cell(&self) -> String {
        match self.target {
            Target::RatioAtLeast(minimum) => format!("ratio >= {minimum:.2}"),
            Target::RatioAtMost(maximum) => format!("ratio <= {maximum:.2}"),
            Target::AtLeast(minimum) => format!(">= {}", self.saker.unit.format(minimum)),
            Target::AtMost(maximum) => format!("<= {}", self.saker.unit.format(maximum)),
            Target::BaselinePlus(extra) => format!("<= raw + {}", self.saker.unit.format(extra)),
            Target::None => "-".to_owned(),
        }
    }

    fn to_json(&self) -> Value {
        let target = match self.target {
            Target::RatioAtLeast(minimum) => json!({ "ratio_at_least": minimum }),
            Target::RatioAtMost(maximum) => json!({ "ratio_at_most": maximum }),
            Target::AtLeast(minimum) => json!({ "at_least": minimum }),
            Target::AtMost(maximum) => json!({ "at_most": maximum }),
            Target::BaselinePlus(extra) => json!({ "at_most_baseline_plus": extra }),
            Target::None => Value::Null,
        };
        json!({
            "benchmark": self.benchmark.id(),
            "name": self.name,
            "saker": self.saker.to_json(),
            "baseline": self.baseline.as_ref().map(Measure::to_json),
            "ratio": self.ratio(),
            "target": target,
            "met": self.met(),
        })
    }
}

/// The machine and the run, printed above the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub cores: usize,
    pub saker: String,
    pub quick: bool,
    /// `/proc/loadavg`'s first three fields when the run started.
    pub load_before: String,
    /// The same when it ended.
    pub load_after: String,
}

/// Everything one run measured, and what it could not.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub context: Context,
    pub rows: Vec<Row>,
    /// Benchmarks that failed to run, with the error chain.
    pub failures: Vec<(Benchmark, String)>,
    /// Benchmarks that cannot run on this machine, with the reason; not failures.
    pub skipped: Vec<(Benchmark, String)>,
}

impl Report {
    pub fn table(&self) -> String {
        let context = &self.context;
        let mut text = format!(
            "saker-perf ({} run): {} cores, {}, load {} before / {} after\n",
            if context.quick { "quick" } else { "full" },
            context.cores,
            context.saker,
            context.load_before,
            context.load_after,
        );
        let header = ["row", "saker", "baseline (raw)", "ratio", "target", "met"]
            .map(str::to_owned)
            .to_vec();
        let mut lines = vec![header];
        for row in &self.rows {
            lines.push(vec![
                row.name.clone(),
                row.saker.cell(),
                row.baseline
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), Measure::cell),
                row.ratio()
                    // Three decimals: at two, a ratio just under its target can print as
                    // the target itself (0.9855 as 0.99 beside "NO").
                    .map_or_else(|| "-".to_owned(), |ratio| format!("{ratio:.3}")),
                row.target_cell(),
                match row.met() {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "-",
                }
                .to_owned(),
            ]);
        }
        for (benchmark, reason) in &self.skipped {
            let mut line = vec![benchmark.id().to_owned(), format!("skipped: {reason}")];
            line.resize(lines[0].len(), "-".to_owned());
            lines.push(line);
        }
        let columns = lines[0].len();
        let widths: Vec<usize> = (0..columns)
            .map(|column| {
                lines
                    .iter()
                    .map(|line| line[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for line in &lines {
            let mut cells = String::new();
            for (column, cell) in line.iter().enumerate() {
                if column + 1 == columns {
                    cells.push_str(cell);
                } else {
                    let padding = widths[column] - cell.chars().count();
                    let _ = write!(cells, "{cell}{}  ", " ".repeat(padding));
                }
            }
            text.push_str(cells.trim_end());
            text.push('\n');
        }
        for (benchmark, error) in &self.failures {
            let _ = writeln!(text, "FAILED {}: {error}", benchmark.id());
        }
        text
    }

    pub fn to_json(&self) -> Value {
        let context = &self.context;
        json!({
            "cores": context.cores,
            "saker": context.saker,
            "quick": context.quick,
            "load_before": context.load_before,
            "load_after": context.load_after,
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "failures": self.failures.iter().map(|(benchmark, error)| {
                json!({ "benchmark": benchmark.id(), "error": error })
            }).collect::<Vec<_>>(),
            "skipped": self.skipped.iter().map(|(benchmark, reason)| {
                json!({ "benchmark": benchmark.id(), "reason": reason })
            }).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(saker: f64, baseline: Option<f64>, target: Target) -> Row {
        Row {
            benchmark: Benchmark::Throughput,
            name: "no-op".to_owned(),
            saker: Measure::new(saker, Unit::PerSecond),
            baseline: baseline.map(|value| Measure::new(value, Unit::PerSecond)),
            target,
        }
    }

    #[test]
    fn ratio_target_is_judged_on_saker_over_baseline() {
        assert_eq!(
            row(900.0, Some(1000.0), Target::RatioAtLeast(0.9)).met(),
            Some(true)
        );
        assert_eq!(
            row(899.0, Some(1000.0), Target::RatioAtLeast(0.9)).met(),
            Some(false)
        );
        assert_eq!(row(1.0, Some(0.0), Target::RatioAtLeast(0.9)).ratio(), None);
        assert_eq!(row(1.0, None, Target::RatioAtLeast(0.9)).met(), None);
    }

    #[test]
    fn absolute_target_ignores_the_baseline() {
        assert_eq!(
            row(1000.0, Some(10.0), Target::AtMost(1000.0)).met(),
            Some(true)
        );
        assert_eq!(row(1001.0, None, Target::AtMost(1000.0)).met(), Some(false));
        assert_eq!(row(5.0, Some(1.0), Target::None).met(), None);
    }

    #[test]
    fn baseline_plus_target_allows_that_much_above_the_baseline() {
        let target = Target::BaselinePlus(250.0);
        assert_eq!(row(950.0, Some(700.0), target).met(), Some(true));
        assert_eq!(row(951.0, Some(700.0), target).met(), Some(false));
        assert_eq!(row(1.0, None, target).met(), None);
    }

    #[test]
    fn units_format_for_people() {
        assert_eq!(Unit::Microseconds.format(850.4), "850 µs");
        assert_eq!(Unit::Microseconds.format(1234.0), "1.23 ms");
        assert_eq!(Unit::PerSecond.format(5123.6), "5124/s");
        assert_eq!(Unit::PerSecond.format(0.544), "0.54/s");
        assert_eq!(Unit::BytesPerTask.format(97.6), "98 B/task");
        assert_eq!(Unit::BytesPerTask.format(0.12), "0.1 B/task");
        assert_eq!(Unit::Seconds.format(0.0004), "0.40 ms");
        assert_eq!(Unit::Seconds.format(1.0), "1.000 s");
        assert_eq!(Unit::NanosPerEdge.format(742.4), "742 ns/edge");
        assert_eq!(Unit::BytesPerEdge.format(101.23), "101.2 B/edge");
    }

    #[test]
    fn table_aligns_columns_and_lists_failures() {
        let report = Report {
            context: Context {
                cores: 2,
                saker: "target/release/saker".to_owned(),
                quick: true,
                load_before: "0.10 0.20 0.30".to_owned(),
                load_after: "0.40 0.50 0.60".to_owned(),
            },
            rows: vec![
                row(900.0, Some(1000.0), Target::RatioAtLeast(0.9)),
                Row {
                    name: "latency p50".to_owned(),
                    saker: Measure::new(800.0, Unit::Microseconds),
                    baseline: None,
                    target: Target::AtMost(1000.0),
                    benchmark: Benchmark::Latency,
                },
            ],
            failures: vec![(Benchmark::MemoryArray, "pilot did not start".to_owned())],
            skipped: vec![(Benchmark::SlurmStartup, "no Slurm cluster".to_owned())],
        };
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("quick run") && lines[0].contains("2 cores"));
        let column = lines[1]
            .find("saker")
            .expect("header names the saker column");
        assert_eq!(lines[2].find("900/s"), Some(column));
        assert_eq!(
            lines[3]
                .find("800 µs")
                .map(|byte| lines[3][..byte].chars().count()),
            Some(column)
        );
        assert!(lines[2].ends_with("yes") && lines[3].ends_with("yes"));
        assert!(lines[3].contains("<= 1.00 ms"));
        assert!(lines[4].starts_with("slurm-startup"));
        assert_eq!(
            lines[4]
                .find("skipped: no Slurm cluster")
                .map(|byte| lines[4][..byte].chars().count()),
            Some(column)
        );
        assert!(lines[4].ends_with('-') && !lines[4].contains("FAILED"));
        assert_eq!(lines[5], "FAILED memory-array: pilot did not start");
        let json = report.to_json();
        assert_eq!(json["rows"][0]["ratio"], 0.9);
        assert_eq!(json["rows"][1]["met"], true);
        assert_eq!(json["failures"][0]["benchmark"], "memory-array");
        assert_eq!(json["skipped"][0]["reason"], "no Slurm cluster");
    }
}
