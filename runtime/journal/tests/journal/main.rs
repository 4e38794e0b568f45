//! Integration tests of the journal: files written by the real writer, read back by the
//! real reader, damaged on purpose in between.

mod compaction;
mod corruption;
mod disk_full;
mod failures;
mod group_commit;
mod positions;
mod round_trip;
mod torn_tail;

use std::ops::Range;
use std::path::{Path, PathBuf};

use saker_journal::{JournalWriter, SyncMode, WriterOptions};
use serde::{Deserialize, Serialize};

/// Stands in for the pilot's record enum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TestRecord {
    Submitted { task: u64, command: String },
    Accepted { task: u64, exit_code: i32 },
}

/// Record number `index` of a deterministic sequence with varying sizes.
pub fn record(index: u64) -> TestRecord {
    if index % 3 == 2 {
        TestRecord::Accepted {
            task: index,
            exit_code: (index % 7) as i32,
        }
    } else {
        TestRecord::Submitted {
            task: index,
            command: format!("/bin/echo {}", "x".repeat((index % 17) as usize)),
        }
    }
}

pub fn records(range: Range<u64>) -> Vec<TestRecord> {
    range.map(record).collect()
}

pub fn options() -> WriterOptions {
    WriterOptions {
        sync: SyncMode::Fsync,
        ..WriterOptions::default()
    }
}

pub fn segment_path(directory: &Path, number: u64) -> PathBuf {
    directory.join(format!("journal-{number:06}.log"))
}

/// Writes `records` with one writer session per element of `sessions` (each session is a
/// list of appends), so the journal gets one segment per session.
pub fn write_sessions(directory: &Path, sessions: &[Vec<Vec<TestRecord>>]) {
    for session in sessions {
        let writer = JournalWriter::open(directory, options()).expect("journal opens");
        for append in session {
            writer
                .append_blocking(append.clone())
                .expect("append is durable");
        }
        writer.close().expect("journal closes cleanly");
    }
}

/// Byte ranges of the complete records of a segment file, parsed independently of the
/// crate (so the tests also pin the documented format).
pub fn record_spans(bytes: &[u8]) -> Vec<Range<usize>> {
    assert_eq!(&bytes[..8], b"SAKERJ01", "magic");
    assert_eq!(&bytes[8..12], &1u32.to_le_bytes(), "format version");
    assert_eq!(&bytes[12..16], &[0; 4], "flags (not a base segment)");
    let mut spans = Vec::new();
    let mut offset = 16;
    while offset + 8 <= bytes.len() {
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        let end = offset + 8 + length;
        if end > bytes.len() {
            break;
        }
        assert_eq!(
            crc32fast::hash(&bytes[offset + 8..end]),
            crc,
            "crc at {offset}"
        );
        spans.push(offset..end);
        offset = end;
    }
    spans
}
