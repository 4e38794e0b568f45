//! This node's part in a gang attempt: an HPC job running on several nodes at once.
//!
//! The root sends every member of a gang its [`GangPart`] together with the one
//! assignment. A part holds the job's resources on this node from its arrival until
//! it ends, whatever of it runs; its processes run on idle slots, ahead of queued
//! tasks, and hold nothing more themselves. What runs depends on the job's [`Mpi`]:
//!
//! * **none**: this node's ranks, each with the rendezvous environment
//!   ([`rank_launch`]). The part ends when they have; the first to fail stops the
//!   others here (the root stops the other members).
//! * **OpenMPI / MPICH**, on the leader: the MPI launcher, with this agent's
//!   [remote-shell endpoint](crate::gang::endpoint) as its `rsh`/`ssh`. The part ends
//!   with the launcher.
//! * **OpenMPI / MPICH**, on other members: nothing at first; each command the
//!   launcher asks its remote shell to run here ([`GangLaunch`], an `orted` or a
//!   `hydra_pmi_proxy`) runs in this part, and its end goes back to the leader. The
//!   part ends when the root stops it (after the leader's part ended).
//!
//! One result per part goes up ([`ResultBody::Part`]): the output of its first
//! process (rank 0's on the leader, or the launcher's) and how each process ended.
//! Every other process's output is spilled to files beside the node's spilled output
//! (`t<task>.a<attempt>.r<rank>.stdout`, `.d<launch>` for daemons).

pub mod endpoint;

use std::collections::HashMap;
use std::fmt::Write as _;

use saker_wire::messages::{
    Assignment, AttemptId, GangLaunch, GangLaunchEnded, GangPart, Hpc, JobDef, LauncherKind,
    MpiKind, Outcome, Output, ProcessEnd, ResourceKind, Resources, ResultBody, Started, TaskResult,
};

use crate::board::{Board, NextAttempt, Running, Work, bind_launch};
use crate::launch::build_launch;
use crate::process::{Finished, Launch, StopHandle, sets, unix_micros};
use crate::resources::Binding;

/// The name a gang member goes by on an MPI launcher's command line. Not the node's
/// host name: several agents may share a machine (local mode, tests), and a launcher
/// must see each member as a host of its own, never as itself (which it would start
/// without its remote shell).
pub fn member_host(member: usize) -> String {
    format!("saker-m{member}")
}

/// The member a [`member_host`] name stands for.
pub fn member_of_host(host: &str) -> Option<u32> {
    host.strip_prefix("saker-m")?.parse().ok()
}

/// One part in progress. See the module doc.
#[derive(Debug)]
pub(crate) struct Part {
    assignment: Assignment,
    needs: Resources,
    /// The CPUs and GPUs it holds; every process of the part runs with them.
    binding: Binding,
    /// Cores of each of its ranks (their `OMP_NUM_THREADS`).
    rank_cores: u32,
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
    /// The leader's remote-shell endpoint; dropping it closes it.
    pub(crate) endpoint: Option<endpoint::Endpoint>,
    /// This node's position in the gang.
    member: u32,
    /// Several members share a machine (local mode): their MPI daemons need
    /// session directories of their own.
    shared_machine: bool,
    /// An MPI job's part: processes other than the launcher are daemons, whose ends
    /// go to the launcher and decide nothing here.
    mpi: bool,
}

/// A process of a part waiting for an idle slot.
#[derive(Debug)]
pub(crate) struct PartProcess {
    attempt: AttemptId,
    number: u32,
    launch: Box<Launch>,
}

/// The gang state of a [`Board`].
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub(crate) parts: HashMap<AttemptId, Part>,
    /// Started before the queued tasks, in arrival order.
    pub(crate) queue: std::collections::VecDeque<PartProcess>,
    /// Ends of launched daemons, for the leader (sent before the next report).
    pub(crate) launch_ends: Vec<GangLaunchEnded>,
    /// The leader's endpoint threads waiting for a launch's end, by (attempt, launch).
    pub(crate) waiters: HashMap<(AttemptId, u32), std::sync::mpsc::Sender<i32>>,
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
    /// board). Returns whether it is the leader of an MPI job, which then needs its
    /// remote-shell endpoint.
    pub fn accept_part(&mut self, assignment: Assignment, gang: &GangPart) -> bool {
        let Some(job) = self.jobs.get(&assignment.job).cloned() else {
            let reason = format!("unknown job {} on this agent", assignment.job);
            self.fail_part_unstarted(&assignment, Outcome::Lost { reason });
            return false;
        };
        let needs = job
            .resources
            .with(ResourceKind::CORES, job.resources.core_count().max(1));
        // The root places a part only where its resources are free (its credit
        // covered them too): anything else is a protocol error, lost for a replay.
        let Some(free) = self.free.checked_sub(needs) else {
            let reason = format!("gang part needs {needs}; only {} free here", self.free);
            self.fail_part_unstarted(&assignment, Outcome::Lost { reason });
            return false;
        };
        self.free = free;
        // No slot of its own: the CPUs of any slot are as good.
        let binding = self.devices.take(
            usize::MAX,
            needs.core_count(),
            needs.gpu_count(),
            needs.memory_mib(),
        );
        let started_us = unix_micros();
        self.pending.started.push(Started {
            task: assignment.task,
            attempt: assignment.attempt,
            executor: u32::MAX,
            at_unix_us: started_us,
        });
        let hpc = layout(&job, gang.nodes.len());
        let leader = gang.member == 0;
        // With srun, Slurm starts every rank: the leader runs srun, the others hold
        // their cores for the ranks Slurm puts there.
        let srun = hpc.launcher == LauncherKind::Srun;
        let processes: Vec<(u32, Launch)> = match hpc.mpi {
            _ if srun && leader => vec![(0, self.srun_launch(&job, &assignment, gang, &hpc))],
            _ if srun => Vec::new(),
            MpiKind::None => self.rank_launches(&job, &assignment, gang, &hpc),
            MpiKind::Openmpi | MpiKind::Mpich if leader => {
                vec![(0, self.launcher_launch(&job, &assignment, gang, &hpc))]
            }
            MpiKind::Openmpi | MpiKind::Mpich => Vec::new(),
        };
        let live = processes.len() as u32;
        for (number, mut launch) in processes {
            bind_launch(&mut launch, &binding, hpc.cores_per_rank);
            self.parts.queue.push_back(PartProcess {
                attempt: assignment.attempt,
                number,
                launch: Box::new(launch),
            });
        }
        self.parts.parts.insert(
            assignment.attempt,
            Part {
                assignment,
                needs,
                binding,
                rank_cores: hpc.cores_per_rank,
                started_us,
                live,
                ends: Vec::new(),
                first: None,
                failure: None,
                cancelled: false,
                ends_with_processes: (hpc.mpi == MpiKind::None && !srun) || leader,
                endpoint: None,
                member: gang.member,
                shared_machine: has_repeats(&gang.hosts),
                mpi: hpc.mpi != MpiKind::None || srun,
            },
        );
        if live == 0 && hpc.mpi == MpiKind::None && !srun {
            // No rank on this node (fewer ranks than nodes × ranks per node).
            self.complete_part(assignment.attempt);
        }
        leader && hpc.mpi != MpiKind::None && !srun
    }

    /// The leader's `srun` step for the whole job, on the members' hosts (Slurm node
    /// names), overlapping the pilot's own step and limited to the cores asked for.
    fn srun_launch(
        &self,
        job: &JobDef,
        assignment: &Assignment,
        gang: &GangPart,
        hpc: &Hpc,
    ) -> Launch {
        let user = build_launch(job, assignment, &self.spill_dir);
        let mut args: Vec<String> = vec![
            "srun".into(),
            "--overlap".into(),
            "--exact".into(),
            "--quiet".into(),
            "--kill-on-bad-exit=1".into(),
            format!("--nodes={}", gang.nodes.len()),
            format!("--ntasks={}", hpc.ranks),
            format!("--ntasks-per-node={}", hpc.ranks_per_node),
            format!("--cpus-per-task={}", hpc.cores_per_rank),
            format!("--nodelist={}", gang.hosts.join(",")),
        ];
        // Debian's OpenMPI speaks PMIx only, its MPICH PMI-2.
        args.push(
            match hpc.mpi {
                MpiKind::Openmpi => "--mpi=pmix",
                MpiKind::Mpich => "--mpi=pmi2",
                MpiKind::None => "--mpi=none",
            }
            .into(),
        );
        wrap(user, &args, &self.spill_dir, assignment, self.node)
    }

    /// This node's ranks of a job without MPI, each with the rendezvous variables.
    fn rank_launches(
        &self,
        job: &JobDef,
        assignment: &Assignment,
        gang: &GangPart,
        hpc: &Hpc,
    ) -> Vec<(u32, Launch)> {
        let member = gang.member;
        let first = member.saturating_mul(hpc.ranks_per_node);
        let end = (first + hpc.ranks_per_node).min(hpc.ranks);
        let hostfile = self
            .spill_dir
            .join(format!("a{}.hosts", assignment.attempt));
        let mut lines = String::new();
        for (position, host) in gang.hosts.iter().enumerate() {
            let slots = hpc
                .ranks
                .saturating_sub(position as u32 * hpc.ranks_per_node)
                .min(hpc.ranks_per_node);
            _ = writeln!(lines, "{host} slots={slots}");
        }
        // Written whole, then renamed into place: agents that share a directory (local
        // mode) write the same file, and a rank must never read it half-written. A
        // missing hostfile is the job's to notice; the ranks still start.
        let partial = self
            .spill_dir
            .join(format!("a{}.hosts.{}", assignment.attempt, self.node));
        let _ = std::fs::create_dir_all(&self.spill_dir)
            .and_then(|()| std::fs::write(&partial, lines))
            .and_then(|()| std::fs::rename(&partial, &hostfile));
        let nodes = gang.hosts.join(",");
        let leader = gang.hosts.first().map_or("localhost", String::as_str);
        (first..end)
            .map(|rank| {
                let mut launch = build_launch(job, assignment, &self.spill_dir);
                let local = rank - first;
                launch.spill_stem = format!("t{}.a{}.r{rank}", assignment.task, assignment.attempt);
                if rank > 0 {
                    launch.inline_limit = 0; // only rank 0's is inline: the rest to files
                }
                for (key, value) in [
                    ("SAKER_RANK", rank.to_string()),
                    ("SAKER_LOCAL_RANK", local.to_string()),
                    ("SAKER_WORLD_SIZE", hpc.ranks.to_string()),
                    ("SAKER_NODE_RANK", member.to_string()),
                    ("SAKER_NODES", nodes.clone()),
                    ("SAKER_HOSTFILE", hostfile.display().to_string()),
                    ("RANK", rank.to_string()),
                    ("LOCAL_RANK", local.to_string()),
                    ("WORLD_SIZE", hpc.ranks.to_string()),
                    ("LOCAL_WORLD_SIZE", (end - first).to_string()),
                    ("NODE_RANK", member.to_string()),
                    ("MASTER_ADDR", leader.to_string()),
                    ("MASTER_PORT", gang.port.to_string()),
                ] {
                    launch.set_var(key.as_bytes(), value.as_bytes());
                }
                launch.set_var_number(b"SAKER_NODE", self.node.into());
                (local, launch)
            })
            .collect()
    }

    /// The leader's MPI launcher around the job's command line.
    fn launcher_launch(
        &self,
        job: &JobDef,
        assignment: &Assignment,
        gang: &GangPart,
        hpc: &Hpc,
    ) -> Launch {
        let user = build_launch(job, assignment, &self.spill_dir);
        let socket = endpoint::socket_path(assignment.attempt);
        let shim = endpoint::shim_path(&self.spill_dir, assignment.attempt);
        // The job's SAKER_MPIRUN, if it names another launcher program.
        let chosen = user
            .env()
            .iter()
            .find(|entry| sets(entry, b"SAKER_MPIRUN"))
            .map(|entry| {
                let bytes = entry.to_bytes();
                String::from_utf8_lossy(&bytes[b"SAKER_MPIRUN=".len()..]).into_owned()
            });
        let hosts: Vec<String> = (0..gang.nodes.len()).map(member_host).collect();
        let mut args: Vec<String> = Vec::new();
        match hpc.mpi {
            MpiKind::Openmpi => {
                args.push(chosen.unwrap_or_else(|| "mpirun.openmpi".into()));
                let list: Vec<String> = hosts
                    .iter()
                    .map(|host| format!("{host}:{}", hpc.ranks_per_node))
                    .collect();
                args.extend(["--host".into(), list.join(","), "-np".into()]);
                args.push(hpc.ranks.to_string());
                for (key, value) in [
                    ("plm", "rsh".to_string()),
                    // Saker names the hosts: inside Slurm, OpenMPI would otherwise take
                    // the allocation's (and its slot counts) as the only hosts there are.
                    ("ras", "^slurm".into()),
                    ("plm_rsh_agent", shim.display().to_string()),
                    // Member names never resolve, and must not: a launcher that
                    // resolves them may take them for itself.
                    ("if_base_do_not_resolve", "1".into()),
                    // Only the leader may call the remote shell, and the daemons must
                    // stay the remote shell's children (their part's processes).
                    ("plm_rsh_no_tree_spawn", "1".into()),
                    ("orte_leave_session_attached", "1".into()),
                ] {
                    args.extend(["--mca".into(), key.into(), value]);
                }
                if has_repeats(&gang.hosts) {
                    // Agents sharing a machine would share its shared-memory segment
                    // names (made from the host name): ranks talk over TCP instead,
                    // and over loopback when the machine is the only one.
                    args.extend(["--mca".into(), "btl".into(), "self,tcp".into()]);
                    if gang.hosts.iter().all(|host| *host == gang.hosts[0]) {
                        for key in ["btl_tcp_if_include", "oob_tcp_if_include"] {
                            args.extend(["--mca".into(), key.into(), "lo".into()]);
                        }
                    }
                }
                if rustix::process::geteuid().is_root() {
                    args.push("--allow-run-as-root".into());
                }
            }
            MpiKind::Mpich => {
                args.push(chosen.unwrap_or_else(|| "mpiexec.mpich".into()));
                args.extend(["-launcher".into(), "ssh".into(), "-launcher-exec".into()]);
                args.push(shim.display().to_string());
                args.extend(["-hosts".into(), hosts.join(","), "-n".into()]);
                args.push(hpc.ranks.to_string());
                args.extend(["-ppn".into(), hpc.ranks_per_node.to_string()]);
            }
            MpiKind::None => {}
        }
        let mut launch = wrap(user, &args, &self.spill_dir, assignment, self.node);
        launch.set_var(b"SAKER_GANG_SOCKET", socket.as_os_str().as_encoded_bytes());
        launch
    }

    /// A member runs a command its leader's launcher asked for, in its part. Answered
    /// at once (code 255) if the part is gone.
    pub fn part_launch(&mut self, launch: GangLaunch) {
        let attempt = launch.attempt;
        tracing::debug!(%attempt, launch = launch.launch, "running a daemon for the gang's leader");
        let Some(part) = self.parts.parts.get_mut(&attempt).filter(|p| !p.cancelled) else {
            self.parts.launch_ends.push(GangLaunchEnded {
                attempt,
                launch: launch.launch,
                code: 255,
            });
            return;
        };
        let number = launch.launch;
        let mut process = Launch::new(
            3,
            1,
            self.spill_dir.clone(),
            format!("t{}.a{attempt}.d{number}", part.assignment.task),
        );
        process.arg(b"/bin/sh");
        process.arg(b"-c");
        process.arg(launch.command.as_bytes());
        process.set_var_number(b"SAKER_NODE", self.node.into());
        bind_launch(&mut process, &part.binding, part.rank_cores);
        if part.shared_machine {
            // OpenMPI names its session directory after the host: daemons of several
            // members on one machine would share and remove each other's.
            let dir = self
                .spill_dir
                .join(format!("a{attempt}.m{}.ompi", part.member));
            let _ = std::fs::create_dir_all(&dir);
            process.set_var(
                b"OMPI_MCA_orte_tmpdir_base",
                dir.as_os_str().as_encoded_bytes(),
            );
        }
        part.live += 1;
        self.parts.queue.push_back(PartProcess {
            attempt,
            number,
            launch: Box::new(process),
        });
    }

    /// Starts the next waiting part process on idle slot `index`, if there is one.
    pub(crate) fn start_part_process(&mut self, index: usize) -> Option<NextAttempt> {
        let process = self.parts.queue.pop_front()?;
        let Some(part) = self.parts.parts.get(&process.attempt) else {
            return self.start_part_process(index);
        };
        let (cancel_tx, control) = StopHandle::new();
        let slot = &mut self.slots[index];
        slot.running = Some(Running {
            assignment: part.assignment,
            received_us: part.started_us,
            needs: Resources::ZERO,
            started_us: unix_micros(),
            part: Some(process.number),
        });
        slot.cancel = Some(cancel_tx);
        Some(NextAttempt {
            attempt: process.attempt,
            work: Work::Command(process.launch),
            control,
            binding: part.binding.clone(),
        })
    }

    /// A part's process ended: noted, and the part completed if that was its last.
    pub(crate) fn part_process_ended(
        &mut self,
        number: u32,
        attempt: AttemptId,
        finished: Finished,
    ) {
        tracing::debug!(%attempt, number, outcome = ?finished.outcome, "gang process ended");
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return;
        };
        part.live = part.live.saturating_sub(1);
        let ok = matches!(finished.outcome, Outcome::Exited { code: 0 });
        let daemon = part.mpi && number > 0;
        if daemon {
            self.parts.launch_ends.push(GangLaunchEnded {
                attempt,
                launch: number,
                code: exit_code(&finished.outcome),
            });
        }
        if number == 0 && part.first.is_none() {
            part.first = Some((finished.stdout, finished.stderr));
        }
        if !ok && !daemon && !part.cancelled && part.failure.is_none() {
            part.failure = Some(finished.outcome.clone());
        }
        part.ends.push(ProcessEnd {
            rank: number,
            outcome: finished.outcome,
        });
        let stop_rest = part.failure.is_some() && part.live > 0;
        let done = part.live == 0 && (part.ends_with_processes || part.cancelled);
        if stop_rest {
            self.stop_part_processes(attempt);
        }
        if done {
            self.complete_part(attempt);
        }
    }

    /// The root (or the agent stopping) stops a part: what runs of it is killed, and
    /// the part ends as soon as nothing does. False if `attempt` is not a part.
    pub(crate) fn cancel_part(&mut self, attempt: AttemptId) -> bool {
        let Some(part) = self.parts.parts.get_mut(&attempt) else {
            return false;
        };
        part.cancelled = true;
        self.stop_part_processes(attempt);
        if self
            .parts
            .parts
            .get(&attempt)
            .is_some_and(|part| part.live == 0)
        {
            self.complete_part(attempt);
        }
        true
    }

    /// Drops a part's waiting processes and stops its running ones.
    fn stop_part_processes(&mut self, attempt: AttemptId) {
        let before = self.parts.queue.len();
        self.parts
            .queue
            .retain(|process| process.attempt != attempt);
        let dropped = (before - self.parts.queue.len()) as u32;
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            part.live -= dropped.min(part.live);
        }
        for slot in &mut self.slots {
            if slot
                .running
                .is_some_and(|r| r.part.is_some() && r.assignment.attempt == attempt)
                && let Some(cancel) = slot.cancel.take()
            {
                cancel.cancel();
            }
        }
    }

    /// Reports a part that has nothing left running and gives back what it held.
    fn complete_part(&mut self, attempt: AttemptId) {
        let Some(part) = self.parts.parts.remove(&attempt) else {
            return;
        };
        self.parts
            .waiters
            .retain(|(waiting, _), _| *waiting != attempt);
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
            task: part.assignment.task,
            attempt,
            executor: u32::MAX,
            outcome,
            // A part is taken as its dispatch arrives.
            received_unix_us: part.started_us,
            start_unix_us: part.started_us,
            end_unix_us: unix_micros(),
            body: ResultBody::Part {
                stdout,
                stderr,
                ends: part.ends,
            },
        });
    }

    /// Keeps the leader's remote-shell endpoint for as long as its part lasts.
    pub(crate) fn set_endpoint(&mut self, attempt: AttemptId, endpoint: endpoint::Endpoint) {
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            part.endpoint = Some(endpoint);
        }
    }

    /// The part cannot go on, by its own fault (its launcher could not start
    /// daemons): it fails with `reason` once what runs of it is stopped.
    pub(crate) fn fail_part(&mut self, attempt: AttemptId, reason: String) {
        if let Some(part) = self.parts.parts.get_mut(&attempt) {
            part.failure.get_or_insert(Outcome::SpawnFailed { reason });
        }
        self.stop_part_processes(attempt);
        if self
            .parts
            .parts
            .get(&attempt)
            .is_some_and(|part| part.live == 0)
        {
            self.complete_part(attempt);
        }
    }

    /// A part that could not even be taken.
    fn fail_part_unstarted(&mut self, assignment: &Assignment, outcome: Outcome) {
        let now = unix_micros();
        self.pending.results.push(TaskResult {
            task: assignment.task,
            attempt: assignment.attempt,
            executor: u32::MAX,
            outcome,
            received_unix_us: now,
            start_unix_us: now,
            end_unix_us: now,
            body: ResultBody::Part {
                stdout: Output::default(),
                stderr: Output::default(),
                ends: Vec::new(),
            },
        });
    }

    /// Stops every part (the agent is stopping, or its work is replayed elsewhere).
    pub(crate) fn cancel_all_parts(&mut self) {
        let attempts: Vec<AttemptId> = self.parts.parts.keys().copied().collect();
        for attempt in attempts {
            self.cancel_part(attempt);
        }
    }
}

/// The job's command line behind `prefix` (a launcher and its options), with the
/// job's environment, directory, time limit and output limit.
fn wrap(
    user: Launch,
    prefix: &[String],
    spill_dir: &std::path::Path,
    assignment: &Assignment,
    node: u32,
) -> Launch {
    let env: Vec<(Vec<u8>, Vec<u8>)> = user
        .env()
        .iter()
        .filter_map(|entry| {
            let bytes = entry.to_bytes();
            let at = bytes.iter().position(|&b| b == b'=')?;
            Some((bytes[..at].to_vec(), bytes[at + 1..].to_vec()))
        })
        .collect();
    let mut launch = Launch::new(
        prefix.len() + user.argv().len(),
        env.len() + 4,
        spill_dir.to_path_buf(),
        format!("t{}.a{}", assignment.task, assignment.attempt),
    );
    for arg in prefix {
        launch.arg(arg.as_bytes());
    }
    for arg in user.argv() {
        launch.arg(arg.to_bytes());
    }
    for (key, value) in &env {
        launch.set_var(key, value);
    }
    launch.set_var_number(b"SAKER_NODE", node.into());
    launch.cwd = user.cwd.clone();
    launch.time_limit = user.time_limit;
    launch.inline_limit = user.inline_limit;
    launch
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
