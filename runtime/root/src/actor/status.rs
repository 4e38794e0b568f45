//! The read-only status view: what `status` answers, read from every owner's state
//! at once. Nothing here changes the root.

use super::replies::error;
use super::state::RootState;
use saker_client::results::JobId;
use saker_client::{
    ErrorKind, HpcStatus, JobTaskCounts, NodeLoad, RequestError, StatusReport, UnstartedJob,
};

impl RootState {
    /// The answer to `status`: the pilot's picture (the one its walltime deadline
    /// left, once reached), with `jobs`' counts as the scheduler has them now.
    pub(super) fn answer_status(
        &self,
        jobs: Option<Vec<JobId>>,
    ) -> Result<StatusReport, RequestError> {
        let job_counts = match jobs {
            None => None,
            Some(jobs) => Some(
                jobs.into_iter()
                    .map(|job| match self.ctx.core.job_counts(job) {
                        Some(counts) => Ok(JobTaskCounts::new(job, &counts)),
                        None => Err(error(ErrorKind::UnknownJob, format!("unknown job {job}"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let mut report = match self.upkeep.walltime.status_at_deadline() {
            Some(at_deadline) => at_deadline.clone(),
            None => self.status(),
        };
        report.job_counts = job_counts;
        Ok(report)
    }

    pub(super) fn status(&self) -> StatusReport {
        let counts = self.ctx.core.counts();
        let totals = self.submissions.totals();
        let (failed, cancelled, durable) = (totals.failed, totals.cancelled, totals.durable);
        let (rate, rate_minute) = self.results.rates(&self.ctx);
        let store = self.nodes.store_total();
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
            agents: self.nodes.len() as u32,
            slots: self.nodes.iter().map(|(_, n)| n.cores()).sum(),
            busy_slots: self.nodes.iter().map(|(_, n)| n.busy()).sum(),
            rate,
            rate_minute,
            stages: self.results.stages(),
            allocations: self
                .upkeep
                .elastic
                .as_ref()
                .map(|e| e.statuses(self.ctx.timestamp().unix_micros()))
                .unwrap_or_default(),
            provisioning_paused: self.upkeep.elastic.as_ref().is_some_and(|e| e.paused()),
            provisioning_rounds: self.upkeep.elastic.as_ref().map_or(0, |e| e.rounds()),
            jobs: self.submissions.job_count() as u64,
            allocation: self.facts.allocation.clone().map(|mut allocation| {
                let now = self.ctx.timestamp().unix_micros();
                allocation.seconds_left = allocation
                    .end_time
                    .map(|end| end.unix_micros().saturating_sub(now) / 1_000_000);
                allocation
            }),
            nodes: self.node_loads(),
            beyond_deadline: counts.beyond_deadline,
            walltime_reached: self.upkeep.walltime.reached(),
            unstarted: if self.upkeep.walltime.reached() {
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
            disk_full: self.ctx.journal.waiting_for_space(),
            root: self.facts.process.clone(),
            adoption: self.adoption.status(),
            agentless_seconds: self
                .facts
                .agentless_since
                .map(|since| self.ctx.timestamp().unix_micros().saturating_sub(since) / 1_000_000),
            actors: self.actors.live(),
            max_nodes: self.ctx.pilot.max_nodes,
            periodic: self.schedules.len() as u64,
            items: self.items.len() as u64,
            data_moved_bytes: self.items.moved_bytes(),
            data_root_bytes: self.items.root_bytes(),
            data_relayed_bytes: self.items.relayed_bytes(),
            data_held_bytes: self.items.held_bytes(),
            data_recomputes: self.items.recomputes(),
            data_memory_bytes: store.memory_bytes,
            data_memory_bound: store.memory_bound,
            data_spills: store.spills,
            data_spilled_bytes: store.spilled_bytes,
            data_drops: store.drops,
            data_dropped_bytes: store.dropped_bytes,
            job_counts: None,
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
                .map(|held| held.nodes.iter().map(|n| self.nodes.hostname(*n)).collect())
                .unwrap_or_default(),
            reserved_seconds: reservation.and_then(|held| held.start).map(|start| {
                start.as_micros().saturating_sub(self.ctx.now().as_micros()) as f64 / 1e6
            }),
        }
    }

    fn node_loads(&self) -> Vec<NodeLoad> {
        let mut loads: Vec<NodeLoad> = self
            .nodes
            .iter()
            .map(|(id, node)| NodeLoad {
                node: id,
                hostname: node.hostname().to_owned(),
                cores: node.cores(),
                busy: node.busy(),
                gpus: node.capacity().gpu_count(),
                memory_mib: node.capacity().memory_mib(),
                resources: saker_core::ResourceKind::all()
                    .filter_map(|kind| {
                        let name = self.submissions.resource_name(kind.custom_index()?)?;
                        let amount = node.capacity().get(kind);
                        (amount > 0).then(|| (name.to_owned(), amount))
                    })
                    .collect(),
                fetched_bytes: self.items.fetched_by(id),
                held_bytes: self.items.held_by(id),
                memory_bytes: node.store().memory_bytes,
                memory_bound: node.store().memory_bound,
                spilled_bytes: node.store().spilled_bytes,
            })
            .collect();
        loads.sort_by_key(|load| load.node);
        loads
    }
}
