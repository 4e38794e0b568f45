//! The compaction proper, on a thread of its own: reads the sealed history, folds it
//! ([`super::compact`]) and writes the base segment over the seal's placeholder.

use std::path::Path;

use saker_journal::{JournalError, JournalReader, Position, SegmentNumber};

use super::KeepResults;
use crate::records::Record;
use saker_client::results::TaskId;

/// What a compaction did, sent back to the root.
#[derive(Debug)]
pub struct CompactionDone {
    /// The base segment written.
    pub base: SegmentNumber,
    /// The results kept, in `seq` order, where they are now.
    pub kept: Vec<(TaskId, u64, Position)>,
    /// The results dropped (task, seq).
    pub dropped: Vec<(TaskId, u64)>,
    pub compacted_total: u64,
    pub compacted_through: u64,
    /// Records read, and written to the base.
    pub records_before: usize,
    pub records_after: usize,
}

/// Why a compaction did not happen; the journal is as it was before it.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("the journal is closed")]
    Closed,
    #[error("sealing the journal failed")]
    Seal(#[source] JournalError),
    #[error("reading the sealed history failed")]
    Read(#[source] JournalError),
    #[error("writing the base segment failed")]
    Write(#[source] JournalError),
    #[error("cannot start the compaction thread")]
    Thread(#[source] std::io::Error),
}

/// Reads the segments of `directory` below `base` (the placeholder a seal left), folds
/// them under `keep`, and writes the base over the placeholder.
pub fn run_compaction(
    directory: &Path,
    base: SegmentNumber,
    keep: KeepResults,
    now_unix_us: u64,
) -> Result<CompactionDone, CompactionError> {
    let mut reader = JournalReader::<Record>::open(directory).map_err(CompactionError::Read)?;
    let mut records = Vec::new();
    while let Some(record) = reader.next() {
        let record = record.map_err(CompactionError::Read)?;
        if reader
            .last_position()
            .is_some_and(|position| position.segment >= base)
        {
            break;
        }
        records.push(record);
    }
    let records_before = records.len();
    let compacted = super::compact(records, &keep, now_unix_us);
    let positions = saker_journal::write_base_segment(directory, base, &compacted.records)
        .map_err(CompactionError::Write)?;
    let kept = compacted
        .records
        .iter()
        .zip(&positions)
        .filter_map(|(record, &position)| match record {
            Record::Result(result) => Some((result.task, result.seq, position)),
            _ => None,
        })
        .collect();
    Ok(CompactionDone {
        base,
        kept,
        dropped: compacted.dropped,
        compacted_total: compacted.compacted_total,
        compacted_through: compacted.compacted_through,
        records_before,
        records_after: compacted.records.len(),
    })
}
