//! The simulator's independent record of every task, kept from the core's outputs
//! alone, and the invariants checked against it.
//!
//! Per-step checks are O(1) or O(size of the input just applied); [`Ledger::sweep`]
//! compares every task against the core (O(tasks)) and runs every K steps and at the end.
//!
//! A task may have two live attempts (a speculative copy): the ledger checks that the
//! second is a copy of a started attempt of a speculative job on another node, that
//! only one result is ever accepted, and that a live attempt the core drops when its
//! task finishes was told to stop.
//!
//! Credit is kept per resource kind: no node is ever sent more than its credit, nor a
//! task its capacity does not fit, in any kind.

use std::collections::{HashMap, HashSet};

use saker_core::{
    AttemptError, AttemptId, Core, Counts, Dependency, DependencyKind, Dispatch, Disposition,
    Event, JobId, JobSpec, MAX_CUSTOM, NodeId, NodeLoss, ResourceKind, Resources, SubmittedJob,
    TaskId, TaskStatus, TerminalState, Time,
};

/// Amounts per resource kind, in [`ResourceKind::all`] order; signed, so that a
/// balance driven below zero shows as such.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Balance([i64; 3 + MAX_CUSTOM]);

impl Balance {
    fn add(&mut self, amounts: Resources, sign: i64) {
        for (slot, kind) in self.0.iter_mut().zip(ResourceKind::all()) {
            *slot += sign * i64::from(amounts.get(kind));
        }
    }

    fn subtract(&mut self, other: &Balance) {
        for (slot, amount) in self.0.iter_mut().zip(other.0) {
            *slot -= amount;
        }
    }

    /// The first kind below zero, if any.
    fn negative(&self) -> Option<ResourceKind> {
        ResourceKind::all()
            .zip(self.0)
            .find(|(_, amount)| *amount < 0)
            .map(|(kind, _)| kind)
    }

    /// As the core reports it: each kind capped at `u32::MAX` (`None` if negative).
    fn saturated(&self) -> Option<Resources> {
        let mut amounts = Resources::ZERO;
        for (kind, amount) in ResourceKind::all().zip(self.0) {
            let amount = u32::try_from(amount.min(i64::from(u32::MAX))).ok()?;
            amounts = amounts.with(kind, amount);
        }
        Some(amounts)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Queued or waiting for a retry in the core.
    Waiting,
    /// Live attempts: the original (the one the core reports) first, then its copy.
    InFlight(AttemptId, Option<AttemptId>),
    Terminal,
}

#[derive(Clone, Copy, Debug)]
struct TaskEntry {
    state: State,
    /// Attempts dispatched.
    attempts: u32,
    /// TaskFinished events seen (must end at exactly 1).
    finished_events: u8,
    /// A result was accepted (must happen at most once).
    accepted: bool,
}

/// A live attempt: where, of which task, whether it was reported started, whether it
/// is a speculative copy.
#[derive(Clone, Copy, Debug)]
struct Live {
    node: NodeId,
    task: TaskId,
    started: bool,
    copy: bool,
}

#[derive(Clone, Copy, Debug)]
struct JobEntry {
    first_task: TaskId,
    count: u32,
    need: Resources,
    time_limit: Option<u64>,
    class: u32,
    speculative: bool,
    /// The node its tasks are pinned to, if any.
    pinned: Option<NodeId>,
    /// Not dispatched before this time (an update gave it).
    not_before: Option<Time>,
    cancelled: bool,
    finished_tasks: u32,
    succeeded: u32,
    job_finished: bool,
}

/// Per node: its capacity, attempts live on it and credit balance (granted minus
/// dispatched, per kind).
#[derive(Debug)]
struct NodeEntry {
    capacity: Resources,
    live: HashSet<AttemptId>,
    balance: Balance,
}

#[derive(Debug, Default)]
pub struct Ledger {
    tasks: Vec<TaskEntry>,
    jobs: Vec<JobEntry>,
    /// The jobs each job waits for, by job.
    after: Vec<Vec<Dependency>>,
    nodes: HashMap<NodeId, NodeEntry>,
    attempts: HashMap<AttemptId, Live>,
    /// Live attempts the core told to stop.
    signalled: HashSet<AttemptId>,
    /// Live attempts the core asked back unstarted.
    asked_back: HashSet<AttemptId>,
    last_attempt: u64,
    /// The deadline the root passed last, and whether it drained.
    deadline: Option<Time>,
    draining: bool,
    waiting: u64,
    in_flight: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub duplicates: u64,
    pub unknown: u64,
    pub speculated: u64,
    pub copies_won: u64,
    /// Attempts that ended while their task went on with its other copy.
    pub continued: u64,
    /// Attempts dispatched whose task needs more than cores.
    pub non_core_attempts: u64,
    /// Speculative copies of such tasks.
    pub non_core_copies: u64,
    /// Dispatches after which the node had the cores for one more task like its last
    /// one but not the rest of what it needs: a kind other than cores bounded it.
    pub bound_by_other_kinds: u64,
    /// The balances of all live nodes, summed (what [`Counts::credit`] says).
    total_balance: Balance,
}

impl Ledger {
    pub fn total_tasks(&self) -> u64 {
        self.tasks.len() as u64
    }

    pub fn terminal(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    pub fn job_need(&self, job: JobId) -> Resources {
        self.jobs[job.0 as usize - 1].need
    }

    fn task_mut(&mut self, task: TaskId) -> &mut TaskEntry {
        &mut self.tasks[task.0 as usize - 1]
    }

    pub fn job_time_limit(&self, job: JobId) -> Option<u64> {
        self.jobs[job.0 as usize - 1].time_limit
    }

    pub fn job_class(&self, job: JobId) -> u32 {
        self.jobs[job.0 as usize - 1].class
    }

    pub fn deadline(&mut self, deadline: Option<Time>) {
        self.deadline = deadline;
    }

    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// Jobs submitted so far.
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    pub fn submitted_after(&mut self, job: SubmittedJob, spec: &JobSpec, after: Vec<Dependency>) {
        self.submitted(job, spec);
        self.after.push(after);
    }

    pub fn submitted(&mut self, job: SubmittedJob, spec: &JobSpec) {
        if self.after.len() < self.jobs.len() {
            self.after.resize(self.jobs.len(), Vec::new());
        }
        assert_eq!(job.job.0 as usize, self.jobs.len() + 1, "job ids are dense");
        assert_eq!(
            job.first_task.0 as usize,
            self.tasks.len() + 1,
            "task ids are dense"
        );
        self.jobs.push(JobEntry {
            first_task: job.first_task,
            count: job.count,
            need: spec.resources,
            time_limit: spec.time_limit,
            class: spec.class,
            speculative: spec.speculative,
            pinned: match spec.placement {
                saker_core::Placement::Node { node } => Some(node),
                _ => None,
            },
            not_before: None,
            cancelled: false,
            finished_tasks: 0,
            succeeded: 0,
            job_finished: false,
        });
        let entry = TaskEntry {
            state: State::Waiting,
            attempts: 0,
            finished_events: 0,
            accepted: false,
        };
        self.tasks
            .extend(std::iter::repeat_n(entry, job.count as usize));
        self.waiting += u64::from(job.count);
    }

    pub fn joined(&mut self, node: NodeId, capacity: Resources) {
        let entry = NodeEntry {
            capacity,
            live: HashSet::new(),
            balance: Balance::default(),
        };
        let previous = self.nodes.insert(node, entry);
        assert!(previous.is_none(), "node {node} joined twice");
    }

    pub fn credited(&mut self, node: NodeId, credit: Resources) {
        let entry = self.nodes.get_mut(&node).expect("credit for a live node");
        entry.balance.add(credit, 1);
        self.total_balance.add(credit, 1);
    }

    /// Checks the core's view of a node's capacity and credit equals the ledger's.
    pub fn check_credit(&self, core: &Core, node: NodeId) {
        let Some(entry) = self.nodes.get(&node) else {
            assert_eq!(core.node_credit(node), None, "core knows lost node {node}");
            return;
        };
        let (capacity, credit) = core.node_credit(node).expect("ledger node is live in core");
        assert_eq!(capacity, entry.capacity, "capacity of node {node}");
        assert_eq!(
            Some(credit),
            entry.balance.saturated(),
            "credit of node {node}"
        );
    }

    /// A dispatch at `now`: every attempt in it must be able to finish by the deadline
    /// (start + limit <= deadline; before the deadline without a limit), none after a
    /// drain, none beyond credit. An attempt of a task in flight is a speculative copy:
    /// of a speculative job, of a started attempt, on another node, at most one.
    pub fn dispatched(&mut self, dispatch: &Dispatch, now: Time) {
        assert!(!self.draining, "dispatch after drain");
        let node = dispatch.node;
        let capacity = self
            .nodes
            .get(&node)
            .expect("dispatch to live node")
            .capacity;
        let mut used = Balance::default();
        for assignment in &dispatch.assignments {
            assert!(
                assignment.attempt.0 > self.last_attempt,
                "attempt ids must increase"
            );
            self.last_attempt = assignment.attempt.0;
            let job = self.jobs[assignment.job.0 as usize - 1];
            for dependency in self
                .after
                .get(assignment.job.0 as usize - 1)
                .into_iter()
                .flatten()
            {
                let needed = &self.jobs[dependency.job.0 as usize - 1];
                assert!(
                    needed.job_finished,
                    "job {} dispatched before job {} ended",
                    assignment.job, dependency.job
                );
                if dependency.kind == DependencyKind::Success {
                    assert_eq!(
                        needed.succeeded, needed.count,
                        "job {} dispatched though job {} did not succeed",
                        assignment.job, dependency.job
                    );
                }
            }
            if let Some(pinned) = job.pinned {
                assert_eq!(node, pinned, "pinned work goes to its node only");
            }
            if let Some(not_before) = job.not_before {
                assert!(
                    now >= not_before,
                    "job {} dispatched at {now}, before its time {not_before}",
                    assignment.job
                );
            }
            assert_eq!(
                assignment.task.0,
                job.first_task.0 + u64::from(assignment.index),
                "task id matches job and index"
            );
            assert!(
                job.need.fits_in(&capacity),
                "task needing {} sent to node {node} of {capacity}",
                job.need
            );
            assert!(!job.cancelled, "dispatched a task of a cancelled job");
            if let Some(deadline) = self.deadline {
                let fits = match job.time_limit {
                    Some(limit) => now.as_micros().saturating_add(limit) <= deadline.as_micros(),
                    None => now < deadline,
                };
                assert!(
                    fits,
                    "task {} (limit {:?}) started at {now}, cannot finish by {deadline}",
                    assignment.task, job.time_limit
                );
            }
            used.add(job.need, 1);
            if job.need != Resources::cores(job.need.core_count()) {
                self.non_core_attempts += 1;
            }
            let task = assignment.task;
            let attempt = assignment.attempt;
            let copy = match self.task_mut(task).state {
                State::Waiting => {
                    self.waiting -= 1;
                    self.in_flight += 1;
                    self.task_mut(task).state = State::InFlight(attempt, None);
                    false
                }
                State::InFlight(original, None) => {
                    assert!(
                        job.speculative,
                        "copy of task {task} of a non-speculative job"
                    );
                    let live = self.attempts[&original];
                    assert!(live.started, "copy of task {task} before it started");
                    assert_ne!(
                        live.node, node,
                        "copy of task {task} on its original's node"
                    );
                    self.task_mut(task).state = State::InFlight(original, Some(attempt));
                    self.speculated += 1;
                    if job.need != Resources::cores(job.need.core_count()) {
                        self.non_core_copies += 1;
                    }
                    true
                }
                other => panic!("task {task} dispatched while {other:?}"),
            };
            self.task_mut(task).attempts += 1;
            self.attempts.insert(
                attempt,
                Live {
                    node,
                    task,
                    started: false,
                    copy,
                },
            );
            let live = &mut self
                .nodes
                .get_mut(&node)
                .expect("dispatch to live node")
                .live;
            live.insert(assignment.attempt);
        }
        let entry = self.nodes.get_mut(&node).expect("dispatch to live node");
        entry.balance.subtract(&used);
        self.total_balance.subtract(&used);
        if let Some(kind) = entry.balance.negative() {
            panic!("node {node} sent work beyond its credit in {kind:?}");
        }
        // Invariant: the core sends no empty dispatch (the harness checks it too).
        let last = dispatch
            .assignments
            .last()
            .expect("a dispatch assigns work");
        let left = entry.balance.saturated().expect("checked not negative");
        let need = self.job_need(last.job);
        if need.core_count() <= left.core_count() && !need.fits_in(&left) {
            self.bound_by_other_kinds += 1;
        }
    }

    pub fn started(&mut self, attempt: AttemptId, result: Result<(), AttemptError>) {
        if let Some(live) = self.attempts.get_mut(&attempt) {
            assert_eq!(result, Ok(()), "started for live attempt {attempt}");
            live.started = true;
        } else {
            assert_eq!(result, Err(AttemptError::Stale { attempt }));
        }
    }

    /// Ends a live attempt in the ledger; its task waits again if it was the last (a
    /// terminal outcome is recorded from the TaskFinished event).
    fn end_attempt(&mut self, attempt: AttemptId) -> Option<Live> {
        let live = self.attempts.remove(&attempt)?;
        self.signalled.remove(&attempt);
        self.asked_back.remove(&attempt);
        if let Some(entry) = self.nodes.get_mut(&live.node) {
            entry.live.remove(&attempt);
        }
        let entry = self.task_mut(live.task);
        entry.state = match entry.state {
            State::InFlight(original, None) if original == attempt => State::Waiting,
            State::InFlight(original, Some(copy)) if original == attempt => {
                State::InFlight(copy, None)
            }
            State::InFlight(original, Some(copy)) if copy == attempt => {
                State::InFlight(original, None)
            }
            other => panic!("attempt {attempt} ended while its task was {other:?}"),
        };
        if entry.state == State::Waiting {
            self.in_flight -= 1;
            self.waiting += 1;
        }
        Some(live)
    }

    pub fn result(&mut self, attempt: AttemptId, disposition: Disposition) {
        let asked_back = self.asked_back.contains(&attempt);
        let Some(live) = self.end_attempt(attempt) else {
            match disposition {
                Disposition::Duplicate => {
                    assert!(attempt.0 <= self.last_attempt && attempt.0 > 0);
                    self.duplicates += 1;
                }
                Disposition::UnknownAttempt => {
                    assert!(attempt.0 > self.last_attempt || attempt.0 == 0);
                    self.unknown += 1;
                }
                other => panic!("result of dead attempt {attempt} changed state: {other:?}"),
            }
            return;
        };
        let task = live.task;
        let job = self.job_of(task);
        let entry = self.task_mut(task);
        match disposition {
            Disposition::Accepted {
                task: accepted,
                state,
                ..
            } => {
                assert_eq!(accepted, task);
                assert!(!entry.accepted, "task {task}: a second result accepted");
                entry.accepted = true;
                if job.cancelled {
                    assert_eq!(state, TerminalState::Cancelled);
                }
                if state == TerminalState::Succeeded && live.copy {
                    self.copies_won += 1;
                }
            }
            Disposition::WillRetry { task: retried, .. }
            | Disposition::WillReplay { task: retried } => {
                assert_eq!(retried, task);
                assert_eq!(
                    entry.state,
                    State::Waiting,
                    "task {task} requeued in flight"
                );
                assert!(!job.cancelled, "cancelled job's task requeued");
            }
            Disposition::Returned { task: returned } => {
                assert_eq!(returned, task);
                assert!(asked_back, "attempt {attempt} returned unasked");
                assert_eq!(
                    entry.state,
                    State::Waiting,
                    "task {task} returned in flight"
                );
                assert!(!job.cancelled, "cancelled job's task returned");
                // Given back unstarted: the attempt does not count.
                entry.attempts -= 1;
            }
            Disposition::Continues { task: continued } => {
                assert_eq!(continued, task);
                assert!(
                    matches!(entry.state, State::InFlight(_, None)),
                    "task {task} continues without its copy"
                );
                assert!(!job.cancelled, "cancelled job's task continues");
                self.continued += 1;
            }
            other => panic!("live attempt {attempt} dropped: {other:?}"),
        }
    }

    fn job_of(&self, task: TaskId) -> JobEntry {
        let index = self.jobs.partition_point(|job| job.first_task <= task) - 1;
        self.jobs[index]
    }

    pub fn node_lost(&mut self, node: NodeId, loss: NodeLoss) {
        let entry = self.nodes.remove(&node).expect("lost node was live");
        assert_eq!(
            loss.attempts as usize,
            entry.live.len(),
            "attempts on lost node"
        );
        assert_eq!(
            loss.replayed + loss.failed + loss.cancelled + loss.continued,
            loss.attempts,
            "every attempt of a lost node is accounted for"
        );
        assert_eq!(
            Some(loss.credit_dropped),
            entry.balance.saturated(),
            "credit dropped with node {node}"
        );
        self.total_balance.subtract(&entry.balance);
        let mut continued = 0;
        for attempt in entry.live {
            let live = self.end_attempt(attempt).expect("node attempt is live");
            let in_flight = matches!(self.task_mut(live.task).state, State::InFlight(..));
            if in_flight && !self.job_of(live.task).cancelled {
                continued += 1;
            }
        }
        assert_eq!(
            continued, loss.continued,
            "tasks that go on with their copy"
        );
        self.continued += u64::from(continued);
    }

    /// An update gave `job` a time ahead (`None`: none, or one past).
    pub fn retimed(&mut self, job: JobId, not_before: Option<Time>) {
        self.jobs[job.0 as usize - 1].not_before = not_before;
    }

    /// An update gave `job` a new time limit: dispatches from now on must fit the
    /// deadline with it.
    pub fn relimited(&mut self, job: JobId, time_limit: Option<u64>) {
        self.jobs[job.0 as usize - 1].time_limit = time_limit;
    }

    pub fn cancel_requested(&mut self, job: JobId) {
        self.jobs[job.0 as usize - 1].cancelled = true;
    }

    /// Returns the attempt to cancel on its node, for CancelAttempt events.
    pub fn event(&mut self, event: Event) {
        match event {
            Event::TaskFinished {
                task,
                job,
                index,
                state,
                attempts,
            } => {
                let job_entry = &mut self.jobs[job.0 as usize - 1];
                assert_eq!(task.0, job_entry.first_task.0 + u64::from(index));
                if job_entry.cancelled {
                    assert_eq!(state, TerminalState::Cancelled);
                } else {
                    assert_ne!(
                        state,
                        TerminalState::Cancelled,
                        "cancelled without a cancel"
                    );
                }
                job_entry.finished_tasks += 1;
                if state == TerminalState::Succeeded {
                    job_entry.succeeded += 1;
                }
                // The core drops a task's remaining attempt when it finishes: it must
                // have been told to stop (a copy that lost, or a cancelled job's).
                while let State::InFlight(attempt, _) = self.task_mut(task).state {
                    assert!(
                        self.signalled.contains(&attempt),
                        "task {task} finished with attempt {attempt} live and not stopped"
                    );
                    self.end_attempt(attempt);
                }
                let entry = self.task_mut(task);
                entry.finished_events += 1;
                assert_eq!(entry.finished_events, 1, "task {task} finished twice");
                assert_eq!(entry.attempts, attempts, "attempt count of task {task}");
                assert_eq!(
                    entry.state,
                    State::Waiting,
                    "task {task} finished while in flight"
                );
                entry.state = State::Terminal;
                self.waiting -= 1;
                match state {
                    TerminalState::Succeeded => self.succeeded += 1,
                    TerminalState::Failed => self.failed += 1,
                    TerminalState::Cancelled => self.cancelled += 1,
                }
            }
            Event::ReturnUnstarted { node, attempt } => {
                let live = self.attempts[&attempt];
                assert_eq!(live.node, node, "asked back from the attempt's node");
                assert!(
                    !live.started,
                    "attempt {attempt} asked back after it started"
                );
                assert!(
                    self.asked_back.insert(attempt),
                    "attempt {attempt} asked back twice"
                );
            }
            Event::CancelAttempt { node, attempt } => {
                let live = self.attempts[&attempt];
                assert_eq!(live.node, node, "cancel sent to the attempt's node");
                assert!(
                    self.signalled.insert(attempt),
                    "attempt {attempt} stopped twice"
                );
            }
            Event::DependencyFailed { job, dependency } => {
                let needed = &self.jobs[dependency.0 as usize - 1];
                assert!(
                    needed.job_finished && needed.succeeded < needed.count,
                    "job {job} cancelled for {dependency}, which has not failed"
                );
                self.jobs[job.0 as usize - 1].cancelled = true;
            }
            Event::JobFinished { job } => {
                let entry = &mut self.jobs[job.0 as usize - 1];
                assert_eq!(
                    entry.finished_tasks, entry.count,
                    "job {job} finished early"
                );
                assert!(!entry.job_finished, "job {job} finished twice");
                entry.job_finished = true;
            }
        }
    }

    /// O(1) checks after every step (outputs drained).
    pub fn check_counts(&self, counts: &Counts) {
        assert_eq!(counts.submitted, self.total_tasks(), "submitted");
        assert_eq!(
            counts.queued + counts.delayed,
            self.waiting,
            "waiting tasks"
        );
        assert_eq!(
            counts.assigned + counts.running,
            self.in_flight,
            "in-flight tasks"
        );
        assert_eq!(counts.succeeded, self.succeeded, "succeeded");
        assert_eq!(counts.failed, self.failed, "failed");
        assert_eq!(counts.cancelled, self.cancelled, "cancelled");
        assert_eq!(counts.duplicates, self.duplicates, "duplicates");
        assert_eq!(counts.unknown_attempts, self.unknown, "unknown attempts");
        assert_eq!(counts.speculated, self.speculated, "speculative copies");
        assert_eq!(counts.nodes, self.nodes.len() as u64, "live nodes");
        assert_eq!(
            Some(counts.credit),
            self.total_balance.saturated(),
            "credit of all nodes"
        );
        assert!(
            counts.beyond_deadline <= counts.queued,
            "held tasks are queued"
        );
        if self.deadline.is_none() {
            assert_eq!(counts.beyond_deadline, 0, "held without a deadline");
        }
    }

    /// O(tasks) comparison of every task and node with the core.
    pub fn sweep(&self, core: &Core) {
        if let Err(error) = core.check_consistency() {
            panic!("core inconsistent: {error}");
        }
        for (position, entry) in self.tasks.iter().enumerate() {
            let task = TaskId(position as u64 + 1);
            let status = core.task_status(task).expect("submitted task is known");
            let agrees = match (entry.state, status) {
                (State::Waiting, TaskStatus::Queued | TaskStatus::Delayed { .. }) => true,
                (State::InFlight(attempt, copy), TaskStatus::Assigned { attempt: live, .. })
                | (State::InFlight(attempt, copy), TaskStatus::Running { attempt: live, .. }) => {
                    let started = self.attempts[&attempt].started
                        || copy.is_some_and(|copy| self.attempts[&copy].started);
                    attempt == live && started == matches!(status, TaskStatus::Running { .. })
                }
                (State::Terminal, TaskStatus::Finished) => true,
                _ => false,
            };
            assert!(
                agrees,
                "task {task}: ledger {:?}, core {status:?}",
                entry.state
            );
        }
        for node in self.nodes.keys() {
            self.check_credit(core, *node);
        }
    }

    /// End of run: nothing in flight; every task finished exactly once, except those
    /// that never ran (deadline or drain), which the core lists per job; a job is
    /// finished exactly when all its tasks are. Without a drain, everything left is
    /// held by the deadline: nothing that fits was left behind.
    pub fn check_final(&self, core: &Core) {
        self.sweep(core);
        let counts = core.counts();
        assert_eq!(self.in_flight, 0, "work in flight at the end");
        let unstarted = core.unstarted();
        assert_eq!(unstarted.tasks, self.waiting, "unstarted tasks");
        assert_eq!(
            unstarted.tasks + self.terminal() + self.in_flight,
            self.total_tasks(),
            "unstarted + terminal + in flight = all tasks"
        );
        let mut expected = Vec::new();
        for (position, job) in self.jobs.iter().enumerate() {
            let first = job.first_task.0 as usize - 1;
            let tasks = &self.tasks[first..first + job.count as usize];
            let waiting = tasks
                .iter()
                .filter(|entry| entry.state == State::Waiting)
                .count() as u64;
            assert!(
                tasks
                    .iter()
                    .all(|entry| entry.finished_events == u8::from(entry.state == State::Terminal)),
                "job {}: a task finished other than once",
                position + 1
            );
            assert_eq!(
                job.job_finished,
                waiting == 0,
                "job {} finished",
                position + 1
            );
            if waiting > 0 {
                expected.push((JobId(position as u32 + 1), waiting));
            }
            // Left waiting only for a job that never ended (held by the deadline).
            if core.is_waiting(JobId(position as u32 + 1)) {
                assert!(
                    self.after[position]
                        .iter()
                        .any(|dependency| !self.jobs[dependency.job.0 as usize - 1].job_finished),
                    "job {} waits for nothing that is left",
                    position + 1
                );
            }
        }
        assert_eq!(unstarted.jobs, expected, "unstarted tasks per job");
        if self.deadline.is_none() && !self.draining {
            assert!(core.is_quiescent(), "core not quiescent: {counts:?}");
        }
        if !self.draining {
            assert_eq!(counts.delayed, 0, "a retry never released");
            assert_eq!(
                counts.beyond_deadline + counts.waiting,
                counts.queued,
                "queued work that fits the deadline was left behind"
            );
        }
    }
}
