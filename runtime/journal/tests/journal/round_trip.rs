use std::sync::{Arc, Mutex};

use saker_journal::{
    JournalError, JournalReader, JournalWriter, SegmentNumber, WriterOptions, read_all,
};

use crate::{TestRecord, options, record_spans, records, segment_path, write_sessions};

#[test]
fn records_round_trip_across_appends_and_segment_rotation() {
    let directory = tempfile::tempdir().unwrap();
    let max_segment_bytes = 2048;
    let writer = JournalWriter::open(
        directory.path(),
        WriterOptions {
            max_segment_bytes,
            ..options()
        },
    )
    .unwrap();
    let mut expected = Vec::new();
    let results = Arc::new(Mutex::new(Vec::new()));
    for append in 0..60u64 {
        let batch = records(expected.len() as u64..expected.len() as u64 + append % 10 + 1);
        expected.extend(batch.iter().cloned());
        if append % 2 == 0 {
            writer.append_blocking(batch).unwrap();
        } else {
            let results = Arc::clone(&results);
            writer.append(batch, move |result| results.lock().unwrap().push(result));
        }
    }
    let stats = writer.close().unwrap();
    let results = results.lock().unwrap();
    assert_eq!(results.len(), 30);
    assert!(results.iter().all(Result::is_ok));

    let outcome = read_all::<TestRecord>(directory.path()).unwrap();
    assert_eq!(outcome.records, expected);
    assert_eq!(outcome.torn_tail, None);
    assert!(outcome.segments >= 3, "{} segments", outcome.segments);
    assert_eq!(stats.segments_created, outcome.segments as u64);
    assert_eq!(stats.records_written, expected.len() as u64);
    assert_eq!(stats.appends_submitted, 60);
    assert_eq!(stats.appends_completed, 60);

    let mut bytes_on_disk = 0;
    for number in 1..=outcome.segments as u64 {
        let bytes = std::fs::read(segment_path(directory.path(), number)).unwrap();
        assert!(
            bytes.len() as u64 <= max_segment_bytes,
            "segment {number} too big"
        );
        let spans = record_spans(&bytes);
        assert_eq!(
            spans.last().map_or(16, |span| span.end),
            bytes.len(),
            "segment {number} ends on a record"
        );
        bytes_on_disk += bytes.len() as u64;
    }
    assert_eq!(stats.bytes_written, bytes_on_disk);
}

#[test]
fn reopening_appends_in_a_new_segment_and_reads_everything_in_order() {
    let directory = tempfile::tempdir().unwrap();
    write_sessions(
        directory.path(),
        &[vec![records(0..5)], vec![records(5..7), records(7..9)]],
    );
    let writer = JournalWriter::<TestRecord>::open(directory.path(), options()).unwrap();
    assert_eq!(writer.first_segment(), SegmentNumber(3));
    writer.append_blocking(records(9..10)).unwrap();
    writer.close().unwrap();

    let mut reader = JournalReader::<TestRecord>::open(directory.path()).unwrap();
    assert_eq!(reader.segment_count(), 3);
    let read: Vec<TestRecord> = reader.by_ref().map(Result::unwrap).collect();
    assert_eq!(read, records(0..10));
    assert_eq!(reader.torn_tail(), None);
    assert!(reader.next().is_none(), "the reader stays exhausted");
}

#[test]
fn writer_creates_missing_directories_and_an_empty_journal_reads_empty() {
    let root = tempfile::tempdir().unwrap();
    let directory = root.path().join("pilot").join("journal");
    let writer = JournalWriter::<TestRecord>::open(&directory, options()).unwrap();
    writer.append_blocking(Vec::new()).unwrap();
    let stats = writer.close().unwrap();
    assert_eq!(stats.groups_committed, 0, "an empty append writes nothing");
    let outcome = read_all::<TestRecord>(&directory).unwrap();
    assert!(outcome.records.is_empty());
    assert_eq!(outcome.segments, 1);
    assert_eq!(outcome.torn_tail, None);
}

#[test]
fn reading_a_missing_directory_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let error = read_all::<TestRecord>(&root.path().join("absent")).unwrap_err();
    assert!(
        matches!(error, JournalError::ListDirectory { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.io_error().unwrap().kind(),
        std::io::ErrorKind::NotFound
    );
}

#[test]
fn files_that_are_not_segments_are_ignored() {
    let directory = tempfile::tempdir().unwrap();
    write_sessions(directory.path(), &[vec![records(0..3)]]);
    std::fs::write(directory.path().join("lock"), b"pid 1").unwrap();
    std::fs::write(directory.path().join("journal-000001.log.bak"), b"junk").unwrap();
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        records(0..3)
    );
}
