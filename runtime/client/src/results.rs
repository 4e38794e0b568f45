//! The result of one task as the outside world sees it: [`ResultRecord`], shared by
//! the journal, the client protocol (`results` stream) and `saker results`, plus its
//! two output formats (JSON lines and an aligned human table).
//!
//! Times are [`Timestamp`]s: exact unix microseconds in memory, RFC 3339 UTC strings
//! with six fractional digits on the wire (`"2025-01-31T12:00:00.000250Z"`), readable
//! in a `jq` pipeline and parsed by Python's `datetime.fromisoformat` (3.11+, or after
//! replacing `Z` by `+00:00`).

use std::io::{self, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::attempts::AttemptNote;
pub use crate::time::{Timestamp, TimestampError};

mod csv;
pub use self::csv::{CSV_COLUMNS, CsvWriter};

/// Jobs and tasks are named by the core's ids (bare numbers in JSON); a task's end is
/// the core's [`TerminalState`].
pub use saker_core::{JobId, TaskId, TerminalState};

/// The first accepted terminal result of one task. One JSON object per line in
/// `saker results --format jsonl`, the payload of a `result` message in the client
/// protocol, and the journal's result record. Every field is always written (`null`
/// when absent), so consumers see a fixed set of keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultRecord {
    pub task: TaskId,
    pub job: JobId,
    /// Array index, `null` for a job without an array.
    pub index: Option<u32>,
    pub state: TerminalState,
    /// Exit status when the program exited; `null` when killed by a signal or never run.
    pub exit_code: Option<i32>,
    /// Signal number when the program was killed by one.
    pub signal: Option<i32>,
    /// Why, when the exit status alone does not say (spawn failure, time limit,
    /// cancellation, lost node): human text, not for matching.
    pub reason: Option<String>,
    /// How the counted attempt of a failed task failed, for programs to match on
    /// (`reason` is for people); `null` for tasks that succeeded or were cancelled, and
    /// in journals written before it was kept.
    #[serde(default)]
    pub failure: Option<Failure>,
    /// Attempts made, including the accepted one (0 when cancelled while queued).
    pub attempts: u32,
    /// Hostname of the node that ran the accepted attempt.
    pub node: Option<String>,
    /// That node's number in the pilot (`SAKER_NODE` in the task), which tells agents apart
    /// when host names repeat; `null` in journals written before it was kept.
    #[serde(default)]
    pub node_id: Option<u32>,
    /// Executor (slot) index on that node.
    pub executor: Option<u32>,
    pub submit_time: Timestamp,
    /// When the root sent the task's last attempt to a node (its clock); `null` for a
    /// task never dispatched, one in flight across a root restart, and in journals
    /// written before it was kept.
    #[serde(default)]
    pub dispatch_time: Option<Timestamp>,
    /// When the node's agent received that dispatch (the agent's clock); `null` when
    /// not known (as `dispatch_time`, and for attempts that ran on no agent).
    #[serde(default)]
    pub received_time: Option<Timestamp>,
    pub start_time: Option<Timestamp>,
    pub end_time: Timestamp,
    /// When the root accepted the result (its clock; `null` in journals written
    /// before it was kept).
    #[serde(default)]
    pub accept_time: Option<Timestamp>,
    /// How long its attempt waited on its node for the data items it reads to be
    /// fetched, µs; absent when it fetched none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_us: Option<u64>,
    /// Captured output, lossy UTF-8: everything when small, else the first inline bytes
    /// (the whole stream is then in `stdout_path`).
    pub stdout: String,
    pub stderr: String,
    pub stdout_path: Option<String>,
    pub stderr_path: Option<String>,
    /// A function task's answer from its worker (return value, or the exception it
    /// raised), base64 in JSON; `null` for commands and when no answer came.
    #[serde(default, with = "crate::spec::base64_option")]
    pub output: Option<Vec<u8>>,
    /// Journal sequence number: resume a `results` stream with `from = seq + 1`.
    pub seq: u64,
    /// The attempts before the accepted one and why each did not count, oldest first
    /// (empty when the first attempt counted).
    #[serde(default)]
    pub history: Vec<AttemptNote>,
    /// For an HPC job: the nodes it ran on and how each process ended; `null` for
    /// other tasks.
    #[serde(default)]
    pub gang: Option<GangRecord>,
}

/// How a failed task's counted attempt failed: `failure` in results, one word each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Exited with a non-zero status (`exit_code`).
    Exit,
    /// Killed by a signal (`signal`).
    Signal,
    /// Ran past its time limit.
    TimeLimit,
    /// Killed at its memory limit.
    OutOfMemory,
    /// Never started: program not found, bad working directory, a resource its node
    /// cannot give, or (after it ran) a data item it did not write.
    Spawn,
    /// A function task's persistent worker could not be started, or ended before it
    /// was ready: the worker's environment is at fault, not the call.
    WorkerStart,
    /// A function task's call raised.
    Raised,
    /// Lost with its agent or node, or stopped from outside Saker, with no replay left.
    Lost,
}

impl Failure {
    /// The word results carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Exit => "exit",
            Failure::Signal => "signal",
            Failure::TimeLimit => "time_limit",
            Failure::OutOfMemory => "out_of_memory",
            Failure::Spawn => "spawn",
            Failure::WorkerStart => "worker_start",
            Failure::Raised => "raised",
            Failure::Lost => "lost",
        }
    }
}

/// Where an HPC job ran and how each of its processes ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangRecord {
    /// Host names of its nodes, the group's leader (rank 0's node) first.
    pub nodes: Vec<String>,
    /// Ranks in all.
    pub ranks: u32,
    /// Each process: the ranks Saker started, or for an MPI job the launcher (rank 0,
    /// on the leader) and the daemons each member ran.
    pub processes: Vec<ProcessRecord>,
    /// For ranks their agents served PMI (`--mpi pmi`): how their wire-up went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wireup: Option<WireUp>,
}

/// How the ranks of an MPI job served PMI by their agents wired up, in µs after the
/// job's start (its first node taking its part; agents' clocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireUp {
    /// The last rank said PMI `init` (its `MPI_Init` began talking to its agent).
    pub init_us: u64,
    /// The ranks' first fence (barrier) completed on every node; absent if it never
    /// did (the job ended first).
    pub fence_us: Option<u64>,
}

/// How one process of an HPC job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub node: String,
    /// Its node's position in the job (0: the leader), which tells nodes apart when
    /// host names repeat (several agents on one machine).
    pub member: u32,
    pub rank: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
}

impl ResultRecord {
    /// Run time of the accepted attempt, when it started.
    pub fn run_time(&self) -> Option<Duration> {
        let start = self.start_time?;
        Some(Duration::from_micros(
            self.end_time
                .unix_micros()
                .saturating_sub(start.unix_micros()),
        ))
    }
}

/// Captured bytes as text for a [`ResultRecord`]: invalid UTF-8 becomes U+FFFD.
pub fn lossy_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes `record` as one JSON line.
pub fn write_jsonl(out: &mut impl Write, record: &ResultRecord) -> io::Result<()> {
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")
}

const WIDTH: usize = 10;

const COLUMNS: [&str; WIDTH] = [
    "TASK", "INDEX", "STATE", "EXIT", "ATTEMPTS", "NODE", "EXECUTOR", "DURATION", "NOTE", "OUTPUT",
];

/// The NOTE cell: why the task ended as it did, and how earlier attempts ended.
fn note(record: &ResultRecord) -> String {
    let mut note = record.reason.clone().unwrap_or_default();
    if !record.history.is_empty() {
        let earlier: Vec<String> = record.history.iter().map(AttemptNote::short).collect();
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str("earlier: ");
        note.push_str(&earlier.join(", "));
    }
    if note.is_empty() {
        "-".to_owned()
    } else {
        note
    }
}

/// The table cells of one record, in [`COLUMNS`] order.
fn cells(record: &ResultRecord) -> [String; WIDTH] {
    let dash = || "-".to_owned();
    let exit = match (record.exit_code, record.signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => signal_name(signal),
        (None, None) => dash(),
    };
    let output = match (&record.stdout_path, &record.stderr_path) {
        // A function task's answer is bytes for its client: only its size is shown.
        _ if record.output.is_some() => {
            format!("{} B", record.output.as_ref().map_or(0, Vec::len))
        }
        (Some(out), Some(err)) => format!("{out} {err}"),
        (Some(path), None) | (None, Some(path)) => path.clone(),
        (None, None) if !record.stdout.is_empty() || !record.stderr.is_empty() => {
            "inline".to_owned()
        }
        (None, None) => dash(),
    };
    [
        record.task.to_string(),
        record.index.map_or_else(dash, |index| index.to_string()),
        record.state.as_str().to_owned(),
        exit,
        record.attempts.to_string(),
        // An HPC job: its leader and how many more nodes, and its ranks.
        match (&record.gang, &record.node) {
            (Some(gang), Some(node)) => format!("{node} +{}", gang.nodes.len().saturating_sub(1)),
            _ => record.node.clone().unwrap_or_else(dash),
        },
        match &record.gang {
            Some(gang) => format!("{} ranks", gang.ranks),
            None => record
                .executor
                .map_or_else(dash, |executor| executor.to_string()),
        },
        record
            .run_time()
            .map_or_else(dash, crate::spec::format_duration),
        note(record),
        output,
    ]
}

pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

fn write_row(
    out: &mut impl Write,
    widths: &[usize; WIDTH],
    row: &[String; WIDTH],
) -> io::Result<()> {
    let mut line = String::new();
    for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
        if column + 1 == row.len() {
            line.push_str(cell);
        } else {
            line.push_str(&format!("{cell:<width$}  "));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// Renders `records` as a table with columns as wide as their widest cell.
pub fn render_table(records: &[ResultRecord]) -> String {
    let rows: Vec<[String; WIDTH]> = records.iter().map(cells).collect();
    let mut widths = COLUMNS.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = Vec::new();
    let header = COLUMNS.map(str::to_owned);
    // Writing into a Vec cannot fail.
    for row in std::iter::once(&header).chain(&rows) {
        let _ = write_row(&mut out, &widths, row);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A table written row by row as results stream in (`saker results --follow`): the
/// header comes first; a column widens when a cell does not fit, later rows align to
/// the new width.
#[derive(Debug)]
pub struct TableWriter<W> {
    out: W,
    widths: [usize; WIDTH],
    header_written: bool,
}

impl<W: Write> TableWriter<W> {
    pub fn new(out: W) -> Self {
        // Room for typical values so that most streams never re-align.
        let mut widths = COLUMNS.map(str::len);
        widths[0] = widths[0].max(8);
        widths[2] = widths[2].max("succeeded".len());
        widths[5] = widths[5].max(12);
        widths[7] = widths[7].max(9);
        TableWriter {
            out,
            widths,
            header_written: false,
        }
    }

    pub fn write(&mut self, record: &ResultRecord) -> io::Result<()> {
        if !self.header_written {
            write_row(&mut self.out, &self.widths, &COLUMNS.map(str::to_owned))?;
            self.header_written = true;
        }
        let row = cells(record);
        for (width, cell) in self.widths.iter_mut().zip(&row) {
            *width = (*width).max(cell.chars().count());
        }
        write_row(&mut self.out, &self.widths, &row)
    }

    /// Pushes written rows out (for a stream that a person watches).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A plausible succeeded record, for tests here and in the crates that keep results
/// (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub fn sample_record(task: u64) -> ResultRecord {
    ResultRecord {
        task: TaskId(task),
        job: JobId(1),
        index: Some(task as u32),
        state: TerminalState::Succeeded,
        exit_code: Some(0),
        signal: None,
        reason: None,
        failure: None,
        attempts: 1,
        node: Some("node001".to_owned()),
        node_id: Some(1),
        executor: Some(3),
        submit_time: Timestamp::from_unix_micros(1_700_000_000_000_000),
        dispatch_time: Some(Timestamp::from_unix_micros(1_700_000_000_400_000)),
        received_time: Some(Timestamp::from_unix_micros(1_700_000_000_450_000)),
        start_time: Some(Timestamp::from_unix_micros(1_700_000_000_500_000)),
        end_time: Timestamp::from_unix_micros(1_700_000_001_750_000),
        accept_time: Some(Timestamp::from_unix_micros(1_700_000_001_751_000)),
        fetch_us: None,
        stdout: "hello\n".to_owned(),
        stderr: String::new(),
        stdout_path: None,
        stderr_path: None,
        output: None,
        seq: task + 100,
        history: Vec::new(),
        gang: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(task: u64) -> ResultRecord {
        sample_record(task)
    }

    #[test]
    fn timestamps_format_as_rfc3339_and_parse_back() {
        let cases = [
            (0, "1970-01-01T00:00:00.000000Z"),
            (951_782_400_000_001, "2000-02-29T00:00:00.000001Z"),
            (1_700_000_000_123_456, "2023-11-14T22:13:20.123456Z"),
            (4_102_444_799_999_999, "2099-12-31T23:59:59.999999Z"),
        ];
        for (micros, text) in cases {
            let timestamp = Timestamp::from_unix_micros(micros);
            assert_eq!(timestamp.to_string(), text);
            assert_eq!(text.parse::<Timestamp>(), Ok(timestamp));
        }
        assert_eq!(
            "2023-11-14T22:13:20+00:00".parse::<Timestamp>(),
            Ok(Timestamp::from_unix_micros(1_700_000_000_000_000))
        );
        for bad in [
            "2023-11-14T22:13:20",
            "2023-13-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2023-11-14T22:13:20.12x4Z",
            "yesterday",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }

    #[test]
    fn record_json_has_every_key_and_round_trips() {
        let record = sample(7);
        let mut line = Vec::new();
        write_jsonl(&mut line, &record).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert!(text.ends_with('\n') && text.matches('\n').count() == 1);
        let object: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(object["state"], "succeeded");
        assert_eq!(object["start_time"], "2023-11-14T22:13:20.500000Z");
        assert!(object["signal"].is_null() && object["stdout_path"].is_null());
        assert!(object["output"].is_null(), "a command has no output");
        assert!(object["gang"].is_null(), "not an HPC job");
        assert!(object["failure"].is_null(), "it succeeded");
        assert_eq!(object.as_object().unwrap().len(), 26);
        assert_eq!(serde_json::from_str::<ResultRecord>(&text).unwrap(), record);
    }

    /// A journal written before results said how a task failed still reads.
    #[test]
    fn a_record_without_failure_reads_as_none() {
        let mut failed = sample(7);
        failed.state = TerminalState::Failed;
        failed.exit_code = Some(2);
        failed.failure = Some(Failure::Exit);
        let mut object = serde_json::to_value(&failed).unwrap();
        assert_eq!(object["failure"], "exit");
        object.as_object_mut().unwrap().remove("failure");
        let read: ResultRecord = serde_json::from_value(object).unwrap();
        assert_eq!(read.failure, None);
        assert_eq!(read.exit_code, Some(2));
    }

    #[test]
    fn table_aligns_columns() {
        let mut failed = sample(12345);
        failed.state = TerminalState::Failed;
        failed.exit_code = None;
        failed.signal = Some(9);
        failed.node = Some("a-much-longer-hostname".to_owned());
        failed.stdout_path = Some("/out/12345.out".to_owned());
        failed.history = vec![crate::attempts::AttemptNote {
            attempt: 1,
            end: crate::attempts::AttemptEnd::Lost,
            reason: "agent 2 lost".to_owned(),
            exit_code: None,
            signal: None,
            node: None,
            start_time: None,
            end_time: Timestamp::from_unix_micros(1),
        }];
        let mut queued_cancel = sample(2);
        queued_cancel.state = TerminalState::Cancelled;
        queued_cancel.index = None;
        (
            queued_cancel.exit_code,
            queued_cancel.node,
            queued_cancel.executor,
        ) = (None, None, None);
        queued_cancel.start_time = None;
        queued_cancel.stdout.clear();
        let mut call = sample(3);
        call.stdout.clear();
        call.output = Some(vec![0; 42]);
        let table = render_table(&[sample(1), failed, queued_cancel, call]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(
            lines[4].ends_with("42 B"),
            "a call's answer by its size: {}",
            lines[4]
        );
        let state_column = lines[0].find("STATE").unwrap();
        let node_column = lines[0].find("NODE").unwrap();
        assert_eq!(&lines[1][state_column..state_column + 9], "succeeded");
        assert_eq!(&lines[2][node_column..node_column + 6], "a-much");
        assert!(lines[2].contains("SIGKILL") && lines[2].ends_with("/out/12345.out"));
        assert!(lines[2].contains("earlier: lost"), "{}", lines[2]);
        assert!(lines[1].contains("1.25s") && lines[1].ends_with("inline"));
        assert!(lines[3].contains("cancelled") && lines[3].ends_with('-'));
    }

    #[test]
    fn an_hpc_job_shows_its_nodes_and_ranks() {
        let mut job = sample(7);
        job.node = Some("n1".to_owned());
        job.executor = None;
        job.gang = Some(GangRecord {
            nodes: vec!["n1".into(), "n2".into(), "n3".into()],
            ranks: 6,
            processes: Vec::new(),
            wireup: None,
        });
        let table = render_table(&[job]);
        let row = table.lines().nth(1).unwrap();
        assert!(row.contains("n1 +2") && row.contains("6 ranks"), "{row}");
    }

    #[test]
    fn streaming_table_writes_header_once() {
        let mut writer = TableWriter::new(Vec::new());
        writer.write(&sample(1)).unwrap();
        writer.write(&sample(2)).unwrap();
        let text = String::from_utf8(writer.into_inner()).unwrap();
        assert_eq!(text.matches("TASK").count(), 1);
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn run_times_are_short_and_readable() {
        assert_eq!(
            crate::spec::format_duration(Duration::from_millis(12)),
            "12.0ms"
        );
        assert_eq!(
            crate::spec::format_duration(Duration::from_secs(723)),
            "12m03s"
        );
        assert_eq!(
            crate::spec::format_duration(Duration::from_secs(5 * 3600 + 7 * 60)),
            "5h07m"
        );
    }
}
