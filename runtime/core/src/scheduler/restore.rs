//! Rebuilding jobs from a journal after the root restarted ([`Core::handle_restore_job`]).

use super::deps::Gate;
use super::inputs::check_spec;
use super::{Core, slot};
use crate::config::{Dependency, JobSpec};
use crate::error::{RestoreError, SubmitError};
use crate::horizon::Held;
use crate::ids::{JobId, TaskId, Time};
use crate::output::{EarlierAttempts, SubmittedJob, TerminalState};
use crate::queue::{FreshRange, ReturnedTask};
use crate::stored::StoredSpec;
use crate::task::{Bucket, JobRecord, Phase, TaskRecord};

impl Core {
    /// Re-creates a job that a previous root accepted, with the tasks at `finished`
    /// offsets already terminal. Call it for every journaled job in journal order, on a
    /// core that has seen nothing else yet, so each job gets the same ids as before.
    ///
    /// No events are produced for the restored terminal tasks (their results are in
    /// the journal already); the rest are queued as if never dispatched. Because
    /// dispatch is FIFO within a job, unfinished tasks below the highest finished index
    /// are few (what was in flight or waiting for a retry when the old root stopped):
    /// they are queued one by one ahead of fresh work, as replays are, and everything
    /// after the highest finished index stays one range, so a mostly-unstarted array
    /// still costs nothing per task. Attempts that agents still run are adopted
    /// afterwards ([`Core::handle_adopt`]), on a core of a later term.
    ///
    /// `earlier` gives, by offset, the attempts of tasks that ended without counting
    /// before the old root stopped: an unfinished task keeps them against its
    /// `max_retries` and replay bound (a resume must not hand out a fresh budget), and
    /// all of them are added to [`Counts`](crate::Counts)' `retries` and `replays`.
    ///
    /// Errors: the spec breaks a submission rule ([`Core::handle_submit`]; a gang
    /// included), or `finished`/`earlier` name an index twice or outside the job. They
    /// leave the core unchanged.
    pub fn handle_restore_job(
        &mut self,
        spec: JobSpec,
        finished: &[(u32, TerminalState)],
        earlier: &[(u32, EarlierAttempts)],
        now: Time,
    ) -> Result<SubmittedJob, RestoreError> {
        self.handle_restore_job_after(spec, &[], finished, earlier, now)
    }

    /// [`Core::handle_restore_job`] for a job submitted with dependencies: an
    /// unfinished job waits again for those that have not ended (restored before it,
    /// in journal order), or is cancelled if one it needed to succeed did not.
    pub fn handle_restore_job_after(
        &mut self,
        spec: JobSpec,
        after: &[Dependency],
        finished: &[(u32, TerminalState)],
        earlier: &[(u32, EarlierAttempts)],
        now: Time,
    ) -> Result<SubmittedJob, RestoreError> {
        self.handle_restore_job_at(spec, after, None, finished, earlier, now)
    }

    /// [`Core::handle_restore_job_after`] for a job that also waits until `not_before`
    /// (on this core's clock: the driver converts the journaled wall-clock time).
    pub fn handle_restore_job_at(
        &mut self,
        spec: JobSpec,
        after: &[Dependency],
        not_before: Option<Time>,
        finished: &[(u32, TerminalState)],
        earlier: &[(u32, EarlierAttempts)],
        now: Time,
    ) -> Result<SubmittedJob, RestoreError> {
        self.observe(now);
        check_spec(&spec).map_err(RestoreError::Submit)?;
        let sorted = by_index(finished, spec.count)?;
        let earlier = by_index(earlier, spec.count)?;
        let job = u32::try_from(self.jobs.len() + 1)
            .map(JobId)
            .map_err(|_| RestoreError::Submit(SubmitError::JobIdsExhausted))?;
        Self::check_dependencies(job, after).map_err(RestoreError::Submit)?;
        let first_task = TaskId(self.next_task);
        self.next_task =
            self.next_task
                .checked_add(u64::from(spec.count))
                .ok_or(RestoreError::Submit(SubmitError::TaskIdsExhausted {
                    count: spec.count,
                }))?;

        let max_replays = spec.max_replays.unwrap_or(self.config.default_max_replays);
        let stored = StoredSpec::new(&spec, self.shapes.intern(&spec));
        self.jobs
            .push(JobRecord::new(stored, max_replays, first_task));
        self.counts.submitted += u64::from(spec.count);
        self.counts.queued += u64::from(spec.count);
        self.work.add(&stored, spec.count);
        let record = &mut self.jobs[slot(job)];
        for &(index, state) in &sorted {
            record.mark_finished(index);
            record.shift(
                &mut self.counts,
                &mut self.work,
                Bucket::Queued,
                Bucket::from(state),
                1,
            );
        }
        if !self.horizon.track(job, spec.time_limit, self.now) {
            self.horizon.hold(job);
        }
        for (_, before) in &earlier {
            self.counts.retries += u64::from(before.failures);
            self.counts.replays += u64::from(before.replays);
        }
        // Unfinished tasks below the highest finished or attempted one go back one by
        // one, carrying what their earlier attempts used up.
        let tail = sorted
            .last()
            .map(|&(index, _)| index)
            .max(earlier.last().map(|&(index, _)| index))
            .map_or(0, |index| index + 1);
        let mut done = sorted.iter().map(|&(index, _)| index).peekable();
        let mut before = earlier.iter().peekable();
        let mut entries = Held::default();
        for index in 0..tail {
            let used = match before.peek() {
                Some(&&(at, used)) if at == index => {
                    before.next();
                    used
                }
                _ => EarlierAttempts::default(),
            };
            if done.peek() == Some(&index) {
                done.next();
                continue;
            }
            let task = TaskId(first_task.0 + u64::from(index));
            self.tasks.insert(
                task,
                TaskRecord {
                    job,
                    index,
                    attempts: used.failures + used.replays,
                    failures: used.failures,
                    replays: used.replays,
                    phase: Phase::Queued,
                },
            );
            entries.returned.push(ReturnedTask { task, job });
        }
        if tail < spec.count {
            entries.fresh.insert(FreshRange {
                job,
                next: tail,
                end: spec.count,
            });
        }
        let gate = if self.jobs[slot(job)].counts.is_finished() {
            Gate::Open
        } else {
            self.gate_at(job, after, not_before)
        };
        self.admit(job, gate, entries);
        self.finish_job_if_done(job);
        Ok(SubmittedJob {
            job,
            first_task,
            count: spec.count,
        })
    }
}

/// `entries` sorted by task index, each index at most once and inside a job of `count`.
fn by_index<T: Copy>(entries: &[(u32, T)], count: u32) -> Result<Vec<(u32, T)>, RestoreError> {
    let mut sorted = entries.to_vec();
    sorted.sort_unstable_by_key(|&(index, _)| index);
    if let Some(pair) = sorted.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(RestoreError::DuplicateIndex { index: pair[0].0 });
    }
    match sorted.last() {
        Some(&(index, _)) if index >= count => Err(RestoreError::IndexOutOfRange { index, count }),
        _ => Ok(sorted),
    }
}
