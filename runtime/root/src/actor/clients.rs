//! The root's side of clients: submissions, waits, cancels, result streams, status.
//!
//! The root never awaits a client. Replies are oneshots; a results stream is fed by a
//! small task of its own (history first, then live results from an unbounded
//! channel the root pushes to), so a slow reader slows only itself.

use std::sync::Arc;

use saker_core::{JobSpec, Placement, Resources};
use saker_wire::messages::{Command, EnvVar, Function, Hpc, JobDef, Launcher, Mpi, Payload};

use super::port::AfterJournal;
use super::resources::TooManyKinds;
use super::state::{JobEntry, LineBatch, RootState};
use crate::client::{
    CancelReport, ClientRequest, ErrorKind, HpcStatus, MAX_WAITED_RESULTS, NodeLoad, Reply,
    RequestError, StatusReport, SubmitReply, SubmitWait, SubmittedJob, SubmittedLines,
    UnstartedJob,
};
use crate::records::Record;
use crate::results::{JobId, TaskId};
use crate::spec::{JobLines, JobRequest, LauncherKind, MpiKind, plan};

/// Inline output kept per stream when a request does not say.
pub const DEFAULT_INLINE_OUTPUT: u32 = 4096;

pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError::new(kind, message)
}

impl RootState {
    pub(super) fn on_client(&mut self, request: ClientRequest) {
        match request {
            ClientRequest::Submit { jobs, wait, reply } => self.on_submit(jobs, wait, reply),
            ClientRequest::SubmitLines { lines, reply } => self.on_submit_lines(lines, reply),
            ClientRequest::Status { reply } => {
                let report = self.upkeep.walltime.status.clone();
                let _ = reply.send(Ok(report.unwrap_or_else(|| self.status())));
            }
            ClientRequest::Wait { jobs, reply } => {
                if let Some(unknown) = jobs
                    .iter()
                    .flatten()
                    .find(|j| !self.submissions.jobs.contains_key(j))
                {
                    let message = format!("unknown job {unknown}");
                    let _ = reply.send(Err(error(ErrorKind::UnknownJob, message)));
                    return;
                }

                let waiter = super::results::Waiter { jobs, reply };
                self.results.log.waiters.push(waiter);
                self.results.check_waiters(&self.submissions);
            }
            ClientRequest::Cancel { jobs, reply } => self.on_cancel(jobs, reply),
            ClientRequest::Results { from, follow, sink } => {
                self.results.on_results(&self.ctx, from, follow, sink)
            }
            ClientRequest::Result { task, reply } => {
                self.results
                    .on_result(&self.ctx, &self.upkeep.compaction.keep, task, reply)
            }
            ClientRequest::Provisioning { pause, reply } => {
                let answer = match self.upkeep.elastic.as_mut() {
                    Some(elastic) => {
                        elastic.pause(pause);
                        Ok(pause)
                    }
                    None => Err(error(
                        ErrorKind::Unavailable,
                        "this pilot is not elastic (saker pilot --elastic)",
                    )),
                };
                let _ = reply.send(answer);
            }
            ClientRequest::Shutdown {
                kill_running: _,
                reply,
            } => {
                self.on_shutdown();
                let _ = reply.send(Ok(()));
            }
            ClientRequest::Update {
                jobs,
                update,
                reply,
            } => self.on_update(jobs, update, reply),
            ClientRequest::ActorSpawn { spawn, reply } => {
                self.actors.on_actor_spawn(&mut self.ctx, spawn, reply)
            }
            ClientRequest::ActorCall {
                actor,
                data,
                cast,
                reply,
            } => self.actors.on_actor_call(
                &mut self.ctx,
                actor,
                data,
                cast,
                super::placed::Caller::Client(reply),
            ),
            ClientRequest::ActorStop { actor, reply } => {
                self.actors.on_actor_stop(&mut self.ctx, actor, reply)
            }
        }
    }

    fn on_submit(
        &mut self,
        mut requests: Vec<JobRequest>,
        wait: Option<SubmitWait>,
        reply: Reply<SubmitReply>,
    ) {
        if self.ctx.pilot.shutting_down {
            let _ = reply.send(Err(error(
                ErrorKind::Unavailable,
                "the pilot is shutting down",
            )));
            return;
        }
        // Accepted whole or not at all.
        for (position, request) in requests.iter().enumerate() {
            if let Err(problem) = request.validate() {
                let message = format!("job {position} of the submission: {problem}");
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
                return;
            }
            if request.task_count() > u64::from(u32::MAX) {
                let message =
                    format!("job {position} of the submission has more than 2^32-1 tasks");
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
                return;
            }
        }
        let tasks: u64 = requests.iter().map(JobRequest::task_count).sum();
        if wait == Some(SubmitWait::Results) && tasks > MAX_WAITED_RESULTS {
            let message = format!(
                "wait \"results\" takes submissions of at most {MAX_WAITED_RESULTS} tasks, this one has {tasks}; wait for \"counts\", or follow a results stream"
            );
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
            return;
        }
        // Jobs that wait for later ones of the submission go after them; their
        // dependencies become ids.
        let next_job = self.ctx.core.next_job().0;
        let (order, after) = match plan(&mut requests, next_job) {
            Ok(plan) => plan,
            Err(problem) => {
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
                return;
            }
        };
        // What the core would refuse, it refuses here, before any job is queued. New
        // resource names are numbered in a copy, kept only if all is accepted.
        let mut names = self.submissions.resource_names.clone();
        let mut specs = Vec::with_capacity(requests.len());
        for (position, request) in requests.iter().enumerate() {
            if let Err(problem) = self.check_fits(request) {
                let message = format!("job {position} of the submission: {problem}");
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
                return;
            }
            match names.vector(&request.spec) {
                Ok(needs) => specs.push(base_spec(request, needs, self.widest_node())),
                Err(problem) => {
                    let message = format!("job {position} of the submission: {problem}");
                    let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
                    return;
                }
            }
        }
        let ordered: Vec<JobSpec> = order.iter().map(|&position| specs[position]).collect();
        if let Err((at, problem)) = self.ctx.core.check_submissions(&ordered) {
            let message = format!("job {} of the submission: {problem}", order[at]);
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
            return;
        }
        self.submissions.resource_names = names;
        let submitted_us = self.ctx.timestamp().unix_micros();
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
            let job = match self.register_job(&request, spec, &after[position], submitted_us) {
                Ok(job) => job,
                Err(problem) => {
                    // Not reached: the batch was checked above. Should it be, the
                    // jobs queued so far are journaled and acknowledged, not lost.
                    tracing::error!(%problem, "submission refused by the core after its check");
                    break;
                }
            };
            self.start_schedule(job.job, &request, submitted_us);
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
        let jobs = submitted.into_iter().flatten().collect();
        match wait {
            // Acknowledged only once durable: an acknowledged submission survives a crash.
            None => self
                .ctx
                .append(records, AfterJournal::Acknowledge { reply, jobs }),
            // Answered once its results are durable, which they become after it (the
            // journal keeps order); a journal that fails stops the pilot, and the
            // dropped answer tells the client.
            Some(wait) => {
                self.ctx.append(records, AfterJournal::Nothing);
                self.results.log.submit_waiters.add(jobs, wait, reply);
            }
        }
    }

    /// Queues a validated job as `spec` in the core and keeps what agents need to
    /// run it.
    pub(super) fn register_job(
        &mut self,
        request: &JobRequest,
        spec: JobSpec,
        after: &[saker_core::Dependency],
        submitted_us: u64,
    ) -> Result<saker_core::SubmittedJob, saker_core::SubmitError> {
        let not_before = self.core_time(request.spec.not_before);
        let job = self
            .ctx
            .core
            .handle_submit_at(spec, after, not_before, self.ctx.now())?;
        self.keep_job(job.job, request, &spec, submitted_us);
        Ok(job)
    }

    /// Keeps what agents need to run a job the core has accepted.
    pub(super) fn keep_job(
        &mut self,
        job: JobId,
        request: &JobRequest,
        core: &JobSpec,
        submitted_us: u64,
    ) {
        self.results.log.totals.tasks += request.task_count();
        let def = job_def(
            job,
            &request.spec,
            core,
            request.inline_output,
            request.array.is_some(),
        );
        self.submissions.jobs.insert(
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
        self.items
            .note_reads(&mut self.ctx, job, &request.spec.reads);
    }

    /// Queues one single-task job per command of `lines` (validated by the client
    /// server), journals them as one record, and answers once it is durable.
    fn on_submit_lines(&mut self, lines: Box<JobLines>, reply: Reply<SubmittedLines>) {
        if self.ctx.pilot.shutting_down {
            let _ = reply.send(Err(error(
                ErrorKind::Unavailable,
                "the pilot is shutting down",
            )));
            return;
        }
        let lines: Arc<JobLines> = Arc::from(lines);
        // Every job is the template with its command: checked once.
        let first = JobRequest {
            spec: lines.spec(0),
            array: None,
            inline_output: lines.inline_output,
        };
        if let Err(problem) = self.check_fits(&first) {
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
            return;
        }
        let mut names = self.submissions.resource_names.clone();
        let spec = match names.vector(&first.spec) {
            Ok(needs) => base_spec(&first, needs, self.widest_node()),
            Err(problem) => {
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
                return;
            }
        };
        if let Err((_, problem)) = self.ctx.core.check_submissions(&[spec]) {
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
            return;
        }
        self.submissions.resource_names = names;
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
        let submitted_us = self.ctx.timestamp().unix_micros();
        let not_before = self.core_time(first.spec.not_before);
        let now = self.ctx.now();
        let first_job = self.ctx.core.next_job();
        let mut first_task = None;
        self.submissions.jobs.add_lines(
            first_job,
            Arc::new(LineBatch {
                lines: Arc::clone(&lines),
                proto,
                submitted_us,
            }),
        );
        for _ in 0..lines.len() {
            let job = match self.ctx.core.handle_submit_at(spec, &[], not_before, now) {
                Ok(job) => job,
                Err(problem) => {
                    // Not reached: the spec was checked above.
                    tracing::error!(%problem, "submit_lines refused by the core after its check");
                    let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
                    return;
                }
            };
            first_task.get_or_insert(job.first_task);
        }
        // The jobs' entries are the batch's (see `JobTable::add_lines`).
        self.results.log.totals.tasks += lines.len() as u64;
        let first_task = first_task.unwrap_or(TaskId(0));
        let submitted = SubmittedLines {
            first_job,
            first_task,
            count: lines.len() as u64,
        };
        self.ctx.append(
            vec![Record::SubmitLines {
                first_job,
                first_task,
                submitted_unix_us: submitted_us,
                lines,
            }],
            AfterJournal::AcknowledgeLines { reply, submitted },
        );
    }

    fn on_cancel(&mut self, jobs: Vec<JobId>, reply: Reply<CancelReport>) {
        if let Some(unknown) = jobs.iter().find(|j| !self.submissions.jobs.contains_key(j)) {
            let _ = reply.send(Err(error(
                ErrorKind::UnknownJob,
                format!("unknown job {unknown}"),
            )));
            return;
        }
        let now = self.ctx.now();
        let mut cancelled = 0;
        let mut records = Vec::new();
        for job in jobs {
            match self.ctx.core.handle_cancel_job(job, now) {
                Ok(summary) => cancelled += summary.cancelled + summary.attempts_signalled,
                Err(problem) => tracing::warn!(%problem, job = job.0, "cancel"),
            }
            records.push(Record::Cancel {
                job,
                unix_us: self.ctx.timestamp().unix_micros(),
            });
        }
        self.ctx.append(records, AfterJournal::Nothing);
        let _ = reply.send(Ok(CancelReport { cancelled }));
    }

    pub(super) fn on_shutdown(&mut self) {
        self.ctx.pilot.shutting_down = true;
        self.cancel_pending_allocations();
        self.ctx.port.shutdown_requested();
        self.broadcast_shutdown();
        // Dropping the live senders ends follow streams with `end`.
        self.results.log.followers.clear();
    }

    pub(super) fn status(&self) -> StatusReport {
        let counts = self.ctx.core.counts();
        let (failed, cancelled) = (
            self.results.log.totals.failed,
            self.results.log.totals.cancelled,
        );
        let durable = self.results.log.totals.durable;
        StatusReport {
            pilot_id: self.ctx.pilot.id.clone(),
            queued: counts.queued + counts.delayed,
            waiting: counts.waiting,
            running: counts.assigned + counts.running,
            succeeded: durable.saturating_sub(failed + cancelled),
            failed,
            cancelled,
            duplicates: counts.duplicates,
            retries: counts.retries,
            replays: counts.replays,
            speculated: counts.speculated,
            agents: self.ctx.nodes.len() as u32,
            slots: self.ctx.nodes.values().map(|n| n.cores).sum(),
            busy_slots: self
                .ctx
                .nodes
                .values()
                .map(|n| n.running.min(n.cores))
                .sum(),
            rate: self
                .results
                .log
                .rate
                .rate(self.ctx.now(), self.results.log.index.len()),
            rate_minute: self.results.log.minute.rate(self.ctx.now(), durable),
            stages: self.results.log.stages.summaries(),
            allocations: self
                .upkeep
                .elastic
                .as_ref()
                .map(|e| e.statuses(self.ctx.timestamp().unix_micros()))
                .unwrap_or_default(),
            provisioning_paused: self.upkeep.elastic.as_ref().is_some_and(|e| e.paused()),
            provisioning_rounds: self.upkeep.elastic.as_ref().map_or(0, |e| e.rounds()),
            jobs: self.submissions.jobs.len() as u64,
            allocation: self.ctx.pilot.allocation.clone().map(|mut allocation| {
                let now = self.ctx.timestamp().unix_micros();
                allocation.seconds_left = allocation
                    .end_time
                    .map(|end| end.unix_micros().saturating_sub(now) / 1_000_000);
                allocation
            }),
            nodes: self.node_loads(),
            beyond_deadline: counts.beyond_deadline,
            walltime_reached: self.upkeep.walltime.reached,
            unstarted: if self.upkeep.walltime.reached {
                let summary = self.ctx.core.unstarted();
                summary
                    .jobs
                    .into_iter()
                    .map(|(job, tasks)| UnstartedJob { job, tasks })
                    .collect()
            } else {
                Vec::new()
            },
            hpc: self.hpc_status(),
            actors: self.actors.live(),
            max_nodes: self.ctx.pilot.max_nodes,
            periodic: self.schedules.len() as u64,
            items: self.items.len() as u64,
            data_moved_bytes: self.items.moved_bytes,
        }
    }

    fn hpc_status(&self) -> HpcStatus {
        let (waiting, running) = self.ctx.core.gang_counts();
        let reservation = self.ctx.core.reservation();
        HpcStatus {
            running,
            waiting,
            reserved_for: reservation.as_ref().map(|held| held.job),
            reserved_nodes: reservation
                .as_ref()
                .map(|held| {
                    held.nodes
                        .iter()
                        .map(|n| self.ctx.hostname_of(*n))
                        .collect()
                })
                .unwrap_or_default(),
            reserved_seconds: reservation.and_then(|held| held.start).map(|start| {
                start.as_micros().saturating_sub(self.ctx.now().as_micros()) as f64 / 1e6
            }),
        }
    }
}

impl RootState {
    fn node_loads(&self) -> Vec<NodeLoad> {
        let mut loads: Vec<NodeLoad> = self
            .ctx
            .nodes
            .iter()
            .map(|(id, node)| NodeLoad {
                node: *id,
                hostname: node.hostname.clone(),
                cores: node.cores,
                busy: node.running.min(node.cores),
                gpus: node.capacity.gpu_count(),
                memory_mib: node.capacity.memory_mib(),
                resources: saker_core::ResourceKind::all()
                    .filter_map(|kind| {
                        let name = self.submissions.resource_names.name(kind.custom_index()?)?;
                        let amount = node.capacity.get(kind);
                        (amount > 0).then(|| (name.to_owned(), amount))
                    })
                    .collect(),
            })
            .collect();
        loads.sort_by_key(|load| load.node);
        loads
    }
}

impl RootState {
    /// What the core needs to know of a job request. Jobs with the same set of tags
    /// share one runtime estimate (for stragglers); untagged jobs share class 0.
    /// Errors only if the request names one custom resource more than the pilot can
    /// number (checked before a submission is accepted).
    pub(super) fn core_spec(&mut self, request: &JobRequest) -> Result<JobSpec, TooManyKinds> {
        let needs = self.submissions.resource_names.vector(&request.spec)?;
        let spec = base_spec(request, needs, self.widest_node());
        Ok(JobSpec {
            class: self.class_of(&request.spec.tags),
            ..spec
        })
    }

    /// The core's time for a wall-clock time (`None` for none, or one already past).
    pub(super) fn core_time(
        &self,
        at: Option<crate::results::Timestamp>,
    ) -> Option<saker_core::Time> {
        let wall = self.ctx.timestamp().unix_micros();
        let ahead = at?
            .unix_micros()
            .checked_sub(wall)
            .filter(|ahead| *ahead > 0)?;
        Some(self.ctx.now().saturating_add_micros(ahead))
    }

    /// Cores of the widest node (what `exclusive` holds of a node): of those that
    /// joined, or of what the pilot was started with; 0 if neither is known.
    fn widest_node(&self) -> u32 {
        let joined = self.ctx.nodes.values().map(|node| node.cores).max();
        let expected = self.ctx.pilot.expected_node.as_ref().map(|node| node.cores);
        joined.max(expected).unwrap_or(0)
    }

    /// Whether a job can ever run on this pilot's nodes: resources some node offers,
    /// a node it has; for an HPC job no more nodes than it will have, and no more
    /// cores per node than the widest.
    fn check_fits(&self, request: &JobRequest) -> Result<(), String> {
        self.check_resources(&request.spec)?;
        if !request.spec.writes.is_empty() && request.task_count() > 1 {
            return Err(format!(
                "its {} tasks would all write the same data items: writes are for single tasks",
                request.task_count()
            ));
        }
        if let (Some(node), Some(most)) = (request.spec.node, self.ctx.pilot.max_nodes)
            && node >= most
        {
            return Err(format!(
                "it asks for node {node}; this pilot's nodes are 0 to {}",
                most.saturating_sub(1)
            ));
        }
        let Ok(Some(layout)) = request.spec.layout() else {
            return Ok(());
        };
        if let Some(most) = self.ctx.pilot.max_nodes
            && layout.nodes > most
        {
            return Err(format!(
                "it asks for {} nodes; this pilot has at most {most}",
                layout.nodes
            ));
        }
        let widest = self.widest_node();
        if widest > 0 && layout.cores_per_node() > widest {
            return Err(format!(
                "it needs {} cores on each node ({} ranks of {} cores); the widest node has {widest}",
                layout.cores_per_node(),
                layout.ranks_per_node,
                layout.cores_per_rank
            ));
        }
        if layout.launcher == LauncherKind::Srun && self.ctx.pilot.allocation.is_none() {
            return Err(
                "launcher srun needs a Slurm allocation: this pilot runs outside one".into(),
            );
        }
        if layout.exclusive && widest == 0 {
            return Err("--exclusive needs a node to have joined, to know its size".into());
        }
        Ok(())
    }

    /// The runtime estimate class of a set of tags, numbering a new set.
    fn class_of(&mut self, tags: &[String]) -> u32 {
        if tags.is_empty() {
            return 0;
        }
        let mut tags = tags.to_vec();
        tags.sort_unstable();
        tags.dedup();
        let next = self.submissions.classes.len() as u32 + 1;
        *self.submissions.classes.entry(tags).or_insert(next)
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
        mpi: match layout.mpi {
            MpiKind::None => Mpi::None,
            MpiKind::Openmpi => Mpi::OpenMpi,
            MpiKind::Mpich => Mpi::Mpich,
        },
        launcher: match layout.launcher {
            LauncherKind::Agents => Launcher::Agents,
            LauncherKind::Srun => Launcher::Srun,
        },
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
