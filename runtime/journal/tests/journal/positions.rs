//! Where records are: the writer says (`append_at`), a reader goes straight there
//! (`read_at`) or reads on from there (`JournalReader::open_at`).

use std::sync::mpsc;

use saker_journal::{
    JournalError, JournalReader, JournalWriter, Position, SegmentNumber, WriterOptions, read_at,
};

use crate::{TestRecord, options, records};

#[test]
fn every_record_is_found_where_the_writer_said_across_segments() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(
        directory.path(),
        WriterOptions {
            max_segment_bytes: 1024,
            ..options()
        },
    )
    .unwrap();
    let (sender, positions) = mpsc::channel();
    let mut expected = Vec::new();
    for append in 0..40u64 {
        let batch = records(expected.len() as u64..expected.len() as u64 + append % 5 + 1);
        expected.extend(batch.iter().cloned());
        let sender = sender.clone();
        writer.append_at(batch, move |result| sender.send(result.unwrap()).unwrap());
    }
    writer.close().unwrap();
    drop(sender);
    let positions: Vec<Position> = positions.iter().flatten().collect();
    assert_eq!(positions.len(), expected.len());
    let segments: std::collections::BTreeSet<SegmentNumber> =
        positions.iter().map(|p| p.segment).collect();
    assert!(segments.len() >= 3, "{} segments", segments.len());
    for (position, record) in positions.iter().zip(&expected) {
        assert_eq!(
            &read_at::<TestRecord>(directory.path(), *position).unwrap(),
            record
        );
        assert_eq!(Position::unpack(position.pack().unwrap()), *position);
    }
    // Reading on from any position gives the rest, in order, with their positions.
    let from = 17;
    let mut reader =
        JournalReader::<TestRecord>::open_at(directory.path(), positions[from]).unwrap();
    let mut rest = Vec::new();
    while let Some(record) = reader.next() {
        rest.push((reader.last_position().unwrap(), record.unwrap()));
    }
    let wanted: Vec<(Position, TestRecord)> = positions[from..]
        .iter()
        .copied()
        .zip(expected[from..].iter().cloned())
        .collect();
    assert_eq!(rest, wanted);
}

#[test]
fn a_wrong_position_is_an_error_not_a_wrong_record() {
    let directory = tempfile::tempdir().unwrap();
    let writer = JournalWriter::open(directory.path(), options()).unwrap();
    let (sender, positions) = mpsc::channel();
    writer.append_at(records(0..3), move |result| {
        sender.send(result.unwrap()).unwrap()
    });
    writer.close().unwrap();
    let positions = positions.recv().unwrap();
    let inside = Position {
        offset: positions[1].offset + 3,
        ..positions[1]
    };
    assert!(read_at::<TestRecord>(directory.path(), inside).is_err());
    let missing = Position {
        segment: SegmentNumber(9),
        ..positions[0]
    };
    assert!(matches!(
        read_at::<TestRecord>(directory.path(), missing),
        Err(JournalError::OpenSegment { .. })
    ));
    assert!(JournalReader::<TestRecord>::open_at(directory.path(), missing).is_err());
    assert_eq!(
        Position::unpack(0),
        Position {
            segment: SegmentNumber(0),
            offset: 0
        }
    );
    assert_eq!(
        Position {
            segment: SegmentNumber(1 << 24),
            offset: 0
        }
        .pack(),
        None
    );
}
