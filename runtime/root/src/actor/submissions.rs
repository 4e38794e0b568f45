//! Jobs as submitted, and what a submission is checked against: the job table (what
//! agents need to run each job), the runtime-estimate classes of tag sets, the numbers
//! of named resources, and why a job was cancelled for its dependency.

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::{JobId, JobSpec, Placement, Resources, TaskId};
use saker_wire::messages::{Command, EnvVar, Function, Hpc, JobDef, Payload};

use super::clients::{DEFAULT_INLINE_OUTPUT, error};
use super::ctx::Ctx;
use super::jobs::{JobEntry, JobTable, LineBatch};
use super::resources::{ResourceNames, TooManyKinds};
use crate::client::{
    ErrorKind, MAX_WAITED_RESULTS, RequestError, SubmitWait, SubmittedJob, SubmittedLines,
};
use crate::records::Record;
use crate::spec::{JobLines, JobRequest, plan};

#[derive(Debug)]
pub(super) struct Submissions {
    pub jobs: JobTable,
    /// Runtime estimate class of each set of tags (sorted), numbered from 1.
    pub classes: HashMap<Vec<String>, u32>,
    /// The custom resource kinds this pilot has numbered.
    pub resource_names: ResourceNames,
    /// Jobs cancelled because a job they needed to succeed did not, with that job
    /// (their results say so), until they finish.
    pub dependency_failed: HashMap<JobId, JobId>,
    /// Tasks submitted, pilot-wide.
    pub tasks: u64,
}

/// A submission accepted: its jobs in the request's order, and its journal records
/// (one per job, in id order).
#[derive(Debug)]
pub(super) struct Accepted {
    pub jobs: Vec<SubmittedJob>,
    pub records: Vec<Record>,
}

impl Submissions {
    pub(super) fn submit(
        &mut self,
        ctx: &mut Ctx,
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
        let mut names = self.resource_names.clone();
        let mut specs = Vec::with_capacity(requests.len());
        for (position, request) in requests.iter().enumerate() {
            if let Err(problem) = ctx.check_fits(&self.resource_names, request) {
                let message = format!("job {position} of the submission: {problem}");
                return Err(error(ErrorKind::InvalidSpec, message));
            }
            match names.vector(&request.spec) {
                Ok(needs) => specs.push(base_spec(request, needs, ctx.widest_node())),
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
            let job = match self.register(ctx, &request, spec, &after[position], submitted_us) {
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

    /// Queues a validated job as `spec` in the core and keeps what agents need to
    /// run it (its data reads are for the caller to note).
    pub(super) fn register(
        &mut self,
        ctx: &mut Ctx,
        request: &JobRequest,
        spec: JobSpec,
        after: &[saker_core::Dependency],
        submitted_us: u64,
    ) -> Result<saker_core::SubmittedJob, saker_core::SubmitError> {
        let not_before = ctx.core_time(request.spec.not_before);
        let job = ctx
            .core
            .handle_submit_at(spec, after, not_before, ctx.now())?;
        self.keep(job.job, request, &spec, submitted_us);
        Ok(job)
    }

    /// Keeps what agents need to run a job the core has accepted.
    pub(super) fn keep(
        &mut self,
        job: JobId,
        request: &JobRequest,
        core: &JobSpec,
        submitted_us: u64,
    ) {
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
                known_by: Vec::new(),
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
        lines: Box<JobLines>,
    ) -> Result<(SubmittedLines, Record), RequestError> {
        let lines: Arc<JobLines> = Arc::from(lines);
        // Every job is the template with its command: checked once.
        let first = JobRequest {
            spec: lines.spec(0),
            array: None,
            inline_output: lines.inline_output,
        };
        if let Err(problem) = ctx.check_fits(&self.resource_names, &first) {
            return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
        }
        let mut names = self.resource_names.clone();
        let spec = match names.vector(&first.spec) {
            Ok(needs) => base_spec(&first, needs, ctx.widest_node()),
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
        let proto = Arc::new(job_def(
            JobId(0),
            &first.spec,
            &spec,
            lines.inline_output,
            false,
        ));
        let submitted_us = ctx.timestamp().unix_micros();
        let not_before = ctx.core_time(first.spec.not_before);
        let now = ctx.now();
        let first_job = ctx.core.next_job();
        let mut first_task = None;
        self.jobs.add_lines(
            first_job,
            Arc::new(LineBatch {
                lines: Arc::clone(&lines),
                proto,
                submitted_us,
            }),
        );
        for _ in 0..lines.len() {
            let job = match ctx.core.handle_submit_at(spec, &[], not_before, now) {
                Ok(job) => job,
                Err(problem) => {
                    // Not reached: the spec was checked above.
                    tracing::error!(%problem, "submit_lines refused by the core after its check");
                    return Err(error(ErrorKind::InvalidSpec, problem.to_string()));
                }
            };
            first_task.get_or_insert(job.first_task);
        }
        // The jobs' entries are the batch's (see `JobTable::add_lines`).
        self.tasks += lines.len() as u64;
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

    /// What the core needs to know of a job request. Jobs with the same set of tags
    /// share one runtime estimate (for stragglers); untagged jobs share class 0.
    /// Errors only if the request names one custom resource more than the pilot can
    /// number (checked before a submission is accepted).
    pub(super) fn core_spec(
        &mut self,
        ctx: &Ctx,
        request: &JobRequest,
    ) -> Result<JobSpec, TooManyKinds> {
        let needs = self.resource_names.vector(&request.spec)?;
        let spec = base_spec(request, needs, ctx.widest_node());
        Ok(JobSpec {
            class: self.class_of(&request.spec.tags),
            ..spec
        })
    }

    /// The runtime estimate class of a set of tags, numbering a new set.
    pub(super) fn class_of(&mut self, tags: &[String]) -> u32 {
        if tags.is_empty() {
            return 0;
        }
        let mut tags = tags.to_vec();
        tags.sort_unstable();
        tags.dedup();
        let next = self.classes.len() as u32 + 1;
        *self.classes.entry(tags).or_insert(next)
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
    spec: &crate::spec::TaskSpec,
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
