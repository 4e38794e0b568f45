//! Jobs as submitted and how far each has come: the job table (what agents need to run
//! each job, until it is done, then its final counts), the runtime-estimate classes of
//! tag sets, the numbers of named resources, why a job was cancelled for its
//! dependency, the pilot's totals of durable results and the waits on them.
//!
//! **Start reading** at [`Submissions::submit`]: a submission is checked whole against
//! the pilot's nodes ([`fits`]), then each job is queued in the core and kept through
//! [`Submissions::register`], the one road every job takes, new, periodic or resumed
//! from the journal (`resume.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use saker_actors::resources::NodeResources;
use saker_core::{EarlierAttempts, JobId, JobSpec, Placement, Resources, TaskId};
use saker_wire::messages::{Command, EnvVar, Function, Hello, Hpc, JobDef, Payload};

use super::ctx::Ctx;
use super::nodes::Offered;
use super::replies::error;
use super::resources::ResourceNames;
use crate::client::Reply;
use crate::records::Record;
use fits::Shape;
use jobs::{JobEntry, JobTable, LineBatch};
use progress::Progress;
use saker_client::results::{ResultRecord, TerminalState};
use saker_client::spec::{JobLines, JobRequest, plan};
use saker_client::{
    ErrorKind, MAX_WAITED_RESULTS, RequestError, SubmitWait, SubmittedJob, SubmittedLines,
    WaitReport,
};

mod fits;
mod jobs;
mod journaled;
mod progress;
mod resume;
mod updates;

pub use super::resources::TooManyKinds;
pub(super) use journaled::Journaled;
pub(crate) use progress::Totals;

/// Inline output kept per stream when a request does not say.
pub const DEFAULT_INLINE_OUTPUT: u32 = 4096;

/// Jobs as submitted (see the module doc).
#[derive(Debug)]
pub(super) struct Submissions {
    jobs: JobTable,
    /// Runtime estimate class of each set of tags (sorted), numbered from 1.
    classes: HashMap<Vec<String>, u32>,
    /// The custom resource kinds this pilot has numbered.
    resource_names: ResourceNames,
    /// Jobs cancelled because a job they needed to succeed did not, with that job
    /// (their results say so), until they finish.
    dependency_failed: HashMap<JobId, JobId>,
    /// Tasks submitted, pilot-wide.
    tasks: u64,
    progress: Progress,
    /// The widest node the pilot will have, when known before nodes join.
    expected_node: Option<NodeResources>,
    /// The pilot runs in a batch allocation (an srun launcher needs one).
    in_allocation: bool,
}

/// A submission accepted: its jobs in the request's order, and its journal records
/// (one per job, in id order).
#[derive(Debug)]
pub(super) struct Accepted {
    pub jobs: Vec<SubmittedJob>,
    pub records: Vec<Record>,
}

/// What a previous root's journal says a job's tasks went through, by offset: those
/// that ended, and what the others' earlier attempts used up of their retries and
/// replays.
#[derive(Debug, Clone, Copy)]
pub(super) struct Past<'a> {
    pub ended: &'a [(u32, TerminalState)],
    pub earlier: &'a [(u32, EarlierAttempts)],
}

/// A job the core would not queue.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegisterError {
    #[error(transparent)]
    Submit(#[from] saker_core::SubmitError),
    #[error(transparent)]
    Restore(#[from] saker_core::RestoreError),
}

impl Submissions {
    /// A new pilot's submissions: `expected_node` is the widest node it will have,
    /// when known before any joins; its custom resources are numbered first, in the
    /// order given, so a resumed pilot numbers them the same.
    pub(super) fn new(expected_node: Option<NodeResources>, in_allocation: bool) -> Submissions {
        let mut resource_names = ResourceNames::default();
        for (name, _) in expected_node.iter().flat_map(|node| &node.custom) {
            resource_names.kind(name);
        }
        Submissions {
            jobs: JobTable::default(),
            classes: HashMap::new(),
            resource_names,
            dependency_failed: HashMap::new(),
            tasks: 0,
            progress: Progress::default(),
            expected_node,
            in_allocation,
        }
    }

    /// What a submission is checked against, with `offered` by the nodes that joined.
    fn shape(&self, ctx: &Ctx, offered: Offered) -> Shape<'_> {
        Shape {
            expected: self.expected_node.as_ref(),
            max_nodes: ctx.pilot.max_nodes,
            in_allocation: self.in_allocation,
            offered,
        }
    }

    /// Checks `requests` whole against the pilot's nodes (`offered`: what those that
    /// joined offer) and queues them, or refuses them all.
    pub(super) fn submit(
        &mut self,
        ctx: &mut Ctx,
        offered: Offered,
        mut requests: Vec<JobRequest>,
        wait: Option<SubmitWait>,
    ) -> Result<Accepted, RequestError> {
        // Accepted whole or not at all.
        for (position, request) in requests.iter().enumerate() {
            if let Err(problem) = request.validate() {
                let message = format!("job {position} of the submission: {problem}");
                return Err(error(ErrorKind::InvalidSpec, message));
            }
            if request.task_count() > u64::from(u32::MAX) {
                let message =
                    format!("job {position} of the submission has more than 2^32-1 tasks");
                return Err(error(ErrorKind::InvalidSpec, message));
            }
        }
        let tasks: u64 = requests.iter().map(JobRequest::task_count).sum();
        if wait == Some(SubmitWait::Results) && tasks > MAX_WAITED_RESULTS {
            let message = format!(
                "wait \"results\" takes submissions of at most {MAX_WAITED_RESULTS} tasks, this one has {tasks}; wait for \"counts\", or follow a results stream"
            );
            return Err(error(ErrorKind::InvalidSpec, message));
        }
        // Jobs that wait for later ones of the submission go after them; their
        // dependencies become ids.
        let next_job = ctx.core.next_job().0;
        let (order, after) = match plan(&mut requests, next_job) {
            Ok(plan) => plan,
            Err(problem) => {
                return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
            }
        };
        // What the core would refuse, it refuses here, before any job is queued. New
        // resource names are numbered in a copy, kept only if all is accepted.
        let shape = self.shape(ctx, offered);
        let mut names = self.resource_names.clone();
        let mut specs = Vec::with_capacity(requests.len());
        for (position, request) in requests.iter().enumerate() {
            if let Err(problem) = shape.check_fits(&self.resource_names, request) {
                let message = format!("job {position} of the submission: {problem}");
                return Err(error(ErrorKind::InvalidSpec, message));
            }
            match names.vector(&request.spec) {
                Ok(needs) => specs.push(base_spec(request, needs, shape.widest_node())),
                Err(problem) => {
                    let message = format!("job {position} of the submission: {problem}");
                    return Err(error(ErrorKind::InvalidSpec, message));
                }
            }
        }
        let ordered: Vec<JobSpec> = order.iter().map(|&position| specs[position]).collect();
        if let Err((at, problem)) = ctx.core.check_submissions(&ordered) {
            let message = format!("job {} of the submission: {problem}", order[at]);
            return Err(error(ErrorKind::InvalidSpec, message));
        }
        self.resource_names = names;
        let submitted_us = ctx.timestamp().unix_micros();
        // The answer lists the jobs in the submission's order; the journal in id order.
        let mut submitted: Vec<Option<SubmittedJob>> = vec![None; requests.len()];
        let mut records = Vec::with_capacity(requests.len());
        let mut requests: Vec<Option<JobRequest>> = requests.into_iter().map(Some).collect();
        for position in order {
            let Some(request) = requests[position].take() else {
                continue;
            };
            let spec = JobSpec {
                class: self.class_of(&request.spec.tags),
                ..specs[position]
            };
            let registered =
                self.register(ctx, &request, spec, &after[position], submitted_us, None);
            let job = match registered {
                Ok(job) => job,
                Err(problem) => {
                    // Not reached: the batch was checked above. Should it be, the
                    // jobs queued so far are journaled and acknowledged, not lost.
                    tracing::error!(%problem, "submission refused by the core after its check");
                    break;
                }
            };
            submitted[position] = Some(SubmittedJob {
                job: job.job,
                first_task: job.first_task,
                count: u64::from(job.count),
            });
            records.push(Record::Submit {
                job: job.job,
                first_task: job.first_task,
                count: job.count,
                submitted_unix_us: submitted_us,
                request: Box::new(request),
            });
        }
        Ok(Accepted {
            jobs: submitted.into_iter().flatten().collect(),
            records,
        })
    }

    /// Queues a validated job as `spec` in the core and keeps what agents need to run
    /// it: the one road of every job, new or periodic (`past`: none) or resumed from a
    /// previous root's journal (`past`: what its tasks went through). Its data reads
    /// are for the caller to note.
    pub(super) fn register(
        &mut self,
        ctx: &mut Ctx,
        request: &JobRequest,
        spec: JobSpec,
        after: &[saker_core::Dependency],
        submitted_us: u64,
        past: Option<Past<'_>>,
    ) -> Result<saker_core::SubmittedJob, RegisterError> {
        let not_before = ctx.core_time(request.spec.not_before);
        let now = ctx.now();
        let job = match past {
            None => ctx.core.handle_submit_at(spec, after, not_before, now)?,
            Some(past) => ctx.core.handle_restore_job_at(
                spec,
                after,
                not_before,
                past.ended,
                past.earlier,
                now,
            )?,
        };
        self.keep(job.job, request, &spec, submitted_us);
        Ok(job)
    }

    /// Keeps what agents need to run a job the core has accepted.
    fn keep(&mut self, job: JobId, request: &JobRequest, core: &JobSpec, submitted_us: u64) {
        self.tasks += request.task_count();
        let def = job_def(
            job,
            &request.spec,
            core,
            request.inline_output,
            request.array.is_some(),
        );
        self.jobs.insert(
            job,
            JobEntry {
                def: Arc::new(def),
                array: request.array.clone().map(Box::new),
                submitted_us,
                count: request.task_count() as u32,
                durable: 0,
                failed: 0,
                cancelled: 0,
            },
        );
    }

    /// Queues one single-task job per command of `lines` (validated by the client
    /// server); says what to answer and the one record that journals them.
    pub(super) fn submit_lines(
        &mut self,
        ctx: &mut Ctx,
        offered: Offered,
        lines: Box<JobLines>,
    ) -> Result<(SubmittedLines, Record), RequestError> {
        let lines: Arc<JobLines> = Arc::from(lines);
        // Every job is the template with its command: checked once.
        let first = JobRequest {
            spec: lines.spec(0),
            array: None,
            inline_output: lines.inline_output,
        };
        let shape = self.shape(ctx, offered);
        if let Err(problem) = shape.check_fits(&self.resource_names, &first) {
            return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
        }
        let mut names = self.resource_names.clone();
        let spec = match names.vector(&first.spec) {
            Ok(needs) => base_spec(&first, needs, shape.widest_node()),
            Err(problem) => {
                return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
            }
        };
        if let Err((_, problem)) = ctx.core.check_submissions(&[spec]) {
            return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
        }
        self.resource_names = names;
        let spec = JobSpec {
            class: self.class_of(&first.spec.tags),
            ..spec
        };
        let submitted_us = ctx.timestamp().unix_micros();
        let first_job = ctx.core.next_job();
        self.keep_lines(first_job, &lines, &spec, submitted_us);
        let not_before = ctx.core_time(lines.template.not_before);
        let now = ctx.now();
        let mut first_task = None;
        for _ in 0..lines.len() {
            match Self::queue_line(ctx, spec, not_before, now, None) {
                Ok(job) => {
                    first_task.get_or_insert(job.first_task);
                }
                Err(problem) => {
                    // Not reached: the spec was checked above.
                    tracing::error!(%problem, "submit_lines refused by the core after its check");
                    return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
                }
            }
        }
        let first_task = first_task.unwrap_or(TaskId(0));
        let submitted = SubmittedLines {
            first_job,
            first_task,
            count: lines.len() as u64,
        };
        let record = Record::SubmitLines {
            first_job,
            first_task,
            submitted_unix_us: submitted_us,
            lines,
        };
        Ok((submitted, record))
    }

    /// Keeps the batch `lines` as jobs `first_job ..`, each the template with its
    /// command, queued as `spec` (their entries are the batch's: see
    /// `JobTable::add_lines`).
    fn keep_lines(
        &mut self,
        first_job: JobId,
        lines: &Arc<JobLines>,
        spec: &JobSpec,
        submitted_us: u64,
    ) {
        let proto = Arc::new(job_def(
            JobId(0),
            &lines.spec(0),
            spec,
            lines.inline_output,
            false,
        ));
        self.jobs.add_lines(
            first_job,
            Arc::new(LineBatch {
                lines: Arc::clone(lines),
                proto,
                submitted_us,
            }),
        );
        self.tasks += lines.len() as u64;
    }

    /// Queues the next job of a batch kept by [`Submissions::keep_lines`] in the core,
    /// new or with its `past`, at `now` (read once for the batch).
    fn queue_line(
        ctx: &mut Ctx,
        spec: JobSpec,
        not_before: Option<saker_core::Time>,
        now: saker_core::Time,
        past: Option<Past<'_>>,
    ) -> Result<saker_core::SubmittedJob, RegisterError> {
        Ok(match past {
            None => ctx.core.handle_submit_at(spec, &[], not_before, now)?,
            Some(past) => ctx.core.handle_restore_job_at(
                spec,
                &[],
                not_before,
                past.ended,
                past.earlier,
                now,
            )?,
        })
    }

    /// What the core needs to know of a job request. Jobs with the same set of tags
    /// share one runtime estimate (for stragglers); untagged jobs share class 0.
    /// Errors only if the request names one custom resource more than the pilot can
    /// number (checked before a submission is accepted).
    pub(super) fn core_spec(
        &mut self,
        ctx: &Ctx,
        offered: Offered,
        request: &JobRequest,
    ) -> Result<JobSpec, TooManyKinds> {
        let needs = self.resource_names.vector(&request.spec)?;
        let spec = base_spec(request, needs, self.shape(ctx, offered).widest_node());
        Ok(JobSpec {
            class: self.class_of(&request.spec.tags),
            ..spec
        })
    }

    /// The runtime estimate class of a set of tags, numbering a new set.
    fn class_of(&mut self, tags: &[String]) -> u32 {
        if tags.is_empty() {
            return 0;
        }
        let mut tags = tags.to_vec();
        tags.sort_unstable();
        tags.dedup();
        let next = self.classes.len() as u32 + 1;
        *self.classes.entry(tags).or_insert(next)
    }

    /// What a node that says `hello` offers in the root's kinds: its cores, GPUs and
    /// memory, and its named resources numbered as the pilot numbers them. A name with
    /// no kind left (more names than a pilot can number) is left out, logged.
    pub(super) fn capacity_of(&mut self, hello: &Hello) -> Resources {
        use saker_core::ResourceKind;
        let offered = hello.capacity;
        let mut capacity = Resources::cores(offered.core_count())
            .with(ResourceKind::GPUS, offered.gpu_count())
            .with(ResourceKind::MEMORY_MIB, offered.memory_mib());
        for named in &hello.custom {
            if !saker_client::spec::valid_resource_name(&named.name) {
                tracing::warn!(node = %hello.node, name = ?named.name, "ignoring a resource with an invalid name");
                continue;
            }
            match self.resource_names.kind(&named.name) {
                Some(kind) => capacity = capacity.with(kind, named.amount),
                None => tracing::warn!(
                    node = %hello.node,
                    name = %named.name,
                    "ignoring a resource: the pilot numbers no more kinds"
                ),
            }
        }
        capacity
    }

    /// The name of custom resource kind `index`, if the pilot numbered one.
    pub(super) fn resource_name(&self, index: usize) -> Option<&str> {
        self.resource_names.name(index)
    }

    /// Whether `job` was submitted (it may be done).
    pub(super) fn contains(&self, job: JobId) -> bool {
        self.jobs.contains_key(&job)
    }

    /// Jobs submitted.
    pub(super) fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The definition of `job` to send to a node.
    pub(super) fn definition(&self, job: JobId) -> Option<Arc<JobDef>> {
        self.jobs.def(job)
    }

    /// The array index of task `offset` of `job` (0 for a task of no array); `None`
    /// if the job is not in flight.
    pub(super) fn array_index(&self, job: JobId, offset: u32) -> Option<u32> {
        let entry = self.jobs.get(&job)?;
        Some(entry.array_index(offset).unwrap_or(0))
    }

    /// What the record of task `offset` of `job` takes from its job, while the job is
    /// in flight.
    pub(super) fn facts(&self, job: JobId, offset: u32) -> Option<super::results::JobFacts> {
        let entry = self.jobs.get(&job)?;
        Some(super::results::JobFacts {
            index: entry.array_index(offset),
            submitted_us: entry.submitted_us,
            dependency_failed: self.dependency_failed.get(&job).copied(),
        })
    }

    /// `job` is cancelled because `dependency`, which it needed to succeed, did not.
    pub(super) fn dependency_failed(&mut self, job: JobId, dependency: JobId) {
        self.dependency_failed.insert(job, dependency);
    }

    /// `job` finished: nothing more is said of it.
    pub(super) fn job_finished(&mut self, job: JobId) {
        self.dependency_failed.remove(&job);
    }

    /// The pilot's totals of durable results.
    pub(super) fn totals(&self) -> Totals {
        self.progress.totals()
    }

    /// `results` are durable: counted in their jobs and the totals; the waits they
    /// end are answered. Whether the root should now give freed memory back (see
    /// [`Progress::release_memory_now`]).
    pub(super) fn on_durable(&mut self, results: &[Arc<ResultRecord>]) -> bool {
        self.progress.count_results(&mut self.jobs, results);
        self.progress.answer_waits(&self.jobs, self.tasks);
        self.progress.release_memory_now(self.tasks)
    }

    /// Gives memory back after `results` more results once idle (tests).
    #[cfg(test)]
    pub(super) fn release_memory_after(&mut self, results: u64) {
        self.progress.release_after(results);
    }

    /// A `wait` for `jobs` (all when `None`): answered once every task of them has a
    /// durable result, or at once with an error if one is unknown.
    pub(super) fn wait(&mut self, jobs: Option<Vec<JobId>>, reply: Reply<WaitReport>) {
        if let Some(unknown) = jobs.iter().flatten().find(|j| !self.jobs.contains_key(j)) {
            let message = format!("unknown job {unknown}");
            let _ = reply.send(Err(error(ErrorKind::UnknownJob, message)));
            return;
        }
        self.progress.wait(jobs, reply, &self.jobs, self.tasks);
    }
}

/// The core's spec of a job request needing `needs` per task, without the estimate
/// class (which depends on the pilot's other jobs). An HPC job needs its ranks' cores
/// on each of its nodes, or all of the widest node's with `exclusive`.
fn base_spec(request: &JobRequest, needs: Resources, widest_node: u32) -> JobSpec {
    let spec = &request.spec;
    let (needs, placement) = match spec.layout() {
        Ok(Some(layout)) => {
            let cores = if layout.exclusive {
                layout.cores_per_node().max(widest_node)
            } else {
                layout.cores_per_node()
            };
            let needs = needs.with(saker_core::ResourceKind::CORES, cores.max(1));
            (
                needs,
                Placement::Gang {
                    nodes: layout.nodes,
                },
            )
        }
        _ => match spec.node {
            Some(node) => (
                needs,
                Placement::Node {
                    node: saker_core::NodeId(node),
                },
            ),
            None => (needs, Placement::Single),
        },
    };
    JobSpec {
        count: request.task_count() as u32,
        resources: needs,
        placement,
        priority: spec.priority,
        max_retries: spec.max_retries,
        max_replays: spec.max_replays,
        time_limit: limit_micros(spec.time_limit),
        class: 0,
        speculative: spec.idempotent,
    }
}

/// A time limit as the core plans with it: microseconds.
pub(super) fn limit_micros(limit: Option<std::time::Duration>) -> Option<u64> {
    limit.map(|t| u64::try_from(t.as_micros()).unwrap_or(u64::MAX))
}

/// A time limit as job definitions carry it: milliseconds, at least 1; 0 for none.
pub(super) fn limit_ms(limit: Option<std::time::Duration>) -> u64 {
    limit.map_or(0, |t| t.as_millis().max(1) as u64)
}

/// What a node needs to run job `job`, whose spec is `spec` (`core` as the core has it).
pub(super) fn job_def(
    job: JobId,
    spec: &saker_client::spec::TaskSpec,
    core: &JobSpec,
    inline_output: Option<u32>,
    is_array: bool,
) -> JobDef {
    let payload = match &spec.function {
        Some(function) => Payload::Function(Function {
            kind: function.kind.clone(),
            data: function.payload.clone(),
        }),
        None => Payload::Command(Command {
            argv: spec.command().into_owned(),
            env: spec
                .env
                .iter()
                .map(|(key, value)| EnvVar {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            cwd: spec.cwd.as_ref().map(|p| p.display().to_string()),
        }),
    };
    let hpc = spec.layout().ok().flatten().map(|layout| Hpc {
        ranks: layout.ranks,
        ranks_per_node: layout.ranks_per_node,
        cores_per_rank: layout.cores_per_rank,
        mpi: layout.mpi,
        launcher: layout.launcher,
    });
    JobDef {
        job,
        payload,
        resources: core.resources,
        placement: core.placement,
        hpc,
        time_limit_ms: limit_ms(spec.time_limit),
        inline_output_bytes: inline_output.unwrap_or(DEFAULT_INLINE_OUTPUT),
        is_array,
        reads: spec.reads.clone(),
        writes: spec.writes.clone(),
    }
}

#[cfg(test)]
mod tests;
