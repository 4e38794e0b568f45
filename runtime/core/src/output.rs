//! What the core hands back: dispositions of inputs, dispatches, events and counters.

use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::resources::Resources;

/// A job accepted by [`Core::handle_submit`](crate::Core::handle_submit). Its tasks are
/// `first_task .. first_task + count`; task `first_task + i` has index `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmittedJob {
    /// The new job's id.
    pub job: JobId,
    /// Id of the task at index 0.
    pub first_task: TaskId,
    /// Number of tasks.
    pub count: u32,
}

impl SubmittedJob {
    /// The id of the task at `index` (no bounds check against `count`).
    pub fn task(&self, index: u32) -> TaskId {
        TaskId(self.first_task.0 + u64::from(index))
    }
}

/// How an attempt ended, as its agent reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// The task ran and succeeded.
    Succeeded,
    /// The task's own failure (non-zero exit, signal, its timeout, spawn failure):
    /// retried after backoff up to the job's `max_retries`.
    Failed,
    /// Infrastructure failure (executor crash, agent restart): replayed at once up to
    /// the job's replay bound, without counting as the task's failure.
    Lost,
    /// The agent stopped the attempt. Expected after [`Event::CancelAttempt`]; when the
    /// job was not cancelled it is treated as [`AttemptOutcome::Lost`] (an agent that
    /// stops work on its own, e.g. while draining, does not fail the task).
    Cancelled,
}

/// The final state of a task. Reached once per task. In results and the client
/// protocol: `"succeeded"`, `"failed"`, `"cancelled"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum TerminalState {
    /// An attempt succeeded.
    Succeeded,
    /// Non-zero exit, signal, time limit or spawn failure, with retries and replays
    /// exhausted.
    Failed,
    /// Its job was cancelled.
    Cancelled,
}

impl TerminalState {
    /// The state as results and the client protocol name it.
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalState::Succeeded => "succeeded",
            TerminalState::Failed => "failed",
            TerminalState::Cancelled => "cancelled",
        }
    }
}

/// What [`Core::handle_result`](crate::Core::handle_result) did with a result. The event
/// stream stays authoritative: an `Accepted` result also produces one
/// [`Event::TaskFinished`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// The task is now terminal.
    Accepted {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
        /// Its index within the job.
        index: u32,
        /// The state it ended in.
        state: TerminalState,
        /// Attempts dispatched for it, this one included.
        attempts: u32,
    },
    /// The task failed and waits until `not_before` (see
    /// [`Core::poll_timeout`](crate::Core::poll_timeout)) before it is queued again.
    WillRetry {
        /// The task.
        task: TaskId,
        /// When it becomes eligible again.
        not_before: Time,
    },
    /// The attempt was lost; the task is queued again ahead of fresh work.
    WillReplay {
        /// The task.
        task: TaskId,
    },
    /// The attempt failed, was lost or stopped while a speculative copy of its task is
    /// still live: nothing is retried or replayed, the task carries on with that copy.
    Continues {
        /// The task.
        task: TaskId,
    },
    /// The node gave back an attempt it had not started, as asked
    /// ([`Event::ReturnUnstarted`]): the task is queued again, as if never dispatched.
    Returned {
        /// The task.
        task: TaskId,
    },
    /// The attempt was issued but is no longer live (superseded by a replay, its task is
    /// already terminal, or it lost to a speculative copy): the result is dropped and
    /// counted.
    Duplicate,
    /// No such attempt was ever issued: the result is dropped and counted.
    UnknownAttempt,
}

/// Work for one node. Sent as one frame; its resources were covered by the node's
/// credit in every kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    /// The node to run the assignments.
    pub node: NodeId,
    /// At most [`CoreConfig::max_bundle`](crate::CoreConfig::max_bundle) assignments, in
    /// queue order.
    pub assignments: Vec<Assignment>,
    /// Empty for single-node work. For a gang ([`Placement::Gang`](crate::Placement)):
    /// its one assignment runs on all these nodes at once, `node` (the group's leader)
    /// first; the driver sends each member its part. Each member's credit was charged.
    pub members: Vec<NodeId>,
}

/// The nodes held for the gang at the head of the gang queue
/// ([`Core::reservation`](crate::Core::reservation)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangReservation {
    /// The gang's job.
    pub job: JobId,
    /// The reserved nodes, ascending.
    pub nodes: Vec<NodeId>,
    /// When they are expected to have the gang's need free, from the time limits of
    /// the work on them; `None` if some of it has no limit.
    pub start: Option<Time>,
}

/// One attempt of one task, sent to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The task.
    pub task: TaskId,
    /// The fresh attempt id the node must report the result under.
    pub attempt: AttemptId,
    /// The task's job (its spec says what to run and what it needs).
    pub job: JobId,
    /// The task's index within the job.
    pub index: u32,
}

/// Something the driver must act on or record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A task reached its terminal state. Emitted exactly once per task.
    TaskFinished {
        /// The task.
        task: TaskId,
        /// Its job.
        job: JobId,
        /// Its index within the job.
        index: u32,
        /// The state it ended in.
        state: TerminalState,
        /// Attempts dispatched for it (0 if it never left the queue).
        attempts: u32,
    },
    /// Tell `node` to stop `attempt`. Either its job was cancelled (the task becomes
    /// `Cancelled` when the result of any of its attempts, whatever the outcome, or the
    /// loss of its node arrives), or another copy of its task succeeded first (the
    /// task is `Succeeded` already; this attempt's result will be a
    /// [`Disposition::Duplicate`]).
    CancelAttempt {
        /// Where the attempt runs.
        node: NodeId,
        /// The attempt to stop.
        attempt: AttemptId,
    },
    /// Ask `node` to give back `attempt` if it has not started it (it waits in the
    /// node's local queue): its cores are reserved for a gang, and work queued there
    /// would hold them past the reservation. An attempt given back ends
    /// [`AttemptOutcome::Cancelled`] and its task is queued again, counted neither as
    /// a failure nor as a replay ([`Disposition::Returned`]); one already started
    /// runs on and ends as usual.
    ReturnUnstarted {
        /// The reserved node.
        node: NodeId,
        /// An attempt of it not known to have started.
        attempt: AttemptId,
    },
    /// Every task of the job is terminal. Follows the job's last `TaskFinished`.
    JobFinished {
        /// The job.
        job: JobId,
    },
    /// `job` waited for `dependency` to succeed, which failed or was cancelled: `job`
    /// is cancelled (its `TaskFinished` events follow, `Cancelled`).
    DependencyFailed {
        /// The waiting job.
        job: JobId,
        /// The job it waited for.
        dependency: JobId,
    },
}

/// What [`Core::handle_node_lost`](crate::Core::handle_node_lost) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeLoss {
    /// Live attempts the node held.
    pub attempts: u32,
    /// Tasks queued again (ahead of fresh work).
    pub replayed: u32,
    /// Tasks failed because they exceeded their replay bound.
    pub failed: u32,
    /// Tasks of cancelled jobs, now `Cancelled`.
    pub cancelled: u32,
    /// Attempts whose task carries on with its speculative copy on another node.
    pub continued: u32,
    /// Credit the node held that vanished with it.
    pub credit_dropped: Resources,
}

/// What [`Core::handle_cancel_job`](crate::Core::handle_cancel_job) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CancelSummary {
    /// Tasks that were queued or waiting for a retry and are now `Cancelled`.
    pub cancelled: u64,
    /// Attempts told to stop ([`Event::CancelAttempt`]); their tasks become `Cancelled`
    /// when the results arrive.
    pub attempts_signalled: u64,
    /// Tasks that were already terminal.
    pub already_terminal: u64,
    /// The job had been cancelled before (this call changed nothing).
    pub already_cancelled: bool,
}

/// Where one task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    /// In the ready queue.
    Queued,
    /// Waiting for its retry backoff.
    Delayed {
        /// When it becomes eligible again.
        not_before: Time,
    },
    /// Sent to a node, not yet reported started. With a speculative copy live, the
    /// task is `Running` if either attempt started, and this names the original
    /// attempt (or the copy, once the original has ended).
    Assigned {
        /// The node.
        node: NodeId,
        /// The live attempt.
        attempt: AttemptId,
    },
    /// Reported started by its node.
    Running {
        /// The node.
        node: NodeId,
        /// The live attempt.
        attempt: AttemptId,
    },
    /// Terminal (the core keeps one bit per finished task, not which state; the
    /// `TaskFinished` event said).
    Finished,
}

/// Attempts of a task that ended without counting, as a journal remembers them: own
/// failures that were retried and losses that were replayed. See
/// [`Core::handle_restore_job`](crate::Core::handle_restore_job).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EarlierAttempts {
    pub failures: u32,
    pub replays: u32,
}

/// Task counters over the whole core. Every submitted task is in exactly one of
/// `queued`, `delayed`, `assigned`, `running`, `succeeded`, `failed`, `cancelled`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Tasks ever submitted.
    pub submitted: u64,
    /// In the ready queue (or held back: by the deadline, or by dependencies).
    pub queued: u64,
    /// Of `queued`, those whose job waits for other jobs to end.
    pub waiting: u64,
    /// Waiting for a retry backoff.
    pub delayed: u64,
    /// Dispatched, not reported started.
    pub assigned: u64,
    /// Reported started (a task with a speculative copy: either attempt started).
    pub running: u64,
    /// Terminal: succeeded.
    pub succeeded: u64,
    /// Terminal: failed.
    pub failed: u64,
    /// Terminal: cancelled.
    pub cancelled: u64,
    /// Failures that were retried.
    pub retries: u64,
    /// Losses that were replayed.
    pub replays: u64,
    /// Results dropped because their attempt was superseded or its task terminal.
    pub duplicates: u64,
    /// Results dropped because their attempt was never issued.
    pub unknown_attempts: u64,
    /// Speculative copies issued for stragglers (see
    /// [`Speculation`](crate::Speculation)). A copy is an attempt of a task that is
    /// in flight already; it does not move the task between the partitions above.
    pub speculated: u64,
    /// Attempts of earlier roots adopted ([`Core::handle_adopt`]): each moved its task
    /// from `queued` or `delayed` to `assigned` or `running`, as a dispatch would.
    ///
    /// [`Core::handle_adopt`]: crate::Core::handle_adopt
    pub adopted: u64,
    /// Live nodes.
    pub nodes: u64,
    /// Credit granted by live nodes and not yet used by a dispatch, per kind (capped
    /// at `u32::MAX`: memory over thousands of nodes can reach it).
    pub credit: Resources,
    /// Queued tasks (part of `queued`) held back because they cannot finish by the
    /// deadline ([`Core::handle_deadline`](crate::Core::handle_deadline)). They wait for
    /// a later deadline or a continuation allocation; they are not failed.
    pub beyond_deadline: u64,
}

impl Counts {
    /// Tasks in a terminal state.
    pub fn terminal(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    /// Tasks with a live attempt.
    pub fn in_flight(&self) -> u64 {
        self.assigned + self.running
    }
}

/// What has not run, from [`Core::unstarted`](crate::Core::unstarted): tasks queued
/// (never dispatched, or queued again after an attempt) or waiting for a retry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnstartedSummary {
    /// Such tasks over all jobs (`queued + delayed` of [`Counts`]).
    pub tasks: u64,
    /// (job, its such tasks) for every job that has any, in job id order.
    pub jobs: Vec<(JobId, u64)>,
}

/// Task counters of one job; the same partition as [`Counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Tasks in the job.
    pub count: u32,
    /// In the ready queue.
    pub queued: u32,
    /// Waiting for a retry backoff.
    pub delayed: u32,
    /// Dispatched, not reported started.
    pub assigned: u32,
    /// Reported started.
    pub running: u32,
    /// Terminal: succeeded.
    pub succeeded: u32,
    /// Terminal: failed.
    pub failed: u32,
    /// Terminal: cancelled.
    pub cancelled: u32,
    /// The job was cancelled.
    pub cancel_requested: bool,
}

impl JobCounts {
    /// Tasks in a terminal state.
    pub fn terminal(&self) -> u32 {
        self.succeeded + self.failed + self.cancelled
    }

    /// Every task is terminal.
    pub fn is_finished(&self) -> bool {
        self.terminal() == self.count
    }
}
