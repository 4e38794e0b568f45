//! Clients' updates of jobs that have not ended (`update`): a new priority, not-before
//! time or time limit for their tasks that have not started. All the jobs of a request
//! are updated or none; each update is journaled and the request answered once it is
//! durable, so an answered update survives a crash (a resume folds the journaled
//! updates into the jobs' requests before it queues them again).
//!
//! A new time limit also reaches the agents: each node that holds the job's definition
//! gets the new one at once, which replaces its copy, so an attempt waiting in its
//! local queue starts under the new limit. One that started before keeps the limit it
//! started with.

use std::collections::BTreeSet;
use std::sync::Arc;

use saker_core::{JobId, UpdateError};
use saker_wire::messages::{Dispatch, JobDef, ToAgent};

use super::clients::error;
use super::ctx::Ctx;
use super::journal::AfterJournal;
use super::submissions::Submissions;
use super::submissions::{limit_micros, limit_ms};
use crate::client::{ErrorKind, JobUpdate, Reply, UpdateReport};
use crate::records::Record;

impl Submissions {
    pub(super) fn on_update(
        &mut self,
        ctx: &mut Ctx,
        jobs: Vec<JobId>,
        update: JobUpdate,
        reply: Reply<UpdateReport>,
    ) {
        if let Err(problem) = update.validate() {
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
            return;
        }
        for &job in &jobs {
            if let Err(problem) = ctx.core.check_update(job) {
                let kind = match problem {
                    UpdateError::UnknownJob { .. } => ErrorKind::UnknownJob,
                    UpdateError::Ended { .. } => ErrorKind::JobEnded,
                };
                let _ = reply.send(Err(error(kind, problem.to_string())));
                return;
            }
        }
        let unix_us = ctx.timestamp().unix_micros();
        let mut records = Vec::with_capacity(jobs.len());
        for job in jobs {
            if let Err(problem) = self.apply_update(ctx, job, update) {
                // Not reached: every job was checked above, and nothing ends meanwhile.
                tracing::error!(%problem, "update refused by the core after its check");
                continue;
            }
            records.push(Record::Update {
                job,
                update,
                unix_us,
            });
        }
        let report = UpdateReport {
            updated: records.len() as u64,
        };
        ctx.append(records, AfterJournal::Updated { reply, report });
    }

    /// Applies `update` to job `job` in the core and in its definition.
    fn apply_update(
        &mut self,
        ctx: &mut Ctx,
        job: JobId,
        update: JobUpdate,
    ) -> Result<(), UpdateError> {
        let now = ctx.now();
        if let Some(priority) = update.priority {
            ctx.core.handle_update_priority(job, priority, now)?;
        }
        if let Some(not_before) = update.not_before {
            let at = ctx.core_time(not_before);
            ctx.core.handle_update_not_before(job, at, now)?;
        }
        if let Some(limit) = update.time_limit {
            ctx.core
                .handle_update_time_limit(job, limit_micros(limit), now)?;
            self.redefine(ctx, job, limit_ms(limit));
        }
        Ok(())
    }

    /// Gives job `job` a definition with `time_limit_ms` and sends it to every node
    /// that holds the old one, where it replaces it before any queued attempt starts.
    fn redefine(&mut self, ctx: &mut Ctx, job: JobId, time_limit_ms: u64) {
        let Some(old) = self.jobs.def(job) else {
            return;
        };
        if old.time_limit_ms == time_limit_ms {
            return;
        }
        let def = Arc::new(JobDef {
            time_limit_ms,
            ..JobDef::clone(&old)
        });
        let Some(entry) = self.jobs.get_mut(&job) else {
            return;
        };
        entry.def = Arc::clone(&def);
        // A node may appear twice across lives; it gets the definition once.
        let holders: BTreeSet<_> = entry.known_by.iter().copied().collect();
        for node_id in holders {
            let Some(node) = ctx.nodes.get_mut(&node_id) else {
                continue;
            };
            if !node.known_jobs.contains(&job) {
                continue;
            }
            let message = ToAgent::Dispatch(Dispatch {
                jobs: vec![Arc::clone(&def)],
                tasks: Vec::new(),
                forget: std::mem::take(&mut node.forget),
                gang: None,
            });
            let link = node.link;
            ctx.send_to(link, node_id, &message);
        }
    }
}
