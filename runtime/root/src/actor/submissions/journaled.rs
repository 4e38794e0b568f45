//! What the journal holds of the submissions, gathered in the resume's one pass over
//! its records (`resume.rs` queues them again).

use std::collections::HashMap;

use saker_core::{JobId, TaskId};

use crate::records::Record;
use saker_client::JobUpdate;

/// What the journal holds of the submissions (see `Submissions::resume`).
#[derive(Debug, Default)]
pub(crate) struct Journaled {
    /// `submit` and `submit_lines` records, in journal order, with their positions.
    pub(super) submitted: Vec<(usize, Record)>,
    /// What clients' updates changed of each job, the latest value of each field.
    pub(super) updates: HashMap<JobId, JobUpdate>,
    pub(super) cancelled: Vec<JobId>,
    /// Jobs a compaction recorded as finished, with one state letter a task: their
    /// tasks are terminal whether or not their results were kept.
    pub(super) finished: Vec<(usize, JobId, String)>,
}

/// What `Submissions::resume` restored.
#[derive(Debug, Default)]
pub(crate) struct Resumed {
    pub jobs: u64,
    pub tasks: u64,
    /// Tasks that had ended.
    pub finished: u64,
    /// The jobs a compaction recorded as finished: (job, first task, tasks).
    pub compacted: Vec<(JobId, TaskId, u32)>,
}

impl Journaled {
    /// Keeps `record` (at `position` among the records): a submission, an update, a
    /// cancel or a compaction's finished job (the submissions' own; nothing else).
    pub(crate) fn gather(&mut self, position: usize, record: Record) {
        match record {
            Record::Submit { .. } | Record::SubmitLines { .. } => {
                self.submitted.push((position, record))
            }
            Record::Update { job, update, .. } => {
                let folded = self.updates.entry(job).or_default();
                *folded = folded.then(update);
            }
            Record::Cancel { job, .. } => self.cancelled.push(job),
            Record::Finished { job, states } => self.finished.push((position, job, states)),
            _ => {}
        }
    }
}
