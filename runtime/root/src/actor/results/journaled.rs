//! What the journal holds of the results, gathered in the resume's one pass over its
//! records (`resume.rs` indexes them again).

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::EarlierAttempts;
use saker_journal::Position;

use crate::actor::restore::RestoreError;
use crate::records::Record;
use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::{JobId, ResultRecord, TaskId, TerminalState};

/// The journaled results, attempt notes and compactions (see `Results::resume`).
#[derive(Debug)]
pub(crate) struct Journaled {
    /// Each result with its record's position among the records and its place in
    /// the journal.
    pub(super) results: Vec<(usize, Arc<ResultRecord>, Position)>,
    /// Why attempts did not count, by task.
    pub(super) notes: HashMap<TaskId, Vec<AttemptNote>>,
    /// The first `seq` after the compacted ones, and the last compaction's count of
    /// results dropped and the highest `seq` among them.
    pub(super) next_seq: u64,
    pub(super) compacted: u64,
    pub(super) compacted_through: u64,
}

impl Default for Journaled {
    fn default() -> Self {
        Journaled {
            results: Vec::new(),
            notes: HashMap::new(),
            next_seq: 1,
            compacted: 0,
            compacted_through: 0,
        }
    }
}

impl Journaled {
    /// Keeps `record` (at `position` among the records, `at` in the journal): a
    /// result, an attempt note or a compaction (the results' own; nothing else).
    pub(crate) fn gather(
        &mut self,
        position: usize,
        record: Record,
        at: Option<Position>,
    ) -> Result<(), RestoreError> {
        match record {
            Record::Result(result) => {
                let Some(at) = at else {
                    return Err(RestoreError::NoPosition { position });
                };
                self.results.push((position, result, at));
            }
            Record::Attempt { task, note } => self.notes.entry(task).or_default().push(note),
            Record::Compaction {
                next_seq,
                compacted,
                compacted_through,
                ..
            } => {
                self.next_seq = self.next_seq.max(next_seq);
                self.compacted = compacted;
                self.compacted_through = compacted_through;
            }
            _ => {}
        }
        Ok(())
    }

    /// Every journaled result: (position, job, task, state).
    pub(crate) fn ended(&self) -> impl Iterator<Item = (usize, JobId, TaskId, TerminalState)> + '_ {
        self.results
            .iter()
            .map(|(position, record, _)| (*position, record.job, record.task, record.state))
    }

    /// What each task's attempts that did not count used up of its retries and
    /// replays. Conservative: a failed or lost speculative copy counts too, although
    /// it did not use up a retry while its twin ran on.
    pub(crate) fn earlier(&self) -> HashMap<TaskId, EarlierAttempts> {
        self.notes
            .iter()
            .map(|(&task, notes)| {
                let mut used = EarlierAttempts::default();
                for note in notes {
                    match note.end {
                        AttemptEnd::Failed => used.failures += 1,
                        AttemptEnd::Lost => used.replays += 1,
                    }
                }
                (task, used)
            })
            .collect()
    }
}
