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

use saker_actors::pmi::hub::{Gathered, Gathering};
use saker_core::{AttemptId, AttemptOutcome, NodeId, TaskId};
use saker_wire::messages::{
    GangLaunch, GangLaunchEnded, GangPart, Hpc, LauncherKind, MpiKind, Outcome, PmiFence, PmiTimes,
    ProcessEnd, ResultBody, TaskResult, ToAgent,
};

use super::ctx::Ctx;
use super::nodes::Nodes;
use super::outcomes::{describe_owned, failure_of_owned};
use super::results::Detail;
use saker_client::results::{GangRecord, ProcessRecord, WireUp, lossy_text};

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
    /// The PMI fence in progress, when gathered here (none yet in a root that
    /// adopted the gang, until a member's fence says which it is).
    fence: Option<Gathering>,
}

/// A gang attempt whose every part is in: what the core and the task's record hear.
#[derive(Debug)]
pub(super) struct Settled {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub outcome: AttemptOutcome,
    pub detail: Detail,
    pub note: saker_client::attempts::AttemptNote,
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
    /// A gang attempt of `task` starts on `members` (hosts `hosts`, the leader
    /// first), running a job laid out as `hpc`: each member's part, in order. A PMI
    /// job of several members gathers its fences at `hub`, the leader's data address
    /// (empty: here, at the root).
    pub(super) fn start(
        &mut self,
        task: TaskId,
        attempt: AttemptId,
        members: Vec<NodeId>,
        hosts: Vec<String>,
        hpc: Option<Hpc>,
        hub: &str,
    ) -> Vec<GangPart> {
        let port = PORT_BASE + (attempt.0 % PORT_SPAN) as u16;
        let pmi = hpc.is_some_and(|hpc| hpc.mpi == MpiKind::Pmi) && members.len() > 1;
        let hub = if pmi { hub.to_owned() } else { String::new() };
        let parts = (0..members.len())
            .map(|member| GangPart {
                member: member as u32,
                nodes: members.clone(),
                hosts: hosts.clone(),
                port,
                hub: hub.clone(),
            })
            .collect();
        self.adopt(task, attempt, members, hosts, hpc);
        if let Some(run) = self.runs.get_mut(&attempt) {
            // Started here: its fences are this root's from the first.
            run.fence = Some(Gathering::new(run.members.len() as u32));
        }
        parts
    }

    /// A gang attempt of `task` an earlier root started on `members` (hosts `hosts`,
    /// the leader first) runs on as this root's: its parts' results are awaited.
    pub(super) fn adopt(
        &mut self,
        task: TaskId,
        attempt: AttemptId,
        members: Vec<NodeId>,
        hosts: Vec<String>,
        hpc: Option<Hpc>,
    ) {
        let count = members.len();
        self.runs.insert(
            attempt,
            GangRun {
                task,
                members,
                hosts,
                parts: vec![None; count],
                first_failure: None,
                launched: hpc.is_some_and(|hpc| {
                    matches!(hpc.mpi, MpiKind::Openmpi | MpiKind::Mpich)
                        || matches!(hpc.launcher, LauncherKind::Srun | LauncherKind::Script)
                }),
                ranks: hpc.map_or(0, |hpc| hpc.ranks),
                stopped: false,
                fence: None,
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

    /// A part result from `node` of a gang in flight: once every member's part is
    /// in, the job's one outcome, for the core.
    pub(super) fn on_part_result(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        node: NodeId,
        result: TaskResult,
    ) -> Option<Settled> {
        let attempt = result.attempt;
        let run = self.runs.get_mut(&attempt)?;
        // From a node that is not a member, or a second time: dropped.
        let member = run.members.iter().position(|m| *m == node)?;
        if run.parts[member].is_some() {
            return None;
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
            let stop = ToAgent::Cancel {
                attempts: vec![attempt],
            };
            for node in running {
                nodes.send(ctx, node, &stop);
            }
        }
        if run.parts.iter().any(Option::is_none) {
            return None;
        }
        let run = self.runs.remove(&attempt)?;
        Some(Self::settle(attempt, run))
    }

    /// Every part is in: one outcome for the core, one detail for the record.
    fn settle(attempt: AttemptId, mut run: GangRun) -> Settled {
        let parts: Vec<TaskResult> = std::mem::take(&mut run.parts)
            .into_iter()
            .flatten()
            .collect();
        // Ranks Saker started: of the processes that failed (not those stopped), the
        // one that ended first decides, and is named. A peer that notices a crash
        // and aborts ends after it, whichever part's result came in first.
        let earliest = earliest_failure(&run, &parts);
        if let Some((member, _, _)) = earliest {
            run.first_failure = Some(member);
        }
        let deciding = run.first_failure.unwrap_or(0);
        let outcome = match &earliest {
            Some((_, _, outcome)) => outcome.clone(),
            None => parts[deciding].outcome.clone(),
        };
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
            for ProcessEnd { rank, outcome, .. } in ends {
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
        let rank = earliest.map_or_else(String::new, |(_, rank, _)| format!("rank {rank}: "));
        let reason = match (run.first_failure, reason) {
            (Some(member), Some(reason)) => {
                Some(format!("{rank}{reason} (on {})", run.hosts[member]))
            }
            (Some(member), None) => Some(format!(
                "{rank}exit {} (on {})",
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
            host: run.hosts[0].clone(),
            executor: None,
            // The last member to receive its part held the group back.
            received_unix_us: parts.iter().map(|p| p.received_unix_us).max().unwrap_or(0),
            fetch_us: 0,
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
                wireup: wireup(&parts),
            }),
        };
        let note = saker_client::attempts::AttemptNote {
            attempt: attempt.0,
            end: saker_client::attempts::AttemptEnd::Failed,
            reason: detail
                .reason
                .clone()
                .unwrap_or_else(|| format!("exit {}", exit_code.unwrap_or_default())),
            exit_code,
            signal,
            node: Some(run.hosts[deciding].clone()),
            start_time: Some(saker_client::results::Timestamp::from_unix_micros(
                detail.start_unix_us,
            )),
            end_time: saker_client::results::Timestamp::from_unix_micros(detail.end_unix_us),
        };
        Settled {
            task: run.task,
            attempt,
            outcome: core_outcome,
            detail,
            note,
        }
    }

    /// A leader's launcher asks for a command on a member: relayed to it.
    pub(super) fn relay_launch(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        launch: GangLaunch,
    ) {
        tracing::debug!(%from, attempt = %launch.attempt, member = launch.member, "relaying a gang launch");
        let Some(run) = self.runs.get(&launch.attempt) else {
            return Self::answer_launch(ctx, nodes, from, launch.attempt, launch.launch);
        };
        let target = (run.members.first() == Some(&from))
            .then(|| run.members.get(launch.member as usize).copied())
            .flatten();
        let Some(target) = target.filter(|node| nodes.contains(*node)) else {
            return Self::answer_launch(ctx, nodes, from, launch.attempt, launch.launch);
        };
        nodes.send(ctx, target, &ToAgent::GangLaunch(launch));
    }

    /// A member's launched command ended: relayed to the leader.
    pub(super) fn relay_launch_end(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        ended: GangLaunchEnded,
    ) {
        let Some(leader) = self
            .runs
            .get(&ended.attempt)
            .and_then(|run| run.members.first().copied())
        else {
            return;
        };
        nodes.send(ctx, leader, &ToAgent::GangLaunchEnded(ended));
    }

    /// A member's ranks entered a PMI fence: once every member's keys are in, all of
    /// them go to every member (see `saker_actors::pmi::hub`, which gathers them the
    /// same way at a job's leader). A fence from a node that is no member of the
    /// gang, or that does not fit the one gathering, is dropped (a stale copy of a
    /// node); keys sent again count once, and those of the fence gathered last are
    /// answered again to their member (which missed the answer).
    pub(super) fn on_pmi_fence(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        fence: PmiFence,
    ) {
        let Some(run) = self.runs.get_mut(&fence.attempt) else {
            return; // the gang ended or is replayed
        };
        let (attempt, member, epoch) = (fence.attempt, fence.member, fence.epoch);
        if run.members.get(member as usize) != Some(&from) {
            tracing::warn!(%from, %attempt, member, epoch, "a PMI fence from no member: dropped");
            return;
        }
        let count = run.members.len() as u32;
        // A root that adopted the gang mid-run learns its epoch from the members,
        // which resend the fence they wait in.
        let gathering = run.fence.get_or_insert_with(|| Gathering::at(count, epoch));
        match gathering.add(fence) {
            Ok(Gathered::Waiting) => {}
            Ok(Gathered::Again(last)) => {
                nodes.send(ctx, from, &ToAgent::PmiFenced(last));
            }
            Ok(Gathered::All(all)) => {
                let message = ToAgent::PmiFenced(all);
                for &node in &run.members {
                    nodes.send(ctx, node, &message);
                }
            }
            Err(error) => {
                tracing::warn!(%from, %attempt, %error, "a PMI fence that does not fit: dropped");
            }
        }
    }

    /// Answers a launch that cannot be relayed (its gang or member is gone) as failed.
    fn answer_launch(
        ctx: &mut Ctx,
        nodes: &Nodes,
        leader: NodeId,
        attempt: AttemptId,
        launch: u32,
    ) {
        let ended = GangLaunchEnded {
            attempt,
            launch,
            code: 255,
            stdout: Vec::new(),
            stderr: b"saker: the job's member is gone\n".to_vec(),
        };
        nodes.send(ctx, leader, &ToAgent::GangLaunchEnded(ended));
    }
}

/// For ranks Saker started: the member, rank and outcome of the failed process that
/// ended first (stopped ones are not failures), one that called `PMI_Abort` only if
/// none other failed.
fn earliest_failure(run: &GangRun, parts: &[TaskResult]) -> Option<(usize, u32, Outcome)> {
    if run.launched {
        return None;
    }
    parts
        .iter()
        .enumerate()
        .flat_map(|(member, part)| {
            let ends = match &part.body {
                ResultBody::Part { ends, .. } => ends.as_slice(),
                _ => &[],
            };
            ends.iter().map(move |end| (member, end))
        })
        .filter(|(_, end)| {
            !matches!(
                end.outcome,
                Outcome::Exited { code: 0 } | Outcome::Cancelled
            )
        })
        .min_by_key(|(_, end)| (end.aborted, end.ended_unix_us))
        .map(|(member, end)| {
            let rank = rank_offset(run, member) + end.rank;
            (member, rank, end.outcome.clone())
        })
}

/// How a PMI job's ranks wired up, from its parts' times: the last node's last
/// `init`, and the last node's first fence, after the first part's start. None for
/// other jobs, and for one whose ranks did not all say `init`.
fn wireup(parts: &[TaskResult]) -> Option<WireUp> {
    let times: Vec<PmiTimes> = parts
        .iter()
        .filter_map(|part| match &part.body {
            ResultBody::Part { pmi, .. } => *pmi,
            _ => None,
        })
        .collect();
    if times.len() != parts.len() || times.iter().any(|t| t.inited_unix_us == 0) {
        return None;
    }
    let start = parts.iter().map(|p| p.start_unix_us).min().unwrap_or(0);
    let last = |at: fn(&PmiTimes) -> u64| times.iter().map(at).max().unwrap_or(0);
    let fenced = times.iter().all(|t| t.fenced_unix_us > 0);
    Some(WireUp {
        init_us: last(|t| t.inited_unix_us).saturating_sub(start),
        fence_us: fenced.then(|| last(|t| t.fenced_unix_us).saturating_sub(start)),
    })
}

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

#[cfg(test)]
mod tests;
