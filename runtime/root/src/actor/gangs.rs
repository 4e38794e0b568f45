//! The root's side of HPC jobs: sending each member of a gang its part, relaying an
//! MPI launcher's remote-shell requests between the leader and the members, and
//! turning the members' part results into the job's one result.
//!
//! The core places a gang whole and ends it whole; in between, the root waits for
//! every member's part. The first part that fails (for a job without MPI), or the
//! leader's part ending (the MPI launcher, whose end is the job's), makes the root
//! stop the parts still running, so no rank outlives its job anywhere. When every
//! part has reported, the job's outcome is the first failure's (by arrival), else
//! the leader's, and the core hears of it once. A member lost with its node is the
//! core's business: it replays the gang, and the run here is forgotten.

use std::collections::HashMap;

use saker_core::{AttemptId, AttemptOutcome, NodeId, TaskId};
use saker_wire::messages::{
    Assignment, Dispatch, GangLaunch, GangLaunchEnded, GangPart, LauncherKind, MpiKind, Outcome,
    ProcessEnd, ResultBody, TaskResult, ToAgent,
};

use super::ctx::Ctx;
use super::results::{Detail, Results};
use crate::results::{Failure, GangRecord, ProcessRecord, lossy_text};

/// Ports for rendezvous start here; a gang's is this plus its attempt id modulo
/// [`PORT_SPAN`], so gangs running at the same time get different ones.
const PORT_BASE: u16 = 20_000;
const PORT_SPAN: u64 = 40_000;

/// A gang attempt in flight.
#[derive(Debug)]
pub(super) struct GangRun {
    task: TaskId,
    members: Vec<NodeId>,
    hosts: Vec<String>,
    /// Each member's part result, once in.
    parts: Vec<Option<TaskResult>>,
    /// The member whose part failed first, if any.
    first_failure: Option<usize>,
    /// One process on the leader starts the job (an MPI launcher, or srun): its end
    /// is the job's.
    launched: bool,
    ranks: u32,
    /// The parts still running were told to stop.
    stopped: bool,
}

/// Gang attempts in flight, by attempt.
#[derive(Debug, Default)]
pub(super) struct GangRuns {
    runs: HashMap<AttemptId, GangRun>,
}

impl GangRuns {
    /// Whether `attempt` is a gang attempt in flight.
    pub(super) fn contains(&self, attempt: &AttemptId) -> bool {
        self.runs.contains_key(attempt)
    }
}

impl GangRuns {
    /// Sends each member of a gang dispatch its part.
    pub(super) fn send_gang(
        &mut self,
        ctx: &mut Ctx,
        table: &mut super::jobs::JobTable,
        dispatch: saker_core::Dispatch,
    ) {
        let Some(&assignment) = dispatch.assignments.first() else {
            return;
        };
        let (Some(job), Some(def)) = (table.get(&assignment.job), table.def(assignment.job)) else {
            return;
        };
        let index = job.array_index(assignment.index).unwrap_or(0);
        let hosts: Vec<String> = dispatch
            .members
            .iter()
            .map(|node| ctx.hostname_of(*node))
            .collect();
        let port = PORT_BASE + (assignment.attempt.0 % PORT_SPAN) as u16;
        for (member, node_id) in dispatch.members.iter().enumerate() {
            let Some(node) = ctx.nodes.get_mut(node_id) else {
                continue;
            };
            let mut jobs = Vec::new();
            if node.known_jobs.insert(assignment.job) {
                jobs.push(std::sync::Arc::clone(&def));
                if let Some(entry) = table.get_mut(&assignment.job) {
                    entry.known_by.push(*node_id);
                }
            }
            node.running += 1;
            let message = ToAgent::Dispatch(Dispatch {
                jobs,
                tasks: vec![Assignment {
                    task: assignment.task,
                    attempt: assignment.attempt,
                    job: assignment.job,
                    index,
                }],
                forget: std::mem::take(&mut node.forget),
                gang: Some(GangPart {
                    member: member as u32,
                    nodes: dispatch.members.clone(),
                    hosts: hosts.clone(),
                    port,
                }),
            });
            let link = node.link;
            ctx.send_to(link, *node_id, &message);
        }
        let count = dispatch.members.len();
        self.runs.insert(
            assignment.attempt,
            GangRun {
                task: assignment.task,
                members: dispatch.members,
                hosts,
                parts: vec![None; count],
                first_failure: None,
                launched: def.hpc.is_some_and(|hpc| {
                    hpc.mpi != MpiKind::None || hpc.launcher == LauncherKind::Srun
                }),
                ranks: def.hpc.map_or(0, |hpc| hpc.ranks),
                stopped: false,
            },
        );
    }

    /// Forgets the runs of gang attempts the core no longer counts live (a member
    /// was lost: the gang is replayed).
    pub(super) fn forget_dead_gangs(&mut self, ctx: &Ctx) {
        let core = &ctx.core;
        self.runs
            .retain(|attempt, _| core.gang_members(*attempt).is_some());
    }

    /// A part result from `node`; false if `result` is not of a gang in flight (it
    /// then takes the ordinary path, where a stale one is a duplicate).
    pub(super) fn on_part_result(
        &mut self,
        ctx: &mut Ctx,
        results: &mut Results,
        node: NodeId,
        result: TaskResult,
    ) -> bool {
        let attempt = result.attempt;
        let Some(run) = self.runs.get_mut(&attempt) else {
            return false;
        };
        let Some(member) = run.members.iter().position(|m| *m == node) else {
            return true; // not a member: dropped
        };
        if run.parts[member].is_some() {
            return true;
        }
        let failed = !matches!(
            result.outcome,
            Outcome::Exited { code: 0 } | Outcome::Cancelled
        );
        if failed && run.first_failure.is_none() {
            run.first_failure = Some(member);
        }
        let launcher_ended = member == 0 && run.launched;
        run.parts[member] = Some(result);
        if !run.stopped && (failed || launcher_ended) {
            run.stopped = true;
            let running: Vec<NodeId> = run
                .members
                .iter()
                .zip(&run.parts)
                .filter(|(_, part)| part.is_none())
                .map(|(node, _)| *node)
                .collect();
            for node in running {
                if let Some(entry) = ctx.nodes.get(&node) {
                    let stop = ToAgent::Cancel {
                        attempts: vec![attempt],
                    };
                    ctx.send_to(entry.link, node, &stop);
                }
            }
        }
        let Some(run) = self.runs.get(&attempt) else {
            return true;
        };
        if run.parts.iter().any(Option::is_none) {
            return true;
        }
        let Some(run) = self.runs.remove(&attempt) else {
            return true;
        };
        Self::settle_gang(ctx, results, attempt, run);
        true
    }

    /// Every part is in: one outcome for the core, one detail for the record.
    fn settle_gang(ctx: &mut Ctx, results: &mut Results, attempt: AttemptId, mut run: GangRun) {
        let parts: Vec<TaskResult> = std::mem::take(&mut run.parts)
            .into_iter()
            .flatten()
            .collect();
        let deciding = run.first_failure.unwrap_or(0);
        let outcome = parts[deciding].outcome.clone();
        let core_outcome = match &outcome {
            Outcome::Exited { code: 0 } => AttemptOutcome::Succeeded,
            Outcome::Lost { .. } => AttemptOutcome::Lost,
            Outcome::Cancelled => AttemptOutcome::Cancelled,
            _ => AttemptOutcome::Failed,
        };
        let mut processes = Vec::new();
        for (member, part) in parts.iter().enumerate() {
            let ResultBody::Part { ends, .. } = &part.body else {
                continue;
            };
            let offset = rank_offset(&run, member);
            for ProcessEnd { rank, outcome } in ends {
                let (exit_code, signal, reason) = describe_owned(outcome);
                processes.push(ProcessRecord {
                    node: run.hosts[member].clone(),
                    member: member as u32,
                    rank: offset + rank,
                    exit_code,
                    signal,
                    reason,
                });
            }
        }
        processes.sort_by_key(|process| (process.rank, process.member));
        let (exit_code, signal, reason) = describe_owned(&outcome);
        let reason = match (run.first_failure, reason) {
            (Some(member), Some(reason)) => Some(format!("{reason} (on {})", run.hosts[member])),
            (Some(member), None) => Some(format!(
                "exit {} (on {})",
                exit_code.unwrap_or_default(),
                run.hosts[member]
            )),
            (None, reason) => reason,
        };
        let leader = &parts[0];
        let (stdout, stderr) = match &leader.body {
            ResultBody::Part { stdout, stderr, .. } | ResultBody::Command { stdout, stderr } => {
                (Some(stdout), Some(stderr))
            }
            ResultBody::Function { .. } => (None, None),
        };
        let detail = Detail {
            node: run.members[0],
            executor: None,
            // The last member to receive its part held the group back.
            received_unix_us: parts.iter().map(|p| p.received_unix_us).max().unwrap_or(0),
            start_unix_us: parts.iter().map(|p| p.start_unix_us).min().unwrap_or(0),
            end_unix_us: parts.iter().map(|p| p.end_unix_us).max().unwrap_or(0),
            exit_code,
            signal,
            reason,
            failure: failure_of_owned(&outcome),
            stdout: stdout.map(|o| lossy_text(&o.inline)).unwrap_or_default(),
            stderr: stderr.map(|o| lossy_text(&o.inline)).unwrap_or_default(),
            stdout_path: stdout.and_then(|o| o.spill_path.clone()),
            stderr_path: stderr.and_then(|o| o.spill_path.clone()),
            output: None,
            gang: Some(GangRecord {
                nodes: run.hosts.clone(),
                ranks: run.ranks,
                processes,
            }),
        };
        let note = crate::attempts::AttemptNote {
            attempt: attempt.0,
            end: crate::attempts::AttemptEnd::Failed,
            reason: detail
                .reason
                .clone()
                .unwrap_or_else(|| format!("exit {}", exit_code.unwrap_or_default())),
            exit_code,
            signal,
            node: Some(run.hosts[deciding].clone()),
            start_time: Some(crate::results::Timestamp::from_unix_micros(
                detail.start_unix_us,
            )),
            end_time: crate::results::Timestamp::from_unix_micros(detail.end_unix_us),
        };
        results.settle(ctx, run.task, attempt, core_outcome, detail, note);
    }

    /// A leader's launcher asks for a command on a member: relayed to it.
    pub(super) fn relay_launch(&mut self, ctx: &mut Ctx, from: NodeId, launch: GangLaunch) {
        tracing::debug!(%from, attempt = %launch.attempt, member = launch.member, "relaying a gang launch");
        let Some(run) = self.runs.get(&launch.attempt) else {
            return self.answer_launch(ctx, from, launch.attempt, launch.launch);
        };
        let target = (run.members.first() == Some(&from))
            .then(|| run.members.get(launch.member as usize).copied())
            .flatten();
        let Some(target) = target.filter(|node| ctx.nodes.contains_key(node)) else {
            return self.answer_launch(ctx, from, launch.attempt, launch.launch);
        };
        let link = ctx.nodes[&target].link;
        ctx.send_to(link, target, &ToAgent::GangLaunch(launch));
    }

    /// A member's launched command ended: relayed to the leader.
    pub(super) fn relay_launch_end(&mut self, ctx: &mut Ctx, ended: GangLaunchEnded) {
        let Some(leader) = self
            .runs
            .get(&ended.attempt)
            .and_then(|run| run.members.first().copied())
        else {
            return;
        };
        if let Some(entry) = ctx.nodes.get(&leader) {
            let link = entry.link;
            ctx.send_to(link, leader, &ToAgent::GangLaunchEnded(ended));
        }
    }

    /// Answers a launch that cannot be relayed (its gang or member is gone) as failed.
    fn answer_launch(&mut self, ctx: &mut Ctx, leader: NodeId, attempt: AttemptId, launch: u32) {
        if let Some(entry) = ctx.nodes.get(&leader) {
            let link = entry.link;
            let ended = GangLaunchEnded {
                attempt,
                launch,
                code: 255,
            };
            ctx.send_to(link, leader, &ToAgent::GangLaunchEnded(ended));
        }
    }
}

/// Exit code, signal and reason of an outcome (owned), as a record shows them.
/// The rank of `member`'s first process: ranks fill nodes in order. For an MPI
/// job the processes are the launcher and daemons, numbered per node: shown
/// under the member's first rank.
fn rank_offset(run: &GangRun, member: usize) -> u32 {
    let per_node = run.ranks.div_ceil(run.members.len().max(1) as u32);
    if run.launched {
        0
    } else {
        member as u32 * per_node
    }
}

fn describe_owned(outcome: &Outcome) -> (Option<i32>, Option<i32>, Option<String>) {
    match outcome {
        Outcome::Exited { code } => (Some(*code), None, None),
        Outcome::Signaled { signal } => (
            None,
            Some(*signal),
            Some(format!("killed by signal {signal}")),
        ),
        Outcome::TimedOut => (None, None, Some("time limit exceeded".into())),
        Outcome::OutOfMemory { limit_mib } => (
            None,
            Some(9),
            Some(super::agents::out_of_memory(*limit_mib)),
        ),
        Outcome::SpawnFailed { reason } | Outcome::WorkerFailed { reason } => {
            (None, None, Some(reason.clone()))
        }
        Outcome::Lost { reason } => (None, None, Some(format!("lost: {reason}"))),
        Outcome::Cancelled => (None, None, Some("stopped".into())),
        Outcome::Raised { message } => (None, None, Some(format!("raised: {message}"))),
    }
}

/// How an HPC job that ended with `outcome` failed (`None`: it did not).
fn failure_of_owned(outcome: &Outcome) -> Option<Failure> {
    Some(match outcome {
        Outcome::Exited { code: 0 } | Outcome::Cancelled => return None,
        Outcome::Exited { .. } => Failure::Exit,
        Outcome::Signaled { .. } => Failure::Signal,
        Outcome::TimedOut => Failure::TimeLimit,
        Outcome::OutOfMemory { .. } => Failure::OutOfMemory,
        Outcome::SpawnFailed { .. } => Failure::Spawn,
        Outcome::WorkerFailed { .. } => Failure::WorkerStart,
        Outcome::Raised { .. } => Failure::Raised,
        Outcome::Lost { .. } => Failure::Lost,
    })
}
