//! Command-line definition (clap). Parsing only: `main` wires, the library works.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "saker",
    version,
    about = "Run many tasks inside one allocation: an actor-based pilot-job runtime",
    long_about = None,
)]
pub struct Cli {
    /// Log filter for diagnostics on stderr (e.g. `info`, `saker=debug`).
    #[arg(long, global = true, env = "SAKER_LOG", default_value = "warn")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a pilot on this machine, run the given tasks, wait for all, exit.
    ///
    /// Non-zero exit if any task failed. Give a command after `--` (with `--array` for
    /// one task per index), or a task FILE (one command per line, or JSON lines).
    Run(Box<RunArgs>),
    /// Start a long-lived pilot that serves clients (`saker submit`, `status`, …).
    Pilot(Box<PilotArgs>),
    /// Submit tasks to a running pilot.
    Submit(Box<SubmitArgs>),
    /// Wait until the pilot's tasks (or the given jobs) have finished.
    Wait(WaitArgs),
    /// Show the pilot's counters, agents and rate.
    Status(StatusArgs),
    /// A live view of the pilot, redrawn in place: counts, rates, nodes, where tasks'
    /// time goes, recent failures. `q` quits.
    Top(TopArgs),
    /// Cancel jobs: queued tasks never start, running ones are killed.
    Cancel(CancelArgs),
    /// Change jobs' tasks that have not started: priority, not-before time, time limit.
    Update(UpdateArgs),
    /// List task results (from the live pilot, or from the journal if it has stopped).
    Results(ResultsArgs),
    /// Write one self-contained HTML page of what the pilot did (running or
    /// finished): utilization, Gantt, throughput, stage histograms, failures.
    Report(ReportArgs),
    /// Ask a running pilot to stop.
    Shutdown(DirArgs),
    /// An elastic pilot's allocations: list them, or pause and resume asking for more.
    Alloc(AllocArgs),
    /// Objects by reference from a machine that sees no node's store (a login node):
    /// put bytes in a node's store, get them back, free them. The bytes go to and
    /// from the nodes directly, never through the root.
    Object(ObjectArgs),
    /// Print a Slurm batch script for a pilot, with your settings filled in.
    Template(TemplateArgs),
    /// Internal: one agent process (started by the pilot, not by users).
    #[command(hide = true)]
    Agent(RoleArgs),
    /// Internal: an agent's watchdog, which kills the agent's running tasks when the
    /// agent dies (started by the agent; reads its commands on stdin).
    #[command(hide = true)]
    Reaper(RoleArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// How often to ask the pilot for its status (at least 100ms).
    #[arg(long, default_value = "1s")]
    pub interval: String,
}

#[derive(Debug, Clone, Args)]
pub struct ObjectArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(subcommand)]
    pub action: ObjectAction,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ObjectAction {
    /// Store FILE's bytes (standard input: `-`) as a new object; prints its id.
    Put {
        /// The file to store, or `-` for standard input.
        file: PathBuf,
        /// The node whose store takes it (default: the live nodes in turn).
        #[arg(long)]
        node: Option<u32>,
    },
    /// Write an object's bytes to standard output (or to `--output`).
    Get {
        /// The object's id (32 hexadecimal digits).
        id: String,
        /// Write them to this file instead.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Read it from this node's store, whether or not the pilot knows the node
        /// holds it (instead of from the holders the pilot names).
        #[arg(long)]
        node: Option<u32>,
    },
    /// Free objects: each goes from its nodes once no unfinished task reads it.
    Free {
        /// The objects' ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct AllocArgs {
    #[command(subcommand)]
    pub action: AllocAction,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum AllocAction {
    /// Each allocation: Slurm job, state, nodes, time left, and why it was asked for.
    List(DirArgs),
    /// Stop asking for allocations (idle ones are still released).
    Pause(DirArgs),
    /// Ask for allocations again as the queue needs them.
    Resume(DirArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Where to write the page (default: report.html in the pilot directory).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Print the whole snapshot as one JSON object (the protocol's `status` body,
    /// docs/protocol.md) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// A pilot directory.
#[derive(Debug, Clone, Args)]
pub struct DirArgs {
    /// The pilot directory.
    #[arg(long, env = "SAKER_DIR")]
    pub dir: PathBuf,
}

/// The shape of the embedded pilot.
#[derive(Debug, Clone, Args)]
pub struct ShapeArgs {
    /// Agent processes to start (default: 1 on a single machine).
    #[arg(long)]
    pub agents: Option<u32>,
    /// Total executor slots across all agents (default: the number of cores).
    #[arg(long)]
    pub slots: Option<u32>,
    /// Children per node of the agent tree.
    #[arg(long, default_value_t = 16)]
    pub fanout: u32,
    /// Inside a Slurm allocation: executor slots per node (default: the CPUs the
    /// allocation holds on each node).
    #[arg(long)]
    pub slots_per_node: Option<u32>,
    /// Run on this machine only, even inside a Slurm allocation.
    #[arg(long)]
    pub local: bool,
    /// The command line of the persistent workers of one kind, for function tasks
    /// (repeatable): `--worker python="/opt/venv/bin/python -m saker.worker"`. The
    /// default for `python` is `python3 -m saker.worker`.
    #[arg(long = "worker", value_name = "KIND=COMMAND")]
    pub workers: Vec<String>,
    /// A program built on Saker's Rust API (the `saker` crate) to drive this pilot:
    /// the agents are the program (they host its actors), its typed tasks run on the
    /// pilot's workers (as `--worker KIND=PATH`), and it
    /// runs once the pilot is up, with `SAKER_PILOT_DIR` naming it. The pilot stops
    /// when the program exits, and exits with its code. With `saker run`, the
    /// arguments after `--` are the program's.
    #[arg(long, value_name = "PATH")]
    pub app: Option<PathBuf>,
    /// The worker kind of the `--app` program's tasks (its `App::kind`).
    #[arg(long, value_name = "KIND", default_value = "rust")]
    pub app_kind: String,
    #[command(flatten)]
    pub nodes: crate::nodes::NodeArgs,
    #[command(flatten)]
    pub liveness: LivenessArgs,
    #[command(flatten)]
    pub stragglers: StragglerArgs,
}

impl ShapeArgs {
    /// The agents' variables naming each `--worker` command.
    pub fn worker_env(&self) -> anyhow::Result<Vec<(std::ffi::OsString, std::ffi::OsString)>> {
        let app = match &self.app {
            Some(path) => Some(crate::app::worker_flag(path, &self.app_kind)?),
            None => None,
        };
        self.workers
            .iter()
            .chain(app.as_ref())
            .map(|given| {
                let Some((kind, command)) = given.split_once('=') else {
                    anyhow::bail!("--worker {given:?}: expected KIND=COMMAND");
                };
                if !saker_client::spec::valid_kind(kind) {
                    anyhow::bail!(
                        "--worker {given:?}: a kind is letters, digits, '_' and '-' (at most 32)"
                    );
                }
                match shell_words::split(command) {
                    Ok(words) if !words.is_empty() => {}
                    Ok(_) => anyhow::bail!("--worker {given:?}: the command is empty"),
                    Err(error) => anyhow::bail!("--worker {given:?}: {error}"),
                }
                let variable = saker_actors::worker::worker_variable(kind);
                Ok((variable.into(), command.into()))
            })
            .collect()
    }

    /// The pilot's agents: one per node inside a Slurm allocation (unless `--local`),
    /// else local agent processes of the shape these flags ask for.
    pub fn agents(&self, allow_none: bool) -> anyhow::Result<saker_root::Agents> {
        let request = saker_root::local::ShapeRequest {
            agents: self.agents,
            slots: self.slots,
            fanout: self.fanout,
            allow_none,
        };
        Ok(saker_root::Agents::detect(
            self.local,
            request,
            self.slots_per_node,
        )?)
    }
}

/// When a task of an `--idempotent` job counts as a straggler.
#[derive(Debug, Clone, Args)]
pub struct StragglerArgs {
    /// A task straggles once it runs longer than this many times the estimate of its
    /// tags (mean + 2 standard deviations of their finished tasks); 0 turns
    /// speculative copies off.
    #[arg(long, default_value_t = 1.5, value_name = "FACTOR")]
    pub straggler_factor: f64,
    /// Finished tasks with the same tags needed before there is an estimate.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub straggler_samples: u32,
    /// How long a task reading data items waits for a node that holds them before it
    /// runs elsewhere (their bytes then move to it); 0 turns locality off.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub locality_wait: String,
}

impl StragglerArgs {
    /// The core's configuration with these settings.
    pub fn core_config(&self) -> anyhow::Result<saker_core::CoreConfig> {
        if !self.straggler_factor.is_finite() || self.straggler_factor < 0.0 {
            anyhow::bail!(
                "--straggler-factor {} must be a number from 0 (off) up",
                self.straggler_factor
            );
        }
        let speculation = (self.straggler_factor > 0.0).then(|| saker_core::Speculation {
            factor_percent: (self.straggler_factor * 100.0)
                .round()
                .min(f64::from(u32::MAX)) as u32,
            min_samples: self.straggler_samples,
        });
        let wait = match self.locality_wait.trim() {
            "0" => std::time::Duration::ZERO,
            text => saker_client::spec::parse_duration(text)
                .map_err(|error| anyhow::anyhow!("--locality-wait {text:?}: {error}"))?,
        };
        Ok(saker_core::CoreConfig {
            speculation,
            locality_wait_micros: wait.as_micros().min(u128::from(u64::MAX)) as u64,
            ..saker_core::CoreConfig::default()
        })
    }
}

/// Heartbeats on the links of the agent tree.
#[derive(Debug, Clone, Args)]
pub struct LivenessArgs {
    /// How often an idle link sends a heartbeat.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub heartbeat_interval: String,
    /// How long a silent link lives: a dead or hung agent's work is replayed on
    /// other agents after this (at least twice the interval).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub heartbeat_timeout: String,
}

impl LivenessArgs {
    pub fn parse(&self) -> Result<saker_actors::liveness::Liveness, saker_node::FlagError> {
        saker_node::offer::liveness(&self.heartbeat_interval, &self.heartbeat_timeout)
    }
}

/// Options that shape every task of a submission.
#[derive(Debug, Clone, Args)]
pub struct TaskArgs {
    /// One task per index: `1-100000`, `0-99:2`, `1,3,5-7`. `{index}` in arguments is
    /// replaced by the index; tasks see `SAKER_ARRAY_INDEX` and `SAKER_TASK_ID`.
    #[arg(long)]
    pub array: Option<String>,
    /// Cores per task (pinned to them where the node pins; `OMP_NUM_THREADS` is set
    /// to them unless the task's environment sets it).
    #[arg(long, default_value_t = 1)]
    pub cores: u32,
    /// GPUs per task: it sees exactly its own (`CUDA_VISIBLE_DEVICES`,
    /// `ROCR_VISIBLE_DEVICES`, `SAKER_GPUS`), never one another task holds.
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Memory per task (`4G`, `512M`; a bare number is MiB): it runs only where that
    /// much is free, and is killed past it where the agent can set a limit.
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// A named resource per task, `NAME=N`, as nodes offer with `--node-resource`;
    /// repeatable.
    #[arg(long = "resource", value_name = "NAME=N")]
    pub resources: Vec<String>,
    /// Data items each task reads (comma-separated names): files other tasks wrote,
    /// fetched into `$SAKER_SCRATCH` before it starts; it prefers the nodes that hold
    /// them (docs/data.md).
    #[arg(long, value_name = "ITEM[,ITEM…]", value_delimiter = ',')]
    pub reads: Vec<String>,
    /// Data items each task writes as files in `$SAKER_SCRATCH` (a single task).
    #[arg(long, value_name = "ITEM[,ITEM…]", value_delimiter = ',')]
    pub writes: Vec<String>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Further attempts after a task's own failure.
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// Further attempts after an attempt is lost with its agent, node or executor
    /// (such replays never count against --retries) [default: 3]
    #[arg(long)]
    pub max_replays: Option<u32>,
    /// Wall-clock limit per attempt: `90s`, `5m`, `1h30m`, `H:MM:SS`.
    #[arg(long)]
    pub time_limit: Option<String>,
    /// Environment override `KEY=VALUE` (repeatable); the rest is inherited.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Working directory of the tasks.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Label for the tasks (repeatable).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Run the command through `/bin/sh -c` (one string after `--`).
    #[arg(long)]
    pub shell: bool,
    /// The tasks may safely run twice: a straggler (running far longer than tasks
    /// with the same tags) then gets a speculative copy on an idle slot elsewhere, and
    /// the first result wins.
    #[arg(long)]
    pub idempotent: bool,
    /// Run every task on this node only (its id, as `saker status` lists nodes); a
    /// queued task waits for its node while the node is away.
    #[arg(long, value_name = "ID")]
    pub node: Option<u32>,
    #[command(flatten)]
    pub hpc: HpcArgs,
    /// A task file: one command per line, or JSON task specs, one per line.
    #[arg(conflicts_with = "command")]
    pub file: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// An HPC job: one program on several nodes at once (docs/hpc-jobs.md).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HPC jobs")]
pub struct HpcArgs {
    /// Nodes the job runs on at once.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Ranks on each node [default: 1, or what --ranks needs].
    #[arg(long)]
    pub ranks_per_node: Option<u32>,
    /// Ranks in all [default: nodes × ranks per node].
    #[arg(long)]
    pub ranks: Option<u32>,
    /// Cores of each rank [default: --cores].
    #[arg(long)]
    pub cores_per_rank: Option<u32>,
    /// Hold whole nodes: nothing else runs on them meanwhile.
    #[arg(long)]
    pub exclusive: bool,
    /// What starts the ranks: none (Saker, with RANK, WORLD_SIZE, MASTER_ADDR, …),
    /// pmi (Saker, serving each rank PMI: MPICH, MVAPICH, Intel MPI; no mpiexec),
    /// openmpi (mpirun.openmpi) or mpich (mpiexec.mpich).
    #[arg(long, value_parser = ["none", "pmi", "openmpi", "mpich"])]
    pub mpi: Option<String>,
    /// What starts the ranks' daemons: agents (Saker's, the default), srun (one
    /// `srun --overlap --exact` step; inside a Slurm allocation), or script (with
    /// --mpi pmi: the command runs once on the first node and starts the ranks with
    /// `saker mpiexec`, as many times as it likes).
    #[arg(long, value_parser = ["agents", "srun", "script"])]
    pub launcher: Option<String>,
}

/// How the pilot keeps its journal.
#[derive(Debug, Clone, Args)]
pub struct JournalArgs {
    /// Results of finished jobs the journal keeps: `all` (the default), `none`, the
    /// last N (`1000000`), or those that ended within a duration (`12h`, `7d`). The
    /// others are compacted away as the journal grows, and `saker results` says so.
    /// Jobs not yet finished always keep theirs; submissions are never dropped.
    #[arg(long, default_value = "all", value_name = "POLICY")]
    pub keep_results: saker_root::compact::KeepResults,
    /// Bytes after which the journal starts a new segment.
    #[arg(long, default_value_t = 64 * 1024 * 1024, hide = true)]
    pub journal_segment_bytes: u64,
    /// Compact the journal every this many new segments (when --keep-results is not
    /// `all`).
    #[arg(long, default_value_t = 4, hide = true)]
    pub compact_every_segments: u64,
}

impl JournalArgs {
    pub fn options(&self) -> saker_root::pilot::JournalOptions {
        use saker_root::compact::KeepResults;
        saker_root::pilot::JournalOptions {
            segment_bytes: self.journal_segment_bytes.max(1),
            compaction: saker_root::actor::CompactionPolicy {
                keep: self.keep_results,
                every_segments: match self.keep_results {
                    KeepResults::All => 0,
                    _ => self.compact_every_segments.max(1),
                },
            },
        }
    }
}

/// When the pilot must stop.
#[derive(Debug, Clone, Args)]
pub struct WalltimeArgs {
    /// Stop after this long at most (`90m`, `2h`, `H:MM:SS`); inside a Slurm
    /// allocation the allocation's end applies too, whichever is first.
    #[arg(long)]
    pub time_budget: Option<String>,
    /// Safety margin before the end: no task starts unless it can finish before
    /// end − margin, and at end − margin what still runs is stopped and the pilot
    /// exits, its journal ready for a continuation.
    #[arg(long, default_value = "60s")]
    pub walltime_margin: String,
}

impl WalltimeArgs {
    /// The pilot's deadline (unix µs), if it has one.
    pub fn deadline(&self, agents: &saker_root::Agents) -> anyhow::Result<Option<u64>> {
        use anyhow::Context;
        let margin = saker_client::spec::parse_duration(&self.walltime_margin)
            .with_context(|| format!("--walltime-margin {:?}", self.walltime_margin))?;
        let budget = match &self.time_budget {
            Some(text) => Some(
                saker_client::spec::parse_duration(text)
                    .with_context(|| format!("--time-budget {text:?}"))?,
            ),
            None => None,
        };
        saker_root::pilot::deadline(agents, margin, budget).map_err(with_flags)
    }
}

/// A pilot error, with the flag that changes it where there is one.
pub fn with_flags(error: saker_root::PilotError) -> anyhow::Error {
    use saker_root::PilotError;
    match error {
        PilotError::NoTime { .. } => anyhow::anyhow!("{error} (lower it with --walltime-margin)"),
        PilotError::JournalExists { .. } => {
            anyhow::anyhow!("{error} (with --resume, the same --dir)")
        }
        other => other.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, periodic lines otherwise.
    Auto,
    Bar,
    Lines,
    None,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Keep the pilot directory here (journal, results, spilled output); default: a
    /// temporary directory removed at exit.
    #[arg(long, env = "SAKER_DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    pub task: TaskArgs,
    #[command(flatten)]
    pub walltime: WalltimeArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Inside a Slurm allocation: when the walltime stops the run with tasks left,
    /// submit this batch script as a continuation (dependency afterany on this job)
    /// that resumes the pilot. `$0` in a batch script names the script itself.
    #[arg(long, value_name = "SCRIPT")]
    pub chain: Option<PathBuf>,
    /// Time limit of the continuation job (default: this job's).
    #[arg(long, value_name = "DURATION")]
    pub chain_time: Option<String>,
    /// Continuations to submit at most, counting this job's place in the chain
    /// (`SAKER_CHAIN_INDEX`).
    #[arg(long, default_value_t = 10)]
    pub max_chain: u32,
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    pub progress: ProgressMode,
    /// Bytes of each task's stdout/stderr kept inline in its result.
    #[arg(long, default_value_t = 4096)]
    pub inline_output: u32,
    /// Skip fsync of the journal (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Continue the pilot in --dir from its journal: finished tasks stay finished,
    /// everything else runs (no task arguments needed, extra ones are added).
    #[arg(long, requires = "dir")]
    pub resume: bool,
}

#[derive(Debug, Clone, Args)]
pub struct PilotArgs {
    #[arg(long, env = "SAKER_DIR")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    pub walltime: WalltimeArgs,
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Skip fsync of the journal (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Continue the pilot in --dir from its journal (after a crash, or in a
    /// continuation allocation).
    #[arg(long)]
    pub resume: bool,
    /// Keep N standby roots that take over the pilot, adopting its agents, when the
    /// root dies: other processes on this machine, or inside a Slurm allocation
    /// one-task steps on other nodes. The root holds a lock on --dir, and a standby
    /// waits for it (docs/faults.md).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "elastic"
    )]
    pub standby: u32,
    /// Run as a standby: wait until the root of --dir is gone, then take over.
    #[arg(long, hide = true)]
    pub take_over: bool,
    /// Run as the root under a keeper (`saker pilot --standby` inside an allocation
    /// runs the root as its child, and holds the allocation if it dies).
    #[arg(long, hide = true)]
    pub kept: bool,
    /// Serve the pilot's figures (counts, rates, nodes, per-stage percentiles) for
    /// Prometheus at http://ADDR/metrics; `127.0.0.1:0` picks a free port. The
    /// address bound is written to `metrics.addr` in --dir.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub elastic: crate::elastic::ElasticArgs,
    /// Stop, as `saker shutdown` would, once process PID has ended: the program that
    /// started this pilot for itself (Python's `Pilot.start`), so that nothing runs on
    /// after it is killed.
    #[arg(long, value_name = "PID")]
    pub owner: Option<u32>,
    /// Remove DIR, a temporary directory made for this pilot alone (holding --dir),
    /// once the pilot has stopped.
    #[arg(long, value_name = "DIR")]
    pub remove_when_done: Option<PathBuf>,
    /// With `--app`: the program's arguments.
    #[arg(last = true, value_name = "APP_ARGS")]
    pub app_args: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub task: TaskArgs,
    /// Bytes of each task's stdout/stderr kept inline in its result.
    #[arg(long, default_value_t = 4096)]
    pub inline_output: u32,
    /// Wait for the submitted jobs to finish; exit non-zero if a task failed.
    #[arg(long)]
    pub wait: bool,
    /// Run only after every task of these jobs succeeded (Slurm's afterok); if one
    /// fails or is cancelled, the submitted jobs are cancelled. Comma-separated ids.
    #[arg(long, value_name = "JOB[,JOB…]", value_delimiter = ',')]
    pub after: Vec<u32>,
    /// Run only after these jobs ended, however (afterany). Comma-separated ids.
    #[arg(long, value_name = "JOB[,JOB…]", value_delimiter = ',')]
    pub after_any: Vec<u32>,
    /// Start no task before this time: RFC 3339 UTC (`2026-12-01T03:00Z`).
    #[arg(long, value_name = "TIME", conflicts_with = "in_")]
    pub at: Option<String>,
    /// Start no task before this long from now (`90s`, `10m`, `1h30m`).
    #[arg(long = "in", id = "in_", value_name = "DURATION")]
    pub in_: Option<String>,
    /// Periodic: a new job every DURATION (from --at/--in, or now), each with its own
    /// result; a missed occurrence runs once late, wholly missed ones are skipped.
    #[arg(long, value_name = "DURATION")]
    pub every: Option<String>,
    /// Periodic: no occurrence after this time (RFC 3339 UTC).
    #[arg(long, value_name = "TIME", requires = "every")]
    pub until: Option<String>,
    /// Periodic: at most N occurrences.
    #[arg(long, value_name = "N", requires = "every")]
    pub count: Option<u32>,
}

#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Only these jobs (default: everything submitted so far).
    #[arg(long = "job")]
    pub jobs: Vec<u32>,
    /// If the pilot goes away meanwhile (its root died and a standby takes over, or
    /// it is resumed), reconnect and wait on for this long before giving up.
    #[arg(long, default_value = "1m", value_name = "DURATION")]
    pub reconnect_for: String,
}

#[derive(Debug, Clone, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Job ids to cancel.
    #[arg(required = true)]
    pub jobs: Vec<u32>,
}

#[derive(Debug, Clone, Args)]
#[command(group(
    clap::ArgGroup::new("change")
        .required(true)
        .multiple(true)
        .args(["priority", "at", "in_", "time_limit"]),
))]
pub struct UpdateArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// Job ids to update: all are updated, or none (an unknown or ended job refuses).
    #[arg(required = true)]
    pub jobs: Vec<u32>,
    /// The new priority (higher runs first).
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Start no task before this time: RFC 3339 UTC (`2026-12-01T03:00Z`), or `none`.
    /// Tasks already started run on.
    #[arg(long, value_name = "TIME|none", conflicts_with = "in_")]
    pub at: Option<String>,
    /// Start no task before this long from now (`90s`, `10m`).
    #[arg(long = "in", id = "in_", value_name = "DURATION")]
    pub in_: Option<String>,
    /// The time limit of each attempt not started yet (`90s`, `1h`, `H:MM:SS`), or
    /// `none`.
    #[arg(long, value_name = "LIMIT|none")]
    pub time_limit: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ResultsFormat {
    Jsonl,
    Table,
    /// Comma-separated values with a header row, for spreadsheets.
    Csv,
}

#[derive(Debug, Clone, Args)]
pub struct ResultsArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    #[arg(long, value_enum, default_value_t = ResultsFormat::Table)]
    pub format: ResultsFormat,
    /// Keep streaming results as they arrive (live pilot only). If the pilot goes
    /// away (a crash, a continuation allocation), reconnect and continue after the
    /// last result shown, without gaps or repeats.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: how long to keep trying to reach a pilot that went away.
    #[arg(long, default_value = "10m", requires = "follow")]
    pub reconnect_for: String,
    /// Only the result of this task (its id; repeatable). A task with no result yet
    /// makes the exit code non-zero.
    #[arg(long = "task", value_name = "ID", conflicts_with = "follow")]
    pub tasks: Vec<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct TemplateArgs {
    /// Which pilot: mtc (run a task file), service (serve submissions), campaign
    /// (chain allocations until done), parsl (run a Parsl workflow script), snakemake
    /// (run a Snakemake workflow).
    #[arg(value_enum)]
    pub kind: crate::template::TemplateKind,
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Time limit per allocation (`H:MM:SS`, or Slurm's other forms).
    #[arg(long)]
    pub time: Option<String>,
    #[arg(long)]
    pub account: Option<String>,
    #[arg(long)]
    pub partition: Option<String>,
    /// The task file (mtc, campaign).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    /// The pilot directory (on a shared filesystem).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The Parsl workflow script (parsl).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// The Python that runs the script and the workers (parsl), or the workers
    /// (service, snakemake).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The snakemake command (snakemake).
    #[arg(long)]
    pub snakemake: Option<PathBuf>,
}

/// A node role's command line, passed on unparsed: saker-node defines its flags and
/// its `--help`.
#[derive(Debug, Clone, Args)]
#[command(disable_help_flag = true)]
pub struct RoleArgs {
    /// The role's flags (`saker agent --help` lists the agent's).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `saker --log debug agent …` reaches clap: the role's flags pass through to
    /// saker-node untouched, `--help` included.
    #[test]
    fn a_node_roles_flags_pass_through_unparsed() {
        let cli = Cli::parse_from([
            "saker",
            "--log",
            "debug",
            "agent",
            "--dir",
            "/p",
            "--fanout=2",
            "--help",
        ]);
        assert_eq!(cli.log, "debug");
        let Command::Agent(role) = cli.command else {
            panic!("parsed {:?}", cli.command);
        };
        assert_eq!(role.args, ["--dir", "/p", "--fanout=2", "--help"]);
        let cli = Cli::parse_from(["saker", "--log=info", "reaper"]);
        assert!(matches!(cli.command, Command::Reaper(role) if role.args.is_empty()));
    }
}
