//! Rebuilding the root's state from the journal a previous root left (resume).
//!
//! Submissions are replayed in journal order through the same path as new ones, so
//! every job and task keeps its id; accepted results mark their tasks terminal and
//! are served to clients again with their original sequence numbers; everything else
//! is queued to run. Cancelled jobs are cancelled again, which finishes their tasks
//! that never started.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use saker_core::{EarlierAttempts, JobId, TaskId};

use saker_core::JobSpec;

use super::jobs::LineBatch;
use super::state::RootState;
use super::submissions::job_def;
use crate::attempts::{AttemptEnd, AttemptNote};
use crate::client::JobUpdate;
use crate::records::Record;
use crate::results::TerminalState;
use crate::spec::{JobLines, JobRequest};

/// What a resume found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreSummary {
    pub jobs: u64,
    pub tasks: u64,
    pub finished: u64,
    pub previous_starts: u64,
    /// Actors that had not ended, started again as their nodes join.
    pub actors: u64,
}

/// A journal that cannot be the history of one pilot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("journal record {position}: a result whose place in the journal is unknown")]
    NoPosition { position: usize },
    #[error("journal record {position}: job {job} cannot be restored")]
    Job {
        position: usize,
        job: JobId,
        #[source]
        source: saker_core::RestoreError,
    },
    #[error("journal record {position}: job {job} was expected to get id {expected}")]
    IdMismatch {
        position: usize,
        job: JobId,
        expected: JobId,
    },
    #[error(
        "journal record {position}: job {job} was expected to start at task {first_task}, not {got}"
    )]
    TaskIdMismatch {
        position: usize,
        job: JobId,
        first_task: TaskId,
        got: TaskId,
    },
    #[error("journal record {position}: job {job} names more custom resources than a pilot can")]
    Resources {
        position: usize,
        job: JobId,
        #[source]
        source: super::resources::TooManyKinds,
    },
    #[error(
        "journal record {position}: job {job}'s finished record holds a letter that is not a state"
    )]
    FinishedState { position: usize, job: JobId },
    #[error("journal record {position}: a result for task {task} of unknown job {job}")]
    UnknownJob {
        position: usize,
        job: JobId,
        task: TaskId,
    },
}

impl RootState {
    /// Replays `records` into this (fresh) root.
    /// Rebuilds the root from a journal's `records`; `positions` says where each is (the
    /// results are indexed, not kept).
    pub(super) fn restore(
        &mut self,
        records: Vec<Record>,
        positions: Vec<saker_journal::Position>,
    ) -> Result<RestoreSummary, RestoreError> {
        let mut summary = RestoreSummary::default();
        // Per job: (first task, finished offsets). Results may precede nothing but
        // their submission, so collect them first.
        let submits = records.iter().flat_map(Record::submitted_jobs).count();
        // Sized up front: a journal of a million single jobs would rehash these maps
        // twenty times over.
        let mut first_tasks: HashMap<JobId, TaskId> = HashMap::with_capacity(submits);
        // Jobs a compaction recorded as finished, with one state letter a task: their
        // tasks are terminal whether or not their results were kept.
        let mut finished_jobs: BTreeMap<JobId, String> = BTreeMap::new();
        self.submissions.jobs.reserve(submits);
        for record in &records {
            first_tasks.extend(record.submitted_jobs().map(|(job, task, _)| (job, task)));
            if let Record::Finished { job, states } = record {
                finished_jobs.insert(*job, states.clone());
            }
        }
        let mut finished: BTreeMap<JobId, Vec<(u32, TerminalState)>> = BTreeMap::new();
        let mut results = Vec::new();
        let mut cancelled = Vec::new();
        let mut notes: HashMap<TaskId, Vec<AttemptNote>> = HashMap::new();
        // Every actor id spawned, with its request while it had not ended.
        let mut actors = BTreeMap::new();
        // What clients' updates changed of each job, the latest value of each field.
        let mut updates: HashMap<JobId, JobUpdate> = HashMap::new();
        // The latest occurrence of each periodic job, by its first job.
        let mut occurrences: HashMap<JobId, (u32, JobId)> = HashMap::new();
        let mut schedules = Vec::new();
        // Where data items were written, in journal order.
        let mut items = Vec::new();
        for (position, record) in records.iter().enumerate() {
            match record {
                Record::Result(result) => {
                    let job = result.job;
                    let Some(first) = first_tasks.get(&job) else {
                        return Err(RestoreError::UnknownJob {
                            position,
                            job,
                            task: result.task,
                        });
                    };
                    let offset = result.task.0.saturating_sub(first.0) as u32;
                    if !finished_jobs.contains_key(&job) {
                        finished
                            .entry(job)
                            .or_default()
                            .push((offset, result.state));
                    }
                    match positions.get(position) {
                        Some(&at) => results.push((Arc::clone(result), at)),
                        None => return Err(RestoreError::NoPosition { position }),
                    }
                }
                Record::Cancel { job, .. } => cancelled.push(*job),
                Record::Attempt { task, note } => {
                    notes.entry(*task).or_default().push(note.clone())
                }
                Record::PilotStarted { .. } => summary.previous_starts += 1,
                // Nodes register again when their agents reattach; the records are
                // history for `saker report`.
                Record::Submit { .. }
                | Record::SubmitLines { .. }
                | Record::NodeJoined { .. }
                | Record::NodeLeft { .. } => {}
                Record::Allocation { .. } => {
                    let now = self.ctx.clock.now();
                    if let Some(elastic) = self.upkeep.elastic.as_mut() {
                        elastic.restore(record, now);
                    }
                }
                Record::ActorSpawned { actor, spawn, .. } => {
                    actors.insert(*actor, Some((**spawn).clone()));
                }
                Record::ActorEnded { actor, .. } => {
                    actors.insert(*actor, None);
                }
                Record::Update { job, update, .. } => {
                    let folded = updates.entry(*job).or_default();
                    *folded = folded.then(*update);
                }
                Record::Occurrence {
                    schedule,
                    job,
                    occurrence,
                } => {
                    occurrences.insert(*schedule, (*occurrence, *job));
                }
                Record::Item { item, node, bytes } => items.push((item.clone(), *node, *bytes)),
                Record::Compaction {
                    next_seq,
                    compacted,
                    compacted_through,
                    ..
                } => {
                    self.results.log.next_seq = self.results.log.next_seq.max(*next_seq);
                    self.results.log.compacted = *compacted;
                    self.results.log.compacted_through = *compacted_through;
                }
                Record::Finished { job, states } => {
                    let mut done = Vec::with_capacity(states.len());
                    for (offset, letter) in states.chars().enumerate() {
                        let Some(state) = crate::compact::letter_state(letter) else {
                            return Err(RestoreError::FinishedState {
                                position,
                                job: *job,
                            });
                        };
                        done.push((offset as u32, state));
                    }
                    finished.insert(*job, done);
                }
            }
        }
        let mut earlier = earlier_by_job(&first_tasks, &notes);
        for (position, record) in records.into_iter().enumerate() {
            let (job, first_task, submitted_unix_us, mut request) = match record {
                Record::Submit {
                    job,
                    first_task,
                    count: _,
                    submitted_unix_us,
                    request,
                } => (job, first_task, submitted_unix_us, request),
                Record::SubmitLines {
                    first_job,
                    first_task,
                    submitted_unix_us,
                    lines,
                } => {
                    let at = Batch {
                        position,
                        first_job,
                        first_task,
                        submitted_us: submitted_unix_us,
                    };
                    let jobs = Pending {
                        finished: &mut finished,
                        earlier: &mut earlier,
                        updates: &updates,
                    };
                    let count = self.restore_lines(at, lines, jobs)?;
                    summary.jobs += count;
                    summary.tasks += count;
                    continue;
                }
                _ => continue,
            };
            // A schedule goes on from its first occurrence as submitted; an update
            // changed that occurrence only.
            let schedule = request.spec.every.is_some().then(|| request.clone());
            if let Some(update) = updates.get(&job) {
                apply(update, &mut request);
            }
            let done = finished.remove(&job).unwrap_or_default();
            let used = earlier.remove(&job).unwrap_or_default();
            let (count, spec) =
                self.restore_request(position, job, first_task, &request, &done, &used)?;
            self.submissions
                .keep(job, &request, &spec, submitted_unix_us);
            self.items
                .note_reads(&mut self.ctx, job, &request.spec.reads);
            if let Some(first) = schedule {
                schedules.push((job, first, submitted_unix_us));
            }
            summary.jobs += 1;
            summary.tasks += u64::from(count);
        }
        // Journaled in `seq` order; sorted all the same, as the index needs that order.
        results.sort_by_key(|(record, _)| record.seq);
        for (record, _) in &results {
            // A finished task carries its history in its result.
            notes.remove(&record.task);
        }
        self.results.attempts.history = notes;
        for (record, position) in results {
            if !finished_jobs.contains_key(&record.job) {
                self.results.count_durable(&mut self.submissions, &record);
                summary.finished += 1;
            }
            self.results.log.next_seq = self.results.log.next_seq.max(record.seq + 1);
            self.results
                .log
                .index
                .insert(record.task, record.seq, position);
        }
        for (job, states) in &finished_jobs {
            let Some(first) = first_tasks.get(job) else {
                continue;
            };
            for (offset, letter) in states.chars().enumerate() {
                // Checked above: every letter is a state.
                let Some(state) = crate::compact::letter_state(letter) else {
                    continue;
                };
                self.results
                    .count_durable_state(&mut self.submissions, *job, state);
                summary.finished += 1;
                let task = TaskId(first.0 + offset as u64);
                if self.results.log.index.find(task).is_none() {
                    self.results.log.index.mark_compacted(task);
                }
            }
        }
        for job in cancelled {
            if let Err(error) = self.ctx.core.handle_cancel_job(job, self.ctx.now()) {
                tracing::warn!(%error, %job, "re-cancelling a restored job");
            }
        }
        // After the jobs: their readers prefer the holders.
        for (item, node, bytes) in items {
            self.items.restore_item(&mut self.ctx, &item, node, bytes);
        }
        summary.actors = self.actors.restore_actors(&mut self.ctx, actors);
        for (job, request, submitted_us) in schedules {
            let pending = occurrences.get(&job).copied();
            self.schedules
                .restore_schedule(job, &request, submitted_us, pending);
        }
        // A pending occurrence that ended before the old root stopped has its next
        // one now; one that had not is queued again and runs, late if its time passed.
        self.schedules
            .poll_schedules(&mut self.ctx, &mut self.submissions, &mut self.items);
        if let Some(elastic) = self.upkeep.elastic.as_mut() {
            elastic.resumed();
        }
        Ok(summary)
    }
}

/// Where a `submit_lines` record was and what it numbered.
struct Batch {
    position: usize,
    first_job: JobId,
    first_task: TaskId,
    submitted_us: u64,
}

/// What the journal said of the jobs not restored yet.
struct Pending<'a> {
    finished: &'a mut BTreeMap<JobId, Vec<(u32, TerminalState)>>,
    earlier: &'a mut HashMap<JobId, Vec<(u32, EarlierAttempts)>>,
    updates: &'a HashMap<JobId, JobUpdate>,
}

impl RootState {
    /// Queues `request` as job `job` in the core, as it was numbered before.
    fn restore_request(
        &mut self,
        position: usize,
        job: JobId,
        first_task: TaskId,
        request: &JobRequest,
        done: &[(u32, TerminalState)],
        used: &[(u32, EarlierAttempts)],
    ) -> Result<(u32, JobSpec), RestoreError> {
        let spec = self
            .submissions
            .core_spec(&self.ctx, request)
            .map_err(|source| RestoreError::Resources {
                position,
                job,
                source,
            })?;
        let after = dependencies(request);
        let not_before = self.ctx.core_time(request.spec.not_before);
        let count = self.restore_spec(
            position, job, first_task, spec, &after, not_before, done, used,
        )?;
        Ok((count, spec))
    }

    #[allow(clippy::too_many_arguments)]
    fn restore_spec(
        &mut self,
        position: usize,
        job: JobId,
        first_task: TaskId,
        spec: JobSpec,
        after: &[saker_core::Dependency],
        not_before: Option<saker_core::Time>,
        done: &[(u32, TerminalState)],
        used: &[(u32, EarlierAttempts)],
    ) -> Result<u32, RestoreError> {
        let restored = self
            .ctx
            .core
            .handle_restore_job_at(spec, after, not_before, done, used, self.ctx.now())
            .map_err(|source| RestoreError::Job {
                position,
                job,
                source,
            })?;
        if restored.job != job {
            return Err(RestoreError::IdMismatch {
                position,
                job,
                expected: restored.job,
            });
        }
        if restored.first_task != first_task {
            return Err(RestoreError::TaskIdMismatch {
                position,
                job,
                first_task,
                got: restored.first_task,
            });
        }
        Ok(restored.count)
    }

    /// Restores the jobs of a `submit_lines` record; returns how many.
    fn restore_lines(
        &mut self,
        at: Batch,
        lines: Arc<JobLines>,
        jobs: Pending<'_>,
    ) -> Result<u64, RestoreError> {
        let template = JobRequest {
            spec: lines.spec(0),
            array: None,
            inline_output: lines.inline_output,
        };
        let spec = self
            .submissions
            .core_spec(&self.ctx, &template)
            .map_err(|source| RestoreError::Resources {
                position: at.position,
                job: at.first_job,
                source,
            })?;
        let proto = Arc::new(job_def(
            JobId(0),
            &template.spec,
            &spec,
            lines.inline_output,
            false,
        ));
        self.submissions.jobs.add_lines(
            at.first_job,
            Arc::new(LineBatch {
                lines: Arc::clone(&lines),
                proto,
                submitted_us: at.submitted_us,
            }),
        );
        self.submissions.tasks += lines.len() as u64;
        let not_before = self.ctx.core_time(template.spec.not_before);
        for k in 0..lines.len() {
            let job = JobId(at.first_job.0 + k as u32);
            let first_task = TaskId(at.first_task.0 + k as u64);
            let done = jobs.finished.remove(&job).unwrap_or_default();
            let used = jobs.earlier.remove(&job).unwrap_or_default();
            if let Some(update) = jobs.updates.get(&job) {
                // Rare: an updated line is restored as the whole job it is.
                let mut request = JobRequest {
                    spec: lines.spec(k),
                    ..template.clone()
                };
                apply(update, &mut request);
                let (_, kept) =
                    self.restore_request(at.position, job, first_task, &request, &done, &used)?;
                self.submissions.keep(job, &request, &kept, at.submitted_us);
                self.items
                    .note_reads(&mut self.ctx, job, &request.spec.reads);
                // Counted with its batch.
                self.submissions.tasks -= 1;
                continue;
            }
            self.restore_spec(
                at.position,
                job,
                first_task,
                spec,
                &[],
                not_before,
                &done,
                &used,
            )?;
        }
        Ok(lines.len() as u64)
    }
}

/// What each job's tasks used up of their retries and replays, by offset, from the
/// journaled attempt notes. Conservative: a failed or lost speculative copy counts too,
/// although it did not use up a retry while its twin ran on.
fn earlier_by_job(
    first_tasks: &HashMap<JobId, TaskId>,
    notes: &HashMap<TaskId, Vec<AttemptNote>>,
) -> HashMap<JobId, Vec<(u32, EarlierAttempts)>> {
    let mut starts: Vec<(TaskId, JobId)> = first_tasks.iter().map(|(&j, &t)| (t, j)).collect();
    starts.sort_unstable();
    let mut by_job: HashMap<JobId, Vec<(u32, EarlierAttempts)>> = HashMap::new();
    for (&task, task_notes) in notes {
        // The job whose first task is the last one at or before `task`.
        let Some(&(first, job)) = starts
            .partition_point(|&(first, _)| first <= task)
            .checked_sub(1)
            .map(|at| &starts[at])
        else {
            continue;
        };
        let mut used = EarlierAttempts::default();
        for note in task_notes {
            match note.end {
                AttemptEnd::Failed => used.failures += 1,
                AttemptEnd::Lost => used.replays += 1,
            }
        }
        by_job
            .entry(job)
            .or_default()
            .push(((task.0 - first.0) as u32, used));
    }
    by_job
}

/// Folds a job's journaled updates into its request, which the core and the agents'
/// job definition are then built from.
fn apply(update: &JobUpdate, request: &mut crate::spec::JobRequest) {
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
fn dependencies(request: &crate::spec::JobRequest) -> Vec<saker_core::Dependency> {
    use crate::spec::JobRef;
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
