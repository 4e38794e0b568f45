//! Errors of the core's inputs. None of them changes state: a rejected input is as if
//! it had not been made, except that its `now` still advances the core's clock (and
//! with it what fits the deadline).

use crate::ids::{AttemptId, JobId, NodeId, TaskId};

/// A submission was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// `count` was zero.
    #[error("a job must have at least one task")]
    EmptyJob,
    /// `resources` asked for no core (whatever else it asked for).
    #[error("a task must need at least one core")]
    ZeroCores,
    /// The job asked for a gang of no nodes.
    #[error("a gang job must ask for at least one node")]
    EmptyGang,
    /// Every job id has been used.
    #[error("job ids exhausted")]
    JobIdsExhausted,
    /// Task ids would overflow.
    #[error("task ids exhausted: cannot allocate {count} more")]
    TaskIdsExhausted {
        /// The job's task count.
        count: u32,
    },
    /// A dependency names a job that was not submitted before this one (so no
    /// dependency can close a cycle).
    #[error("dependency on unknown job {job}")]
    UnknownDependency {
        /// The job named.
        job: JobId,
    },
}

/// A job could not be restored from a journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// The job itself is not acceptable (same rules as a submission).
    #[error("the restored job is not acceptable")]
    Submit(#[source] SubmitError),
    /// A finished task's index is outside the job.
    #[error("finished task index {index} is outside a job of {count} tasks")]
    IndexOutOfRange {
        /// The offending index.
        index: u32,
        /// The job's task count.
        count: u32,
    },
    /// The same task was listed as finished twice.
    #[error("task index {index} is listed as finished twice")]
    DuplicateIndex {
        /// The repeated index.
        index: u32,
    },
}

/// A node input was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// The node is live already; it must be lost before it joins again.
    #[error("node {node} has already joined")]
    AlreadyJoined {
        /// The node.
        node: NodeId,
    },
    /// The node is not live (never joined, or lost).
    #[error("unknown node {node}")]
    UnknownNode {
        /// The node.
        node: NodeId,
    },
    /// A node must offer at least one core (whatever else it offers).
    #[error("node {node} offers no cores")]
    ZeroCapacity {
        /// The node.
        node: NodeId,
    },
}

/// An attempt report (other than a result) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttemptError {
    /// The attempt id was never issued.
    #[error("unknown attempt {attempt}")]
    Unknown {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The attempt was issued but is no longer live (superseded or finished): a late
    /// report, safe to ignore.
    #[error("attempt {attempt} is no longer live")]
    Stale {
        /// The attempt.
        attempt: AttemptId,
    },
}

/// A cancellation was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CancelError {
    /// No such job was submitted.
    #[error("unknown job {job}")]
    UnknownJob {
        /// The job.
        job: JobId,
    },
}

/// A queued job could not be updated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// No such job.
    #[error("unknown job {job}")]
    UnknownJob {
        /// The job asked for.
        job: JobId,
    },
    /// Every task of the job has ended, or it was cancelled: nothing is left to update.
    #[error("job {job} has ended")]
    Ended {
        /// The job asked for.
        job: JobId,
    },
}

/// An attempt of an earlier root could not be adopted
/// ([`Core::handle_adopt`](crate::Core::handle_adopt)). The driver then stops it on its
/// node (its task, if not finished, runs again from the queue).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptError {
    /// The node is not live (never joined, or lost).
    #[error("unknown node {node}")]
    UnknownNode {
        /// The node.
        node: NodeId,
    },
    /// No root issues this id (its number within its term is 0).
    #[error("attempt {attempt} is no id a root issues")]
    InvalidAttempt {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The attempt is of this core's term or a later one: not an earlier root's.
    #[error("attempt {attempt} is not of a term before {term}")]
    NotEarlierTerm {
        /// The attempt.
        attempt: AttemptId,
        /// This core's term.
        term: u32,
    },
    /// The attempt is live here already (adopted before).
    #[error("attempt {attempt} is live already, for task {task}")]
    AttemptLive {
        /// The attempt.
        attempt: AttemptId,
        /// The task it runs.
        task: TaskId,
    },
    /// No such task was submitted or restored.
    #[error("unknown task {task}")]
    UnknownTask {
        /// The task.
        task: TaskId,
    },
    /// The task is terminal.
    #[error("task {task} has finished")]
    Finished {
        /// The task.
        task: TaskId,
    },
    /// The task's job was asked to cancel.
    #[error("task {task}: job {job} was cancelled")]
    Cancelled {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
    },
    /// The task is a gang's ([`Placement::Gang`](crate::Placement)): adopted with all
    /// its members ([`Core::handle_adopt_gang`](crate::Core::handle_adopt_gang)).
    #[error("task {task}: job {job} is a gang job, adopted only with all its members")]
    Gang {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
    },
    /// Adopted as a gang, but the task's job is no gang job.
    #[error("task {task}: job {job} is not a gang job")]
    NotGang {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
    },
    /// Not the distinct members the task's gang has.
    #[error("task {task}: its gang has {expected} distinct members")]
    Members {
        /// The task.
        task: TaskId,
        /// How many members its gang has.
        expected: u32,
    },
    /// The task has a live attempt already.
    #[error("task {task} is in flight as attempt {attempt}")]
    InFlight {
        /// The task.
        task: TaskId,
        /// Its live attempt.
        attempt: AttemptId,
    },
    /// The task's job waits for other jobs: none of its tasks can be running.
    #[error("task {task}: job {job} waits for other jobs")]
    WaitingForJobs {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
    },
    /// The task should be queued but is not where the core keeps it: a bug in the
    /// core, refused rather than acted on.
    #[error("task {task} is not where the core keeps queued work")]
    NotQueued {
        /// The task.
        task: TaskId,
    },
}
