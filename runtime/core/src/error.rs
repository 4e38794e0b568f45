//! Errors of the core's inputs. None of them changes state: a rejected input is as if
//! it had not been made, except that its `now` still advances the core's clock (and
//! with it what fits the deadline).

use crate::ids::{AttemptId, JobId, NodeId};

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
