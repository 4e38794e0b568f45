use saker_journal::{
    JournalError, JournalReader, JournalWriter, MAX_RECORD_BYTES, RecordDefect, SegmentNumber,
    read_all,
};

use crate::{TestRecord, options, record_spans, records, segment_path, write_sessions};

/// One segment holding records 0..10, one per append; returns its bytes and record spans.
fn one_segment_journal(directory: &std::path::Path) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let appends = (0..10).map(|index| records(index..index + 1)).collect();
    write_sessions(directory, &[appends]);
    let bytes = std::fs::read(segment_path(directory, 1)).unwrap();
    let spans = record_spans(&bytes);
    assert_eq!(spans.len(), 10);
    (bytes, spans)
}

fn expect_corrupt(directory: &std::path::Path, segment: u64, offset: usize) -> RecordDefect {
    match read_all::<TestRecord>(directory).unwrap_err() {
        JournalError::CorruptRecord {
            path,
            offset: found,
            defect,
        } => {
            assert_eq!(path, segment_path(directory, segment));
            assert_eq!(found, offset as u64);
            defect
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
}

#[test]
fn flipped_payload_byte_in_an_earlier_record_is_an_error_naming_the_offset() {
    let directory = tempfile::tempdir().unwrap();
    let (mut bytes, spans) = one_segment_journal(directory.path());
    bytes[spans[3].start + 10] ^= 0x20;
    std::fs::write(segment_path(directory.path(), 1), &bytes).unwrap();

    let defect = expect_corrupt(directory.path(), 1, spans[3].start);
    assert!(
        matches!(defect, RecordDefect::ChecksumMismatch { .. }),
        "{defect:?}"
    );

    let mut reader = JournalReader::<TestRecord>::open(directory.path()).unwrap();
    for expected in records(0..3) {
        assert_eq!(reader.next().unwrap().unwrap(), expected);
    }
    let error = reader.next().unwrap().unwrap_err();
    let message = error.to_string();
    assert!(message.contains("journal-000001.log"), "{message}");
    assert!(
        message.contains(&format!("byte offset {}", spans[3].start)),
        "{message}"
    );
    assert!(reader.next().is_none(), "reading stops at corruption");
    assert_eq!(reader.torn_tail(), None);
}

#[test]
fn damaged_length_fields_are_errors_even_in_the_final_record() {
    let directory = tempfile::tempdir().unwrap();
    let (bytes, spans) = one_segment_journal(directory.path());
    let path = segment_path(directory.path(), 1);
    let set_length = |record: usize, length: u32| {
        let mut damaged = bytes.clone();
        damaged[spans[record].start..spans[record].start + 4]
            .copy_from_slice(&length.to_le_bytes());
        std::fs::write(&path, &damaged).unwrap();
    };

    // One byte longer: the checksum covers the wrong bytes and records follow.
    let length = (spans[2].len() - 8) as u32;
    set_length(2, length + 1);
    let defect = expect_corrupt(directory.path(), 1, spans[2].start);
    assert!(
        matches!(defect, RecordDefect::ChecksumMismatch { .. }),
        "{defect:?}"
    );

    // Over the limit: corruption wherever it is, never a torn tail.
    for record in [2, 9] {
        set_length(record, MAX_RECORD_BYTES + 1);
        let defect = expect_corrupt(directory.path(), 1, spans[record].start);
        assert_eq!(
            defect,
            RecordDefect::TooLong {
                declared: MAX_RECORD_BYTES + 1
            }
        );
    }

    // Zero length with data after it.
    set_length(9, 0);
    assert_eq!(
        expect_corrupt(directory.path(), 1, spans[9].start),
        RecordDefect::ZeroLength
    );
}

#[test]
fn torn_record_in_a_non_final_segment_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    write_sessions(
        directory.path(),
        &[vec![records(0..3)], vec![records(3..5)]],
    );
    let first = segment_path(directory.path(), 1);
    let bytes = std::fs::read(&first).unwrap();
    let last_start = record_spans(&bytes)[2].start;
    std::fs::write(&first, &bytes[..bytes.len() - 3]).unwrap();
    let defect = expect_corrupt(directory.path(), 1, last_start);
    assert!(
        matches!(defect, RecordDefect::ShortPayload { .. }),
        "{defect:?}"
    );
}

#[test]
fn record_that_does_not_decode_is_an_error_not_a_torn_tail() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::<serde_json::Value>::open(directory.path(), options()).unwrap();
    let good = serde_json::to_value(records(0..2)).unwrap();
    let serde_json::Value::Array(good) = good else {
        unreachable!("a vec encodes as an array")
    };
    writer.append_blocking(good).unwrap();
    writer
        .append_blocking(vec![serde_json::json!({"Launched": {"task": 2}})])
        .unwrap();
    writer.close().unwrap();
    let bytes = std::fs::read(segment_path(directory.path(), 1)).unwrap();
    let last_start = record_spans(&bytes)[2].start as u64;

    let error = read_all::<TestRecord>(directory.path()).unwrap_err();
    assert!(
        matches!(&error, JournalError::DecodeRecord { offset, .. } if *offset == last_start),
        "{error:?}"
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "the json error is the source"
    );
}

#[test]
fn bad_magic_is_an_error_for_readers_and_writers() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(
        segment_path(directory.path(), 1),
        b"NOTSAKER\x01\0\0\0\0\0\0\0",
    )
    .unwrap();
    let error = read_all::<TestRecord>(directory.path()).unwrap_err();
    assert!(
        matches!(&error, JournalError::BadMagic { found, .. } if found == b"NOTSAKER"),
        "{error:?}"
    );
    let error = JournalWriter::<TestRecord>::open(directory.path(), options()).unwrap_err();
    assert!(matches!(error, JournalError::BadMagic { .. }), "{error:?}");
}

#[test]
fn unknown_format_version_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    write_sessions(directory.path(), &[vec![records(0..2)]]);
    let path = segment_path(directory.path(), 1);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let error = read_all::<TestRecord>(directory.path()).unwrap_err();
    assert!(
        matches!(
            error,
            JournalError::UnsupportedVersion {
                version: 2,
                supported: 1,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn truncated_header_of_a_non_final_segment_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    write_sessions(
        directory.path(),
        &[vec![records(0..1)], vec![records(1..2)]],
    );
    std::fs::write(segment_path(directory.path(), 1), b"SAKERJ01").unwrap();
    let error = read_all::<TestRecord>(directory.path()).unwrap_err();
    assert!(
        matches!(error, JournalError::TruncatedFileHeader { length: 8, .. }),
        "{error:?}"
    );
}

#[test]
fn missing_segment_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    let session = vec![records(0..1)];
    write_sessions(
        directory.path(),
        &[session.clone(), session.clone(), session],
    );
    std::fs::remove_file(segment_path(directory.path(), 2)).unwrap();
    let error = read_all::<TestRecord>(directory.path()).unwrap_err();
    assert!(
        matches!(
            error,
            JournalError::MissingSegment {
                missing: SegmentNumber(2),
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn writer_refuses_a_journal_whose_last_segment_is_corrupt() {
    let directory = tempfile::tempdir().unwrap();
    let (mut bytes, spans) = one_segment_journal(directory.path());
    bytes[spans[5].start + 9] ^= 0xFF;
    std::fs::write(segment_path(directory.path(), 1), &bytes).unwrap();
    let error = JournalWriter::<TestRecord>::open(directory.path(), options()).unwrap_err();
    assert!(
        matches!(&error, JournalError::CorruptRecord { offset, .. } if *offset == spans[5].start as u64),
        "{error:?}"
    );
    assert!(
        !segment_path(directory.path(), 2).exists(),
        "no segment after a corrupt one"
    );
}
