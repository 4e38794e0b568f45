//! The end of the allocation as the [`Core`] sees it: [`Core::handle_deadline`],
//! [`Core::handle_drain`] and [`Core::unstarted`]. The fit rule and the held work live
//! in `horizon.rs`.

use std::collections::{BTreeMap, BTreeSet};

use super::{Core, slot};
use crate::ids::{JobId, Time};
use crate::output::UnstartedSummary;
use crate::queue::{FreshRange, ReturnedTask};

impl Core {
    /// From now on an attempt starts only if it can finish by `deadline`: a task whose
    /// job has a time limit `L` is dispatched only while `now + L <= deadline`, a task
    /// without one only while `now < deadline`. `now` is the latest time the core has
    /// seen, so the driver passes the allocation's end minus a safety margin that covers
    /// the delay from dispatch to start on the node.
    ///
    /// Work that no longer fits is *held*: it stays queued (counted in
    /// [`Counts::beyond_deadline`](crate::Counts::beyond_deadline), listed by
    /// [`Core::unstarted`]), is neither failed nor dispatched, and does not stand in
    /// front of work that still fits, whatever its priority. Since time only moves
    /// forward, a held job never fits again under the same deadline (unless
    /// [`Core::handle_update_time_limit`] shortens its limit), so skipping it cannot
    /// starve anything. Its replays and released retries are held too; results,
    /// node losses and cancellation work as before.
    ///
    /// `None` (or a later deadline) puts held work back in the queue: fresh work at its
    /// submission place, returned tasks behind the return lane of their priority, job
    /// by job. Calling it again replaces the deadline. O(jobs + queue entries).
    pub fn handle_deadline(&mut self, deadline: Option<Time>, now: Time) {
        self.observe(now);
        let held = self.horizon.reset(deadline);
        let mut levels: BTreeMap<i32, (Vec<FreshRange>, Vec<ReturnedTask>)> = BTreeMap::new();
        for (job, entries) in held {
            let priority = self.jobs[slot(job)].spec.priority;
            let (fresh, returned) = levels.entry(priority).or_default();
            fresh.extend(entries.fresh);
            returned.extend(entries.returned);
        }
        for (priority, (fresh, returned)) in levels {
            let jobs: Vec<JobId> = fresh
                .iter()
                .map(|range| range.job)
                .chain(returned.iter().map(|task| task.job))
                .collect();
            self.queue.restore(priority, fresh, returned);
            for job in jobs {
                self.wake_pinned(job);
            }
        }
        if deadline.is_none() {
            return;
        }
        let mut unfit = Vec::new();
        for (position, record) in self.jobs.live() {
            if record.counts.is_finished() || record.counts.cancel_requested {
                continue; // nothing of it will be queued again
            }
            let job = JobId(position as u32 + 1);
            if !self.horizon.track(job, record.spec.time_limit, self.now) {
                unfit.push(job);
            }
        }
        self.hold_jobs(unfit);
    }

    /// Stops all dispatch for good: [`Core::poll_dispatch`] returns `None` from now on.
    /// Everything else goes on (results are accepted, lost attempts and failures are
    /// queued again, cancellations finish tasks), so the driver can wait for the work
    /// in flight, then list what did not run with [`Core::unstarted`]. Idempotent.
    pub fn handle_drain(&mut self, now: Time) {
        self.observe(now);
        self.draining = true;
    }

    /// The deadline set by [`Core::handle_deadline`], if any.
    pub fn deadline(&self) -> Option<Time> {
        self.horizon.deadline()
    }

    /// Whether [`Core::handle_drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// What has not run: per job (in id order, jobs with none left out) the tasks that
    /// are queued (never dispatched, or queued again after an attempt, held or not) or
    /// waiting for a retry. O(jobs); a queued array is counted, not expanded.
    pub fn unstarted(&self) -> UnstartedSummary {
        let mut summary = UnstartedSummary::default();
        for (position, record) in self.jobs.live() {
            let tasks = u64::from(record.counts.queued) + u64::from(record.counts.delayed);
            if tasks > 0 {
                summary.tasks += tasks;
                summary.jobs.push((JobId(position as u32 + 1), tasks));
            }
        }
        summary
    }

    /// Holds `jobs` (they no longer fit the deadline): marks them and moves their queue
    /// entries into the horizon, one pass per priority level.
    pub(super) fn hold_jobs(&mut self, jobs: Vec<JobId>) {
        let mut levels: BTreeMap<i32, BTreeSet<JobId>> = BTreeMap::new();
        for job in jobs {
            self.horizon.hold(job);
            let priority = self.jobs[slot(job)].spec.priority;
            levels.entry(priority).or_default().insert(job);
        }
        for (priority, jobs) in levels {
            let (fresh, returned) = self.queue.remove_jobs(priority, |job| jobs.contains(&job));
            for range in fresh {
                self.horizon.push_fresh(&mut self.queue, priority, range);
            }
            for task in returned {
                self.horizon.push_returned(&mut self.queue, priority, task);
            }
        }
    }
}
