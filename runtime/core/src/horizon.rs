//! The end of the allocation: which jobs may still start an attempt.
//!
//! With a deadline `D` set, an attempt of a job whose time limit is `L` may start at
//! `now` only if `now + L <= D`; an attempt of a job without a limit only while
//! `now < D` (as if its limit were one microsecond). Every job therefore has a *last
//! start*, `D - L` (or `D - 1`), and since time only moves forward, a job that stops
//! fitting never fits again under the same deadline. That makes the rule cheap to
//! enforce: a job that still fits has one entry (last start, job) in `boundaries`; when
//! the clock passes it, the job is *held*: its ready-queue entries move here, and
//! whatever of it comes back later (replays, released retries) comes here too. The
//! ready queue thus only ever holds work that fits, dispatch needs no extra test, and a
//! held job can never stand in front of work that fits. A new deadline (or none) puts
//! every held entry back in the queue and decides again; so does a new time limit for
//! its job ([`Horizon::relimit`]), the one way a held job may fit again.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{JobId, Time};
use crate::queue::{FreshRange, QueuedTask, ReadyQueue, ReturnedTask};
use crate::ranges::Ranges;

/// The last instant an attempt with `time_limit` may start to finish by `deadline`,
/// `None` if it cannot start at all. No limit counts as one microsecond, so such a
/// task may start while `now < deadline`.
pub(crate) fn last_start(deadline: Time, time_limit: Option<u64>) -> Option<Time> {
    deadline
        .as_micros()
        .checked_sub(time_limit.unwrap_or(1))
        .map(Time)
}

/// The queue entries of one held job, in the order they left the queue.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Its never-dispatched tasks, if any.
    pub(crate) fresh: Ranges,
    /// Its tasks queued again after an attempt.
    pub(crate) returned: Vec<ReturnedTask>,
}

impl Held {
    pub(crate) fn tasks(&self) -> u64 {
        self.returned.len() as u64 + self.fresh.tasks()
    }

    /// Takes one of its tasks out; false if it does not hold it.
    pub(crate) fn take_task(&mut self, task: QueuedTask) -> bool {
        match task {
            QueuedTask::Returned(task) => {
                let at = self.returned.iter().position(|entry| entry.task == task);
                at.map(|at| self.returned.remove(at)).is_some()
            }
            QueuedTask::Fresh(index) => self.fresh.take_index(index),
        }
    }
}

/// What a new time limit did to a job's place under the deadline.
#[derive(Debug)]
pub(crate) enum Refit {
    /// It fits as before, or is held as before.
    Same,
    /// It no longer fits: the caller holds it.
    Unfit,
    /// It was held and fits now: these entries go back to the queue.
    Fits(Held),
}

/// The deadline and what it holds back. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Horizon {
    deadline: Option<Time>,
    /// (last start, job) of every tracked job that still fits. Finished jobs leave.
    boundaries: BTreeSet<(Time, JobId)>,
    /// Jobs that no longer fit, with the queue entries they would have. A job is held
    /// exactly when it has an entry here, possibly an empty one (all its tasks were
    /// in flight when it stopped fitting).
    held: BTreeMap<JobId, Held>,
    held_tasks: u64,
}

impl Horizon {
    pub(crate) fn deadline(&self) -> Option<Time> {
        self.deadline
    }

    /// Queued tasks held back because their job no longer fits.
    pub(crate) fn held_tasks(&self) -> u64 {
        self.held_tasks
    }

    pub(crate) fn is_held(&self, job: JobId) -> bool {
        self.held.contains_key(&job)
    }

    /// Sets a new deadline: forgets every boundary and hands back every held entry (the
    /// caller queues them again and tracks its jobs anew).
    pub(crate) fn reset(&mut self, deadline: Option<Time>) -> BTreeMap<JobId, Held> {
        self.deadline = deadline;
        self.boundaries.clear();
        self.held_tasks = 0;
        std::mem::take(&mut self.held)
    }

    /// Starts following `job`. True if it may start work at `now` (then it is tracked
    /// until its last start passes, or without a deadline not at all); false if it
    /// must be held at once.
    pub(crate) fn track(&mut self, job: JobId, time_limit: Option<u64>, now: Time) -> bool {
        let Some(deadline) = self.deadline else {
            return true;
        };
        match last_start(deadline, time_limit) {
            Some(last) if now <= last => {
                self.boundaries.insert((last, job));
                true
            }
            _ => false,
        }
    }

    /// `job`'s time limit changed from `old` to `new`: it is tracked anew at `now`.
    pub(crate) fn relimit(
        &mut self,
        job: JobId,
        old: Option<u64>,
        new: Option<u64>,
        now: Time,
    ) -> Refit {
        let Some(deadline) = self.deadline else {
            return Refit::Same;
        };
        if let Some(last) = last_start(deadline, old) {
            self.boundaries.remove(&(last, job));
        }
        let fits = self.track(job, new, now);
        match (self.held.remove(&job), fits) {
            (None, true) => Refit::Same,
            (None, false) => Refit::Unfit,
            (Some(held), false) => {
                self.held.insert(job, held);
                Refit::Same
            }
            (Some(held), true) => {
                self.held_tasks -= held.tasks();
                Refit::Fits(held)
            }
        }
    }

    /// Whether some tracked job stopped fitting before `now`.
    pub(crate) fn has_expired(&self, now: Time) -> bool {
        self.boundaries.first().is_some_and(|&(last, _)| last < now)
    }

    /// Stops tracking the jobs whose last start is before `now` and appends them to
    /// `out`; the caller holds them.
    pub(crate) fn pop_expired(&mut self, now: Time, out: &mut Vec<JobId>) {
        while let Some(&(last, job)) = self.boundaries.first() {
            if last >= now {
                break;
            }
            self.boundaries.pop_first();
            out.push(job);
        }
    }

    /// Marks `job` held (idempotent). Entries pushed for it from now on are kept here.
    pub(crate) fn hold(&mut self, job: JobId) {
        self.held.entry(job).or_default();
    }

    /// Queues a job's fresh range, or keeps it here if the job is held.
    pub(crate) fn push_fresh(&mut self, queue: &mut ReadyQueue, priority: i32, range: FreshRange) {
        match self.held.get_mut(&range.job) {
            Some(held) => {
                self.held_tasks += u64::from(range.end - range.next);
                held.fresh.insert(range);
            }
            None => queue.push_fresh(priority, range),
        }
    }

    /// Queues a returned task, or keeps it here if its job is held.
    pub(crate) fn push_returned(
        &mut self,
        queue: &mut ReadyQueue,
        priority: i32,
        task: ReturnedTask,
    ) {
        match self.held.get_mut(&task.job) {
            Some(held) => {
                self.held_tasks += 1;
                held.returned.push(task);
            }
            None => queue.push_returned(priority, task),
        }
    }

    /// Takes one queued task of held `job` out; false if it does not hold it.
    pub(crate) fn take_task(&mut self, job: JobId, task: QueuedTask) -> bool {
        let taken = self
            .held
            .get_mut(&job)
            .is_some_and(|held| held.take_task(task));
        self.held_tasks -= u64::from(taken);
        taken
    }

    /// Takes the held entries of `job` (it stays held, with none), for cancellation.
    pub(crate) fn take_held(&mut self, job: JobId) -> Option<Held> {
        let held = std::mem::take(self.held.get_mut(&job)?);
        self.held_tasks -= held.tasks();
        Some(held)
    }

    /// Forgets a finished job (it has no queued tasks left).
    pub(crate) fn forget(&mut self, job: JobId, time_limit: Option<u64>) {
        if let Some(last) = self
            .deadline
            .and_then(|deadline| last_start(deadline, time_limit))
        {
            self.boundaries.remove(&(last, job));
        }
        if let Some(held) = self.held.remove(&job) {
            debug_assert_eq!(held.tasks(), 0, "a finished job holds no tasks");
        }
    }

    /// The first instant at which a tracked job stops fitting.
    pub(crate) fn next_change(&self) -> Option<Time> {
        self.boundaries
            .first()
            .map(|&(last, _)| last.saturating_add_micros(1))
    }

    pub(crate) fn boundaries(&self) -> impl Iterator<Item = (Time, JobId)> + '_ {
        self.boundaries.iter().copied()
    }

    pub(crate) fn held(&self) -> impl Iterator<Item = (JobId, &Held)> {
        self.held.iter().map(|(job, held)| (*job, held))
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let boundaries = self.boundaries.len() * (size_of::<(Time, JobId)>() * 3 / 2 + 8);
        let held: usize = self
            .held
            .values()
            .map(|held| {
                (size_of::<JobId>() + size_of::<Held>()) * 3 / 2
                    + 8
                    + held.returned.capacity() * size_of::<ReturnedTask>()
            })
            .sum();
        boundaries + held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_start_is_deadline_minus_limit_and_one_without() {
        let deadline = Time(1_000);
        assert_eq!(last_start(deadline, Some(400)), Some(Time(600)));
        assert_eq!(last_start(deadline, Some(1_000)), Some(Time(0)));
        assert_eq!(last_start(deadline, Some(1_001)), None);
        assert_eq!(last_start(deadline, Some(0)), Some(deadline));
        assert_eq!(last_start(deadline, None), Some(Time(999)));
        assert_eq!(last_start(Time::ZERO, None), None);
    }

    #[test]
    fn tracked_jobs_expire_after_their_last_start() {
        let mut horizon = Horizon::default();
        assert!(horizon.track(JobId(1), Some(500), Time(0)), "no deadline");
        assert_eq!(horizon.next_change(), None);
        horizon.reset(Some(Time(1_000)));
        assert!(horizon.track(JobId(1), Some(500), Time(0)));
        assert!(horizon.track(JobId(2), None, Time(0)));
        assert!(!horizon.track(JobId(3), Some(2_000), Time(0)));
        assert_eq!(horizon.next_change(), Some(Time(501)));
        assert!(!horizon.has_expired(Time(500)));
        assert!(horizon.has_expired(Time(501)));
        let mut expired = Vec::new();
        horizon.pop_expired(Time(999), &mut expired);
        assert_eq!(expired, vec![JobId(1)]);
        horizon.pop_expired(Time(1_000), &mut expired);
        assert_eq!(expired, vec![JobId(1), JobId(2)]);
        assert_eq!(horizon.next_change(), None);
    }
}
