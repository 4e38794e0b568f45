//! Compacting the journal while the pilot runs (issue 15): when the writer has started
//! enough segments since the last compaction, the root seals the journal; a thread of
//! its own folds the sealed history ([`crate::compact::compact`]) into a base segment
//! written over the seal's placeholder; back on the root, the result index learns where
//! the kept results now are and which were dropped. The superseded segments are deleted
//! only once every read of results that began before that (and may hold a position in
//! them) has ended, so no position the root handed out points into a deleted file.

use std::sync::Arc;

use crate::actor::ctx::Ctx;
use crate::compact::{CompactionDone, CompactionError, KeepResults};

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
pub(crate) struct Compaction {
    keep: KeepResults,
    every_segments: u64,
    /// A compaction is under way (one at a time).
    running: bool,
    /// The writer's segment count at which the next compaction starts.
    next_at: u64,
    /// Compactions finished by this root.
    finished: u64,
    /// Reader tokens of the generations before the last compaction: its superseded
    /// segments are deleted once every one of them is dropped.
    retire_after: Vec<Arc<()>>,
}

impl Compaction {
    pub(crate) fn set(&mut self, ctx: &Ctx, policy: CompactionPolicy) {
        self.keep = policy.keep;
        self.every_segments = policy.every_segments;
        self.next_at = ctx.journal.segments() + policy.every_segments;
    }

    /// Which results of done jobs a compaction keeps.
    pub(crate) fn keep(&self) -> KeepResults {
        self.keep
    }

    /// Compactions finished by this root.
    #[cfg(test)]
    pub(crate) fn finished(&self) -> u64 {
        self.finished
    }

    /// Starts a compaction if one is due.
    pub(crate) fn maybe_compact(&mut self, ctx: &mut Ctx) {
        if self.every_segments == 0 || self.running || ctx.journal.segments() < self.next_at {
            return;
        }
        self.running = true;
        let now = ctx.clock.unix_micros();
        ctx.journal.compact(self.keep, now);
    }

    /// A compaction ended: what it did, for the results' index, or nothing if it
    /// failed (the journal is as before: the placeholder stays an empty segment; the
    /// next compaction tries again).
    pub(crate) fn ended(
        &mut self,
        ctx: &mut Ctx,
        outcome: Result<CompactionDone, CompactionError>,
    ) -> Option<CompactionDone> {
        self.running = false;
        self.next_at = ctx.journal.segments() + self.every_segments.max(1);
        match outcome {
            Ok(done) => Some(done),
            Err(error) => {
                tracing::error!(error = %saker_actors::error_chain(&error), "journal compaction failed");
                None
            }
        }
    }

    /// The results' index follows `done`; the segments it superseded go once every
    /// read that held `superseded` (the readers before it) has ended.
    pub(crate) fn applied(&mut self, ctx: &mut Ctx, done: &CompactionDone, superseded: Arc<()>) {
        self.finished += 1;
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
    pub(crate) fn poll_retirement(&mut self, ctx: &mut Ctx) {
        let retire = &mut self.retire_after;
        if retire.is_empty() || retire.iter().any(|token| Arc::strong_count(token) > 1) {
            return;
        }
        retire.clear();
        ctx.journal.retire_superseded();
    }
}
