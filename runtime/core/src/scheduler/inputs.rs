//! The `handle_*` inputs of [`Core`].

use super::speculate::Ended;
use super::{Core, PendingEvent, slot};
use crate::config::{Dependency, JobSpec, Placement};
use crate::error::{AttemptError, CancelError, NodeError, SubmitError};
use crate::horizon::Held;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::{
    AttemptOutcome, CancelSummary, Disposition, Event, NodeLoss, SubmittedJob, TerminalState,
};
use crate::queue::{FreshRange, ReturnedTask};
use crate::resources::Resources;
use crate::stored::StoredSpec;
use crate::task::{Bucket, CopyState, JobRecord, Phase};

impl Core {
    /// Accepts a job of `spec.count` tasks, queued at once (held back at once if a
    /// deadline is set and the job cannot finish by it). Task ids are contiguous.
    ///
    /// Errors: `count == 0`, no core in `resources`, a gang placement (not scheduled
    /// yet), or id exhaustion; nothing changes then.
    /// Whether [`Core::handle_submit`] would accept every one of `specs`, submitted in
    /// this order, without changing anything: the first refusal, by position. A driver
    /// that promises "accepted whole or not at all" checks a batch with this first.
    pub fn check_submissions(&self, specs: &[JobSpec]) -> Result<(), (usize, SubmitError)> {
        let mut jobs = self.jobs.len();
        let mut next_task = self.next_task;
        for (position, spec) in specs.iter().enumerate() {
            check_spec(spec).map_err(|error| (position, error))?;
            jobs += 1;
            if u32::try_from(jobs).is_err() {
                return Err((position, SubmitError::JobIdsExhausted));
            }
            next_task = next_task.checked_add(u64::from(spec.count)).ok_or((
                position,
                SubmitError::TaskIdsExhausted { count: spec.count },
            ))?;
        }
        Ok(())
    }

    pub fn handle_submit(&mut self, spec: JobSpec, now: Time) -> Result<SubmittedJob, SubmitError> {
        self.handle_submit_after(spec, &[], now)
    }

    /// Accepts a job that waits for other jobs ([`Dependency`]): it is queued once each
    /// has ended (for [`DependencyKind::Success`], with every task succeeded), and
    /// cancelled, with an [`Event::DependencyFailed`] first, if one it needed to
    /// succeed did not. Until then its tasks count as queued and as
    /// [`Counts::waiting`](crate::Counts). A dependency on a job that has ended already
    /// is decided at once.
    ///
    /// Errors: as [`Core::handle_submit`], and a dependency on a job not submitted
    /// before this one ([`SubmitError::UnknownDependency`]).
    ///
    /// [`DependencyKind::Success`]: crate::DependencyKind::Success
    pub fn handle_submit_after(
        &mut self,
        spec: JobSpec,
        after: &[Dependency],
        now: Time,
    ) -> Result<SubmittedJob, SubmitError> {
        self.handle_submit_at(spec, after, None, now)
    }

    /// [`Core::handle_submit_after`] for a job that also waits until `not_before`
    /// (the driver's clock, as `now`): its tasks wait, counted as
    /// [`Counts::waiting`](crate::Counts), until [`Core::handle_timeout`] at or after
    /// that time ([`Core::poll_timeout`] asks for it), and until its dependencies have
    /// ended. A time already past waits for nothing.
    pub fn handle_submit_at(
        &mut self,
        spec: JobSpec,
        after: &[Dependency],
        not_before: Option<Time>,
        now: Time,
    ) -> Result<SubmittedJob, SubmitError> {
        self.observe(now);
        check_spec(&spec)?;
        let job = u32::try_from(self.jobs.len() + 1)
            .map(JobId)
            .map_err(|_| SubmitError::JobIdsExhausted)?;
        Self::check_dependencies(job, after)?;
        let first_task = TaskId(self.next_task);
        self.next_task = self
            .next_task
            .checked_add(u64::from(spec.count))
            .ok_or(SubmitError::TaskIdsExhausted { count: spec.count })?;
        let max_replays = spec.max_replays.unwrap_or(self.config.default_max_replays);
        let stored = StoredSpec::new(&spec, self.shapes.intern(&spec));
        self.jobs
            .push(JobRecord::new(stored, max_replays, first_task));
        self.counts.submitted += u64::from(spec.count);
        self.counts.queued += u64::from(spec.count);
        self.work.add(&stored, spec.count);
        if !self.horizon.track(job, spec.time_limit, self.now) {
            self.horizon.hold(job);
        }
        let gate = self.gate_at(job, after, not_before);
        let mut entries = Held::default();
        entries.fresh.insert(FreshRange {
            job,
            next: 0,
            end: spec.count,
        });
        self.admit(job, gate, entries);
        Ok(SubmittedJob {
            job,
            first_task,
            count: spec.count,
        })
    }

    /// A node joined with `capacity`: only tasks whose resources fit it in every kind
    /// are sent to it. It gets no work until it grants credit ([`Core::handle_credit`]).
    ///
    /// Errors: the node is live already, or offers no core.
    pub fn handle_node_joined(
        &mut self,
        node: NodeId,
        capacity: Resources,
        now: Time,
    ) -> Result<(), NodeError> {
        self.observe(now);
        self.nodes.join(node, capacity)
    }

    /// The node asks for `credit` more work (added to its unused credit, kind by kind,
    /// saturating). Typically capacity plus a prefetch margin at first, then the
    /// resources of each finished attempt. It is sent work only while its credit covers
    /// the work in every kind.
    ///
    /// Errors: the node is not live (a late message from a lost node).
    pub fn handle_credit(
        &mut self,
        node: NodeId,
        credit: Resources,
        now: Time,
    ) -> Result<(), NodeError> {
        self.observe(now);
        self.nodes.add_credit(node, credit)
    }

    /// The node takes no more work from now on: its unused credit is dropped and
    /// credit it sends later is ignored; its live attempts run on and report as usual.
    /// For a node about to go away in good order (an elastic pilot drains an
    /// allocation close to its end, then lets its agents go). Idempotent.
    ///
    /// Errors: the node is not live.
    pub fn handle_node_closed(&mut self, node: NodeId, now: Time) -> Result<(), NodeError> {
        self.observe(now);
        self.nodes.close(node)
    }

    /// The node started `attempt` (assigned → running; idempotent). Its run time counts
    /// from the first such report: for its class's runtime estimate if it succeeds,
    /// and to tell whether it is a straggler ([`Speculation`](crate::Speculation)).
    ///
    /// Errors: the attempt was never issued, or is no longer live (a late report).
    pub fn handle_started(&mut self, attempt: AttemptId, now: Time) -> Result<(), AttemptError> {
        self.observe(now);
        let Some(live) = self.attempts.get_mut(&attempt) else {
            return Err(self.attempt_error(attempt));
        };
        if live.started().is_some() {
            return Ok(());
        }
        live.start(self.now);
        let task = live.task;
        // Invariant: a live attempt's task has an in-flight record.
        let record = self.tasks.get_mut(&task).expect("live attempt has a task");
        let Phase::InFlight { started, .. } = &mut record.phase else {
            return Ok(());
        };
        if !*started {
            *started = true;
            let job = &mut self.jobs[slot(record.job)];
            job.shift(
                &mut self.counts,
                &mut self.work,
                Bucket::Assigned,
                Bucket::Running,
                1,
            );
        }
        self.index_started(attempt, task, self.now);
        Ok(())
    }

    /// An attempt ended with `outcome`. Only a live attempt of a non-terminal task
    /// changes state; anything else is dropped and counted. If the task's job was
    /// cancelled, any outcome makes the task `Cancelled`.
    ///
    /// With a speculative copy live, a success finishes the task and stops the other
    /// attempt ([`Event::CancelAttempt`]; its result will be a duplicate); any other
    /// outcome just ends this attempt ([`Disposition::Continues`]).
    pub fn handle_result(
        &mut self,
        attempt: AttemptId,
        outcome: AttemptOutcome,
        now: Time,
    ) -> Disposition {
        self.observe(now);
        let Some(live) = self.attempts.remove(&attempt) else {
            return match self.attempt_error(attempt) {
                AttemptError::Stale { .. } => {
                    self.counts.duplicates += 1;
                    Disposition::Duplicate
                }
                AttemptError::Unknown { .. } => {
                    self.counts.unknown_attempts += 1;
                    Disposition::UnknownAttempt
                }
            };
        };
        // Not hashed on the single-task path: only reserved nodes are asked back.
        let asked_back = !self.gangs.returning.is_empty() && self.gangs.returning.remove(&attempt);
        let Ended {
            task, from, other, ..
        } = self.end_attempt(attempt, live);
        // Invariant: end_attempt returns a task that has a record.
        let job = self.tasks[&task].job;
        if asked_back
            && outcome == AttemptOutcome::Cancelled
            && other.is_none()
            && !self.jobs[slot(job)].counts.cancel_requested
        {
            return self.requeue_given_back(task, from);
        }
        if self.jobs[slot(job)].counts.cancel_requested {
            if let Some(other) = other {
                self.drop_other(job, other, false);
            }
            return self.finish(task, from, TerminalState::Cancelled);
        }
        match (outcome, other) {
            (AttemptOutcome::Succeeded, other) => {
                if let Some(started) = live.started() {
                    self.record_run(job, started);
                }
                if let Some(other) = other {
                    self.drop_other(job, other, true);
                }
                self.finish(task, from, TerminalState::Succeeded)
            }
            (_, Some(other)) => {
                self.continue_with(task, other);
                Disposition::Continues { task }
            }
            (AttemptOutcome::Failed, None) => self.retry_or_fail(task, from),
            (AttemptOutcome::Lost | AttemptOutcome::Cancelled, None) => {
                self.replay_or_fail(task, from)
            }
        }
    }

    /// The node is gone (connection closed, heartbeats missed). Its credit vanishes and
    /// every live attempt on it is replayed (or fails past its replay bound, or becomes
    /// `Cancelled` if its job was cancelled), except one whose task has a speculative
    /// copy elsewhere: the task carries on with that. The id may join again later as a
    /// new node.
    ///
    /// Errors: the node is not live.
    pub fn handle_node_lost(&mut self, node: NodeId, now: Time) -> Result<NodeLoss, NodeError> {
        self.observe(now);
        let record = self
            .nodes
            .remove(node)
            .ok_or(NodeError::UnknownNode { node })?;
        let mut loss = NodeLoss {
            attempts: u32::try_from(record.attempts.len()).unwrap_or(u32::MAX),
            credit_dropped: record.credit,
            ..NodeLoss::default()
        };
        for attempt in record.attempts {
            // Invariant: a node's attempt set holds live attempts only.
            let live = self
                .attempts
                .remove(&attempt)
                .expect("node attempt is live");
            let Ended {
                task,
                from,
                other,
                members,
            } = self.end_attempt(attempt, live);
            // A gang ends whole: its surviving members stop their parts.
            if members.is_some() {
                let job = self.tasks[&task].job;
                self.note_lost_member(job, node);
            }
            for &member in members.iter().flatten().filter(|&&member| member != node) {
                self.events
                    .push_back(PendingEvent::Ready(Event::CancelAttempt {
                        node: member,
                        attempt,
                    }));
            }
            // Invariant: end_attempt returns a task that has a record.
            let job = self.tasks[&task].job;
            if self.jobs[slot(job)].counts.cancel_requested {
                if let Some(other) = other {
                    self.drop_other(job, other, false);
                }
                self.finish(task, from, TerminalState::Cancelled);
                loss.cancelled += 1;
                continue;
            }
            if let Some(other) = other {
                self.continue_with(task, other);
                loss.continued += 1;
                continue;
            }
            match self.replay_or_fail(task, from) {
                Disposition::WillReplay { .. } => loss.replayed += 1,
                _ => loss.failed += 1,
            }
        }
        Ok(loss)
    }

    /// Cancels a job: its queued and retry-waiting tasks become `Cancelled` now, each
    /// live attempt (both, for a task with a speculative copy) gets an
    /// [`Event::CancelAttempt`] and its task becomes `Cancelled` when the first result
    /// arrives. Idempotent.
    ///
    /// Errors: no such job.
    pub fn handle_cancel_job(
        &mut self,
        job: JobId,
        now: Time,
    ) -> Result<CancelSummary, CancelError> {
        self.observe(now);
        let index = usize::try_from(job.0)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .ok_or(CancelError::UnknownJob { job })?;
        let Some(record) = self.jobs.get(index) else {
            // Finished and compacted, or never submitted.
            let counts = self
                .jobs
                .counts(index)
                .ok_or(CancelError::UnknownJob { job })?;
            self.jobs.set_cancel_requested(index);
            return Ok(CancelSummary {
                already_terminal: u64::from(counts.terminal()),
                already_cancelled: counts.cancel_requested,
                ..CancelSummary::default()
            });
        };
        let mut summary = CancelSummary {
            already_terminal: u64::from(record.counts.terminal()),
            ..CancelSummary::default()
        };
        if record.counts.cancel_requested {
            summary.already_cancelled = true;
            return Ok(summary);
        }
        let (priority, first_task, count) =
            (record.spec.priority, record.first_task, record.spec.count);
        self.job_mut(job).counts.cancel_requested = true;
        let (fresh, returned) = match self.deps.take(job) {
            Some(waiting) => {
                // A waiting job may be held by the deadline too (with nothing in it).
                let _ = self.horizon.take_held(job);
                (waiting.fresh, waiting.returned)
            }
            None => match self.horizon.take_held(job) {
                Some(held) => (held.fresh, held.returned),
                None => self.queue.remove_job(job, priority),
            },
        };
        let end_task = TaskId(first_task.0 + u64::from(count));
        let records: Vec<(TaskId, Phase)> = self
            .tasks
            .range(first_task..end_task)
            .map(|(task, record)| (*task, record.phase))
            .collect();
        debug_assert_eq!(
            returned.len(),
            records
                .iter()
                .filter(|(_, phase)| *phase == Phase::Queued)
                .count()
        );
        for (task, phase) in records {
            match phase {
                Phase::Queued => {
                    self.finish(task, Bucket::Queued, TerminalState::Cancelled);
                    summary.cancelled += 1;
                }
                Phase::Delayed { not_before } => {
                    self.retry_timers.remove(&(not_before, task));
                    self.finish(task, Bucket::Delayed, TerminalState::Cancelled);
                    summary.cancelled += 1;
                }
                Phase::InFlight { attempt, copy, .. } => {
                    let copy = match copy.state() {
                        CopyState::Live(copy) => Some(copy),
                        CopyState::Absent | CopyState::Spent => None,
                    };
                    for attempt in std::iter::once(attempt).chain(copy) {
                        // Invariant: an in-flight record's attempts are live.
                        let live = *self.attempts.get(&attempt).expect("live attempt");
                        if let Some(started) = live.started() {
                            self.unindex(job, started, attempt);
                        }
                        let leader = [live.node];
                        let nodes = self.gangs.members.get(&attempt).map_or(&leader[..], |m| m);
                        for &node in nodes {
                            self.events
                                .push_back(PendingEvent::Ready(Event::CancelAttempt {
                                    node,
                                    attempt,
                                }));
                        }
                        summary.attempts_signalled += 1;
                    }
                }
            }
        }
        if !fresh.is_empty() {
            for range in fresh {
                let amount = range.end - range.next;
                let record = &mut self.jobs[slot(job)];
                record.mark_range_finished(range.next, range.end);
                record.shift(
                    &mut self.counts,
                    &mut self.work,
                    Bucket::Queued,
                    Bucket::Cancelled,
                    amount,
                );
                self.events.push_back(PendingEvent::CancelledRange {
                    job,
                    first_task,
                    next: range.next,
                    end: range.end,
                });
                summary.cancelled += u64::from(amount);
            }
            self.finish_job_if_done(job);
        }
        Ok(summary)
    }

    /// Releases every retry whose backoff ended at or before `now` into the queue
    /// (ahead of fresh work of its priority, in `(not_before, task)` order), holds
    /// back the jobs that stopped fitting the deadline and notes the attempts that
    /// became stragglers (every input does the last two; this one exists for the
    /// instants [`Core::poll_timeout`] names).
    pub fn handle_timeout(&mut self, now: Time) {
        self.observe(now);
        self.release_due();
        while let Some(&(not_before, task)) = self.retry_timers.first() {
            if not_before > self.now {
                break;
            }
            self.retry_timers.pop_first();
            // Invariant: a timer exists only for a delayed task with a record.
            let record = self.tasks.get_mut(&task).expect("timer task has a record");
            record.phase = Phase::Queued;
            let job_id = record.job;
            let job = &mut self.jobs[slot(job_id)];
            job.shift(
                &mut self.counts,
                &mut self.work,
                Bucket::Delayed,
                Bucket::Queued,
                1,
            );
            self.requeue(ReturnedTask { task, job: job_id });
        }
    }

    /// Why `attempt` is not live: this core issued it, or an earlier root did (its
    /// task was queued again when the new root restored it, and not adopted), so it was
    /// superseded; or no root issued it yet.
    fn attempt_error(&self, attempt: AttemptId) -> AttemptError {
        let first = AttemptId::first_of_term(self.config.term);
        let earlier = attempt < first && attempt.number() != 0;
        if earlier || (attempt >= first && attempt.0 < self.next_attempt) {
            AttemptError::Stale { attempt }
        } else {
            AttemptError::Unknown { attempt }
        }
    }
}

/// The rules every job must meet, submitted or restored.
pub(super) fn check_spec(spec: &JobSpec) -> Result<(), SubmitError> {
    if spec.count == 0 {
        return Err(SubmitError::EmptyJob);
    }
    if spec.resources.core_count() == 0 {
        return Err(SubmitError::ZeroCores);
    }
    match spec.placement {
        Placement::Single | Placement::Node { .. } => Ok(()),
        Placement::Gang { nodes: 0 } => Err(SubmitError::EmptyGang),
        Placement::Gang { .. } => Ok(()),
    }
}
