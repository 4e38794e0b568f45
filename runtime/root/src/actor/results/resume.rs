//! Results resumed from a previous root's journal: served to clients again with their
//! original sequence numbers, indexed where they are; the notes of tasks not finished
//! kept for their records.

use std::collections::HashSet;

use super::Results;
use super::journaled::Journaled;
use saker_client::results::{JobId, TaskId};

impl Results {
    /// Indexes the journaled results again. `compacted` are the jobs a compaction
    /// recorded as finished (job, first task, tasks): their tasks whose results it
    /// dropped are marked so, and their results count in no stage.
    pub(crate) fn resume(&mut self, journaled: Journaled, compacted: &[(JobId, TaskId, u32)]) {
        let Journaled {
            mut results,
            mut notes,
            next_seq,
            compacted: compacted_count,
            compacted_through,
        } = journaled;
        let log = &mut self.log;
        log.next_seq = log.next_seq.max(next_seq);
        log.compacted = compacted_count;
        log.compacted_through = compacted_through;
        // Journaled in `seq` order; sorted all the same, as the index needs that order.
        results.sort_by_key(|(_, record, _)| record.seq);
        let finished_jobs: HashSet<JobId> = compacted.iter().map(|(job, _, _)| *job).collect();
        for (_, record, position) in results {
            // A finished task carries its history in its result.
            notes.remove(&record.task);
            if !finished_jobs.contains(&record.job) {
                log.stages.record(&record);
            }
            log.next_seq = log.next_seq.max(record.seq + 1);
            log.index.insert(record.task, record.seq, position);
        }
        self.attempts.history = notes;
        for &(_, first, count) in compacted {
            for offset in 0..count {
                let task = TaskId(first.0 + u64::from(offset));
                if log.index.find(task).is_none() {
                    log.index.mark_compacted(task);
                }
            }
        }
    }
}
