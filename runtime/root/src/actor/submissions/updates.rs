//! Clients' updates of jobs that have not ended (`update`): a new priority, not-before
//! time or time limit for their tasks that have not started. All the jobs of a request
//! are updated or none; each update is journaled and the request answered once it is
//! durable, so an answered update survives a crash (a resume folds the journaled
//! updates into the jobs' requests before it queues them again).
//!
//! A new time limit also reaches the agents: the job gets a new definition, which the
//! router sends at once to each node that holds the old one
//! ([`Nodes::redefine`](crate::actor::nodes::Nodes::redefine)), where it replaces its
//! copy, so an attempt waiting in its local queue starts under the new limit. One that
//! started before keeps the limit it started with.

use std::sync::Arc;

use saker_core::{JobId, UpdateError};
use saker_wire::messages::JobDef;

use super::{Submissions, limit_micros, limit_ms};
use crate::actor::ctx::Ctx;
use crate::actor::journal::AfterJournal;
use crate::actor::replies::error;
use crate::client::Reply;
use crate::records::Record;
use saker_client::{ErrorKind, JobUpdate, UpdateReport};

impl Submissions {
    /// Updates `jobs` whole or not at all, journals the update and answers once it is
    /// durable. The new definitions of jobs whose time limit changed, for the nodes
    /// that hold the old ones.
    pub(crate) fn on_update(
        &mut self,
        ctx: &mut Ctx,
        jobs: Vec<JobId>,
        update: JobUpdate,
        reply: Reply<UpdateReport>,
    ) -> Vec<Arc<JobDef>> {
        if let Err(problem) = update.validate() {
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, problem.to_string())));
            return Vec::new();
        }
        for &job in &jobs {
            if let Err(problem) = ctx.core.check_update(job) {
                let kind = match problem {
                    UpdateError::UnknownJob { .. } => ErrorKind::UnknownJob,
                    UpdateError::Ended { .. } => ErrorKind::JobEnded,
                };
                let _ = reply.send(Err(error(kind, problem.to_string())));
                return Vec::new();
            }
        }
        let unix_us = ctx.timestamp().unix_micros();
        let mut records = Vec::with_capacity(jobs.len());
        let mut redefined = Vec::new();
        for job in jobs {
            match self.apply_update(ctx, job, update) {
                Ok(def) => redefined.extend(def),
                Err(problem) => {
                    // Not reached: every job was checked above, and nothing ends
                    // meanwhile.
                    tracing::error!(%problem, "update refused by the core after its check");
                    continue;
                }
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
        redefined
    }

    /// Applies `update` to job `job` in the core and in its definition; its new
    /// definition, if that changed.
    fn apply_update(
        &mut self,
        ctx: &mut Ctx,
        job: JobId,
        update: JobUpdate,
    ) -> Result<Option<Arc<JobDef>>, UpdateError> {
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
            return Ok(self.redefine(job, limit_ms(limit)));
        }
        Ok(None)
    }

    /// Gives job `job` a definition with `time_limit_ms`, if that is new.
    fn redefine(&mut self, job: JobId, time_limit_ms: u64) -> Option<Arc<JobDef>> {
        let old = self.jobs.def(job)?;
        if old.time_limit_ms == time_limit_ms {
            return None;
        }
        let def = Arc::new(JobDef {
            time_limit_ms,
            ..JobDef::clone(&old)
        });
        let entry = self.jobs.get_mut(&job)?;
        entry.def = Arc::clone(&def);
        Some(def)
    }
}
