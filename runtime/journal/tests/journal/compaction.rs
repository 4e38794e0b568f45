//! Compaction: seal, base segment over the placeholder, retirement; and a crash between
//! any two of those steps leaves a journal that reads as either the old history or the
//! compacted one, never a mix and never an error.

use std::sync::mpsc;

use saker_journal::{
    JournalWriter, SegmentNumber, read_all, read_at, retire_superseded, write_base_segment,
};

use crate::{TestRecord, options, record, records, segment_path};

/// Writes `0..before`, seals, writes `before..after`; returns the writer, still open,
/// and the placeholder.
fn sealed(
    directory: &std::path::Path,
    before: u64,
    after: u64,
) -> (JournalWriter<TestRecord>, SegmentNumber) {
    let writer = JournalWriter::open(directory, options()).unwrap();
    writer.append_blocking(records(0..before)).unwrap();
    let (sender, sealed) = mpsc::channel();
    writer.seal(move |placeholder| sender.send(placeholder).unwrap());
    writer.append_blocking(records(before..after)).unwrap();
    let placeholder = sealed.recv().unwrap().unwrap();
    (writer, placeholder)
}

/// The records a compaction of `0..before` keeps: the `Accepted` ones.
fn kept(before: u64) -> Vec<TestRecord> {
    records(0..before)
        .into_iter()
        .filter(|record| matches!(record, TestRecord::Accepted { .. }))
        .collect()
}

#[test]
fn a_seal_splits_the_journal_around_an_empty_placeholder() {
    let directory = tempfile::tempdir().unwrap();
    let (writer, placeholder) = sealed(directory.path(), 10, 20);
    writer.close().unwrap();
    assert_eq!(placeholder, SegmentNumber(2));
    let length = std::fs::metadata(segment_path(directory.path(), 2))
        .unwrap()
        .len();
    assert_eq!(length, 16);
    let all = read_all::<TestRecord>(directory.path()).unwrap();
    assert_eq!(all.records, records(0..20));
    assert!(all.positions[..10].iter().all(|p| p.segment.0 == 1));
    assert!(all.positions[10..].iter().all(|p| p.segment.0 == 3));
}

#[test]
fn a_base_segment_supersedes_what_is_before_it_and_positions_hold() {
    let directory = tempfile::tempdir().unwrap();
    let (writer, placeholder) = sealed(directory.path(), 30, 40);
    let base = kept(30);
    let positions = write_base_segment(directory.path(), placeholder, &base).unwrap();
    // Readers skip the superseded segment even before it is deleted.
    let mut expected = base.clone();
    expected.extend(records(30..40));
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        expected
    );
    let retired = retire_superseded(directory.path()).unwrap();
    assert_eq!(retired.segments, 1);
    assert!(!segment_path(directory.path(), 1).exists());
    for (position, record) in positions.iter().zip(&base) {
        assert_eq!(
            &read_at::<TestRecord>(directory.path(), *position).unwrap(),
            record
        );
    }
    // The writer goes on; a new writer opens after it.
    writer.append_blocking(vec![record(40)]).unwrap();
    writer.close().unwrap();
    expected.push(record(40));
    let reopened = JournalWriter::<TestRecord>::open(directory.path(), options()).unwrap();
    reopened.close().unwrap();
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        expected
    );
}

#[test]
fn only_an_empty_placeholder_can_become_a_base() {
    let directory = tempfile::tempdir().unwrap();
    let (writer, _) = sealed(directory.path(), 5, 6);
    writer.close().unwrap();
    let error = write_base_segment(directory.path(), SegmentNumber(1), &kept(5)).unwrap_err();
    assert!(
        error.to_string().contains("not an empty placeholder"),
        "{error}"
    );
    let error = write_base_segment(directory.path(), SegmentNumber(9), &kept(5)).unwrap_err();
    assert!(
        error.to_string().contains("not an empty placeholder"),
        "{error}"
    );
    assert_eq!(
        read_all::<TestRecord>(directory.path()).unwrap().records,
        records(0..6)
    );
}

/// A crash at each step of a compaction, simulated by what that step leaves on disk,
/// then a new writer (as a resumed pilot opens one) and a reader.
#[test]
fn a_crash_at_any_step_of_a_compaction_leaves_old_or_new_never_a_mix() {
    #[derive(Debug, Clone, Copy)]
    enum Step {
        AfterSeal,
        TemporaryWritten,
        TemporaryTorn,
        Renamed,
        PartlyRetired,
    }
    for step in [
        Step::AfterSeal,
        Step::TemporaryWritten,
        Step::TemporaryTorn,
        Step::Renamed,
        Step::PartlyRetired,
    ] {
        let directory = tempfile::tempdir().unwrap();
        // Two writer sessions before the seal, so there are two segments to retire.
        let first = JournalWriter::open(directory.path(), options()).unwrap();
        first.append_blocking(records(0..10)).unwrap();
        first.close().unwrap();
        let (writer, placeholder) = sealed(directory.path(), 0, 0);
        writer.append_blocking(records(10..20)).unwrap();
        writer.append_blocking(records(20..25)).unwrap();
        drop(writer);
        // Segments: 1 (0..10), 2 (nothing), 3 placeholder, 4 (10..25).
        let _ = placeholder;
        let placeholder = SegmentNumber(3);
        let old: Vec<TestRecord> = records(0..25);
        let base = kept(10);
        let mut new = base.clone();
        new.extend(records(10..25));
        let temporary = {
            let mut path = segment_path(directory.path(), 3).into_os_string();
            path.push(".base");
            std::path::PathBuf::from(path)
        };
        let expected = match step {
            Step::AfterSeal => old.clone(),
            Step::TemporaryWritten | Step::TemporaryTorn => {
                let scratch = tempfile::tempdir().unwrap();
                std::fs::copy(
                    segment_path(directory.path(), 3),
                    segment_path(scratch.path(), 3),
                )
                .unwrap();
                write_base_segment(scratch.path(), placeholder, &base).unwrap();
                let mut bytes = std::fs::read(segment_path(scratch.path(), 3)).unwrap();
                if matches!(step, Step::TemporaryTorn) {
                    bytes.truncate(bytes.len() - 3);
                }
                std::fs::write(&temporary, bytes).unwrap();
                old.clone()
            }
            Step::Renamed => {
                write_base_segment(directory.path(), placeholder, &base).unwrap();
                new.clone()
            }
            Step::PartlyRetired => {
                write_base_segment(directory.path(), placeholder, &base).unwrap();
                std::fs::remove_file(segment_path(directory.path(), 1)).unwrap();
                new.clone()
            }
        };
        assert_eq!(
            read_all::<TestRecord>(directory.path()).unwrap().records,
            expected,
            "{step:?}"
        );
        let resumed = JournalWriter::<TestRecord>::open(directory.path(), options()).unwrap();
        resumed.append_blocking(vec![record(25)]).unwrap();
        resumed.close().unwrap();
        let mut expected = expected;
        expected.push(record(25));
        assert_eq!(
            read_all::<TestRecord>(directory.path()).unwrap().records,
            expected,
            "{step:?} after reopening"
        );
        assert!(
            !temporary.exists(),
            "{step:?}: the temporary file is removed"
        );
        if matches!(step, Step::Renamed | Step::PartlyRetired) {
            assert!(!segment_path(directory.path(), 1).exists(), "{step:?}");
            assert!(!segment_path(directory.path(), 2).exists(), "{step:?}");
        }
    }
}

/// A reader holding a position from before a compaction reads on from it while the
/// superseded segment is still there: the old records, then the base (repeating what
/// it kept), then the rest.
#[test]
fn a_position_in_a_superseded_segment_reads_on_until_the_segment_is_retired() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    let (sender, positions) = mpsc::channel();
    writer.append_at(records(0..6), move |result| {
        sender.send(result.unwrap()).unwrap()
    });
    let positions = positions.recv().unwrap();
    let (sender, sealed) = mpsc::channel();
    writer.seal(move |placeholder| sender.send(placeholder).unwrap());
    let placeholder = sealed.recv().unwrap().unwrap();
    writer.append_blocking(records(6..8)).unwrap();
    writer.close().unwrap();
    write_base_segment(directory.path(), placeholder, &kept(6)).unwrap();

    let reader =
        saker_journal::JournalReader::<TestRecord>::open_at(directory.path(), positions[4])
            .unwrap();
    let read: Vec<TestRecord> = reader.map(Result::unwrap).collect();
    let mut expected = records(4..6);
    expected.extend(kept(6));
    expected.extend(records(6..8));
    assert_eq!(read, expected);

    retire_superseded(directory.path()).unwrap();
    assert!(
        saker_journal::JournalReader::<TestRecord>::open_at(directory.path(), positions[4])
            .is_err()
    );
}
