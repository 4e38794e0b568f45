//! Periodic jobs (`every`, with `until` and `count`): each occurrence is a job of its
//! own, with its own result, submitted with `not_before` set to its time, so it waits
//! in the core like any job waiting for its time and starts as close to it as slots
//! allow (priority breaks ties between jobs due together).
//!
//! The next occurrence is submitted once the pending one has started (or ended): with
//! a free slot that is at the pending one's time, one period ahead of the next.
//! Missed occurrences (the root was down, or slots stayed busy past a period): the
//! pending occurrence runs once, late, when a slot takes it; the occurrences whose
//! times passed before it started are skipped, never stacked up behind it, and the
//! schedule goes on with the first of its times (first + k × every) still ahead.
//! Cancelling the pending occurrence before its time ends the schedule; cancelling it
//! once its time has passed (it waits for a slot) skips it. The root checks its
//! schedules after every message it handles (`RootState::drain`), so a start is
//! seen in the turn that reports it; that costs nothing without periodic jobs.
//!
//! A schedule is journaled as its first occurrence's submission (which carries
//! `every`) and one `occurrence` record per later occurrence, so a resumed root knows
//! the occurrence that was pending.

use std::collections::{BTreeMap, HashMap};

use saker_core::JobId;

use super::ctx::Ctx;
use crate::records::Record;
use saker_client::results::Timestamp;
use saker_client::spec::JobRequest;

/// What the journal holds of the schedules: each one's first occurrence as
/// submitted, and its latest occurrence.
#[derive(Debug, Default)]
pub(super) struct Journaled {
    /// (first job, its request, when submitted), in journal order.
    first: Vec<(JobId, JobRequest, u64)>,
    /// The latest occurrence of each periodic job (number, job), by its first job.
    occurrences: HashMap<JobId, (u32, JobId)>,
}

impl Journaled {
    /// A submission: the first occurrence of a schedule if it repeats.
    pub(super) fn look(&mut self, record: &Record) {
        if let Record::Submit {
            job,
            request,
            submitted_unix_us,
            ..
        } = record
            && request.spec.every.is_some()
        {
            self.first
                .push((*job, (**request).clone(), *submitted_unix_us));
        }
    }

    /// Keeps an occurrence (nothing else is the schedules' own).
    pub(super) fn gather(&mut self, record: Record) {
        if let Record::Occurrence {
            schedule,
            job,
            occurrence,
        } = record
        {
            self.occurrences.insert(schedule, (occurrence, job));
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Schedules {
    /// By the schedule's first job (its id is the schedule's).
    table: BTreeMap<JobId, Schedule>,
}

#[derive(Debug)]
struct Schedule {
    /// An occurrence's request, less its time and the period.
    template: JobRequest,
    first_unix_us: u64,
    every_us: u64,
    until_unix_us: Option<u64>,
    count: Option<u32>,
    /// The occurrence submitted and waiting for its time (or running): its number
    /// from 0, and its job.
    pending: (u32, JobId),
}

impl Schedule {
    fn time_of(&self, occurrence: u32) -> u64 {
        self.first_unix_us
            .saturating_add(self.every_us.saturating_mul(u64::from(occurrence)))
    }

    fn allows(&self, occurrence: u32) -> bool {
        self.count.is_none_or(|count| occurrence < count)
            && self
                .until_unix_us
                .is_none_or(|until| self.time_of(occurrence) <= until)
    }
}

impl Schedules {
    /// Periodic jobs going on.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }
}

impl Schedules {
    /// `job` was submitted as the first occurrence of the periodic `request`.
    pub(super) fn start_schedule(&mut self, job: JobId, request: &JobRequest, submitted_us: u64) {
        let Some(every) = request.spec.every else {
            return;
        };
        let mut template = request.clone();
        template.spec.every = None;
        template.spec.until = None;
        template.spec.count = None;
        template.spec.not_before = None;
        let schedule = Schedule {
            template,
            first_unix_us: request
                .spec
                .not_before
                .map_or(submitted_us, Timestamp::unix_micros),
            every_us: u64::try_from(every.as_micros()).unwrap_or(u64::MAX),
            until_unix_us: request.spec.until.map(Timestamp::unix_micros),
            count: request.spec.count,
            pending: (0, job),
        };
        self.table.insert(job, schedule);
    }

    /// A resumed root's schedules: each goes on from its first occurrence as
    /// submitted (an update changed that occurrence only) and its last one
    /// journaled, which is pending.
    pub(super) fn resume(&mut self, journaled: Journaled) {
        for (job, request, submitted_us) in journaled.first {
            self.start_schedule(job, &request, submitted_us);
            let pending = journaled.occurrences.get(&job);
            if let (Some(schedule), Some(&pending)) = (self.table.get_mut(&job), pending) {
                schedule.pending = pending;
            }
        }
    }

    /// The next occurrence of every schedule whose pending one has started or ended,
    /// for the router to submit; ends the schedules whose pending one was cancelled
    /// before its time, and those that made their last occurrence.
    pub(super) fn poll(&mut self, ctx: &Ctx) -> Vec<Due> {
        if self.table.is_empty() {
            return Vec::new();
        }
        let now = ctx.timestamp().unix_micros();
        let mut due = Vec::new();
        let mut cancelled = Vec::new();
        for (id, schedule) in &self.table {
            let (occurrence, job) = schedule.pending;
            let Some(counts) = ctx.core.job_counts(job) else {
                continue;
            };
            if counts.cancel_requested && schedule.time_of(occurrence) > now {
                cancelled.push(*id);
            } else if counts.running + counts.terminal() > 0 || counts.cancel_requested {
                due.push(*id);
            }
        }
        for id in cancelled {
            tracing::info!(schedule = %id, "a periodic job's pending occurrence was cancelled");
            self.table.remove(&id);
        }
        let mut next_ones = Vec::with_capacity(due.len());
        for id in due {
            let Some(schedule) = self.table.get(&id) else {
                continue;
            };
            // The next occurrence still ahead: those missed while the pending one
            // waited are skipped.
            let mut next = schedule.pending.0 + 1;
            while schedule.time_of(next) <= now && schedule.allows(next) {
                next += 1;
            }
            if !schedule.allows(next) {
                tracing::info!(schedule = %id, "a periodic job made its last occurrence");
                self.table.remove(&id);
                continue;
            }
            let mut request = schedule.template.clone();
            request.spec.not_before = Some(Timestamp::from_unix_micros(schedule.time_of(next)));
            next_ones.push(Due {
                schedule: id,
                occurrence: next,
                request,
            });
        }
        next_ones
    }

    /// `due` was submitted as `job` at `submitted_us`: it is the pending occurrence
    /// now. Its records, for the journal.
    pub(super) fn occurred(
        &mut self,
        due: Due,
        job: saker_core::SubmittedJob,
        submitted_us: u64,
    ) -> Vec<Record> {
        if let Some(schedule) = self.table.get_mut(&due.schedule) {
            schedule.pending = (due.occurrence, job.job);
        }
        vec![
            Record::Submit {
                job: job.job,
                first_task: job.first_task,
                count: job.count,
                submitted_unix_us: submitted_us,
                request: Box::new(due.request),
            },
            Record::Occurrence {
                schedule: due.schedule,
                job: job.job,
                occurrence: due.occurrence,
            },
        ]
    }

    /// A schedule cannot go on (its next occurrence was refused).
    pub(super) fn end(&mut self, schedule: JobId, problem: &dyn std::error::Error) {
        tracing::error!(problem = %saker_actors::error_chain(problem), %schedule, "a periodic job cannot go on");
        self.table.remove(&schedule);
    }
}

/// A schedule's next occurrence, to submit.
#[derive(Debug)]
pub(super) struct Due {
    pub schedule: JobId,
    pub occurrence: u32,
    pub request: JobRequest,
}

#[cfg(test)]
mod tests;
