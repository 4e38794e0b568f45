//! Updates of a job that has not ended: its priority, its not-before time and its time
//! limit ([`Core::handle_update_priority`], [`Core::handle_update_not_before`],
//! [`Core::handle_update_time_limit`]). Each applies to the job's tasks that have not
//! started; started attempts run on as they began.
//!
//! Work already dispatched but not started (in an agent's prefetch window) is handled
//! as each change needs: a new priority leaves it where it is (it is next on its node
//! anyway); a later time, or a limit that no longer fits the deadline, asks it back
//! ([`Event::ReturnUnstarted`]), so nothing starts before its new time or past the
//! deadline; a new limit is recorded on it, since the driver sends its node the job's
//! new definition before it starts. A job waiting for a later time gets no
//! speculative copy either.

use crate::error::UpdateError;
use crate::horizon::Refit;
use crate::ids::{AttemptId, JobId, TaskId, Time};
use crate::output::Event;
use crate::task::Phase;

use super::{Core, PendingEvent, slot};

impl Core {
    /// Whether `job` can be updated: it exists and has not ended (every task terminal)
    /// or been cancelled. A driver that updates several jobs at once, all or none,
    /// checks each with this first; the `handle_update_*` inputs check it again.
    pub fn check_update(&self, job: JobId) -> Result<(), UpdateError> {
        // A compacted job has finished: its counts say so.
        let counts = self
            .job_counts(job)
            .ok_or(UpdateError::UnknownJob { job })?;
        if counts.is_finished() || counts.cancel_requested {
            return Err(UpdateError::Ended { job });
        }
        Ok(())
    }

    /// The time `job` still waits for (its `not_before`, or an update's), if any.
    pub fn not_before(&self, job: JobId) -> Option<Time> {
        self.waits_until(job)
    }

    /// Gives a job that has not ended a new priority: its queued tasks move to that
    /// level now (in their order, after what is queued there), and its tasks queued
    /// later (retries, replays, a waiting or held job's) take it. Running tasks run on.
    ///
    /// Errors: no such job, or it has ended or was cancelled.
    pub fn handle_update_priority(
        &mut self,
        job: JobId,
        priority: i32,
        now: Time,
    ) -> Result<(), UpdateError> {
        self.observe(now);
        self.check_update(job)?;
        let old = self.jobs[slot(job)].spec.priority;
        if old == priority {
            return Ok(());
        }
        self.job_mut(job).spec.priority = priority;
        // Held and waiting jobs keep their entries aside; they are queued with the
        // job's priority when released.
        if !self.horizon.is_held(job) && !self.deps.is_waiting(job) {
            let (fresh, returned) = self.queue.remove_job(job, old);
            for range in fresh {
                self.queue.push_fresh(priority, range);
            }
            for task in returned {
                self.queue.push_returned(priority, task);
            }
        }
        self.move_gang(job, old, priority);
        self.wake_pinned(job);
        Ok(())
    }

    /// Gives a job that has not ended a new not-before time (`None`: none). A job
    /// waiting for its time waits for the new one instead, earlier or later; with no
    /// time, or one not after `now`, it waits only for its dependencies, if any. A
    /// job whose tasks are queued or running and that gets a time ahead waits again:
    /// its queued tasks leave the queue until then, so do the tasks that come back
    /// from its attempts meanwhile, and its attempts not started yet are asked back
    /// ([`Event::ReturnUnstarted`]); started ones run on. Dependencies still apply.
    ///
    /// Errors: no such job, or it has ended or was cancelled; nothing changes then.
    pub fn handle_update_not_before(
        &mut self,
        job: JobId,
        not_before: Option<Time>,
        now: Time,
    ) -> Result<(), UpdateError> {
        self.observe(now);
        self.check_update(job)?;
        if self.retime(job, not_before) {
            self.ask_back_job(job);
        }
        Ok(())
    }

    /// Gives a job that has not ended a new time limit (microseconds; `None`: none)
    /// for its attempts that have not started; started ones keep theirs. The deadline
    /// judges the job by the new limit from now on: a job that stops fitting is held
    /// (and its attempts not started yet are asked back), a held job that fits again
    /// is queued. Its attempts not started yet run under the new limit (the driver
    /// sends their nodes the new definition), so gang reservations count with it.
    ///
    /// Errors: no such job, or it has ended or was cancelled; nothing changes then.
    pub fn handle_update_time_limit(
        &mut self,
        job: JobId,
        time_limit: Option<u64>,
        now: Time,
    ) -> Result<(), UpdateError> {
        self.observe(now);
        self.check_update(job)?;
        let old = self.jobs[slot(job)].spec.time_limit;
        if old == time_limit {
            return Ok(());
        }
        // Its queued tasks are counted in the queued work under their limit.
        let record = &mut self.jobs[slot(job)];
        let queued = record.counts.queued;
        self.work.remove(&record.spec, queued);
        record.spec.time_limit = time_limit;
        self.work.add(&record.spec, queued);
        for attempt in self.unstarted_attempts(job) {
            if let Some(live) = self.attempts.get_mut(&attempt) {
                live.set_limit(time_limit);
            }
        }
        match self.horizon.relimit(job, old, time_limit, self.now) {
            Refit::Same => {}
            Refit::Unfit => {
                self.hold_jobs(vec![job]);
                self.ask_back_job(job);
            }
            Refit::Fits(entries) => {
                // A waiting job's entries are aside, not held: none come back here.
                self.enqueue(job, entries);
            }
        }
        Ok(())
    }

    /// The live attempts of `job`'s tasks that have not started, but gang attempts
    /// (which start when placed), in task order.
    fn unstarted_attempts(&self, job: JobId) -> Vec<AttemptId> {
        let record = &self.jobs[slot(job)];
        let end = TaskId(record.first_task.0 + u64::from(record.spec.count));
        self.tasks
            .range(record.first_task..end)
            .filter_map(|(_, task)| match task.phase {
                Phase::InFlight {
                    attempt,
                    started: false,
                    ..
                } if !self.gangs.members.contains_key(&attempt) => Some(attempt),
                _ => None,
            })
            .collect()
    }

    /// Asks the nodes holding `job`'s attempts that have not started for them back:
    /// each comes back as cancelled and is queued again (aside while the job waits,
    /// held while it does not fit), counted neither as a failure nor as a replay. One
    /// that started meanwhile runs on.
    pub(super) fn ask_back_job(&mut self, job: JobId) {
        for attempt in self.unstarted_attempts(job) {
            if !self.gangs.returning.insert(attempt) {
                continue;
            }
            let node = self.attempts[&attempt].node;
            self.events
                .push_back(PendingEvent::Ready(Event::ReturnUnstarted {
                    node,
                    attempt,
                }));
        }
    }
}
