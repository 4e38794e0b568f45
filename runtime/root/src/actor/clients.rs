//! The root's side of clients: submissions, waits, cancels, result streams, status.
//!
//! The root never awaits a client. Replies are oneshots; a results stream is fed by a
//! small task of its own (history first, then live results from an unbounded
//! channel the root pushes to), so a slow reader slows only itself.

use super::port::AfterJournal;
use super::state::RootState;
use crate::client::{
    CancelReport, ClientRequest, ErrorKind, HpcStatus, NodeLoad, Reply, RequestError, StatusReport,
    SubmitReply, SubmitWait, SubmittedLines, UnstartedJob,
};
use crate::records::Record;
use crate::results::JobId;
use crate::spec::{JobLines, JobRequest};

/// Inline output kept per stream when a request does not say.
pub const DEFAULT_INLINE_OUTPUT: u32 = 4096;

pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError::new(kind, message)
}

fn shutting_down() -> RequestError {
    error(ErrorKind::Unavailable, "the pilot is shutting down")
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
        requests: Vec<JobRequest>,
        wait: Option<SubmitWait>,
        reply: Reply<SubmitReply>,
    ) {
        if self.ctx.pilot.shutting_down {
            let _ = reply.send(Err(shutting_down()));
            return;
        }
        let accepted = match self.submissions.submit(&mut self.ctx, requests, wait) {
            Ok(accepted) => accepted,
            Err(refused) => {
                let _ = reply.send(Err(refused));
                return;
            }
        };
        for record in &accepted.records {
            self.note_submitted(record);
        }
        let jobs = accepted.jobs;
        match wait {
            // Acknowledged only once durable: an acknowledged submission survives a crash.
            None => self
                .ctx
                .append(accepted.records, AfterJournal::Acknowledge { reply, jobs }),
            // Answered once its results are durable, which they become after it (the
            // journal keeps order); a journal that fails stops the pilot, and the
            // dropped answer tells the client.
            Some(wait) => {
                self.ctx.append(accepted.records, AfterJournal::Nothing);
                self.results.log.submit_waiters.add(jobs, wait, reply);
            }
        }
    }

    /// What a new job means beside its entry: the data items it reads, a schedule.
    pub(super) fn note_submitted(&mut self, record: &Record) {
        if let Record::Submit {
            job,
            request,
            submitted_unix_us,
            ..
        } = record
        {
            self.items
                .note_reads(&mut self.ctx, *job, &request.spec.reads);
            self.schedules
                .start_schedule(*job, request, *submitted_unix_us);
        }
    }

    fn on_submit_lines(&mut self, lines: Box<JobLines>, reply: Reply<SubmittedLines>) {
        if self.ctx.pilot.shutting_down {
            let _ = reply.send(Err(shutting_down()));
            return;
        }
        match self.submissions.submit_lines(&mut self.ctx, lines) {
            Ok((submitted, record)) => self.ctx.append(
                vec![record],
                AfterJournal::AcknowledgeLines { reply, submitted },
            ),
            Err(refused) => {
                let _ = reply.send(Err(refused));
            }
        }
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
