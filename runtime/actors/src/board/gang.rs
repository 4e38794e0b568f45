//! This node's parts of gang attempts, as bookkeeping: what a part holds, which of its
//! processes wait for a slot, how they ended, and the one result the part reports.
//! How its processes are started (ranks, an MPI launcher, daemons) is the shell's:
//! see [`crate::gang`].
//!
//! A part holds the job's resources on this node from its arrival until it ends,
//! whatever of it runs; its processes run on idle slots, ahead of queued tasks, and
//! hold nothing more themselves.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use saker_wire::messages::{
    Assignment, AttemptId, GangLaunch, GangLaunchEnded, GangPart, Hpc, JobDef, LaunchRanks,
    LauncherKind, MpiKind, Outcome, Output, PmiTimes, ProcessEnd, Resources, ResultBody, Started,
    TaskResult,
};

use super::{Board, Effect, Moment, Run, Running, Start};
use crate::attempt::Finished;
use crate::resources::Binding;

/// What the shell needs to start any process of one part: the job, the attempt, the
/// gang's layout and this node's place in it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartPlan {
    pub assignment: Assignment,
    pub job: Arc<JobDef>,
    pub gang: GangPart,
    /// The job's layout (one rank per node for a gang without one).
    pub hpc: Hpc,
    /// Several members share a machine (local mode): their MPI daemons need session
    /// directories of their own, and their ranks must not share memory segments.
    pub shared_machine: bool,
}

/// A process of a part, waiting for a slot or running on one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartProcess {
    pub attempt: AttemptId,
    /// Its number in the part: the local rank, 0 for a launcher, the launch's number
    /// for a daemon.
    pub number: u32,
    pub kind: ProcessKind,
}

/// What a part's process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessKind {
    /// Rank `rank` of a job without MPI, with the rendezvous environment, or of a
    /// job whose ranks this agent serves PMI.
    Rank { rank: u32, local: u32 },
    /// The leader's MPI launcher, with this agent's remote shell.
    Launcher,
    /// The leader's `srun` step for the whole job.
    Srun,
    /// A command the leader's launcher asked this member to run (an MPI daemon).
    Daemon { command: String },
    /// The job's command, on the leader of a job of launcher script.
    Script,
    /// Rank `rank` (`local` on this node) of one `saker mpiexec` of a script.
    LaunchRank {
        rank: u32,
        local: u32,
        launch: Arc<LaunchPlan>,
    },
}

impl ProcessKind {
    /// Whether it waits on other processes of its part (a launcher, `srun`, a
    /// script): it runs on a thread of its own, never on a slot, so that the
    /// processes it waits for always have the slots of the cores the part holds.
    pub fn waits_on_others(&self) -> bool {
        matches!(
            self,
            ProcessKind::Launcher | ProcessKind::Srun | ProcessKind::Script
        )
    }
}

/// One `saker mpiexec` of a script job, as this member runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// The leader's number for it (its end goes back under it).
    pub number: u32,
    /// The ranks' `/bin/sh -c` command line.
    pub command: String,
    pub ranks: LaunchRanks,
}

impl LaunchPlan {
    /// The world's ranks that run on `member`.
    pub fn local_ranks(&self, member: u32) -> std::ops::Range<u32> {
        let (ranks, per) = (self.ranks.ranks, self.ranks.ranks_per_node);
        let first = member.saturating_mul(per).min(ranks);
        first..first.saturating_add(per).min(ranks)
    }
}

/// The ranks of a script's `saker mpiexec` running on this node.
#[derive(Debug)]
struct Launch {
    plan: Arc<LaunchPlan>,
    first_rank: u32,
    live: u32,
    /// The first failure's exit code (0 while none failed).
    code: i32,
    /// Each ended rank's output.
    outputs: Vec<(u32, Output, Output)>,
}

/// One part in progress.
#[derive(Debug)]
struct Part {
    plan: Arc<PartPlan>,
    needs: Resources,
    /// The CPUs and GPUs it holds; every process of the part runs with them.
    binding: Binding,
    started_us: u64,
    /// Processes queued or running.
    live: u32,
    ends: Vec<ProcessEnd>,
    /// The output of process 0 (the leader's rank 0 or launcher, a member's first rank).
    first: Option<(Output, Output)>,
    /// How the first of its processes that failed ended.
    failure: Option<Outcome>,
    /// Stopped by the root (or the agent stopping): what is left is killed.
    cancelled: bool,
    /// Whether the part ends when its processes have (ranks, the leader's launcher),
    /// or only when stopped (a member of an MPI job).
    ends_with_processes: bool,
    /// An MPI job's part: processes other than the launcher are daemons, whose ends
    /// go to the launcher and decide nothing here.
    mpi: bool,
    /// Its processes held back while this node fetches the job's data items (they
    /// count in `live`); none once every item is here.
    staged: Option<Vec<PartProcess>>,
    /// The process that called `PMI_Abort`, and the exit code it asked for: its end,
    /// whatever stopped it, is that exit.
    aborted: Option<(u32, i32)>,
    /// When its ranks wired up, for a part whose ranks this node serves PMI.
    pmi: Option<PmiTimes>,
    /// A part of a job of launcher script: process 0 is the leader's script, the
    /// others ranks of its `saker mpiexec` (one at a time).
    script: bool,
    launch: Option<Launch>,
    /// Its process that waits on others runs, on a thread of its own.
    own: bool,
}

/// A moment of a PMI part's wire-up, as its service saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wired {
    /// The last of the node's ranks said `init`.
    Initialized,
    /// The ranks' first fence over the whole group completed.
    Fenced,
}

/// The gang state of a [`Board`].
#[derive(Debug, Default)]
pub(super) struct Parts {
    /// By attempt, in order: stopping them all reports in a set order.
    parts: BTreeMap<AttemptId, Part>,
    /// Started before the queued tasks, in arrival order.
    pub(super) queue: VecDeque<PartProcess>,
    /// Ends of launched daemons, for the leader (sent before the next report).
    pub(super) launch_ends: Vec<GangLaunchEnded>,
    /// A leader's launch requests made while no root heard this node (sent first in
    /// the next report, after the hello).
    pub(super) held_launches: Vec<GangLaunch>,
    /// Parts that ended and whose results no root has said durable yet: a next root
    /// needs their gang to adopt the attempt ([`Board::held`]).
    pub(super) ended: BTreeMap<AttemptId, GangPart>,
}

/// The most ended parts remembered for a next root; past it the oldest are forgotten
/// (their gangs are then replayed if a root dies before their results are durable).
const MAX_ENDED_PARTS: usize = 4096;

impl Parts {
    pub(super) fn contains(&self, attempt: AttemptId) -> bool {
        self.parts.contains_key(&attempt)
    }

    /// Each part that runs here: its attempt, task, start and gang.
    pub(super) fn running(&self) -> impl Iterator<Item = (Assignment, u64, &GangPart)> {
        self.parts
            .values()
            .map(|part| (part.plan.assignment, part.started_us, &part.plan.gang))
    }

    /// The gang of a part that ended here, if its result is not durable yet.
    pub(super) fn ended_gang(&self, attempt: AttemptId) -> Option<&GangPart> {
        self.ended.get(&attempt)
    }

    /// The results of `attempts` are durable at the root: their parts are forgotten.
    pub(super) fn forget_ended(&mut self, attempts: impl Iterator<Item = AttemptId>) {
        if self.ended.is_empty() {
            return;
        }
        for attempt in attempts {
            self.ended.remove(&attempt);
        }
    }
}

/// The job's HPC layout, or a one-rank-per-node layout for a gang without one.
fn layout(job: &JobDef, members: usize) -> Hpc {
    job.hpc.unwrap_or(Hpc {
        ranks: members as u32,
        ranks_per_node: 1,
        cores_per_rank: job.resources.core_count().max(1),
        mpi: MpiKind::None,
        launcher: LauncherKind::Agents,
    })
}

impl Board {
    /// Takes this node's part of a gang attempt (its job definition already on the
    /// board): its resources are held from now, its first processes queued for slots.
    pub(super) fn take_part(&mut self, assignment: Assignment, gang: &GangPart, now: Moment) {
        let Some(job) = self.jobs.get(&assignment.job).cloned() else {
            let reason = format!("unknown job {} on this agent", assignment.job);
            self.fail_part_unstarted(&assignment, Outcome::Lost { reason }, now);
            return;
        };
        let needs = Board::needs_of(&job);
        // The root places a part only where its resources are free (its credit
        // covered them too): anything else is a protocol error, lost for a replay.
        let Some(free) = self.free.checked_sub(needs) else {
            let reason = format!("gang part needs {needs}; only {} free here", self.free);
            self.fail_part_unstarted(&assignment, Outcome::Lost { reason }, now);
            return;
        };
        self.free = free;
        // No slot of its own: the CPUs of any slot are as good.
        let binding = self.devices.take(
            usize::MAX,
            needs.core_count(),
            needs.gpu_count(),
            needs.memory_mib(),
        );
        self.pending.started.push(Started {
            task: assignment.task,
            attempt: assignment.attempt,
            executor: u32::MAX,
            at_unix_us: now.unix_us,
        });
        let hpc = layout(&job, gang.nodes.len());
        let leader = gang.member == 0;
        // With srun, Slurm starts every rank: the leader runs srun, the others hold
        // their cores for the ranks Slurm puts there.
        let srun = hpc.launcher == LauncherKind::Srun;
        // The script runs on the leader; ranks start when it asks.
        let script = hpc.launcher == LauncherKind::Script;
        // Started by this agent: ranks without MPI, and ranks served PMI here.
        let ranks = matches!(hpc.mpi, MpiKind::None | MpiKind::Pmi) && !srun && !script;
        let processes: Vec<(u32, ProcessKind)> = match hpc.mpi {
            _ if srun && leader => vec![(0, ProcessKind::Srun)],
            _ if srun => Vec::new(),
            _ if script && leader => vec![(0, ProcessKind::Script)],
            _ if script => Vec::new(),
            MpiKind::None | MpiKind::Pmi => {
                let first = gang.member.saturating_mul(hpc.ranks_per_node);
                let end = (first + hpc.ranks_per_node).min(hpc.ranks);
                (first..end)
                    .map(|rank| {
                        let local = rank - first;
                        (local, ProcessKind::Rank { rank, local })
                    })
                    .collect()
            }
            MpiKind::Openmpi | MpiKind::Mpich if leader => vec![(0, ProcessKind::Launcher)],
            MpiKind::Openmpi | MpiKind::Mpich => Vec::new(),
        };
        let plan = Arc::new(PartPlan {
            assignment,
            job,
            gang: gang.clone(),
            hpc,
            shared_machine: has_repeats(&gang.hosts),
        });
        if ranks {
            // Before any rank can start: the shell carries it out under the same hold.
            self.effects.push_back(Effect::WriteHostfile {
                plan: Arc::clone(&plan),
            });
        }
        if ranks && hpc.mpi == MpiKind::Pmi {
            self.effects.push_back(Effect::OpenPmi {
                plan: Arc::clone(&plan),
                launch: None,
            });
        }
        let attempt = assignment.attempt;
        let live = processes.len() as u32;
        let processes = processes.into_iter().map(|(number, kind)| PartProcess {
            attempt,
            number,
            kind,
        });
        // Every process here needs the job's items: held back until they are here
        // (a member of an MPI job too, whose daemons come later).
        let stage = !plan.job.reads.is_empty() && (live > 0 || !ranks);
        let staged = if stage {
            self.effects.push_back(Effect::CheckPartItems {
                plan: Arc::clone(&plan),
            });
            Some(processes.collect())
        } else {
            let (own, queued): (Vec<_>, Vec<_>) =
                processes.partition(|process| process.kind.waits_on_others());
            self.parts.queue.extend(queued);
            for process in own {
                self.effects.push_back(Effect::RunOwn {
                    plan: Arc::clone(&plan),
                    process,
                    binding: binding.clone(),
                });
            }
            None
        };
        self.parts.parts.insert(
            attempt,
            Part {
                plan,
                needs,
                binding,
                started_us: now.unix_us,
                live,
                ends: Vec::new(),
                first: None,
                failure: None,
                cancelled: false,
                ends_with_processes: ranks || leader,
                mpi: !ranks && !script,
                staged,
                aborted: None,
                pmi: (hpc.mpi == MpiKind::Pmi && (ranks || script)).then(PmiTimes::default),
                script,
                launch: None,
                own: leader && (srun || script || !ranks) && !stage,
            },
        );
        if live == 0 && ranks {
            // No rank on this node (fewer ranks than nodes × ranks per node).
            self.complete_part(attempt, now);
        }
        if leader && (matches!(hpc.mpi, MpiKind::Openmpi | MpiKind::Mpich) || script) && !srun {
            let members = gang.nodes.len() as u32;
            self.effects
                .push_back(Effect::OpenEndpoint { attempt, members });
        }
    }

    /// This node leads a gang whose launcher asked for a command on a member while no
    /// root hears this node: it goes up first once one does.
    pub fn hold_launch(&mut self, launch: GangLaunch) {
        self.parts.held_launches.push(launch);
    }

    /// A member is to run a command its leader's launcher asked for, in its part.
    /// Answered at once (code 255) if the part is gone.
    pub fn handle_gang_launch(&mut self, launch: GangLaunch) {
        let attempt = launch.attempt;
        let Some(part) = self.parts.parts.get_mut(&attempt).filter(|p| !p.cancelled) else {
            self.parts
                .launch_ends
                .push(launch_refused(attempt, launch.launch, ""));
            return;
        };
        if let Some(ranks) = launch.ranks {
            let plan = Arc::new(LaunchPlan {
                number: launch.launch,
                command: launch.command,
                ranks,
            });
            return self.start_launch(attempt, plan);
        }
        if part.script {
            // Its process numbers are its ranks': a daemon's would be taken for one.
            let reason = "a script job starts its ranks with `saker mpiexec`, not a remote shell";
            let end = launch_refused(attempt, launch.launch, reason);
            self.parts.launch_ends.push(end);
            return;
        }
        part.live += 1;
        let process = PartProcess {
            attempt,
            number: launch.launch,
            kind: ProcessKind::Daemon {
                command: launch.command,
            },
        };
        match &mut part.staged {
            Some(staged) => staged.push(process),
            None => self.parts.queue.push_back(process),
        }
    }

    /// Starts this member's ranks of a script's `saker mpiexec`, or answers at once
    /// why it cannot (code 255).
    fn start_launch(&mut self, attempt: AttemptId, plan: Arc<LaunchPlan>) {
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return;
        };
        let held = part.plan.hpc.ranks_per_node;
        let refused = if !part.script {
            Some("the job is not of launcher script".to_owned())
        } else if part.launch.is_some() {
            Some("another `saker mpiexec` of this job runs: one at a time".to_owned())
        } else if plan.ranks.ranks_per_node > held || plan.ranks.ranks_per_node == 0 {
            Some(format!(
                "{} ranks per node asked; the job holds cores for {held}",
                plan.ranks.ranks_per_node
            ))
        } else {
            None
        };
        if let Some(reason) = refused {
            let end = launch_refused(attempt, plan.number, &reason);
            self.parts.launch_ends.push(end);
            return;
        }
        let local = plan.local_ranks(part.plan.gang.member);
        if local.is_empty() {
            let end = launch_refused(attempt, plan.number, "");
            self.parts
                .launch_ends
                .push(GangLaunchEnded { code: 0, ..end });
            return;
        }
        self.effects.push_back(Effect::OpenPmi {
            plan: Arc::clone(&part.plan),
            launch: Some(Arc::clone(&plan)),
        });
        let processes = local.clone().map(|rank| PartProcess {
            attempt,
            number: 1 + rank - local.start,
            kind: ProcessKind::LaunchRank {
                rank,
                local: rank - local.start,
                launch: Arc::clone(&plan),
            },
        });
        part.live += local.len() as u32;
        part.launch = Some(Launch {
            plan: Arc::clone(&plan),
            first_rank: local.start,
            live: local.len() as u32,
            code: 0,
            outputs: Vec::new(),
        });
        match &mut part.staged {
            Some(staged) => staged.extend(processes),
            None => self.parts.queue.extend(processes),
        }
    }

    /// The shell looked for the items `attempt`'s part reads: `missing` is the first
    /// this node must fetch (the part waits for it, then is checked again), none if
    /// every one is here (its processes may start).
    pub fn handle_part_items_checked(&mut self, attempt: AttemptId, missing: Option<String>) {
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return;
        };
        if part.cancelled || part.staged.is_none() {
            return;
        }
        match missing {
            Some(item) => self.fetches.stage_part(&item, attempt),
            None => {
                let staged = part.staged.take().unwrap_or_default();
                for process in staged {
                    if process.kind.waits_on_others() {
                        part.own = true;
                        self.effects.push_back(Effect::RunOwn {
                            plan: Arc::clone(&part.plan),
                            process,
                            binding: part.binding.clone(),
                        });
                    } else {
                        self.parts.queue.push_back(process);
                    }
                }
            }
        }
    }

    /// The item parts waited for is here (`reason` none), or cannot be had: each looks
    /// again at what it reads, or fails with the reason.
    pub(super) fn parts_fetched(
        &mut self,
        parts: Vec<AttemptId>,
        reason: Option<&str>,
        now: Moment,
    ) {
        for attempt in parts {
            let Some(part) = self.parts.parts.get(&attempt) else {
                continue;
            };
            match reason {
                None => self.effects.push_back(Effect::CheckPartItems {
                    plan: Arc::clone(&part.plan),
                }),
                Some(reason) => self.handle_part_failed(attempt, reason.to_owned(), now),
            }
        }
    }

    /// Starts the next waiting part process on idle slot `index`, if there is one.
    pub(super) fn start_part_process(&mut self, index: usize, now: Moment) -> Option<Start> {
        loop {
            let process = self.parts.queue.pop_front()?;
            let Some(part) = self.parts.parts.get(&process.attempt) else {
                continue;
            };
            self.slots[index].running = Some(Running {
                assignment: part.plan.assignment,
                received_us: part.started_us,
                fetch_us: 0,
                needs: Resources::ZERO,
                started_us: now.unix_us,
                part: Some(process.number),
            });
            return Some(Start {
                slot: index,
                attempt: process.attempt,
                binding: part.binding.clone(),
                run: Run::Part {
                    plan: Arc::clone(&part.plan),
                    process,
                },
            });
        }
    }

    /// A part's process ended: noted, and the part completed if that was its last.
    pub(super) fn part_process_ended(
        &mut self,
        number: u32,
        attempt: AttemptId,
        finished: Finished,
        now: Moment,
    ) {
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return;
        };
        part.live = part.live.saturating_sub(1);
        let mut finished = finished;
        let aborted = part.aborted.is_some_and(|(aborted, _)| aborted == number);
        if let Some((_, code)) = part.aborted.filter(|_| aborted) {
            finished.outcome = Outcome::Exited { code };
        }
        let ok = matches!(finished.outcome, Outcome::Exited { code: 0 });
        let daemon = part.mpi && number > 0;
        let mut rank = number;
        if part.script && number > 0 {
            let ended = launch_rank_ended(part, attempt, number, &finished);
            if let Some((global, end)) = ended {
                rank = global;
                self.parts.launch_ends.extend(end);
            }
        }
        if daemon {
            self.parts.launch_ends.push(GangLaunchEnded {
                attempt,
                launch: number,
                code: exit_code(&finished.outcome),
                stdout: Vec::new(),
                stderr: Vec::new(),
            });
        }
        if number == 0 && part.first.is_none() {
            part.first = Some((finished.stdout, finished.stderr));
        }
        if !ok && !daemon && !part.cancelled && part.failure.is_none() {
            part.failure = Some(finished.outcome.clone());
        }
        part.ends.push(ProcessEnd {
            rank,
            outcome: finished.outcome,
            ended_unix_us: now.unix_us,
            aborted,
        });
        // A script that ended leaves no ranks behind (as a batch script's steps end
        // with it).
        let script_ended = part.script && number == 0;
        let stop_rest = (part.failure.is_some() || script_ended) && part.live > 0;
        // A failed rank of a script job fails its part, as a PMI job's does.
        let failed_here = part.script && part.failure.is_some();
        let done = part.live == 0 && (part.ends_with_processes || part.cancelled || failed_here);
        if stop_rest {
            self.stop_part_processes(attempt);
        }
        if done {
            self.complete_part(attempt, now);
        }
    }

    /// The root (or the agent stopping) stops a part: what runs of it is killed, and
    /// the part ends as soon as nothing does. False if `attempt` is not a part.
    pub(super) fn cancel_part(&mut self, attempt: AttemptId, now: Moment) -> bool {
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return false;
        };
        part.cancelled = true;
        self.stop_part_processes(attempt);
        self.complete_part_if_stopped(attempt, now);
        true
    }

    /// A process of `attempt`'s part that ran on a thread of its own ended.
    pub fn handle_own_ended(
        &mut self,
        attempt: AttemptId,
        number: u32,
        finished: Finished,
        now: Moment,
    ) {
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            part.own = false;
        }
        self.part_process_ended(number, attempt, finished, now);
    }

    /// Drops a part's waiting processes and stops its running ones.
    fn stop_part_processes(&mut self, attempt: AttemptId) {
        let before = self.parts.queue.len();
        self.parts
            .queue
            .retain(|process| process.attempt != attempt);
        let mut dropped = (before - self.parts.queue.len()) as u32;
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            dropped += part.staged.take().map_or(0, |staged| staged.len() as u32);
            part.live -= dropped.min(part.live);
            if part.own {
                self.effects.push_back(Effect::StopOwn { attempt });
            }
        }
        for (slot, running) in self.slots.iter().enumerate() {
            if running
                .running
                .is_some_and(|r| r.part.is_some() && r.assignment.attempt == attempt)
            {
                self.effects.push_back(Effect::Cancel { slot, attempt });
            }
        }
    }

    fn complete_part_if_stopped(&mut self, attempt: AttemptId, now: Moment) {
        if self
            .parts
            .parts
            .get(&attempt)
            .is_some_and(|part| part.live == 0)
        {
            self.complete_part(attempt, now);
        }
    }

    /// Reports a part that has nothing left running and gives back what it held.
    fn complete_part(&mut self, attempt: AttemptId, now: Moment) {
        let Some(part) = self.parts.parts.remove(&attempt) else {
            return;
        };
        self.effects.push_back(Effect::PartEnded { attempt });
        if self.parts.ended.len() >= MAX_ENDED_PARTS {
            self.parts.ended.pop_first();
        }
        self.parts.ended.insert(attempt, part.plan.gang.clone());
        self.devices.release(&part.binding);
        self.free = self.free.saturating_add(part.needs);
        self.give_back(part.needs);
        let outcome = match (part.failure, part.cancelled) {
            (Some(failure), _) => failure,
            (None, true) => Outcome::Cancelled,
            (None, false) => Outcome::Exited { code: 0 },
        };
        let (stdout, stderr) = part.first.unwrap_or_default();
        self.pending.results.push(TaskResult {
            task: part.plan.assignment.task,
            attempt,
            executor: u32::MAX,
            outcome,
            // A part is taken as its dispatch arrives.
            received_unix_us: part.started_us,
            start_unix_us: part.started_us,
            end_unix_us: now.unix_us,
            fetch_us: 0,
            body: ResultBody::Part {
                stdout,
                stderr,
                ends: part.ends,
                pmi: part.pmi,
            },
        });
    }

    /// The part cannot go on, by its own fault (its launcher's remote-shell endpoint
    /// could not be opened): it fails with `reason` once what runs of it is stopped.
    pub fn handle_part_failed(&mut self, attempt: AttemptId, reason: String, now: Moment) {
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            part.failure.get_or_insert(Outcome::SpawnFailed { reason });
        }
        self.stop_part_processes(attempt);
        self.complete_part_if_stopped(attempt, now);
    }

    /// Process `number` of `attempt` (a rank this node serves PMI) called `PMI_Abort`
    /// with `code`: the part fails with that exit (1 for a code of 0), as an MPI
    /// launcher's would, and every process of it is stopped, the aborting one too (an
    /// MPICH rank waits to be).
    pub fn handle_rank_aborted(&mut self, attempt: AttemptId, number: u32, code: i32, now: Moment) {
        let Some(part) = self.parts.parts.get_mut(&attempt).filter(|p| !p.cancelled) else {
            return;
        };
        let code = if code == 0 { 1 } else { code };
        // A script's ranks are its processes 1 and on.
        let number = number + u32::from(part.script);
        part.aborted.get_or_insert((number, code));
        part.failure.get_or_insert(Outcome::Exited { code });
        self.stop_part_processes(attempt);
        self.complete_part_if_stopped(attempt, now);
    }

    /// The ranks of `attempt`'s part reached a moment of their wire-up (the first time
    /// counts).
    pub fn handle_part_wired(&mut self, attempt: AttemptId, wired: Wired, now: Moment) {
        let Some(times) = self
            .parts
            .parts
            .get_mut(&attempt)
            .and_then(|part| part.pmi.as_mut())
        else {
            return;
        };
        let at = match wired {
            Wired::Initialized => &mut times.inited_unix_us,
            Wired::Fenced => &mut times.fenced_unix_us,
        };
        if *at == 0 {
            *at = now.unix_us;
        }
    }

    /// A part that could not even be taken.
    fn fail_part_unstarted(&mut self, assignment: &Assignment, outcome: Outcome, now: Moment) {
        self.pending.results.push(TaskResult {
            task: assignment.task,
            attempt: assignment.attempt,
            executor: u32::MAX,
            outcome,
            received_unix_us: now.unix_us,
            start_unix_us: now.unix_us,
            end_unix_us: now.unix_us,
            fetch_us: 0,
            body: ResultBody::Part {
                stdout: Output::default(),
                stderr: Output::default(),
                ends: Vec::new(),
                pmi: None,
            },
        });
    }

    /// Stops every part (the agent is stopping, or its work is replayed elsewhere).
    pub(super) fn cancel_all_parts(&mut self, now: Moment) {
        let attempts: Vec<AttemptId> = self.parts.parts.keys().copied().collect();
        for attempt in attempts {
            self.cancel_part(attempt, now);
        }
    }
}

/// Rank process `number` of a script part's launch ended: noted, with its global
/// rank; once the launch's last rank here has ended, its end for the leader.
fn launch_rank_ended(
    part: &mut Part,
    attempt: AttemptId,
    number: u32,
    finished: &Finished,
) -> Option<(u32, Option<GangLaunchEnded>)> {
    let launch = part.launch.as_mut()?;
    let rank = launch.first_rank + number - 1;
    launch.live = launch.live.saturating_sub(1);
    let code = exit_code(&finished.outcome);
    if code != 0 && launch.code == 0 {
        launch.code = code;
    }
    launch
        .outputs
        .push((rank, finished.stdout.clone(), finished.stderr.clone()));
    if launch.live > 0 {
        return Some((rank, None));
    }
    let mut launch = part.launch.take()?;
    launch.outputs.sort_by_key(|(rank, _, _)| *rank);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for (rank, out, err) in &launch.outputs {
        gather_output(&mut stdout, *rank, "stdout", out);
        gather_output(&mut stderr, *rank, "stderr", err);
    }
    let end = GangLaunchEnded {
        attempt,
        launch: launch.plan.number,
        code: launch.code,
        stdout,
        stderr,
    };
    Some((rank, Some(end)))
}

/// Most bytes of its ranks' output one member sends back for a launch; the rest
/// stays in the ranks' files on the member.
const MAX_LAUNCH_OUTPUT: usize = 8 << 20;

/// Appends a rank's output (what it kept inline), and where the rest is.
fn gather_output(into: &mut Vec<u8>, rank: u32, stream: &str, output: &Output) {
    let room = MAX_LAUNCH_OUTPUT.saturating_sub(into.len());
    into.extend_from_slice(&output.inline[..output.inline.len().min(room)]);
    let whole = output.inline.len() as u64 >= output.total_bytes;
    if !whole || output.inline.len() > room {
        if into.last().is_some_and(|byte| *byte != b'\n') {
            into.push(b'\n');
        }
        let rest = match &output.spill_path {
            Some(path) => format!("in {path} on its node"),
            None => "not kept".to_owned(),
        };
        let note = format!(
            "[saker: rank {rank}'s {stream} has {} bytes; the rest is {rest}]\n",
            output.total_bytes
        );
        into.extend_from_slice(note.as_bytes());
    }
}

/// A launch answered without running (code 255, with why on its stderr).
fn launch_refused(attempt: AttemptId, launch: u32, reason: &str) -> GangLaunchEnded {
    let stderr = match reason {
        "" => Vec::new(),
        reason => format!("saker: {reason}\n").into_bytes(),
    };
    GangLaunchEnded {
        attempt,
        launch,
        code: 255,
        stdout: Vec::new(),
        stderr,
    }
}

/// A process's end as one exit code: its own, 128 + a killing signal, or 255.
pub fn exit_code(outcome: &Outcome) -> i32 {
    match outcome {
        Outcome::Exited { code } => *code,
        Outcome::Signaled { signal } => 128 + signal,
        _ => 255,
    }
}

fn has_repeats(hosts: &[String]) -> bool {
    let mut seen: Vec<&String> = hosts.iter().collect();
    seen.sort_unstable();
    seen.windows(2).any(|pair| pair[0] == pair[1])
}
