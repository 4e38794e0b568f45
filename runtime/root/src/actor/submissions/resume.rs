//! Submissions resumed from a previous root's journal: every job queued again through
//! [`Submissions::register`] with the id it had, its tasks that ended marked so, the
//! others carrying what their earlier attempts used up; updates folded in first;
//! cancelled jobs cancelled again, which finishes their tasks that never started.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use saker_core::{EarlierAttempts, JobId, TaskId};

use super::journaled::{Journaled, Resumed};
use super::{Past, RegisterError, Submissions};
use crate::actor::ctx::Ctx;
use crate::actor::nodes::Offered;
use crate::actor::restore::RestoreError;
use crate::records::Record;
use saker_client::JobUpdate;
use saker_client::results::TerminalState;
use saker_client::spec::{JobLines, JobRequest};

impl Submissions {
    /// Queues every journaled job again, as [`Journaled`] holds them. `ended` are the
    /// journaled results (position, job, task, state); `earlier` what each task's
    /// journaled attempts that did not count used up. Their durable results are
    /// counted in their jobs and the totals.
    pub(crate) fn resume(
        &mut self,
        ctx: &mut Ctx,
        journaled: Journaled,
        ended: impl Iterator<Item = (usize, JobId, TaskId, TerminalState)>,
        earlier: &HashMap<TaskId, EarlierAttempts>,
    ) -> Result<Resumed, RestoreError> {
        let Journaled {
            submitted,
            updates,
            cancelled,
            finished,
        } = journaled;
        // Sized up front: a journal of a million single jobs would rehash this map
        // twenty times over.
        let count = submitted
            .iter()
            .flat_map(|(_, record)| record.submitted_jobs())
            .count();
        self.jobs.reserve(count);
        let mut first_tasks: HashMap<JobId, TaskId> = HashMap::with_capacity(count);
        for (_, record) in &submitted {
            first_tasks.extend(record.submitted_jobs().map(|(job, task, _)| (job, task)));
        }
        let mut done: BTreeMap<JobId, Vec<(u32, TerminalState)>> = BTreeMap::new();
        let mut resumed = Resumed::default();
        for (position, job, states) in &finished {
            let mut states_of = Vec::with_capacity(states.len());
            for (offset, letter) in states.chars().enumerate() {
                let Some(state) = crate::compact::letter_state(letter) else {
                    return Err(RestoreError::FinishedState {
                        position: *position,
                        job: *job,
                    });
                };
                states_of.push((offset as u32, state));
            }
            if let Some(&first) = first_tasks.get(job) {
                resumed
                    .compacted
                    .push((*job, first, states_of.len() as u32));
            }
            done.insert(*job, states_of);
        }
        let compacted: HashSet<JobId> = finished.iter().map(|(_, job, _)| *job).collect();
        for (position, job, task, state) in ended {
            let Some(first) = first_tasks.get(&job) else {
                return Err(RestoreError::UnknownJob {
                    position,
                    job,
                    task,
                });
            };
            if compacted.contains(&job) {
                continue;
            }
            let offset = task.0.saturating_sub(first.0) as u32;
            done.entry(job).or_default().push((offset, state));
        }
        let mut used = earlier_by_job(&first_tasks, earlier);
        let mut pending = Pending {
            done: &mut done,
            used: &mut used,
            updates: &updates,
            resumed: &mut resumed,
        };
        for (position, record) in submitted {
            match record {
                Record::Submit {
                    job,
                    first_task,
                    submitted_unix_us,
                    request,
                    ..
                } => {
                    let at = Numbered {
                        position,
                        job,
                        first_task,
                        submitted_us: submitted_unix_us,
                    };
                    self.resume_job(ctx, at, *request, &mut pending)?;
                }
                Record::SubmitLines {
                    first_job,
                    first_task,
                    submitted_unix_us,
                    lines,
                } => {
                    let at = Numbered {
                        position,
                        job: first_job,
                        first_task,
                        submitted_us: submitted_unix_us,
                    };
                    self.resume_lines(ctx, at, lines, &mut pending)?;
                }
                _ => {}
            }
        }
        for job in cancelled {
            if let Err(error) = ctx.core.handle_cancel_job(job, ctx.now()) {
                tracing::warn!(%error, %job, "re-cancelling a restored job");
            }
        }
        Ok(resumed)
    }

    /// Queues job `at.job` of `request` again, as journaled.
    fn resume_job(
        &mut self,
        ctx: &mut Ctx,
        at: Numbered,
        mut request: JobRequest,
        pending: &mut Pending<'_>,
    ) -> Result<(), RestoreError> {
        if let Some(update) = pending.updates.get(&at.job) {
            apply(update, &mut request);
        }
        let count = request.task_count() as u32;
        self.resume_whole(ctx, at, &request, pending)?;
        pending.resumed.jobs += 1;
        pending.resumed.tasks += u64::from(count);
        Ok(())
    }

    /// Queues one job of `request` through [`Submissions::register`] with its past,
    /// checks it got its id again, and counts its tasks that ended.
    fn resume_whole(
        &mut self,
        ctx: &mut Ctx,
        at: Numbered,
        request: &JobRequest,
        pending: &mut Pending<'_>,
    ) -> Result<(), RestoreError> {
        // No node has joined yet: specs are judged by what the pilot expects.
        let spec = self
            .core_spec(ctx, Offered::default(), request)
            .map_err(|source| RestoreError::Resources {
                position: at.position,
                job: at.job,
                source,
            })?;
        let after = dependencies(request);
        let ended = pending.done.remove(&at.job).unwrap_or_default();
        let earlier = pending.used.remove(&at.job).unwrap_or_default();
        let past = Past {
            ended: &ended,
            earlier: &earlier,
        };
        let queued = self
            .register(ctx, request, spec, &after, at.submitted_us, Some(past))
            .map_err(|error| at.refused(error))?;
        at.check(queued)?;
        self.count_ended(at.job, &ended, pending.resumed);
        Ok(())
    }

    /// Queues the jobs of a `submit_lines` batch again; an updated one is queued as the
    /// whole job it is.
    fn resume_lines(
        &mut self,
        ctx: &mut Ctx,
        at: Numbered,
        lines: Arc<JobLines>,
        pending: &mut Pending<'_>,
    ) -> Result<(), RestoreError> {
        let template = JobRequest {
            spec: lines.spec(0),
            array: None,
            inline_output: lines.inline_output,
        };
        let spec = self
            .core_spec(ctx, Offered::default(), &template)
            .map_err(|source| RestoreError::Resources {
                position: at.position,
                job: at.job,
                source,
            })?;
        self.keep_lines(at.job, &lines, &spec, at.submitted_us);
        let not_before = ctx.core_time(template.spec.not_before);
        let now = ctx.now();
        for k in 0..lines.len() {
            let line = Numbered {
                job: JobId(at.job.0 + k as u32),
                first_task: TaskId(at.first_task.0 + k as u64),
                ..at
            };
            if let Some(update) = pending.updates.get(&line.job) {
                // Rare: an updated line is restored as the whole job it is.
                let mut request = JobRequest {
                    spec: lines.spec(k),
                    ..template.clone()
                };
                apply(update, &mut request);
                self.resume_whole(ctx, line, &request, pending)?;
                // Counted with its batch.
                self.tasks -= 1;
                continue;
            }
            let ended = pending.done.remove(&line.job).unwrap_or_default();
            let earlier = pending.used.remove(&line.job).unwrap_or_default();
            let past = Past {
                ended: &ended,
                earlier: &earlier,
            };
            let queued = Self::queue_line(ctx, spec, not_before, now, Some(past))
                .map_err(|error| line.refused(error))?;
            line.check(queued)?;
            self.count_ended(line.job, &ended, pending.resumed);
        }
        pending.resumed.jobs += lines.len() as u64;
        pending.resumed.tasks += lines.len() as u64;
        Ok(())
    }

    /// Counts the tasks of `job` that had ended as durable results.
    fn count_ended(&mut self, job: JobId, ended: &[(u32, TerminalState)], resumed: &mut Resumed) {
        for &(_, state) in ended {
            self.progress.count(&mut self.jobs, job, state);
        }
        resumed.finished += ended.len() as u64;
    }
}

/// Where a job was journaled and what it was numbered.
#[derive(Debug, Clone, Copy)]
struct Numbered {
    position: usize,
    job: JobId,
    first_task: TaskId,
    submitted_us: u64,
}

impl Numbered {
    fn refused(&self, error: RegisterError) -> RestoreError {
        let source = match error {
            RegisterError::Restore(source) => source,
            RegisterError::Submit(error) => saker_core::RestoreError::Submit(error),
        };
        RestoreError::Job {
            position: self.position,
            job: self.job,
            source,
        }
    }

    /// Whether the core numbered `queued` as the journal did.
    fn check(&self, queued: saker_core::SubmittedJob) -> Result<(), RestoreError> {
        if queued.job != self.job {
            return Err(RestoreError::IdMismatch {
                position: self.position,
                job: self.job,
                expected: queued.job,
            });
        }
        if queued.first_task != self.first_task {
            return Err(RestoreError::TaskIdMismatch {
                position: self.position,
                job: self.job,
                first_task: self.first_task,
                got: queued.first_task,
            });
        }
        Ok(())
    }
}

/// What the journal said of the jobs not queued again yet.
struct Pending<'a> {
    done: &'a mut BTreeMap<JobId, Vec<(u32, TerminalState)>>,
    used: &'a mut HashMap<JobId, Vec<(u32, EarlierAttempts)>>,
    updates: &'a HashMap<JobId, JobUpdate>,
    resumed: &'a mut Resumed,
}

/// What each job's tasks used up of their retries and replays, by offset.
fn earlier_by_job(
    first_tasks: &HashMap<JobId, TaskId>,
    earlier: &HashMap<TaskId, EarlierAttempts>,
) -> HashMap<JobId, Vec<(u32, EarlierAttempts)>> {
    let mut starts: Vec<(TaskId, JobId)> = first_tasks.iter().map(|(&j, &t)| (t, j)).collect();
    starts.sort_unstable();
    let mut by_job: HashMap<JobId, Vec<(u32, EarlierAttempts)>> = HashMap::new();
    for (&task, &used) in earlier {
        // The job whose first task is the last one at or before `task`.
        let Some(&(first, job)) = starts
            .partition_point(|&(first, _)| first <= task)
            .checked_sub(1)
            .map(|at| &starts[at])
        else {
            continue;
        };
        by_job
            .entry(job)
            .or_default()
            .push(((task.0 - first.0) as u32, used));
    }
    by_job
}

/// Folds a job's journaled updates into its request, which the core and the agents'
/// job definition are then built from.
fn apply(update: &JobUpdate, request: &mut JobRequest) {
    if let Some(priority) = update.priority {
        request.spec.priority = priority;
    }
    if let Some(not_before) = update.not_before {
        request.spec.not_before = not_before;
    }
    if let Some(time_limit) = update.time_limit {
        request.spec.time_limit = time_limit;
    }
}

/// A journaled job's dependencies: ids, as the submission resolved them.
fn dependencies(request: &JobRequest) -> Vec<saker_core::Dependency> {
    use saker_client::spec::JobRef;
    use saker_core::{Dependency, DependencyKind};
    let ids = |list: &[JobRef], kind| {
        list.iter()
            .filter_map(move |reference| match reference {
                JobRef::Id(job) => Some(Dependency {
                    job: JobId(*job),
                    kind,
                }),
                // Never journaled: a submission is planned before it is journaled.
                JobRef::Name(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let mut after = ids(&request.spec.after, DependencyKind::Success);
    after.extend(ids(&request.spec.after_any, DependencyKind::Any));
    after
}
