//! This node's part in a gang attempt: an HPC job running on several nodes at once.
//!
//! The root sends every member of a gang its [`GangPart`] together with the one
//! assignment. A part holds the job's resources on this node from its arrival until
//! it ends, whatever of it runs; its processes run on idle slots, ahead of queued
//! tasks, and hold nothing more themselves. What runs depends on the job's [`Mpi`]:
//!
//! * **none**: this node's ranks, each with the rendezvous environment
//!   ([`process_launch`]). The part ends when they have; the first to fail stops the
//!   others here (the root stops the other members).
//! * **pmi**: the same ranks, each with a socket as its `PMI_FD`, which this agent
//!   serves ([`crate::pmi::server`]); the ranks' fences go through the root to the
//!   other members.
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
//!
//! What a part holds, which of its processes run and how its result is made are the
//! agent core's bookkeeping ([`crate::board`], `board/gang.rs`); this module is the
//! shell's side: the command line and environment of each process, its hostfile, and
//! the leader's endpoint.
//!
//! [`GangPart`]: saker_wire::messages::GangPart
//! [`Mpi`]: saker_wire::messages::MpiKind
//! [`GangLaunch`]: saker_wire::messages::GangLaunch
//! [`ResultBody::Part`]: saker_wire::messages::ResultBody::Part

pub mod endpoint;
pub mod mpiexec;

use std::fmt::Write as _;

use saker_wire::messages::{Assignment, LauncherKind, MpiKind};

pub use crate::board::exit_code;
use crate::board::{LaunchPlan, PartPlan, PartProcess, ProcessKind};
use crate::launch::{Places, bind_launch, build_launch};
use crate::process::Launch;
use crate::process::launch::sets;
use crate::resources::Binding;
pub use endpoint::{member_host, member_of_host};

/// The launch of `process` of the part `plan`, bound to the part's `binding`.
pub fn process_launch(
    plan: &PartPlan,
    process: &PartProcess,
    binding: &Binding,
    places: &Places,
) -> Launch {
    let mut launch = match &process.kind {
        ProcessKind::Rank { rank, local } => rank_launch(plan, *rank, *local, places),
        ProcessKind::Launcher => launcher_launch(plan, places),
        ProcessKind::Script => script_launch(plan, places),
        ProcessKind::LaunchRank {
            rank,
            local,
            launch,
        } => launch_rank_launch(plan, launch, *rank, *local, places),
        ProcessKind::Srun => srun_launch(plan, places),
        ProcessKind::Daemon { command } => {
            return daemon_launch(plan, process.number, command, binding, places);
        }
    };
    bind_launch(&mut launch, binding, plan.hpc.cores_per_rank);
    if !plan.job.reads.is_empty() {
        launch.set_var(
            b"SAKER_SCRATCH",
            places.scratch.as_os_str().as_encoded_bytes(),
        );
    }
    launch
}

/// The ranks of an MPI job (or of `srun`) get their launcher's environment, so
/// `SAKER_SCRATCH` names the leader's scratch directory: on a member's own host, that
/// path is linked to the member's directory, where its items were fetched. (On the
/// leader's host the path is the leader's, which holds them too.)
pub fn link_leader_scratch(plan: &PartPlan, places: &Places) {
    let launched = matches!(plan.hpc.mpi, MpiKind::Openmpi | MpiKind::Mpich)
        || plan.hpc.launcher == LauncherKind::Srun;
    let Some(leader) = plan.gang.nodes.first().filter(|_| launched) else {
        return;
    };
    let there = places.scratch.with_file_name(format!("node-{leader}"));
    if there != places.scratch
        && std::fs::symlink_metadata(&there).is_err()
        && let Err(error) = std::os::unix::fs::symlink(&places.scratch, &there)
    {
        tracing::warn!(%error, path = %there.display(), "cannot link the leader's scratch path here");
    }
}

/// The hostfile the ranks of a job without MPI read (`SAKER_HOSTFILE`): one line per
/// member with its ranks. Written whole, then renamed into place: agents that share a
/// directory (local mode) write the same file, and a rank must never read it
/// half-written. A missing hostfile is the job's to notice; the ranks still start.
pub fn write_hostfile(plan: &PartPlan, places: &Places) {
    let (gang, hpc) = (&plan.gang, &plan.hpc);
    let mut lines = String::new();
    for (position, host) in gang.hosts.iter().enumerate() {
        let slots = hpc
            .ranks
            .saturating_sub(position as u32 * hpc.ranks_per_node)
            .min(hpc.ranks_per_node);
        _ = writeln!(lines, "{host} slots={slots}");
    }
    let attempt = plan.assignment.attempt;
    let partial = places
        .spill_dir
        .join(format!("a{attempt}.hosts.{}", places.node));
    let _ = std::fs::create_dir_all(&places.spill_dir)
        .and_then(|()| std::fs::write(&partial, lines))
        .and_then(|()| std::fs::rename(&partial, hostfile(plan, places)));
}

fn hostfile(plan: &PartPlan, places: &Places) -> std::path::PathBuf {
    places
        .spill_dir
        .join(format!("a{}.hosts", plan.assignment.attempt))
}

/// The leader's `srun` step for the whole job, on the members' hosts (Slurm node
/// names), overlapping the pilot's own step and limited to the cores asked for.
fn srun_launch(plan: &PartPlan, places: &Places) -> Launch {
    let (assignment, gang, hpc) = (&plan.assignment, &plan.gang, &plan.hpc);
    let user = build_launch(&plan.job, assignment, &places.spill_dir);
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
            MpiKind::Mpich | MpiKind::Pmi => "--mpi=pmi2",
            MpiKind::None => "--mpi=none",
        }
        .into(),
    );
    wrap(user, &args, places, assignment)
}

/// Rank `rank` (`local` on this node) of a job without MPI, with the rendezvous
/// variables.
fn rank_launch(plan: &PartPlan, rank: u32, local: u32, places: &Places) -> Launch {
    let (assignment, hpc) = (&plan.assignment, &plan.hpc);
    let mut launch = build_launch(&plan.job, assignment, &places.spill_dir);
    launch.spill_stem = format!("t{}.a{}.r{rank}", assignment.task, assignment.attempt);
    if rank > 0 {
        launch.inline_limit = 0; // only rank 0's is inline: the rest to files
    }
    let world = World {
        ranks: hpc.ranks,
        ranks_per_node: hpc.ranks_per_node,
        kvsname: format!("saker-{}", assignment.attempt),
        job_id: assignment.attempt.0 & u64::from(u32::MAX),
    };
    rank_vars(&mut launch, plan, &world, rank, local, places);
    if hpc.mpi == MpiKind::Pmi {
        pmi_vars(&mut launch, &world, rank, local, assignment.attempt);
    }
    launch
}

/// The PMI world a rank belongs to: a PMI job's ranks, or one `saker mpiexec`'s.
struct World {
    ranks: u32,
    ranks_per_node: u32,
    kvsname: String,
    /// Open MPI's job id (`FLUX_JOB_ID`).
    job_id: u64,
}

/// The PMI world of launch `launch` of `attempt`'s script: named apart from the
/// job's own and from the script's other launches.
pub fn launch_kvsname(attempt: saker_wire::messages::AttemptId, world: u32) -> String {
    format!("saker-{attempt}-{world}")
}

/// Rank `rank` of a script's `saker mpiexec`: its command in `saker mpiexec`'s
/// directory and environment (over the job's), served PMI. Each rank's output is
/// kept inline up to the job's limit (it goes back to `saker mpiexec`), the rest in
/// its file.
fn launch_rank_launch(
    plan: &PartPlan,
    launch_plan: &LaunchPlan,
    rank: u32,
    local: u32,
    places: &Places,
) -> Launch {
    let assignment = &plan.assignment;
    let ranks = &launch_plan.ranks;
    let user = build_launch(&plan.job, assignment, &places.spill_dir);
    let mut launch = Launch::new(
        3,
        user.env().len() + ranks.env.len() + 24,
        places.spill_dir.clone(),
        format!(
            "t{}.a{}.w{}.r{rank}",
            assignment.task, assignment.attempt, ranks.world
        ),
    );
    launch.arg(b"/bin/sh");
    launch.arg(b"-c");
    launch.arg(launch_plan.command.as_bytes());
    for (key, value) in env_pairs(&user) {
        launch.set_var(&key, &value);
    }
    for var in &ranks.env {
        launch.set_var(var.key.as_bytes(), var.value.as_bytes());
    }
    launch.cwd = (!ranks.cwd.is_empty()).then(|| ranks.cwd.clone().into());
    launch.inline_limit = user.inline_limit;
    let world = World {
        ranks: ranks.ranks,
        ranks_per_node: ranks.ranks_per_node,
        kvsname: launch_kvsname(assignment.attempt, ranks.world),
        // Apart from the job's and its other launches' (Open MPI names its
        // shared-memory segments by it).
        job_id: (assignment.attempt.0 & 0xff_ffff) | (u64::from(ranks.world & 0xff) << 24),
    };
    rank_vars(&mut launch, plan, &world, rank, local, places);
    pmi_vars(&mut launch, &world, rank, local, assignment.attempt);
    launch
}

/// The script of a job of launcher script: the job's command, on the leader, with
/// what `saker mpiexec` needs to reach this agent and lay out its ranks.
fn script_launch(plan: &PartPlan, places: &Places) -> Launch {
    let (assignment, gang, hpc) = (&plan.assignment, &plan.gang, &plan.hpc);
    let user = build_launch(&plan.job, assignment, &places.spill_dir);
    let mut launch = wrap(user, &[], places, assignment);
    let socket = endpoint::socket_path(assignment.attempt);
    launch.set_var(b"SAKER_GANG_SOCKET", socket.as_os_str().as_encoded_bytes());
    launch.set_var(
        mpiexec::COMMAND_VAR.as_bytes(),
        mpiexec::command_line().as_bytes(),
    );
    launch.set_var_number(b"SAKER_WORLD_SIZE", hpc.ranks.into());
    launch.set_var_number(b"SAKER_RANKS_PER_NODE", hpc.ranks_per_node.into());
    launch.set_var(b"SAKER_NODES", gang.hosts.join(",").as_bytes());
    launch
}

/// The rendezvous variables of rank `rank` of `world`, on this member.
fn rank_vars(
    launch: &mut Launch,
    plan: &PartPlan,
    world: &World,
    rank: u32,
    local: u32,
    places: &Places,
) {
    let gang = &plan.gang;
    let member = gang.member;
    let first = member.saturating_mul(world.ranks_per_node);
    let end = (first + world.ranks_per_node).min(world.ranks);
    let nodes = gang.hosts.join(",");
    let leader = gang.hosts.first().map_or("localhost", String::as_str);
    for (key, value) in [
        ("SAKER_RANK", rank.to_string()),
        ("SAKER_LOCAL_RANK", local.to_string()),
        ("SAKER_WORLD_SIZE", world.ranks.to_string()),
        ("SAKER_NODE_RANK", member.to_string()),
        ("SAKER_NODES", nodes),
        (
            "SAKER_HOSTFILE",
            hostfile(plan, places).display().to_string(),
        ),
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", local.to_string()),
        ("WORLD_SIZE", world.ranks.to_string()),
        ("LOCAL_WORLD_SIZE", (end - first).to_string()),
        ("NODE_RANK", member.to_string()),
        ("MASTER_ADDR", leader.to_string()),
        ("MASTER_PORT", gang.port.to_string()),
    ] {
        launch.set_var(key.as_bytes(), value.as_bytes());
    }
    launch.set_var_number(b"SAKER_NODE", places.node.into());
}

/// What a rank served PMI by this agent needs: its socket, rank and world, and Open
/// MPI's way in.
fn pmi_vars(
    launch: &mut Launch,
    world: &World,
    rank: u32,
    local: u32,
    attempt: saker_wire::messages::AttemptId,
) {
    let first = rank - local;
    let end = (first + world.ranks_per_node).min(world.ranks);
    {
        // MPICH's simple PMI client: the socket its agent serves (set by the desk).
        launch.set_var(b"PMI_FD", b"3");
        launch.set_var_number(b"PMI_RANK", rank.into());
        launch.set_var_number(b"PMI_SIZE", world.ranks.into());
        launch.set_var(b"PMI_SPAWNED", b"0");
        // Hydra's: MPICH takes its node-local layout from them when set.
        launch.set_var_number(b"MPI_LOCALNRANKS", (end - first).into());
        launch.set_var_number(b"MPI_LOCALRANKID", local.into());
        launch.set_var(b"PMI_JOBID", world.kvsname.as_bytes());
        // The node's topology, read once by its agent, not probed again by each rank.
        if let Some(file) = crate::pmi::topology::made()
            && !launch.sets_var(b"HWLOC_XMLFILE")
        {
            launch.set_var(b"HWLOC_XMLFILE", file.as_os_str().as_encoded_bytes());
            launch.set_var(b"HWLOC_THISSYSTEM", b"1");
        }
        // Open MPI: its `pmix/flux` component, given a PMI-1 library and a numeric
        // job id, wires up through this same socket (pmi::openmpi).
        if let Some(library) = crate::pmi::openmpi::library_written()
            && !launch.sets_var(b"FLUX_PMI_LIBRARY_PATH")
        {
            launch.set_var(
                b"FLUX_PMI_LIBRARY_PATH",
                library.as_os_str().as_encoded_bytes(),
            );
            if !launch.sets_var(b"OMPI_MCA_pmix") {
                launch.set_var(b"OMPI_MCA_pmix", b"flux");
            }
            launch.set_var_number(b"FLUX_JOB_ID", world.job_id);
        }
        if crate::pmi::openmpi::no_fabric() && !launch.sets_var(b"OMPI_MCA_pml") {
            launch.set_var(b"OMPI_MCA_pml", b"ob1");
        }
        if !launch.sets_var(b"OMPI_MCA_btl_vader_backing_directory") {
            let shared = crate::pmi::openmpi::shared_memory_dir(attempt.0);
            let key = b"OMPI_MCA_btl_vader_backing_directory";
            launch.set_var(key, shared.as_os_str().as_encoded_bytes());
        }
    }
}

/// The leader's MPI launcher around the job's command line.
fn launcher_launch(plan: &PartPlan, places: &Places) -> Launch {
    let (assignment, gang, hpc) = (&plan.assignment, &plan.gang, &plan.hpc);
    let user = build_launch(&plan.job, assignment, &places.spill_dir);
    let socket = endpoint::socket_path(assignment.attempt);
    let shim = endpoint::shim_path(&places.spill_dir, assignment.attempt);
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
            if plan.shared_machine {
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
        MpiKind::None | MpiKind::Pmi => {}
    }
    let mut launch = wrap(user, &args, places, assignment);
    launch.set_var(b"SAKER_GANG_SOCKET", socket.as_os_str().as_encoded_bytes());
    launch
}

/// A command the leader's launcher asked this member to run (an MPI daemon), as
/// daemon `number` of the part.
fn daemon_launch(
    plan: &PartPlan,
    number: u32,
    command: &str,
    binding: &Binding,
    places: &Places,
) -> Launch {
    let attempt = plan.assignment.attempt;
    let mut process = Launch::new(
        3,
        1,
        places.spill_dir.clone(),
        format!("t{}.a{attempt}.d{number}", plan.assignment.task),
    );
    process.arg(b"/bin/sh");
    process.arg(b"-c");
    process.arg(command.as_bytes());
    process.set_var_number(b"SAKER_NODE", places.node.into());
    if !plan.job.reads.is_empty() {
        // Open MPI's ranks on a member get their daemon's environment.
        process.set_var(
            b"SAKER_SCRATCH",
            places.scratch.as_os_str().as_encoded_bytes(),
        );
    }
    bind_launch(&mut process, binding, plan.hpc.cores_per_rank);
    if plan.shared_machine {
        // OpenMPI names its session directory after the host: daemons of several
        // members on one machine would share and remove each other's.
        let dir = places
            .spill_dir
            .join(format!("a{attempt}.m{}.ompi", plan.gang.member));
        let _ = std::fs::create_dir_all(&dir);
        process.set_var(
            b"OMPI_MCA_orte_tmpdir_base",
            dir.as_os_str().as_encoded_bytes(),
        );
    }
    process
}

/// The job's command line behind `prefix` (a launcher and its options), with the
/// job's environment, directory, time limit and output limit.
fn wrap(user: Launch, prefix: &[String], places: &Places, assignment: &Assignment) -> Launch {
    let env = env_pairs(&user);
    let mut launch = Launch::new(
        prefix.len() + user.argv().len(),
        env.len() + 4,
        places.spill_dir.clone(),
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
    launch.set_var_number(b"SAKER_NODE", places.node.into());
    launch.cwd = user.cwd.clone();
    launch.time_limit = user.time_limit;
    launch.inline_limit = user.inline_limit;
    launch
}

/// A launch's variables as (key, value) pairs, to set on another launch.
fn env_pairs(launch: &Launch) -> Vec<(Vec<u8>, Vec<u8>)> {
    launch
        .env()
        .iter()
        .filter_map(|entry| {
            let bytes = entry.to_bytes();
            let at = bytes.iter().position(|&b| b == b'=')?;
            Some((bytes[..at].to_vec(), bytes[at + 1..].to_vec()))
        })
        .collect()
}
