use saker_journal::{JournalWriter, RecordDefect, TornTail, read_all};

use crate::{TestRecord, options, record_spans, records, segment_path, write_sessions};

/// A journal of records 0..5: 0..3 in segment 1, 3..5 in segment 2. Returns the bytes of
/// segment 2 and where its last record starts.
fn two_segment_journal(directory: &std::path::Path) -> (Vec<u8>, usize) {
    write_sessions(
        directory,
        &[vec![records(0..3)], vec![records(3..4), records(4..5)]],
    );
    let bytes = std::fs::read(segment_path(directory, 2)).unwrap();
    let spans = record_spans(&bytes);
    assert_eq!(spans.len(), 2);
    (bytes, spans[1].start)
}

#[test]
fn every_truncation_of_the_last_record_is_a_torn_tail() {
    let directory = tempfile::tempdir().unwrap();
    let (bytes, last_start) = two_segment_journal(directory.path());
    let last_segment = segment_path(directory.path(), 2);
    for cut in last_start..bytes.len() {
        std::fs::write(&last_segment, &bytes[..cut]).unwrap();
        let outcome = read_all::<TestRecord>(directory.path())
            .unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
        assert_eq!(outcome.records, records(0..4), "cut at {cut}");
        if cut == last_start {
            assert_eq!(
                outcome.torn_tail, None,
                "a cut between records is a clean end"
            );
            continue;
        }
        let available = (cut - last_start) as u64;
        let reason = if available < 8 {
            RecordDefect::ShortHeader { available }
        } else {
            RecordDefect::ShortPayload {
                declared: (bytes.len() - last_start - 8) as u32,
                available: available - 8,
            }
        };
        assert_eq!(
            outcome.torn_tail,
            Some(TornTail {
                segment: last_segment.clone(),
                offset: last_start as u64,
                reason,
            }),
            "cut at {cut}"
        );
    }
}

#[test]
fn checksum_mismatch_in_the_final_record_is_a_torn_tail() {
    let directory = tempfile::tempdir().unwrap();
    let (mut bytes, last_start) = two_segment_journal(directory.path());
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(segment_path(directory.path(), 2), &bytes).unwrap();
    let outcome = read_all::<TestRecord>(directory.path()).unwrap();
    assert_eq!(outcome.records, records(0..4));
    let torn_tail = outcome.torn_tail.unwrap();
    assert_eq!(torn_tail.offset, last_start as u64);
    assert!(
        matches!(torn_tail.reason, RecordDefect::ChecksumMismatch { .. }),
        "{torn_tail:?}"
    );
}

#[test]
fn zero_filled_tail_is_a_torn_tail() {
    let directory = tempfile::tempdir().unwrap();
    let (mut bytes, _) = two_segment_journal(directory.path());
    let end = bytes.len() as u64;
    bytes.resize(bytes.len() + 5000, 0);
    std::fs::write(segment_path(directory.path(), 2), &bytes).unwrap();
    let outcome = read_all::<TestRecord>(directory.path()).unwrap();
    assert_eq!(outcome.records, records(0..5));
    assert_eq!(
        outcome.torn_tail.map(|torn| (torn.offset, torn.reason)),
        Some((end, RecordDefect::ZeroFilled { length: 5000 }))
    );
}

#[test]
fn last_segment_cut_inside_its_file_header_is_a_torn_tail() {
    let directory = tempfile::tempdir().unwrap();
    two_segment_journal(directory.path());
    let last_segment = segment_path(directory.path(), 2);
    for length in 0..16 {
        let header = std::fs::read(&last_segment).unwrap();
        std::fs::write(&last_segment, &header[..length]).unwrap();
        let outcome = read_all::<TestRecord>(directory.path()).unwrap();
        assert_eq!(outcome.records, records(0..3));
        assert_eq!(
            outcome.torn_tail.map(|torn| (torn.offset, torn.reason)),
            Some((
                0,
                RecordDefect::ShortFileHeader {
                    length: length as u64
                }
            ))
        );
        // Restore a full header for the next round.
        std::fs::write(&last_segment, b"SAKERJ01\x01\x00\x00\x00\x00\x00\x00\x00").unwrap();
    }
}

#[test]
fn reopening_cuts_the_torn_tail_so_later_sessions_read_cleanly() {
    let directory = tempfile::tempdir().unwrap();
    let (bytes, last_start) = two_segment_journal(directory.path());
    let last_segment = segment_path(directory.path(), 2);
    std::fs::write(&last_segment, &bytes[..bytes.len() - 3]).unwrap();

    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    writer.append_blocking(records(10..12)).unwrap();
    writer.close().unwrap();

    assert_eq!(
        std::fs::metadata(&last_segment).unwrap().len(),
        last_start as u64
    );
    let outcome = read_all::<TestRecord>(directory.path()).unwrap();
    let mut expected = records(0..4);
    expected.extend(records(10..12));
    assert_eq!(outcome.records, expected);
    assert_eq!(outcome.torn_tail, None);
    assert_eq!(outcome.segments, 3);
}

#[test]
fn reopening_after_a_crash_inside_a_segment_header_repairs_the_header() {
    let directory = tempfile::tempdir().unwrap();
    two_segment_journal(directory.path());
    std::fs::write(segment_path(directory.path(), 2), b"SAKER").unwrap();

    write_sessions(directory.path(), &[vec![records(20..21)]]);
    let outcome = read_all::<TestRecord>(directory.path()).unwrap();
    let mut expected = records(0..3);
    expected.extend(records(20..21));
    assert_eq!(outcome.records, expected);
    assert_eq!(outcome.torn_tail, None);
    assert_eq!(
        std::fs::metadata(segment_path(directory.path(), 2))
            .unwrap()
            .len(),
        16
    );
}
