//! The pure scheduling core of Saker: which task runs next, where, and what happens
//! when an attempt ends or a node disappears.
//!
//! **Owns**: job and task state machines, the ready queue (priority, FIFO, retry
//! backoff), resource vectors ([`Resources`]: cores, GPUs, memory, custom kinds) and
//! node credit and capacity accounting in them, bundled credit-based dispatch,
//! retry/replay policy, cancellation, the allocation's end (which attempts can still
//! finish in time, draining), speculative copies of stragglers, and exactly-once
//! acceptance of results.
//!
//! **Must never**: do I/O, read a clock, spawn threads, depend on tokio, or let hash
//! iteration order reach its outputs. Time arrives as an argument; effects leave as
//! values polled by the caller. A crate boundary keeps it that way: this crate depends
//! on `thiserror` and nothing else, and its optional `rkyv` and `serde` features add
//! derives only (so that the wire and the root's records carry the core's own ids,
//! resources and placements).
//!
//! **Start reading** at [`Core`]: its doc says how to drive it (inputs `handle_*`,
//! outputs `poll_*`, monotonic `now`). Then `resources.rs` (what a task needs and a
//! node offers), `queue.rs` (ready-queue order), `node.rs` (credit, round-robin,
//! parking), `task.rs` (per-job and per-task records),
//! `horizon.rs` (the deadline and the work it holds back), `speculation.rs` (runtime
//! estimates and stragglers), `scheduler/gang.rs` (gangs and their reservation). The simulator in
//! `tests/sim/` drives 10,000 virtual nodes through the public API and checks the
//! guarantees after every step.
//!
//! **Key decision: state per task is paid only while a task is in motion.** A pilot
//! exists to run millions of small tasks, so the dominant state is *queued* work. A
//! queued array is one range entry (job, next index, end) in the ready queue and is
//! expanded only when a node takes tasks from it; a task gets a record when it is
//! dispatched and loses it when it finishes; a finished task is one bit in its job's
//! bitset (released when the job finishes) plus counters. A million queued array tasks
//! therefore cost well under a byte each (the memory test measures about 0.3), and the
//! heavy per-task state (about 155 bytes) is bounded by the work in flight, which the
//! nodes' credit bounds. The price is that per-task history (which node ran it, exit
//! details) is not kept here: it leaves in events for the journal to keep.
//!
//! # Semantics at a glance
//!
//! * **Order**: priority (higher first); within a priority, tasks that come back
//!   (replays, retries after their backoff) before never-dispatched work, then
//!   submission order.
//! * **Failure of the task** ([`AttemptOutcome::Failed`]): retried after exponential
//!   backoff ([`Backoff`]) up to the job's `max_retries`, then `Failed`.
//! * **Failure of the infrastructure** ([`AttemptOutcome::Lost`], an unsolicited
//!   [`AttemptOutcome::Cancelled`], [`Core::handle_node_lost`]): replayed at once up to
//!   the job's replay bound, then `Failed`. Node loss drops the node's credit.
//! * **Cancellation**: queued and backoff-waiting tasks end `Cancelled` at once; live
//!   attempts get [`Event::CancelAttempt`] and end `Cancelled` with whatever result (or
//!   node loss) comes next.
//! * **Exactly once**: one [`Event::TaskFinished`] per task; a result counts only for
//!   a live attempt of the task ([`Disposition::Duplicate`] /
//!   [`Disposition::UnknownAttempt`] otherwise). One [`Event::JobFinished`] per job,
//!   after its last `TaskFinished`.
//! * **Stragglers** ([`Speculation`], on by default, only for jobs marked
//!   [`JobSpec::speculative`]): a started attempt running longer than `P` times its
//!   class's estimate (mean + 2σ of successful run times, once there are enough) gets
//!   one copy on another node when a node has credit and no queued work it could run.
//!   The first success wins; the other attempt gets [`Event::CancelAttempt`] and its
//!   result is a duplicate. A failure or loss of one of two live attempts just ends it
//!   ([`Disposition::Continues`]); only the last one's outcome retries or replays.
//!   [`Counts::speculated`] counts the copies. A copy must fit the deadline like any
//!   dispatch (a straggler that does not gets none); none while draining.
//! * **Resources**: a task ([`JobSpec::resources`], at least one core) runs only on a
//!   node whose capacity it fits in every kind. Every kind is accounted; only cores
//!   are enforced on the nodes today. A task runs on one node ([`Placement::Single`]),
//!   on one given node only ([`Placement::Node`]: that node takes it first, others
//!   skip it, and it waits for its node while the node is away), or on a gang of
//!   distinct nodes at once ([`Placement::Gang`], below).
//! * **Gangs**: one attempt spans all member nodes; it is placed whole on nodes whose
//!   free capacity (not only credit) covers its need, ends whole (a lost member
//!   stops the others and replays the task), and is never speculated. The first gang
//!   that cannot start reserves the nodes that free up soonest by time limits; they
//!   take only work that ends by then, or of a higher priority (EASY backfill). See
//!   `scheduler/gang.rs` and [`Core::reservation`].
//! * **Credit**: a node is never sent more than it granted, in any kind; see [`Core`]
//!   for the dispatch policy and its head-of-line rule.
//! * **Deadline** ([`Core::handle_deadline`]): an attempt is dispatched at `now` only
//!   if `now + time_limit <= deadline` ([`JobSpec::time_limit`]); without a limit only
//!   if `now < deadline`. Work that no longer fits stays queued, *held* out of the
//!   queue's order so it blocks nothing that fits (whatever its priority), and is never
//!   failed for it: [`Counts::beyond_deadline`] counts it, [`Core::unstarted`] lists
//!   what did not run per job. A new deadline, or `None`, puts it back.
//! * **Drain** ([`Core::handle_drain`]): no dispatch at all from then on; results,
//!   losses and cancellations are still processed.
//! * **Updates** of a job that has not ended ([`Core::handle_update_priority`],
//!   [`Core::handle_update_not_before`], [`Core::handle_update_time_limit`]) apply to
//!   its tasks that have not started. A later time takes its queued tasks aside (they
//!   wait again, as do its retries and replays) and asks its dispatched, unstarted
//!   attempts back ([`Event::ReturnUnstarted`]); a new limit is the one the deadline,
//!   gang reservations and speculative copies judge it by from then on, and a job it
//!   makes unfit is held (its unstarted attempts asked back), one it makes fit again
//!   is queued. Started attempts keep the limit they started under.
//! * **Adoption** ([`Core::handle_adopt`]): a new root (a takeover or a resume: its
//!   [`CoreConfig::term`] one more) restores the journal, which queues every
//!   unfinished task again, then adopts each attempt of an earlier root that an agent
//!   still holds: the task leaves the queue (or its backoff) and is in flight under
//!   that attempt on that node as if dispatched there, so it runs once. Each term
//!   numbers its attempts apart ([`AttemptId::first_of_term`]): an adopted id never
//!   meets one the new root issues, and a result of an earlier root's attempt that was
//!   not adopted is a duplicate. Gang tasks are not adopted (yet).

mod config;
mod error;
mod horizon;
mod hpc;
mod ids;
mod jobs;
mod node;
mod output;
pub mod provision;
mod queue;
mod ranges;
mod resources;
mod scheduler;
mod speculation;
mod stored;
mod task;
mod work;

pub use config::{
    Backoff, CoreConfig, Dependency, DependencyKind, JobSpec, Placement, Speculation,
};
pub use error::{
    AdoptError, AttemptError, CancelError, NodeError, RestoreError, SubmitError, UpdateError,
};
pub use hpc::{LauncherKind, MpiKind, UnknownKind};
pub use ids::{AttemptId, JobId, NodeId, ObjectId, TaskId, Time};
pub use output::{
    Assignment, AttemptOutcome, CancelSummary, Counts, Dispatch, Disposition, EarlierAttempts,
    Event, GangReservation, JobCounts, NodeLoss, SubmittedJob, TaskStatus, TerminalState,
    UnstartedSummary,
};
pub use resources::{MAX_CUSTOM, ResourceKind, Resources};
pub use scheduler::{ConsistencyError, Core, MAX_PREFERRED_NODES};
#[cfg(feature = "rkyv")]
pub use {
    config::ArchivedPlacement,
    hpc::{ArchivedLauncherKind, ArchivedMpiKind},
    ids::{ArchivedAttemptId, ArchivedJobId, ArchivedNodeId, ArchivedObjectId, ArchivedTaskId},
    resources::ArchivedResources,
};
