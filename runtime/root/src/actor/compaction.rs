//! Compacting the journal while the pilot runs (issue 15): when the writer has started
//! enough segments since the last compaction, the root seals the journal; a thread of
//! its own folds the sealed history ([`crate::compact::compact`]) into a base segment
//! written over the seal's placeholder; back on the root, the result index learns where
//! the kept results now are and which were dropped. The superseded segments are deleted
//! only once every read of results that began before that (and may hold a position in
//! them) has ended, so no position the root handed out points into a deleted file.

use std::path::Path;
use std::sync::Arc;

use saker_journal::{JournalReader, Position, SegmentNumber};

use super::ctx::Ctx;
use super::results::Results;
use super::state::RootState;
use crate::compact::KeepResults;
use crate::records::Record;
use crate::results::TaskId;

/// When and how the root compacts its journal.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompactionPolicy {
    /// Which results of done jobs are kept (`--keep-results`).
    pub keep: KeepResults,
    /// Compact once the writer has started this many segments since the last
    /// compaction (or since it opened); 0: never.
    pub every_segments: u64,
}

/// The root's compaction state.
#[derive(Debug, Default)]
pub(super) struct Compaction {
    pub(super) keep: KeepResults,
    every_segments: u64,
    /// A compaction is under way (one at a time).
    running: bool,
    /// The writer's segment count at which the next compaction starts.
    next_at: u64,
    /// Compactions finished by this root.
    pub(super) finished: u64,
    /// Reader tokens of the generations before the last compaction: its superseded
    /// segments are deleted once every one of them is dropped.
    retire_after: Vec<Arc<()>>,
}

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

impl RootState {
    /// Sets when the root compacts its journal (none by default).
    pub fn set_compaction(&mut self, policy: CompactionPolicy) {
        self.upkeep.compaction.set(&self.ctx, policy);
    }
}

impl Compaction {
    pub(super) fn set(&mut self, ctx: &Ctx, policy: CompactionPolicy) {
        self.keep = policy.keep;
        self.every_segments = policy.every_segments;
        self.next_at = ctx.journal.segments() + policy.every_segments;
    }

    /// Starts a compaction if one is due.
    pub(super) fn maybe_compact(&mut self, ctx: &mut Ctx) {
        if self.every_segments == 0 || self.running || ctx.journal.segments() < self.next_at {
            return;
        }
        self.running = true;
        let now = ctx.clock.unix_micros();
        ctx.journal.compact(self.keep, now);
    }

    /// A compaction ended: the index follows the results to the base segment, then
    /// the segments it supersedes go.
    pub(super) fn on_compacted(
        &mut self,
        ctx: &mut Ctx,
        results: &mut Results,
        outcome: Result<CompactionDone, String>,
    ) {
        self.running = false;
        self.next_at = ctx.journal.segments() + self.every_segments.max(1);
        let done = match outcome {
            Ok(done) => done,
            Err(error) => {
                // The journal is as before (the placeholder stays an empty segment);
                // the next compaction tries again.
                tracing::error!(%error, "journal compaction failed");
                return;
            }
        };
        let log = &mut results.log;
        log.index
            .apply_compaction(done.base, &done.kept, &done.dropped);
        log.compacted = done.compacted_total;
        log.compacted_through = done.compacted_through;
        self.finished += 1;
        let superseded = std::mem::replace(&mut log.readers, Arc::new(()));
        self.retire_after.push(superseded);
        tracing::info!(
            base = %done.base,
            records_before = done.records_before,
            records_after = done.records_after,
            results_kept = done.kept.len(),
            results_dropped = done.dropped.len(),
            "compacted the journal"
        );
        self.poll_retirement(ctx);
    }

    /// Deletes the superseded segments once no read that started before the last
    /// compaction is left (they may hold positions in them).
    pub(super) fn poll_retirement(&mut self, ctx: &mut Ctx) {
        let retire = &mut self.retire_after;
        if retire.is_empty() || retire.iter().any(|token| Arc::strong_count(token) > 1) {
            return;
        }
        retire.clear();
        ctx.journal.retire_superseded();
    }
}

/// The compaction proper, on a thread of its own: reads the segments below `base` (the
/// placeholder a seal left), folds them, writes the base over the placeholder.
pub fn run_compaction(
    directory: &Path,
    base: SegmentNumber,
    keep: KeepResults,
    now_unix_us: u64,
) -> Result<CompactionDone, String> {
    let chain = |error: saker_journal::JournalError| saker_actors::error_chain(&error);
    let mut reader = JournalReader::<Record>::open(directory).map_err(chain)?;
    let mut records = Vec::new();
    while let Some(record) = reader.next() {
        let record = record.map_err(chain)?;
        if reader
            .last_position()
            .is_some_and(|position| position.segment >= base)
        {
            break;
        }
        records.push(record);
    }
    let records_before = records.len();
    let compacted = crate::compact::compact(records, &keep, now_unix_us);
    let positions =
        saker_journal::write_base_segment(directory, base, &compacted.records).map_err(chain)?;
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
