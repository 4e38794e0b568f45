//! An elastic pilot's batch allocations: every round the root shows the
//! [`Provisioner`] its backlog and allocations, carries its decisions out through the
//! [`Port`](crate::actor::port::Port) (libslurm submit, cancel and state queries, on a
//! blocking thread), and journals every allocation submitted and ended, so a resumed
//! root adopts the allocations that are still there instead of asking again.
//!
//! Each allocation runs one `srun` step of agents numbered from its own first node id,
//! a subtree of the root of its own (`saker agent --subtree-base`): it joins when its
//! agents say hello, and leaving (released, cancelled, ended by Slurm) is a node loss
//! for each of its nodes, whose work is replayed.

use std::time::Duration;

use saker_core::Time;
use saker_core::provision::{
    AllocationState, AllocationView, Backlog, Decision, ProvisionConfig, Provisioner,
};

use crate::actor::ctx::Ctx;
use crate::actor::journal::AfterJournal;
use crate::actor::nodes::Nodes;
use crate::actor::port::{BatchOutcome, BatchSubmit, BatchWork, Wake};
use crate::records::Record;
use saker_client::ElasticAllocation;

/// How the root asks for allocations: what the provisioner decides with, and what a
/// submission looks like.
#[derive(Debug, Clone)]
pub struct ElasticConfig {
    pub provision: ProvisionConfig,
    /// Seconds between rounds.
    pub round: Duration,
    /// The batch script of an allocation whose agents start at node `first_node`
    /// (`{first_node}` in it is replaced), and the request's other fields.
    pub script: String,
    pub job_name: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time_limit_minutes: Option<u32>,
    pub working_directory: Option<std::path::PathBuf>,
    /// `--output` of the batch job (Slurm's `%j` patterns work).
    pub output: Option<std::path::PathBuf>,
}

/// Where an allocation is, as the root tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Handed to the batch system, no job id yet.
    Submitting,
    /// A job id, no agent yet.
    Pending,
    /// At least one of its agents has joined.
    Running,
    /// Close to its end: its nodes take no new work, and it is released once its
    /// work is done (before Slurm's time limit ends it under running tasks).
    Draining,
    /// Being cancelled or released.
    Ending,
    Ended,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Submitting => "submitting",
            Phase::Pending => "pending",
            Phase::Running => "running",
            Phase::Draining => "draining",
            Phase::Ending => "ending",
            Phase::Ended => "ended",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    id: u64,
    job: Option<u32>,
    nodes: u32,
    first_node: u32,
    phase: Phase,
    submitted: Time,
    /// When Slurm ends it (unix µs), once known.
    end_unix_us: Option<u64>,
    idle_since: Option<Time>,
    /// When the pilot started ending it (released or cancelled).
    ending_since: Option<Time>,
    reason: String,
    /// Slurm's state word, as last read.
    slurm_state: String,
    /// The decision round that asked for it (0: adopted after a restart).
    round: u64,
}

impl Allocation {
    /// Its journal record: submitted as `job` (`ended: false`), or ended, and why.
    fn record(&self, job: u32, ended: bool, unix_us: u64) -> Record {
        Record::Allocation {
            allocation: self.id,
            job_id: job,
            nodes: self.nodes,
            first_node: self.first_node,
            ended,
            reason: self.reason.clone(),
            unix_us,
        }
    }
}

/// How long a released allocation's job may take to end before it is cancelled.
const LINGER: Duration = Duration::from_secs(60);

/// A queued task's run time while nothing tells more (no mean, no time limit).
const DEFAULT_RUN_MICROS: u64 = 60_000_000;

/// The elastic part of the root.
#[derive(Debug)]
pub(crate) struct Elastic {
    config: ElasticConfig,
    provisioner: Provisioner,
    allocations: Vec<Allocation>,
    next_id: u64,
    next_node: u32,
    /// A round's batch work is under way.
    busy: bool,
    /// Decision rounds so far (status shows them, so a watcher can tell "not yet"
    /// from "not at all").
    rounds: u64,
    /// A resumed pilot first looks for jobs of its own the journal does not know.
    find_strays: bool,
}

impl Elastic {
    pub fn new(config: ElasticConfig) -> Elastic {
        Elastic {
            provisioner: Provisioner::new(config.provision),
            config,
            allocations: Vec::new(),
            next_id: 0,
            next_node: 0,
            busy: false,
            rounds: 0,
            find_strays: false,
        }
    }

    /// Rebuilds the allocations from the journal: those submitted and not ended are
    /// adopted (their state is read from Slurm in the first round).
    pub fn restore(&mut self, record: &Record, now: Time) {
        let Record::Allocation {
            allocation,
            job_id,
            nodes,
            first_node,
            ended,
            reason,
            ..
        } = record
        else {
            return;
        };
        self.next_id = self.next_id.max(allocation + 1);
        self.next_node = self.next_node.max(first_node + nodes);
        self.allocations.retain(|a| a.id != *allocation);
        if !ended {
            self.allocations.push(Allocation {
                id: *allocation,
                job: Some(*job_id),
                nodes: *nodes,
                first_node: *first_node,
                phase: Phase::Pending,
                submitted: now,
                end_unix_us: None,
                idle_since: None,
                ending_since: None,
                reason: format!("adopted after a restart ({reason})"),
                slurm_state: String::new(),
                round: 0,
            });
        }
    }

    /// The root was restored from its journal: before its first decision it looks
    /// for *strays*, jobs of its own that no live allocation of the journal names
    /// (submitted in the instant before a crash, before their job id was journaled,
    /// or ended in the journal but still alive in Slurm), and cancels them.
    pub fn resumed(&mut self) {
        self.find_strays = true;
    }

    /// The job-name prefix of this pilot's allocations (`{job_name}-{id}`).
    fn name_prefix(&self) -> String {
        format!("{}-", self.config.job_name)
    }

    /// Of the jobs found by name, those to cancel: not ended, and no live allocation
    /// of this pilot. Allocation numbers they took are not given out again.
    fn strays(
        &mut self,
        found: &[(saker_slurm::SlurmJobId, String, String)],
    ) -> Vec<saker_slurm::SlurmJobId> {
        let prefix = self.name_prefix();
        let mut strays = Vec::new();
        for (job, name, state) in found {
            let Some(id) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.parse::<u64>().ok())
            else {
                continue;
            };
            self.next_id = self.next_id.max(id + 1);
            let live = self.allocations.iter().any(|a| a.job == Some(job.0));
            if !live && !is_terminal(state) {
                tracing::warn!(%job, %name, %state, "cancelling a job of this pilot that its journal does not know");
                strays.push(*job);
            }
        }
        strays
    }

    pub fn pause(&mut self, paused: bool) {
        self.provisioner.pause(paused);
    }

    pub fn paused(&self) -> bool {
        self.provisioner.paused()
    }

    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    pub fn statuses(&self, now_unix_us: u64) -> Vec<ElasticAllocation> {
        self.allocations
            .iter()
            .map(|a| ElasticAllocation {
                allocation: a.id,
                job_id: a.job,
                state: a.phase.as_str().to_owned(),
                slurm_state: a.slurm_state.clone(),
                nodes: a.nodes,
                first_node: a.first_node,
                seconds_left: a
                    .end_unix_us
                    .map(|end| end.saturating_sub(now_unix_us) / 1_000_000),
                reason: a.reason.clone(),
                round: a.round,
            })
            .collect()
    }
}

impl Elastic {
    /// One provisioning round (see the module doc); the next is scheduled here.
    pub(crate) fn on_provision(&mut self, ctx: &mut Ctx, nodes: &Nodes, longest_run: u64) {
        let round = self.config.round;
        ctx.port.wake_after(round, Wake::Provision);
        if self.busy || ctx.pilot.shutting_down {
            return;
        }
        if self.find_strays {
            self.find_strays = false;
            self.busy = true;
            let work = BatchWork {
                find_named: Some(self.name_prefix()),
                ..BatchWork::default()
            };
            ctx.port.batch(work);
            return;
        }
        let now = ctx.now();
        self.note_agents(nodes, now);
        let (closing, mut releasing) = self.drain_ending_allocations(ctx, longest_run, now);
        for range in &closing {
            let closed: Vec<saker_core::NodeId> = nodes
                .iter()
                .map(|(node, _)| node)
                .filter(|node| range.contains(&node.0))
                .collect();
            for node in closed {
                let _ = ctx.core.handle_node_closed(node, now);
            }
        }
        let backlog = Self::backlog(ctx);
        // Agents numbered beyond what the journal knows (a stray allocation's, found
        // late) keep their numbers: new allocations start above them.
        let above_nodes = nodes.iter().map(|(node, _)| node.0 + 1).max().unwrap_or(0);
        let unix_now = ctx.timestamp().unix_micros();
        let views: Vec<AllocationView> = self
            .allocations
            .iter()
            .map(|a| AllocationView {
                id: a.id,
                nodes: a.nodes,
                cores_per_node: None,
                submitted: a.submitted,
                state: match a.phase {
                    Phase::Submitting | Phase::Pending => AllocationState::Pending,
                    // A draining one still holds its nodes (and ends soon).
                    Phase::Running | Phase::Draining => AllocationState::Running {
                        // Slurm's end on the core's clock.
                        end: a.end_unix_us.map(|end| {
                            Time::from_micros(now.as_micros() + end.saturating_sub(unix_now))
                        }),
                        idle_since: a.idle_since,
                    },
                    Phase::Ending | Phase::Ended => AllocationState::Ending,
                },
            })
            .filter(|v| !matches!(v.state, AllocationState::Ending))
            .collect();
        let decisions = self.provisioner.decide(now, &backlog, &views);
        self.rounds += 1;
        self.next_node = self.next_node.max(above_nodes);
        let mut work = BatchWork::default();
        let mut records = Vec::new();
        for decision in decisions {
            match decision {
                Decision::Submit { nodes, reason } => {
                    let id = self.next_id;
                    self.next_id += 1;
                    let first_node = self.next_node;
                    self.next_node += nodes;
                    tracing::info!(allocation = id, nodes, first_node, %reason, "asking for an allocation");
                    work.submits.push(BatchSubmit {
                        allocation: id,
                        request: self.request(nodes, first_node, id),
                    });
                    self.allocations.push(Allocation {
                        id,
                        job: None,
                        nodes,
                        first_node,
                        phase: Phase::Submitting,
                        submitted: now,
                        end_unix_us: None,
                        idle_since: None,
                        ending_since: None,
                        reason,
                        slurm_state: String::new(),
                        round: self.rounds,
                    });
                }
                Decision::Cancel { allocation, reason } => {
                    if let Some(a) = self.allocations.iter_mut().find(|a| a.id == allocation) {
                        tracing::info!(allocation, %reason, "cancelling a pending allocation");
                        a.phase = Phase::Ending;
                        a.ending_since = Some(now);
                        a.reason = reason;
                        if let Some(job) = a.job {
                            work.cancels.push(saker_slurm::SlurmJobId(job));
                        }
                    }
                }
                Decision::Release { allocation, reason } => {
                    // Its agents are told to stop: the batch script then ends and Slurm
                    // counts the job COMPLETED. Cancelled only if it lingers.
                    if let Some(a) = self
                        .allocations
                        .iter_mut()
                        .find(|a| a.id == allocation && a.phase != Phase::Ending)
                    {
                        tracing::info!(allocation, %reason, "releasing an allocation");
                        a.phase = Phase::Ending;
                        a.ending_since = Some(now);
                        a.reason = reason;
                        releasing.push(a.first_node..a.first_node + a.nodes);
                    }
                }
            }
        }
        for a in &mut self.allocations {
            // A released allocation whose job lingers is cancelled.
            let lingering = a.ending_since.is_some_and(|since| {
                now.as_micros().saturating_sub(since.as_micros()) > LINGER.as_micros() as u64
            });
            if let (Some(job), true) = (a.job, lingering) {
                work.cancels.push(saker_slurm::SlurmJobId(job));
                a.ending_since = Some(now);
            }
            if let (Some(job), Phase::Pending | Phase::Running | Phase::Draining | Phase::Ending) =
                (a.job, a.phase)
            {
                work.queries.push((a.id, saker_slurm::SlurmJobId(job)));
            }
        }
        records.extend(self.finished_records(unix_now));
        self.busy = true;
        if !records.is_empty() {
            ctx.append(records, AfterJournal::Nothing);
        }
        ctx.port.batch(work);
        for range in releasing {
            let targets: Vec<_> = nodes
                .iter()
                .map(|(node, _)| node)
                .filter(|node| range.contains(&node.0))
                .collect();
            let stop = saker_wire::messages::ToAgent::Shutdown {
                reason: "its allocation is released".into(),
                kill_running: false,
            };
            for node in targets {
                // Nothing more is sent to an agent told to go.
                let _ = ctx.core.handle_node_closed(node, now);
                nodes.send(ctx, node, &stop);
            }
        }
    }

    /// What the batch system said: job ids of submissions, states of the jobs.
    pub(crate) fn on_batch(&mut self, ctx: &mut Ctx, outcome: BatchOutcome) {
        let unix_now = ctx.timestamp().unix_micros();
        self.busy = false;
        let strays = self.strays(&outcome.found);
        if !strays.is_empty() {
            ctx.port.batch(BatchWork {
                cancels: strays,
                ..BatchWork::default()
            });
        }
        let mut records = Vec::new();
        for (id, submitted) in outcome.submitted {
            let Some(a) = self.allocations.iter_mut().find(|a| a.id == id) else {
                continue;
            };
            match submitted {
                Ok(job) => {
                    a.job = Some(job.0);
                    a.phase = Phase::Pending;
                    records.push(a.record(job.0, false, unix_now));
                }
                Err(error) => {
                    tracing::error!(allocation = id, %error, "the batch system refused an allocation");
                    a.phase = Phase::Ended;
                    let error = saker_actors::error_chain(&*error);
                    a.reason = format!("submission failed: {error}");
                }
            }
        }
        for (id, state) in outcome.states {
            let Some(a) = self.allocations.iter_mut().find(|a| a.id == id) else {
                continue;
            };
            match state {
                Ok((word, end)) => {
                    a.end_unix_us = end.or(a.end_unix_us);
                    if is_terminal(&word) {
                        if a.phase != Phase::Ending {
                            a.reason = format!("ended by Slurm ({word})");
                        }
                        a.phase = Phase::Ended;
                    }
                    a.slurm_state = word;
                }
                Err(error) => {
                    // A job Slurm no longer knows has ended long ago.
                    a.phase = Phase::Ended;
                    let error = saker_actors::error_chain(&*error);
                    a.reason = format!("Slurm no longer knows it: {error}");
                }
            }
        }
        records.extend(self.finished_records(unix_now));
        if !records.is_empty() {
            ctx.append(records, AfterJournal::Nothing);
        }
        if ctx.pilot.shutting_down {
            // Submitted while the pilot began shutting down: not wanted any more.
            self.cancel_pending(ctx);
        }
    }

    /// Allocations that have agents are running; idle ones note since when.
    fn note_agents(&mut self, nodes: &Nodes, now: Time) {
        for a in &mut self.allocations {
            let range = a.first_node..a.first_node + a.nodes;
            let mut joined = 0;
            let mut busy = false;
            for (node, entry) in nodes.iter() {
                if range.contains(&node.0) {
                    joined += 1;
                    busy |= entry.is_running();
                }
            }
            if joined > 0 && matches!(a.phase, Phase::Submitting | Phase::Pending) {
                a.phase = Phase::Running;
            }
            a.idle_since = match (a.phase, busy) {
                (Phase::Running | Phase::Draining, false) => a.idle_since.or(Some(now)),
                _ => None,
            };
        }
    }

    /// Running allocations within the drain margin of their end start draining; the
    /// draining ones that are idle are let go. Returns the node ranges to close (every
    /// draining allocation's: agents may join late) and those to release.
    ///
    /// The margin is the longest run seen so far, half again, plus a round (at least
    /// three rounds), and never more than `replace_ahead`: work started before it
    /// should end before the allocation does, and its replacement was asked for
    /// already.
    fn drain_ending_allocations(
        &mut self,
        ctx: &Ctx,
        longest: u64,
        now: Time,
    ) -> (Vec<std::ops::Range<u32>>, Vec<std::ops::Range<u32>>) {
        let unix_now = ctx.timestamp().unix_micros();
        let round = self.config.round.as_micros() as u64;
        let margin = (longest.saturating_mul(3) / 2 + round)
            .max(3 * round)
            .min(self.config.provision.replace_ahead_us);
        let (mut closing, mut releasing) = (Vec::new(), Vec::new());
        for a in &mut self.allocations {
            let range = a.first_node..a.first_node + a.nodes;
            if a.phase == Phase::Running
                && let Some(end) = a.end_unix_us
                && end.saturating_sub(unix_now) <= margin
            {
                let left = end.saturating_sub(unix_now) / 1_000_000;
                tracing::info!(
                    allocation = a.id,
                    left,
                    "draining an allocation close to its end"
                );
                a.phase = Phase::Draining;
                a.reason = format!("ends in {left}s: draining (no new work)");
            }
            if a.phase != Phase::Draining {
                continue;
            }
            if a.idle_since.is_some() {
                a.phase = Phase::Ending;
                a.ending_since = Some(now);
                a.reason = "drained before its end".into();
                releasing.push(range);
            } else {
                closing.push(range);
            }
        }
        (closing, releasing)
    }

    /// The queue as the provisioner sees it ([`saker_core::Core::backlog`]): each
    /// queued task weighs its tags' mean run time so far, else its time limit, else
    /// the mean over all tags, else a minute.
    fn backlog(ctx: &Ctx) -> Backlog {
        ctx.core.backlog(DEFAULT_RUN_MICROS)
    }

    /// Whether `node` belongs to an allocation the pilot is ending (its agents leave
    /// as asked, not lost).
    pub(crate) fn releasing(&self, node: saker_core::NodeId) -> bool {
        self.allocations.iter().any(|a| {
            a.phase == Phase::Ending && (a.first_node..a.first_node + a.nodes).contains(&node.0)
        })
    }

    /// At shutdown: allocations still pending are cancelled (running ones end when
    /// their agents leave).
    pub(crate) fn cancel_pending(&mut self, ctx: &mut Ctx) {
        let mut jobs = Vec::new();
        for a in &mut self.allocations {
            if matches!(a.phase, Phase::Submitting | Phase::Pending)
                && let Some(job) = a.job
            {
                jobs.push(saker_slurm::SlurmJobId(job));
                a.phase = Phase::Ending;
                a.reason = "the pilot is shutting down".into();
            }
        }
        if !jobs.is_empty() {
            ctx.port.batch(BatchWork {
                cancels: jobs,
                ..BatchWork::default()
            });
        }
    }
}

impl Elastic {
    fn request(&self, nodes: u32, first_node: u32, id: u64) -> saker_slurm::BatchRequest {
        let config = &self.config;
        let mut request = saker_slurm::BatchRequest::new(
            config
                .script
                .replace("{first_node}", &first_node.to_string()),
            nodes,
        );
        request.name = Some(format!("{}-{id}", config.job_name));
        request.partition = config.partition.clone();
        request.account = config.account.clone();
        request.time_limit_minutes = config.time_limit_minutes;
        request.working_directory = config.working_directory.clone();
        request.stdout = config.output.clone();
        // Whole nodes: each agent offers every CPU of its node.
        request.exclusive = true;
        request
    }

    /// `ended` records for allocations that just ended (journaled once: they leave
    /// the table).
    fn finished_records(&mut self, unix_now: u64) -> Vec<Record> {
        let mut records = Vec::new();
        self.allocations.retain(|a| {
            if a.phase != Phase::Ended {
                return true;
            }
            if let Some(job) = a.job {
                records.push(a.record(job, true, unix_now));
            }
            false
        });
        records
    }
}

/// Slurm's states of a job that no longer runs.
fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "CANCELLED"
            | "FAILED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}
