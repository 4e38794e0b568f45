//! Results as CSV (`saker results --format csv`), for spreadsheets and data frames:
//! one header row, then one row per result, written as results stream in.
//!
//! Times are RFC 3339 UTC text, as in JSON; the wait and the run are also given in
//! seconds, so that a spreadsheet can sum and plot them without parsing times.
//! Captured output comes last, quoted as CSV quotes anything (it may hold commas,
//! quotes and newlines); empty cells stand for absent values.

use std::borrow::Cow;
use std::io::{self, Write};

use super::ResultRecord;

/// The columns, in order.
pub const CSV_COLUMNS: [&str; 23] = [
    "task",
    "job",
    "index",
    "state",
    "exit_code",
    "signal",
    "reason",
    "failure",
    "attempts",
    "node",
    "node_id",
    "executor",
    "submit_time",
    "dispatch_time",
    "start_time",
    "end_time",
    "wait_seconds",
    "run_seconds",
    "seq",
    "stdout_path",
    "stderr_path",
    "stdout",
    "stderr",
];

/// Writes results as CSV rows, the header before the first.
#[derive(Debug)]
pub struct CsvWriter<W: Write> {
    out: ::csv::Writer<W>,
    header_written: bool,
}

impl<W: Write> CsvWriter<W> {
    pub fn new(out: W) -> Self {
        CsvWriter {
            // The writer's own buffer: a stream that a person watches is flushed.
            out: ::csv::WriterBuilder::new().from_writer(out),
            header_written: false,
        }
    }

    pub fn write(&mut self, record: &ResultRecord) -> io::Result<()> {
        if !self.header_written {
            self.out.write_record(CSV_COLUMNS).map_err(io_error)?;
            self.header_written = true;
        }
        self.out
            .write_record(cells(record).iter().map(|cell| cell.as_bytes()))
            .map_err(io_error)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and gives the destination back.
    pub fn into_inner(self) -> io::Result<W> {
        self.out
            .into_inner()
            .map_err(|error| io::Error::new(error.error().kind(), error.error().to_string()))
    }
}

/// The I/O error itself (a closed pipe stays one), not wrapped in the crate's.
fn io_error(error: ::csv::Error) -> io::Error {
    match error.into_kind() {
        ::csv::ErrorKind::Io(error) => error,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// A row's cells, borrowing the record's text (a stream may carry millions of
/// rows with their output).
fn cells(record: &ResultRecord) -> [Cow<'_, str>; 23] {
    let owned = |value: Option<String>| Cow::Owned(value.unwrap_or_default());
    let seconds = |micros: u64| format!("{:.6}", micros as f64 / 1e6);
    let wait = record.start_time.map(|start| {
        seconds(
            start
                .unix_micros()
                .saturating_sub(record.submit_time.unix_micros()),
        )
    });
    let run = record
        .run_time()
        .map(|run| seconds(u64::try_from(run.as_micros()).unwrap_or(u64::MAX)));
    [
        Cow::Owned(record.task.0.to_string()),
        Cow::Owned(record.job.0.to_string()),
        owned(record.index.map(|index| index.to_string())),
        Cow::Borrowed(record.state.as_str()),
        owned(record.exit_code.map(|code| code.to_string())),
        owned(record.signal.map(|signal| signal.to_string())),
        text(&record.reason),
        Cow::Borrowed(
            record
                .failure
                .map(|failure| failure.as_str())
                .unwrap_or_default(),
        ),
        Cow::Owned(record.attempts.to_string()),
        text(&record.node),
        owned(record.node_id.map(|node| node.to_string())),
        owned(record.executor.map(|executor| executor.to_string())),
        Cow::Owned(record.submit_time.to_string()),
        owned(record.dispatch_time.map(|at| at.to_string())),
        owned(record.start_time.map(|start| start.to_string())),
        Cow::Owned(record.end_time.to_string()),
        owned(wait),
        owned(run),
        Cow::Owned(record.seq.to_string()),
        text(&record.stdout_path),
        text(&record.stderr_path),
        Cow::Borrowed(&record.stdout),
        Cow::Borrowed(&record.stderr),
    ]
}

fn text(value: &Option<String>) -> Cow<'_, str> {
    Cow::Borrowed(value.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{TerminalState, sample_record};

    fn parse(bytes: &[u8]) -> Vec<::csv::StringRecord> {
        ::csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(bytes)
            .records()
            .collect::<Result<_, _>>()
            .expect("what the writer wrote parses as CSV")
    }

    #[test]
    fn a_header_then_one_row_per_result_with_durations_in_seconds() {
        let mut writer = CsvWriter::new(Vec::new());
        writer.write(&sample_record(1)).unwrap();
        writer.write(&sample_record(2)).unwrap();
        let rows = parse(&writer.into_inner().unwrap());
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].iter().collect::<Vec<_>>(), CSV_COLUMNS);
        let row = &rows[2];
        let cell = |name: &str| {
            let column = CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
            row.get(column).unwrap().to_owned()
        };
        assert_eq!(cell("task"), "2");
        assert_eq!(cell("state"), "succeeded");
        assert_eq!(cell("exit_code"), "0");
        assert_eq!(cell("signal"), "");
        // The sample was submitted at 0 s, started at 0.5 s, ended at 1.75 s.
        assert_eq!(cell("wait_seconds"), "0.500000");
        assert_eq!(cell("run_seconds"), "1.250000");
        assert_eq!(cell("submit_time"), "2023-11-14T22:13:20.000000Z");
        assert_eq!(cell("dispatch_time"), "2023-11-14T22:13:20.400000Z");
        assert_eq!(cell("node_id"), "1");
        assert_eq!(cell("stdout"), "hello\n");
    }

    #[test]
    fn output_with_commas_quotes_and_newlines_comes_back_whole() {
        let mut record = sample_record(7);
        record.state = TerminalState::Failed;
        record.exit_code = Some(3);
        record.stdout = "a,b\n\"quoted\"\nlast".to_owned();
        record.reason = Some("exit 3, see \"stderr\"".to_owned());
        record.start_time = None;
        let mut writer = CsvWriter::new(Vec::new());
        writer.write(&record).unwrap();
        let rows = parse(&writer.into_inner().unwrap());
        let row = &rows[1];
        let column = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert_eq!(&row[column("stdout")], "a,b\n\"quoted\"\nlast");
        assert_eq!(&row[column("reason")], "exit 3, see \"stderr\"");
        assert_eq!(&row[column("state")], "failed");
        assert_eq!(&row[column("wait_seconds")], "", "never started");
        assert_eq!(&row[column("run_seconds")], "");
    }
}
