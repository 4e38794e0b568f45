//! Ending attempts when a task may have two, and speculative copies of stragglers.
//! The estimates and the straggler index live in `speculation.rs`.
//!
//! A task in flight has one live attempt, or two while a speculative copy runs: the
//! original (which [`Core::task_status`] reports) and the copy, on different nodes.
//! The task stays in one bucket throughout (`Running` if either started). The first
//! success wins and the other attempt is stopped; a failure, loss or unsolicited stop
//! of one of two just ends that one, and only the outcome of the last live attempt
//! drives retry, replay or failure as with a single attempt.

use super::{Core, PendingEvent, needs, slot};
use crate::horizon::last_start;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::{Assignment, Dispatch, Event};
use crate::resources::Resources;
use crate::task::{AttemptRecord, Bucket, CopySlot, CopyState, Phase};

/// How many of the oldest stragglers one [`Core::poll_dispatch`] looks at before it
/// gives up for this call. Bounds the cost of a dispatch while stragglers wait for a
/// node (say, the only idle node is the one running them); the older ones keep their
/// place, so a straggler further back waits at most until those ahead are placed or
/// end.
const SCAN: usize = 16;

/// What ending one live attempt left of its task.
pub(super) struct Ended {
    pub(super) task: TaskId,
    /// The task's bucket.
    pub(super) from: Bucket,
    /// The task's other live attempt, if it had a copy.
    pub(super) other: Option<AttemptId>,
    /// A gang attempt's member nodes, leader first (it had no copy).
    pub(super) members: Option<Box<[NodeId]>>,
}

impl Core {
    /// Ends the live attempt `attempt` (already out of the live map): forgets it on
    /// its node and in the straggler index.
    pub(super) fn end_attempt(&mut self, attempt: AttemptId, record: AttemptRecord) -> Ended {
        // Invariant: a live attempt's task has an in-flight record.
        let job = self
            .tasks
            .get(&record.task)
            .expect("live attempt has a task")
            .job;
        let need = self.shapes.resources(self.jobs[slot(job)].spec.shape);
        if !self.gangs.returning.is_empty() {
            self.gangs.returning.remove(&attempt);
        }
        let members = self.end_gang_attempt(attempt, need);
        if members.is_none() {
            self.nodes.detach(record.node, attempt, need);
        }
        let task = &self.tasks[&record.task];
        let (from, other) = match task.phase {
            Phase::InFlight {
                attempt: original,
                started,
                copy,
            } => {
                let other = match copy.state() {
                    CopyState::Live(copy) if copy == attempt => Some(original),
                    CopyState::Live(copy) => Some(copy),
                    CopyState::Absent | CopyState::Spent => None,
                };
                let from = if started {
                    Bucket::Running
                } else {
                    Bucket::Assigned
                };
                (from, other)
            }
            Phase::Queued | Phase::Delayed { .. } => (Bucket::Assigned, None),
        };
        if let Some(started) = record.started() {
            self.unindex(job, started, attempt);
        }
        Ended {
            task: record.task,
            from,
            other,
            members,
        }
    }

    /// The task goes on with `other`, its remaining live attempt, and gets no further
    /// copy while it lasts. The task is `Assigned` again if `other` has not started.
    pub(super) fn continue_with(&mut self, task: TaskId, other: AttemptId) {
        // Invariant: `other` is the live copy of a task with an in-flight record.
        let other_started = self.attempts.get(&other).expect("copy is live").started();
        let record = self.tasks.get_mut(&task).expect("copied task has a record");
        if matches!(record.phase, Phase::InFlight { started: true, .. }) && other_started.is_none()
        {
            let job = &mut self.jobs[slot(record.job)];
            job.shift(
                &mut self.counts,
                &mut self.work,
                Bucket::Running,
                Bucket::Assigned,
                1,
            );
        }
        record.phase = Phase::InFlight {
            attempt: other,
            started: other_started.is_some(),
            copy: CopySlot::SPENT,
        };
    }

    /// Ends `other`, the remaining live attempt of a task that is about to become
    /// terminal, and tells its node to stop it if `stop` (when the job was cancelled,
    /// it has been told already). Its result will be a duplicate.
    pub(super) fn drop_other(&mut self, job: JobId, other: AttemptId, stop: bool) {
        let Some(live) = self.attempts.remove(&other) else {
            return;
        };
        let need = self.shapes.resources(self.jobs[slot(job)].spec.shape);
        self.nodes.detach(live.node, other, need);
        if let Some(started) = live.started() {
            self.unindex(job, started, other);
        }
        if stop {
            self.events
                .push_back(PendingEvent::Ready(Event::CancelAttempt {
                    node: live.node,
                    attempt: other,
                }));
        }
    }

    /// `attempt` started at `started` (its first report, or when an adopted one
    /// began): index it if it may become a straggler, that is, it is the only attempt
    /// of a speculative job's task.
    pub(super) fn index_started(&mut self, attempt: AttemptId, task: TaskId, started: Time) {
        if !self.stragglers.is_enabled() {
            return;
        }
        // Invariant: a live attempt's task has an in-flight record.
        let record = &self.tasks[&task];
        let job = &self.jobs[slot(record.job)];
        let alone = matches!(
            record.phase,
            Phase::InFlight { attempt: original, copy, .. }
                if original == attempt && copy == CopySlot::ABSENT
        );
        if alone && job.spec.speculative && !job.counts.cancel_requested {
            self.stragglers
                .insert(job.spec.class, started, attempt, self.now);
        }
    }

    /// Takes `attempt` (of `job`, started at `started`) out of the straggler index if
    /// it is there.
    pub(super) fn unindex(&mut self, job: JobId, started: Time, attempt: AttemptId) {
        let spec = &self.jobs[slot(job)].spec;
        if self.stragglers.is_enabled() && spec.speculative {
            self.stragglers
                .remove(spec.class, started, attempt, self.now);
        }
    }

    /// A successful attempt of `job` that started at `started` ends now: its run time
    /// feeds its class's estimate.
    pub(super) fn record_run(&mut self, job: JobId, started: Time) {
        let class = self.jobs[slot(job)].spec.class;
        let micros = self.now.as_micros().saturating_sub(started.as_micros());
        self.stragglers.record(class, micros, self.now);
    }

    /// A speculative copy of the oldest straggler that can have one now, for a node
    /// with credit and no ordinary work: a node other than the original's, with
    /// capacity and credit for the job's resources, whose capacity class has nothing in the
    /// ready queue it could run (credit that waits for a wide task at the head of the
    /// queue is not spent on copies). A straggler whose job no longer fits the deadline
    /// gets no copy, and is not looked at again even if the deadline moves later.
    pub(super) fn dispatch_copy(&mut self) -> Option<Dispatch> {
        if !self.stragglers.has_ripe() || self.nodes.total_credit().is_zero() {
            return None;
        }
        self.nodes.park_rotation();
        // Capacities with runnable queued work, once per call: asking the queue can
        // cost a scan of it.
        let busy: Vec<Resources> = if self.queue.is_empty() {
            Vec::new()
        } else {
            self.nodes
                .parked_capacities()
                .filter(|capacity| {
                    self.queue
                        .need(
                            capacity,
                            needs(&self.jobs, &self.shapes, &self.locality, None),
                        )
                        .is_some()
                })
                .collect()
        };
        let mut after = None;
        for _ in 0..SCAN {
            let key = self.stragglers.ripe_after(after)?;
            after = Some(key);
            if let Some(dispatch) = self.try_copy(key, &busy) {
                return Some(dispatch);
            }
        }
        None
    }

    /// Places a copy of the straggler `key` if a node can take it now, on a node whose
    /// capacity is not in `busy`.
    fn try_copy(&mut self, key: (Time, AttemptId), busy: &[Resources]) -> Option<Dispatch> {
        let original = key.1;
        // Invariant: the ripe set holds live attempts with in-flight records only.
        let live = *self.attempts.get(&original).expect("straggler is live");
        let record = self
            .tasks
            .get_mut(&live.task)
            .expect("straggler has a task");
        // A job given a later time while it ran starts nothing new before then.
        if self.deps.is_waiting(record.job) {
            return None;
        }
        let job = &self.jobs[slot(record.job)];
        let (need, time_limit) = (self.shapes.resources(job.spec.shape), job.spec.time_limit);
        let fits = self.horizon.deadline().is_none_or(|deadline| {
            last_start(deadline, time_limit).is_some_and(|last| self.now <= last)
        });
        if !fits {
            self.stragglers.take_ripe(key);
            if let Phase::InFlight { copy, .. } = &mut record.phase {
                *copy = CopySlot::SPENT;
            }
            return None;
        }
        let node = self
            .nodes
            .take_for_copy(need, live.node, |capacity| !busy.contains(capacity))?;
        self.stragglers.take_ripe(key);
        self.nodes.served(node, need);
        let copy = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        record.attempts += 1;
        if let Phase::InFlight { copy: state, .. } = &mut record.phase {
            *state = CopySlot::live(copy);
        }
        let assignment = Assignment {
            task: live.task,
            attempt: copy,
            job: record.job,
            index: record.index,
        };
        self.attempts
            .insert(copy, AttemptRecord::new(live.task, node, time_limit));
        self.nodes.attach(node, copy, need);
        self.counts.speculated += 1;
        Some(Dispatch {
            node,
            assignments: vec![assignment],
            members: Vec::new(),
        })
    }
}
