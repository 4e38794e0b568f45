//! The [`Core`] state machine: its state, constructor and queries. Inputs are in
//! `inputs.rs`, outputs in `outputs.rs`, the self-check in `audit.rs`.

mod adopt;
mod audit;
mod deadline;
mod deps;
mod gang;
mod hold;
mod inputs;
mod locality;
mod outputs;
mod query;
mod restore;
mod speculate;
mod updates;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

pub use audit::ConsistencyError;
pub use locality::MAX_PREFERRED_NODES;

use crate::config::{CoreConfig, JobSpec, Placement};
use crate::horizon::Horizon;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::jobs::{JobStore, Located};
use crate::node::Nodes;
use crate::output::{Counts, Disposition, Event, JobCounts, TaskStatus, TerminalState};
use crate::queue::{ReadyQueue, ReturnedTask, Taken};
use crate::resources::Resources;
use crate::speculation::Stragglers;
use crate::stored::Shapes;
use crate::task::{AttemptRecord, Bucket, JobRecord, Phase, TaskRecord};

/// The pure scheduling core of a pilot: job and task state, the ready queue, node
/// credit, retry/replay policy and exactly-once result acceptance.
///
/// # Driving it
///
/// The core does no I/O and reads no clock; like quinn-proto's `Connection` it is
/// driven from outside by one owner (the root actor):
///
/// * **Inputs** are the `handle_*` methods. Each takes `now`, the driver's monotonic
///   clock ([`Time`], microseconds). `now` must never go backwards; a smaller value than
///   one seen before is treated as the latest one seen (the core never panics on it).
///   Inputs that come from peers (credit, started, results) are validated: a bad one
///   returns an error or a [`Disposition`] and changes nothing.
/// * **Outputs** are the `poll_*` methods. After **every** `handle_*` call the driver
///   drains [`Core::poll_event`] until it returns `None` (journal and forward the
///   events), then [`Core::poll_dispatch`] until it returns `None` (send each
///   [`Dispatch`](crate::Dispatch) as one frame to its node), then events again:
///   dispatching may ask for some (a gang's reservation asks its nodes to give back
///   queued work, [`Event::ReturnUnstarted`]), which must reach nodes after the work
///   dispatched before them. Nothing is lost if the driver batches several inputs
///   before draining; it only delays work.
/// * **Timers**: [`Core::poll_timeout`] says when the core next has something to do on
///   its own (a retry whose backoff ends, or a job that stops fitting the deadline);
///   the driver calls [`Core::handle_timeout`] at or after that time, then drains as
///   above. Call `poll_timeout` again after every input: inputs can move it.
/// * **Allocation end**: when the driver learns when its allocation ends it calls
///   [`Core::handle_deadline`] with that end minus a safety margin (covering the delay
///   from dispatch to start on the node, and the time to report and persist). The core
///   has no clock, so [`Core::poll_dispatch`] judges fit at [`Core::now`], the latest
///   time any input carried; the timer above keeps that time fresh when no messages
///   arrive. To stop for good (the allocation is about to end, or the user asked),
///   [`Core::handle_drain`]; then wait for the in-flight work and report
///   [`Core::unstarted`].
///
/// A typical agent message carrying results and new credit is applied as
/// `handle_result` for each result, then `handle_credit`, then one drain. Credit is
/// never returned implicitly by a result: the agent says how much work it wants.
///
/// # Guarantees
///
/// * Every submitted task ends in exactly one [`TerminalState`] and produces exactly
///   one [`Event::TaskFinished`]; results for attempts that are no longer live are
///   dropped ([`Disposition::Duplicate`]).
/// * A node is never sent more work than the credit it granted, in any resource kind
///   ([`Resources`]), nor a task whose needs do not fit its capacity.
/// * Same inputs in the same order produce the same outputs: no hash order leaks.
///
/// # Dispatch policy
///
/// Capacity, credit and what a task needs are resource vectors; *fits* and *covers*
/// mean in every kind. Work is offered to nodes with credit in round-robin order (the
/// order their credit arrived; a node served goes to the back). A node receives, in
/// queue order, the tasks that fit its *capacity*, up to its credit and
/// [`CoreConfig::max_bundle`]. If the first task it could run needs more than its
/// current credit (in any kind), it receives nothing now (no backfill of narrower
/// tasks past it, so wide tasks are not starved) and other nodes are tried. Such a
/// node is *parked*: it is offered work again when its credit grows, or when every
/// node in the rotation has been served and its credit covers what the queue's head
/// now needs. A task that fits no live node's capacity is skipped by every node and
/// stays queued until a node it fits joins (or its job is cancelled); it does not
/// block narrower work behind it, and the core is not quiescent while it waits.
///
/// With a deadline set, only work that can finish by it is in the queue at all: a job
/// that stops fitting is taken out whole (held) and the order above applies to the
/// rest, so a long high-priority job past its last start neither runs nor stands in
/// front of short work. Time only moves forward, so under one deadline a held job
/// never fits again (unless an update shortens its time limit) and holding it cannot
/// starve anything that still fits.
///
/// Speculative copies of stragglers ([`Speculation`](crate::Speculation)) come last:
/// only when no node with credit can take queued work, one straggler at a time (oldest
/// first) gets a copy on the node with the most credit (cores first) that covers it
/// other than its original's, among nodes whose capacity has nothing runnable in the
/// queue (credit held for a wide head task is not spent on copies). To search by
/// credit, the rotation's nodes are parked first; they come back as described above.
#[derive(Debug)]
pub struct Core {
    config: CoreConfig,
    /// Latest time seen; inputs with an earlier time are clamped to it.
    now: Time,
    /// Index `i` holds job `i + 1`, in pages; a page whose jobs have all finished
    /// keeps only how each ended (`jobs.rs`).
    jobs: JobStore,
    /// The distinct resources and placements of the jobs, which records refer to.
    shapes: Shapes,
    next_task: u64,
    next_attempt: u64,
    /// Tasks that left the queue at least once and are not terminal. Ordered so a
    /// job's records are one range (cancellation) and iteration is deterministic.
    tasks: BTreeMap<TaskId, TaskRecord>,
    /// Live attempts only; an issued id missing here was superseded or finished.
    /// A hash map: only looked up, never iterated into an output.
    attempts: HashMap<AttemptId, AttemptRecord>,
    /// (not_before, task) of tasks waiting for their retry backoff.
    retry_timers: BTreeSet<(Time, TaskId)>,
    queue: ReadyQueue,
    /// The deadline, and the queued work of jobs that no longer fit it.
    horizon: Horizon,
    /// Set by [`Core::handle_drain`]: nothing is dispatched any more.
    draining: bool,
    /// Runtime estimates per class and the started attempts that may become stragglers.
    stragglers: Stragglers,
    nodes: Nodes,
    /// Gang jobs, the members of live gang attempts, and the head gang's reservation.
    gangs: gang::Gangs,
    events: VecDeque<PendingEvent>,
    counts: Counts,
    /// Queued tasks by kind, for [`Core::backlog`].
    work: crate::work::QueuedWork,
    /// Reused buffer for [`ReadyQueue::take`].
    scratch: Vec<Taken>,
    /// Nodes that may have work pinned to them in the queue (set when such work is
    /// queued, cleared when a look finds none): each takes its pinned work first.
    pinned_waiting: std::collections::BTreeSet<NodeId>,
    /// Jobs waiting for other jobs, and who waits for whom.
    deps: deps::Dependencies,
    /// Jobs that would rather run where their data is (see `locality.rs`).
    locality: locality::Locality,
}

/// An event waiting to be polled. A cancelled queued range is kept as a range and
/// expanded one `TaskFinished` per poll, so cancelling a million queued tasks costs no
/// per-task memory.
#[derive(Debug)]
enum PendingEvent {
    Ready(Event),
    CancelledRange {
        job: JobId,
        first_task: TaskId,
        next: u32,
        end: u32,
    },
}

/// Where job `job` lives in `Core::jobs`. Only for ids taken from the core's own
/// records (assignments, task records, queue entries), which are in range by
/// construction; ids from outside go through `Core::job`.
fn slot(job: JobId) -> usize {
    job.0 as usize - 1
}

/// What each task of every job needs on node `serving`, for the ready queue (which
/// keeps needs per job, not per entry); `None` for gangs, which single-node dispatch
/// skips, and for work pinned to another node or still waiting for the nodes it
/// prefers. With `serving` unknown (a search by capacity only), pinned and preferring
/// work counts for no node: its own nodes are woken when the work is queued
/// ([`Core::wake_pinned`]). Only for ids from the core's own queue entries.
fn needs<'a>(
    jobs: &'a JobStore,
    shapes: &'a Shapes,
    locality: &'a locality::Locality,
    serving: Option<NodeId>,
) -> impl Fn(JobId) -> Option<Resources> + Copy + 'a {
    let preferences = !locality.is_empty();
    move |job| {
        let shape = jobs[slot(job)].spec.shape;
        match shapes.placement(shape) {
            Placement::Single if preferences && locality.holds_back(job, serving) => None,
            Placement::Single => Some(shapes.resources(shape)),
            Placement::Node { node } if serving == Some(node) => Some(shapes.resources(shape)),
            Placement::Node { .. } | Placement::Gang { .. } => None,
        }
    }
}

/// What each task of the jobs pinned to `node`, or preferring it, needs; `None` for
/// every other job.
fn pinned_to<'a>(
    jobs: &'a JobStore,
    shapes: &'a Shapes,
    locality: &'a locality::Locality,
    node: NodeId,
) -> impl Fn(JobId) -> Option<Resources> + Copy + 'a {
    move |job| {
        let shape = jobs[slot(job)].spec.shape;
        match shapes.placement(shape) {
            Placement::Node { node: pinned } if pinned == node => Some(shapes.resources(shape)),
            Placement::Single if locality.prefers(job, node) => Some(shapes.resources(shape)),
            _ => None,
        }
    }
}

impl Core {
    /// An empty core: no jobs, no nodes.
    pub fn new(config: CoreConfig) -> Core {
        Core {
            config,
            now: Time::ZERO,
            jobs: JobStore::default(),
            shapes: Shapes::default(),
            next_task: 1,
            next_attempt: AttemptId::first_of_term(config.term).0,
            tasks: BTreeMap::new(),
            attempts: HashMap::new(),
            retry_timers: BTreeSet::new(),
            queue: ReadyQueue::default(),
            horizon: Horizon::default(),
            draining: false,
            stragglers: Stragglers::new(config.speculation),
            nodes: Nodes::default(),
            gangs: gang::Gangs::default(),
            events: VecDeque::new(),
            counts: Counts::default(),
            work: crate::work::QueuedWork::default(),
            scratch: Vec::new(),
            pinned_waiting: std::collections::BTreeSet::new(),
            deps: deps::Dependencies::default(),
            locality: locality::Locality::default(),
        }
    }

    /// The configuration the core was built with.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The latest time any input carried.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Task counters over all jobs, plus live nodes, outstanding credit and the queued
    /// tasks that cannot start before the deadline.
    pub fn counts(&self) -> Counts {
        Counts {
            nodes: self.nodes.len() as u64,
            credit: self.nodes.total_credit().saturated(),
            beyond_deadline: self.horizon.held_tasks(),
            waiting: self.deps.waiting_tasks(),
            ..self.counts
        }
    }

    /// Counters of one job, `None` if it was never submitted.
    pub fn job_counts(&self, job: JobId) -> Option<JobCounts> {
        self.jobs
            .counts(usize::try_from(job.0).ok()?.checked_sub(1)?)
    }

    /// The spec a job was submitted with (`max_replays` as given), `None` if unknown,
    /// or finished long enough ago that only its counts are kept (`jobs.rs`).
    pub fn job_spec(&self, job: JobId) -> Option<JobSpec> {
        self.job(job)
            .map(|record| record.spec.to_spec(&self.shapes))
    }

    /// Every submitted task is terminal (pending events may still wait to be polled).
    pub fn is_quiescent(&self) -> bool {
        self.counts.terminal() == self.counts.submitted
    }

    /// Where `task` stands, `None` if it was never submitted.
    pub fn task_status(&self, task: TaskId) -> Option<TaskStatus> {
        if let Some(record) = self.tasks.get(&task) {
            return Some(match record.phase {
                Phase::Queued => TaskStatus::Queued,
                Phase::Delayed { not_before } => TaskStatus::Delayed { not_before },
                Phase::InFlight {
                    attempt, started, ..
                } => {
                    // Invariant: an in-flight record's attempt is live.
                    let node = self.attempts.get(&attempt).expect("live attempt").node;
                    if started {
                        TaskStatus::Running { node, attempt }
                    } else {
                        TaskStatus::Assigned { node, attempt }
                    }
                }
            });
        }
        match self.locate(task)? {
            Located::Live(_, job, index) if !job.is_finished_index(index) => {
                Some(TaskStatus::Queued)
            }
            Located::Live(..) | Located::Finished => Some(TaskStatus::Finished),
        }
    }

    /// Live node capacity and unused credit, `None` if the node is not live.
    pub fn node_credit(&self, node: NodeId) -> Option<(Resources, Resources)> {
        self.nodes
            .get(node)
            .map(|record| (record.capacity, record.credit))
    }

    /// Entries in the ready queue: one per job with fresh tasks plus one per returned
    /// task. O(jobs), not O(tasks).
    pub fn ready_queue_entries(&self) -> usize {
        self.queue.entries()
    }

    /// Pending events, counting a cancelled range as one.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// The record of `job`, `None` if it was never submitted or has finished and been
    /// compacted (ask [`Core::job_counts`] for what remains of it).
    fn job(&self, job: JobId) -> Option<&JobRecord> {
        let index = usize::try_from(job.0).ok()?.checked_sub(1)?;
        self.jobs.get(index)
    }

    fn job_mut(&mut self, job: JobId) -> &mut JobRecord {
        &mut self.jobs[slot(job)]
    }

    /// The job holding `task` and its index within it (or that both have finished).
    fn locate(&self, task: TaskId) -> Option<Located<'_>> {
        self.jobs.locate(task)
    }

    /// Advances the clock to `now` (never back), holds the jobs that stopped fitting
    /// the deadline on the way and notes the attempts that became stragglers.
    fn observe(&mut self, now: Time) {
        self.now = self.now.max(now);
        if self.horizon.has_expired(self.now) {
            let mut expired = Vec::new();
            self.horizon.pop_expired(self.now, &mut expired);
            self.hold_jobs(expired);
        }
        self.stragglers.advance(self.now);
        self.end_due_waits();
    }

    /// Makes `task` (a record in bucket `from`) terminal in `state` and emits its event.
    fn finish(&mut self, task: TaskId, from: Bucket, state: TerminalState) -> Disposition {
        // Invariant: callers pass a task that has a record.
        let record = self
            .tasks
            .remove(&task)
            .expect("finishing task has a record");
        let job = &mut self.jobs[slot(record.job)];
        if !job.mark_finished(record.index) {
            // A record for a finished task would be a bug; never accept twice.
            debug_assert!(false, "task {task} finished twice");
            self.counts.duplicates += 1;
            return Disposition::Duplicate;
        }
        job.shift(
            &mut self.counts,
            &mut self.work,
            from,
            Bucket::from(state),
            1,
        );
        self.events
            .push_back(PendingEvent::Ready(Event::TaskFinished {
                task,
                job: record.job,
                index: record.index,
                state,
                attempts: record.attempts,
            }));
        self.finish_job_if_done(record.job);
        Disposition::Accepted {
            task,
            job: record.job,
            index: record.index,
            state,
            attempts: record.attempts,
        }
    }

    fn finish_job_if_done(&mut self, job: JobId) {
        if self.job_mut(job).release_if_finished() {
            let spec = self.jobs[slot(job)].spec;
            self.horizon.forget(job, spec.time_limit);
            self.forget_gang(job, spec.priority);
            self.locality.forget(job);
            // A job given a later time while it ran may end before that time: nothing
            // of it is left to release then (its record may be compacted by then).
            let _ = self.deps.take(job);
            self.events
                .push_back(PendingEvent::Ready(Event::JobFinished { job }));
            self.job_ended(job);
            self.jobs.finished(slot(job));
        }
    }

    /// A task (record in bucket `from`) failed on its own: retry after backoff, or fail.
    fn retry_or_fail(&mut self, task: TaskId, from: Bucket) -> Disposition {
        // Invariant: callers pass a task that has a record.
        let record = self
            .tasks
            .get_mut(&task)
            .expect("retried task has a record");
        record.failures += 1;
        let failures = record.failures;
        let job_id = record.job;
        let job = &mut self.jobs[slot(job_id)];
        if failures > job.spec.max_retries {
            return self.finish(task, from, TerminalState::Failed);
        }
        self.counts.retries += 1;
        let delay = self.config.retry_backoff.delay_micros(failures);
        let not_before = self.now.saturating_add_micros(delay);
        if delay == 0 {
            job.shift(&mut self.counts, &mut self.work, from, Bucket::Queued, 1);
            record.phase = Phase::Queued;
            self.requeue(ReturnedTask { task, job: job_id });
        } else {
            job.shift(&mut self.counts, &mut self.work, from, Bucket::Delayed, 1);
            record.phase = Phase::Delayed { not_before };
            self.retry_timers.insert((not_before, task));
        }
        Disposition::WillRetry { task, not_before }
    }

    /// A task's attempt was lost: queue it again ahead of fresh work, or fail it.
    fn replay_or_fail(&mut self, task: TaskId, from: Bucket) -> Disposition {
        // Invariant: callers pass a task that has a record.
        let record = self
            .tasks
            .get_mut(&task)
            .expect("replayed task has a record");
        record.replays += 1;
        let replays = record.replays;
        let job_id = record.job;
        let job = &mut self.jobs[slot(job_id)];
        if replays > job.max_replays {
            return self.finish(task, from, TerminalState::Failed);
        }
        self.counts.replays += 1;
        job.shift(&mut self.counts, &mut self.work, from, Bucket::Queued, 1);
        record.phase = Phase::Queued;
        self.requeue(ReturnedTask { task, job: job_id });
        Disposition::WillReplay { task }
    }

    /// Queued work of `job`, if pinned to a node or preferring some, wakes those nodes
    /// when they are parked: searches by capacity alone do not see such work
    /// ([`needs`]).
    pub(super) fn wake_pinned(&mut self, job: JobId) {
        if let Placement::Node { node } = self.shapes.placement(self.jobs[slot(job)].spec.shape) {
            self.pinned_waiting.insert(node);
            self.nodes.wake(node);
        }
        if !self.locality.is_empty() {
            self.note_queued_preference(job);
        }
    }
}
