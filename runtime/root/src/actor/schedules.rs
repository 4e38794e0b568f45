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
//! schedules after every message it handles ([`RootState::drain`]), so a start is
//! seen in the turn that reports it; that costs nothing without periodic jobs.
//!
//! A schedule is journaled as its first occurrence's submission (which carries
//! `every`) and one `occurrence` record per later occurrence, so a resumed root knows
//! the occurrence that was pending.

use std::collections::BTreeMap;

use saker_core::JobId;

use super::ctx::Ctx;
use super::items::ItemTable;
use super::journal::AfterJournal;
use super::submissions::Submissions;
use crate::records::Record;
use crate::results::Timestamp;
use crate::spec::JobRequest;

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

    /// A restored root's schedule: `job` was its first occurrence, `pending` the last
    /// one journaled.
    pub(super) fn restore_schedule(
        &mut self,
        job: JobId,
        request: &JobRequest,
        submitted_us: u64,
        pending: Option<(u32, JobId)>,
    ) {
        self.start_schedule(job, request, submitted_us);
        if let (Some(schedule), Some(pending)) = (self.table.get_mut(&job), pending) {
            schedule.pending = pending;
        }
    }

    /// Submits the next occurrence of every schedule whose pending one has started or
    /// ended; ends those whose pending one was cancelled before its time.
    pub(super) fn poll_schedules(
        &mut self,
        ctx: &mut Ctx,
        submissions: &mut Submissions,
        items: &mut ItemTable,
    ) {
        if self.table.is_empty() {
            return;
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
            let at = schedule.time_of(next);
            let mut request = schedule.template.clone();
            request.spec.not_before = Some(Timestamp::from_unix_micros(at));
            let spec = match submissions.core_spec(ctx, &request) {
                Ok(spec) => spec,
                Err(problem) => {
                    tracing::error!(%problem, schedule = %id, "a periodic job cannot go on");
                    self.table.remove(&id);
                    continue;
                }
            };
            let submitted_us = ctx.timestamp().unix_micros();
            let registered = submissions.register(ctx, &request, spec, &[], submitted_us);
            let job = match registered {
                Ok(job) => job,
                Err(problem) => {
                    tracing::error!(%problem, schedule = %id, "a periodic job cannot go on");
                    self.table.remove(&id);
                    continue;
                }
            };
            items.note_reads(ctx, job.job, &request.spec.reads);
            if let Some(schedule) = self.table.get_mut(&id) {
                schedule.pending = (next, job.job);
            }
            let records = vec![
                Record::Submit {
                    job: job.job,
                    first_task: job.first_task,
                    count: job.count,
                    submitted_unix_us: submitted_us,
                    request: Box::new(request),
                },
                Record::Occurrence {
                    schedule: id,
                    job: job.job,
                    occurrence: next,
                },
            ];
            ctx.append(records, AfterJournal::Nothing);
        }
    }
}
