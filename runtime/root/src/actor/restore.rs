//! What a resume from the journal a previous root left finds, and why it may not.
//!
//! Resume is a router like [`RootState::handle`](super::RootState::handle)
//! (`mod.rs`): one pass over the records in which each owner gathers what is its own,
//! then each owner resumes from it, in a fixed order (see `RootState::restore`).

use saker_core::{JobId, TaskId};

use super::resources::TooManyKinds;

/// What a resume found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreSummary {
    pub jobs: u64,
    pub tasks: u64,
    pub finished: u64,
    pub previous_starts: u64,
    /// Actors that had not ended, started again as their nodes join.
    pub actors: u64,
}

/// A journal that cannot be the history of one pilot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("journal record {position}: a result whose place in the journal is unknown")]
    NoPosition { position: usize },
    #[error("journal record {position}: job {job} cannot be restored")]
    Job {
        position: usize,
        job: JobId,
        #[source]
        source: saker_core::RestoreError,
    },
    #[error("journal record {position}: job {job} was expected to get id {expected}")]
    IdMismatch {
        position: usize,
        job: JobId,
        expected: JobId,
    },
    #[error(
        "journal record {position}: job {job} was expected to start at task {first_task}, not {got}"
    )]
    TaskIdMismatch {
        position: usize,
        job: JobId,
        first_task: TaskId,
        got: TaskId,
    },
    #[error("journal record {position}: job {job} names more custom resources than a pilot can")]
    Resources {
        position: usize,
        job: JobId,
        #[source]
        source: TooManyKinds,
    },
    #[error(
        "journal record {position}: job {job}'s finished record holds a letter that is not a state"
    )]
    FinishedState { position: usize, job: JobId },
    #[error("journal record {position}: a result for task {task} of unknown job {job}")]
    UnknownJob {
        position: usize,
        job: JobId,
        task: TaskId,
    },
}
