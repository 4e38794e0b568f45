//! Dependencies between jobs: a job submitted with [`Dependency`]s stays out of the
//! ready queue until every job it waits for has ended (all tasks terminal), and is
//! cancelled instead if one it needed to succeed did not. A job may also wait for a
//! time (`not_before`): the time is one more thing it waits for, released by
//! [`Core::handle_timeout`] (and [`Core::poll_timeout`] says when). An update may
//! give a job a new time ([`Core::handle_update_not_before`]), even one whose tasks are
//! queued or running already: its queued tasks then wait again, aside, and so do those
//! that come back from its attempts (retries, replays) until its time comes.
//!
//! A dependency may only name a job submitted earlier, so the graph has no cycles by
//! construction (the driver orders a batch that names later jobs, and refuses its
//! cycles). Each edge costs one entry in its dependency's list and is visited once,
//! when that job ends: releasing a job's dependents is linear in their number. Ends
//! that cascade (a failure cancels a dependent, which cancels its own) are worked off
//! a list, not by recursion, so a chain of a million jobs needs no deep stack.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{Core, PendingEvent, slot};
use crate::config::{Dependency, DependencyKind};
use crate::horizon::Held;
use crate::ids::{JobId, Time};
use crate::output::Event;
use crate::queue::{QueuedTask, ReturnedTask};

#[derive(Debug, Default)]
pub(crate) struct Dependencies {
    /// For each job that others wait for: those jobs, and how they wait.
    dependents: HashMap<JobId, Vec<(JobId, DependencyKind)>>,
    /// Jobs that wait: how many of their dependencies have not ended, and the queue
    /// entries they get once all have.
    waiting: BTreeMap<JobId, Waiting>,
    /// Queued tasks of waiting jobs.
    waiting_tasks: u64,
    /// Ended jobs whose dependents are still to be told.
    ended: Vec<JobId>,
    /// The list above is being worked off (an end that happens meanwhile joins it).
    releasing: bool,
    /// (not before, job) of waiting jobs whose time has not come, and by job.
    timers: BTreeSet<(Time, JobId)>,
    timed: HashMap<JobId, Time>,
    /// Jobs their driver holds (`hold.rs`): one more thing each waits for.
    held: HashSet<JobId>,
}

#[derive(Debug)]
struct Waiting {
    remaining: u32,
    entries: Held,
}

impl Dependencies {
    pub(crate) fn waiting_tasks(&self) -> u64 {
        self.waiting_tasks
    }

    pub(crate) fn is_waiting(&self, job: JobId) -> bool {
        self.waiting.contains_key(&job)
    }

    /// When the next waiting job's time comes.
    pub(crate) fn next_timer(&self) -> Option<Time> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// Takes a waiting job's queue entries (it is cancelled, or released).
    pub(crate) fn take(&mut self, job: JobId) -> Option<Held> {
        let waiting = self.waiting.remove(&job)?;
        self.waiting_tasks -= waiting.entries.tasks();
        // A cancelled job's time, or its hold, no longer matters.
        if let Some(at) = self.timed.remove(&job) {
            self.timers.remove(&(at, job));
        }
        self.held.remove(&job);
        Some(waiting.entries)
    }

    /// Whether `job` waits for other jobs (not only for its time or its driver).
    pub(crate) fn waits_for_jobs(&self, job: JobId) -> bool {
        let other = u32::from(self.timed.contains_key(&job)) + u32::from(self.held.contains(&job));
        self.waiting
            .get(&job)
            .is_some_and(|waiting| waiting.remaining > other)
    }

    /// Whether its driver holds `job`.
    pub(crate) fn is_held(&self, job: JobId) -> bool {
        self.held.contains(&job)
    }

    /// Marks `job` held; false if it was.
    pub(crate) fn hold(&mut self, job: JobId) -> bool {
        self.held.insert(job)
    }

    /// Unmarks `job` held; false if it was not.
    pub(crate) fn unhold(&mut self, job: JobId) -> bool {
        self.held.remove(&job)
    }

    /// Takes one queued task of waiting `job` out; false if it does not keep it.
    pub(crate) fn take_task(&mut self, job: JobId, task: QueuedTask) -> bool {
        let taken = self
            .waiting
            .get_mut(&job)
            .is_some_and(|waiting| waiting.entries.take_task(task));
        self.waiting_tasks -= u64::from(taken);
        taken
    }

    /// The entries every waiting job keeps aside, in job order (for the audit).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (JobId, &Held)> {
        self.waiting
            .iter()
            .map(|(job, waiting)| (*job, &waiting.entries))
    }

    /// Queued tasks a waiting job keeps aside, `None` if it does not wait.
    pub(crate) fn waiting_tasks_of(&self, job: JobId) -> Option<u64> {
        self.waiting
            .get(&job)
            .map(|waiting| waiting.entries.tasks())
    }

    /// Every waiting job waits for as many jobs as name it as a dependent, and its
    /// entries add up to the waiting tasks.
    pub(crate) fn audit(&self) -> Result<(), String> {
        let mut named: HashMap<JobId, u32> = HashMap::new();
        for (_, job) in &self.timers {
            *named.entry(*job).or_default() += 1;
        }
        for job in &self.held {
            *named.entry(*job).or_default() += 1;
        }
        for dependents in self.dependents.values() {
            for (dependent, _) in dependents {
                *named.entry(*dependent).or_default() += 1;
            }
        }
        let mut tasks = 0;
        for (job, waiting) in &self.waiting {
            let edges = named.get(job).copied().unwrap_or(0);
            if waiting.remaining == 0 || edges != waiting.remaining {
                return Err(format!(
                    "job {job} waits for {} jobs, {edges} name it",
                    waiting.remaining
                ));
            }
            tasks += waiting.entries.tasks();
        }
        if tasks != self.waiting_tasks {
            return Err(format!(
                "waiting entries hold {tasks} tasks, {} counted",
                self.waiting_tasks
            ));
        }
        Ok(())
    }
}

/// What a new job's dependencies allow.
pub(crate) enum Gate {
    /// Every dependency has ended as needed: queue it.
    Open,
    /// Some have not ended: it waits for this many.
    Wait(u32),
    /// This one ended without the success it needed: cancel the job.
    Failed(JobId),
}

impl Core {
    /// Whether `after` only names jobs submitted before job `job`.
    pub(super) fn check_dependencies(
        job: JobId,
        after: &[Dependency],
    ) -> Result<(), crate::SubmitError> {
        match after.iter().find(|d| d.job.0 == 0 || d.job >= job) {
            Some(bad) => Err(crate::SubmitError::UnknownDependency { job: bad.job }),
            None => Ok(()),
        }
    }

    /// Registers `job`'s dependencies and its time; what they allow now.
    pub(super) fn gate_at(
        &mut self,
        job: JobId,
        after: &[Dependency],
        not_before: Option<Time>,
    ) -> Gate {
        let gate = self.gate(job, after);
        let Some(at) = not_before.filter(|at| *at > self.now) else {
            return gate;
        };
        match gate {
            Gate::Failed(dependency) => Gate::Failed(dependency),
            Gate::Open => {
                self.deps.timers.insert((at, job));
                self.deps.timed.insert(job, at);
                Gate::Wait(1)
            }
            Gate::Wait(remaining) => {
                self.deps.timers.insert((at, job));
                self.deps.timed.insert(job, at);
                Gate::Wait(remaining + 1)
            }
        }
    }

    /// Releases the waiting jobs whose time has come (those that waited for nothing
    /// else go to the queue).
    pub(super) fn release_due(&mut self) {
        while let Some(&(at, job)) = self.deps.timers.first() {
            if at > self.now {
                break;
            }
            self.deps.timers.pop_first();
            self.deps.timed.remove(&job);
            let Some(waiting) = self.deps.waiting.get_mut(&job) else {
                continue;
            };
            waiting.remaining -= 1;
            if waiting.remaining == 0 {
                self.release(job);
            }
        }
    }

    /// The time `job` waits for, if it waits for one that has not come.
    pub(super) fn waits_until(&self, job: JobId) -> Option<Time> {
        self.deps.timed.get(&job).copied()
    }

    /// `job` (not ended) waits until `at` from now on instead of the time it waited
    /// for, if any; `None` or a time not after now: for no time. A job that waits for
    /// nothing else is released at once; a queued or running job given a time ahead
    /// takes its queue entries (out of the queue, or the horizon's) aside until then.
    /// True in that last case: its attempts not started yet should be asked back.
    pub(super) fn retime(&mut self, job: JobId, at: Option<Time>) -> bool {
        let at = at.filter(|at| *at > self.now);
        let had = self.deps.timed.remove(&job);
        if let Some(old) = had {
            self.deps.timers.remove(&(old, job));
        }
        if let Some(at) = at {
            self.deps.timers.insert((at, job));
            self.deps.timed.insert(job, at);
        }
        match (had, at) {
            (Some(_), Some(_)) | (None, None) => false,
            (Some(_), None) => {
                self.wait_for_one_less(job);
                false
            }
            (None, Some(_)) => self.wait_for_one_more(job),
        }
    }

    /// `job` (not ended) waits for one thing more. One that waited for nothing takes
    /// its queue entries (out of the queue, or the horizon's) aside: true then, and its
    /// attempts not started yet should be asked back.
    pub(super) fn wait_for_one_more(&mut self, job: JobId) -> bool {
        if let Some(waiting) = self.deps.waiting.get_mut(&job) {
            waiting.remaining += 1;
            return false;
        }
        let entries = match self.horizon.take_held(job) {
            Some(held) => held,
            None => {
                let priority = self.jobs[slot(job)].spec.priority;
                let (fresh, returned) = self.queue.remove_job(job, priority);
                Held { fresh, returned }
            }
        };
        self.wait(job, 1, entries);
        true
    }

    /// `job` waits for one thing less: it is queued if that was the last. (A job that
    /// ended meanwhile waits for nothing.)
    pub(super) fn wait_for_one_less(&mut self, job: JobId) {
        if let Some(waiting) = self.deps.waiting.get_mut(&job) {
            waiting.remaining -= 1;
            if waiting.remaining == 0 {
                self.release(job);
            }
        }
    }

    /// Queues `task`, back after an attempt (a retry, a replay, one given back): aside
    /// with its job's entries while the job waits (it was given a later time while it
    /// ran), else in the ready queue through the horizon.
    pub(super) fn requeue(&mut self, task: ReturnedTask) {
        if let Some(waiting) = self.deps.waiting.get_mut(&task.job) {
            waiting.entries.returned.push(task);
            self.deps.waiting_tasks += 1;
            return;
        }
        let priority = self.jobs[slot(task.job)].spec.priority;
        self.horizon.push_returned(&mut self.queue, priority, task);
        self.wake_pinned(task.job);
    }

    /// Registers `job`'s dependencies; what they allow now.
    pub(super) fn gate(&mut self, job: JobId, after: &[Dependency]) -> Gate {
        let mut after = after.to_vec();
        after.sort_unstable();
        after.dedup();
        let mut waits = Vec::new();
        for dependency in after {
            // A dependency may have finished long ago: its counts are all that is kept.
            let other = self.jobs.counts(slot(dependency.job)).unwrap_or_default();
            if !other.is_finished() {
                waits.push(dependency);
            } else if dependency.kind == DependencyKind::Success && other.succeeded != other.count {
                return Gate::Failed(dependency.job);
            }
        }
        if waits.is_empty() {
            return Gate::Open;
        }
        let remaining = waits.len() as u32;
        for dependency in waits {
            self.deps
                .dependents
                .entry(dependency.job)
                .or_default()
                .push((job, dependency.kind));
        }
        Gate::Wait(remaining)
    }

    /// `job` waits for `remaining` jobs; `entries` are queued once they have ended.
    fn wait(&mut self, job: JobId, remaining: u32, entries: Held) {
        self.deps.waiting_tasks += entries.tasks();
        self.deps
            .waiting
            .insert(job, Waiting { remaining, entries });
    }

    /// `job` cannot run: `dependency` did not succeed. It is cancelled with its
    /// dependents in turn.
    pub(super) fn fail_dependent(&mut self, job: JobId, dependency: JobId) {
        self.events
            .push_back(PendingEvent::Ready(Event::DependencyFailed {
                job,
                dependency,
            }));
        // A job that exists cannot fail to cancel.
        let _ = self.handle_cancel_job(job, self.now);
    }

    /// Every task of `job` is terminal: its dependents may go on, or must be cancelled.
    pub(super) fn job_ended(&mut self, job: JobId) {
        self.deps.ended.push(job);
        if self.deps.releasing {
            return;
        }
        self.deps.releasing = true;
        while let Some(ended) = self.deps.ended.pop() {
            let Some(dependents) = self.deps.dependents.remove(&ended) else {
                continue;
            };
            let counts = self.jobs.counts(slot(ended)).unwrap_or_default();
            let succeeded = counts.succeeded == counts.count;
            for (dependent, kind) in dependents {
                let Some(waiting) = self.deps.waiting.get_mut(&dependent) else {
                    // Cancelled meanwhile, or failed by another dependency.
                    continue;
                };
                if kind == DependencyKind::Success && !succeeded {
                    self.fail_dependent(dependent, ended);
                    continue;
                }
                waiting.remaining -= 1;
                if waiting.remaining == 0 {
                    self.release(dependent);
                }
            }
        }
        self.deps.releasing = false;
    }

    /// Queues a job whose dependencies have all ended.
    fn release(&mut self, job: JobId) {
        if let Some(entries) = self.deps.take(job) {
            self.enqueue(job, entries);
        }
    }

    /// A new or restored job's queue entries, as its gate says: queued, set aside to
    /// wait, or (a dependency failed) set aside and cancelled.
    pub(super) fn admit(&mut self, job: JobId, gate: Gate, entries: Held) {
        match gate {
            Gate::Open => self.enqueue(job, entries),
            Gate::Wait(remaining) => {
                self.list_gang(job);
                self.wait(job, remaining, entries);
            }
            Gate::Failed(dependency) => {
                self.list_gang(job);
                self.wait(job, 1, entries);
                self.fail_dependent(job, dependency);
            }
        }
    }

    /// Puts a job's entries in the ready queue (through the horizon, which holds them
    /// if the job no longer fits the deadline).
    pub(super) fn enqueue(&mut self, job: JobId, entries: Held) {
        let spec = self.jobs[slot(job)].spec;
        self.note_gang(job, spec.priority, self.shapes.placement(spec.shape));
        for range in entries.fresh {
            self.horizon
                .push_fresh(&mut self.queue, spec.priority, range);
        }
        for returned in entries.returned {
            self.horizon
                .push_returned(&mut self.queue, spec.priority, returned);
        }
        self.wake_pinned(job);
    }
}
