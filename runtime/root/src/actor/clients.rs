//! The root's side of clients: submissions, waits, cancels, result streams, status.
//!
//! The root never awaits a client. Replies are oneshots; a results stream is fed by a
//! small task of its own (history first, then live results from an unbounded
//! channel the root pushes to), so a slow reader slows only itself.

use super::journal::AfterJournal;
use super::placed::Caller;
use super::replies::{disk_full, error, shutting_down};
use super::state::RootState;
use crate::client::{ClientRequest, Reply};
use crate::records::Record;
use saker_client::protocol::{NodeStore, ObjectHoldersReport, PutObjectRequest, StoresReport};
use saker_client::results::JobId;
use saker_client::spec::{JobLines, JobRequest};
use saker_client::{CancelReport, ErrorKind, SubmitReply, SubmitWait, SubmittedLines};

impl RootState {
    pub(super) fn on_client(&mut self, request: ClientRequest) {
        match request {
            ClientRequest::Submit { jobs, wait, reply } => self.on_submit(jobs, wait, reply),
            ClientRequest::SubmitLines { lines, reply } => self.on_submit_lines(lines, reply),
            ClientRequest::Status { jobs, reply } => {
                let _ = reply.send(self.answer_status(jobs));
            }
            ClientRequest::Wait { jobs, reply } => self.submissions.wait(jobs, reply),
            ClientRequest::Cancel { jobs, reply } => self.on_cancel(jobs, reply),
            ClientRequest::Results { from, follow, sink } => {
                self.results.on_results(&self.ctx, from, follow, sink)
            }
            ClientRequest::Result { task, reply } => {
                let keep = self.upkeep.compaction.keep();
                self.results.on_result(&self.ctx, &keep, task, reply)
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
            ClientRequest::Update { reply, .. } if self.ctx.journal.waiting_for_space() => {
                let _ = reply.send(Err(disk_full()));
            }
            ClientRequest::Update {
                jobs,
                update,
                reply,
            } => {
                let redefined = self
                    .submissions
                    .on_update(&mut self.ctx, jobs, update, reply);
                for def in redefined {
                    self.nodes.redefine(&mut self.ctx, &def);
                }
            }
            ClientRequest::ActorSpawn { spawn, reply } => {
                self.actors
                    .on_actor_spawn(&mut self.ctx, &self.nodes, spawn, reply)
            }
            ClientRequest::ActorCall {
                actor,
                data,
                cast,
                reply,
            } => self.actors.on_actor_call(
                &mut self.ctx,
                &self.nodes,
                actor,
                data,
                cast,
                Caller::Client(reply),
            ),
            ClientRequest::ActorStop { actor, reply } => {
                self.actors
                    .on_actor_stop(&mut self.ctx, &self.nodes, actor, reply)
            }
            ClientRequest::Stores { reply } => {
                let _ = reply.send(Ok(self.stores()));
            }
            ClientRequest::PutObject { put, reply } => self.on_put_object(put, reply),
            ClientRequest::ObjectHolders { object, reply } => {
                let _ = reply.send(Ok(self.object_holders(object)));
            }
            ClientRequest::FreeObjects { objects, reply } => {
                let items = objects
                    .into_iter()
                    .map(saker_client::spec::object_item)
                    .collect();
                self.items.free(&mut self.ctx, &self.nodes, items, reply);
            }
        }
    }

    fn stores(&self) -> StoresReport {
        let mut stores: Vec<NodeStore> = self
            .nodes
            .iter()
            .map(|(node, entry)| node_store(node, entry))
            .collect();
        stores.sort_unstable_by_key(|store| store.node);
        StoresReport { stores }
    }

    /// The live holders of `object`, each client starting at another one (as
    /// readers of an item do), so that many readers spread over its copies.
    fn object_holders(&mut self, object: saker_core::ObjectId) -> ObjectHoldersReport {
        let item = saker_client::spec::object_item(object);
        let holders = self
            .items
            .holders_for_client(&self.nodes, &item)
            .into_iter()
            .filter_map(|node| Some(node_store(node, self.nodes.get(node)?)))
            .collect();
        ObjectHoldersReport { holders }
    }

    fn on_put_object(&mut self, put: PutObjectRequest, reply: Reply<()>) {
        if self.ctx.journal.waiting_for_space() {
            let _ = reply.send(Err(disk_full()));
            return;
        }
        if !self.nodes.contains(put.node) {
            let message = format!(
                "node {} is not live: put the object on a live node",
                put.node
            );
            let _ = reply.send(Err(error(ErrorKind::UnknownNode, message)));
            return;
        }
        let item = saker_client::spec::object_item(put.object);
        self.items
            .on_put(&mut self.ctx, &self.nodes, put.node, item, put.bytes, reply);
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
        if self.ctx.journal.waiting_for_space() {
            let _ = reply.send(Err(disk_full()));
            return;
        }
        let offered = self.nodes.offered();
        let accepted = match self
            .submissions
            .submit(&mut self.ctx, offered, requests, wait)
        {
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
                self.results.wait_for_submitted(jobs, wait, reply);
            }
        }
    }

    fn on_submit_lines(&mut self, lines: Box<JobLines>, reply: Reply<SubmittedLines>) {
        if self.ctx.pilot.shutting_down {
            let _ = reply.send(Err(shutting_down()));
            return;
        }
        if self.ctx.journal.waiting_for_space() {
            let _ = reply.send(Err(disk_full()));
            return;
        }
        let offered = self.nodes.offered();
        match self.submissions.submit_lines(&mut self.ctx, offered, lines) {
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
        if let Some(unknown) = jobs.iter().find(|j| !self.submissions.contains(**j)) {
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
}

fn node_store(node: saker_core::NodeId, entry: &super::nodes::Node) -> NodeStore {
    NodeStore {
        node,
        host: entry.hostname().to_owned(),
        scratch: entry.scratch().to_owned(),
        data: entry.data_addr().to_owned(),
    }
}
