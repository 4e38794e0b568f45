//! The user-facing task spec: what one command task is, as written in JSON by a client,
//! a task file line or the CLI.
//!
//! [`TaskSpec`] is one command; [`JobRequest`] is a spec plus an optional
//! [`ArraySpec`] (Slurm-like `1-100000`, `0-9:2`, `1,3,5-7`) that turns it into one
//! task per array index. An array is kept as a handful of arithmetic ranges, never as
//! a list of indices: a million-task array costs a few dozen bytes here, and the task
//! for array offset `k` is found by [`ArraySpec::index_at`].
//!
//! Everything that arrives from outside goes through [`TaskSpec::validate`] (the
//! protocol server and the task file reader call it), so the root and the agents can
//! rely on a validated spec: non-empty argv without NUL bytes, positive cores, sane
//! environment keys, UTF-8 working directory.

mod array;
mod deps;
mod duration;
mod function;
mod hpc;
mod lines;
mod memory;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use array::{ArraySpec, IndexRange, MAX_ARRAY_TASKS};
pub use deps::{JobRef, PlanError, plan};
pub(crate) use duration::time_limit_serde;
pub use duration::{format_duration, format_micros, parse_duration};
pub use function::{FunctionSpec, MAX_FUNCTION_BYTES, base64_bytes, base64_option, valid_kind};
pub use hpc::{LauncherKind, Layout, MpiKind};
pub use lines::{Commands, JobLines, LinesError};
use memory::memory_serde;
pub use memory::parse_memory_mib;

/// Program run for a spec with `shell: true`.
pub const SHELL_PROGRAM: &str = "/bin/sh";

/// Largest `inline_output` a job may ask for: results travel inline through the tree,
/// the journal and client lines (64 MiB), so big outputs belong in spill files.
pub const MAX_INLINE_OUTPUT: u32 = 16 << 20;

/// Placeholder replaced by the array index in the arguments of an array task.
pub const INDEX_PLACEHOLDER: &str = "{index}";

/// One task: a command, or a function call for a persistent worker (`function`).
///
/// JSON form (every field but `argv` — or `function` instead — may be omitted):
/// `{"argv": ["python", "sim.py", "{index}"], "env": {"OMP_NUM_THREADS": "1"},
///   "cwd": "/scratch/run", "cores": 1, "priority": 0, "max_retries": 0,
///   "time_limit": "1h", "tags": ["sweep"], "shell": false, "idempotent": false}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Program and arguments, executed directly (no shell) unless `shell` is set.
    /// Empty (absent) for a function task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// A call for a persistent worker instead of a command (see `docs/workers.md`):
    /// then `argv`, `env`, `cwd` and `shell` stay unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionSpec>,
    /// Overrides on top of the environment the agent inherited from the allocation,
    /// so site modules and Slurm variables stay visible to tasks.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory; `None` runs in the agent's working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Cores reserved for each task of the job (on each of its nodes).
    #[serde(default = "default_cores")]
    pub cores: u32,
    /// GPUs reserved for each task (on each of its nodes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpus: u32,
    /// Memory reserved for each task, in MiB (on each of its nodes), and its limit
    /// where the agent can enforce one. JSON: MiB as a number, or a string with
    /// units (`"4G"`, `"512M"`); also spelled `memory`.
    #[serde(
        default,
        alias = "memory",
        skip_serializing_if = "is_zero",
        with = "memory_serde"
    )]
    pub memory_mib: u32,
    /// Amounts of named resources of the site's own (licences, scratch bandwidth, …)
    /// reserved for each task. A pilot numbers the names it sees, at most
    /// `saker_core::MAX_CUSTOM` of them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, u32>,
    /// Nodes each task spans at once: an HPC job (an MPI-style program run by a group
    /// of agents; see `spec/hpc.rs` and `docs/hpc-jobs.md`).
    #[serde(default = "default_nodes", skip_serializing_if = "is_one")]
    pub nodes: u32,
    /// HPC: ranks on each node (default: 1, or what `ranks` needs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_per_node: Option<u32>,
    /// HPC: ranks in all (default: nodes × ranks per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
    /// HPC: cores of each rank (default: `cores`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_per_rank: Option<u32>,
    /// HPC: hold the whole of each node.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclusive: bool,
    /// HPC: what starts the ranks: `none` (Saker, with rendezvous variables),
    /// `pmi` (Saker, serving them PMI), `openmpi` or `mpich` (the MPI's launcher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiKind>,
    /// HPC: what starts an MPI job's daemons: `agents` (default) or `srun`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<LauncherKind>,
    /// Run every task on this node only (its id, as `saker status` lists nodes). A
    /// queued task waits for its node while that node is away. Not with `nodes` > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// Higher runs first among ready tasks.
    #[serde(default)]
    pub priority: i32,
    /// Further attempts after the task's own failure (non-zero exit, signal, time
    /// limit). Infrastructure losses are replayed without counting against this.
    #[serde(default)]
    pub max_retries: u32,
    /// Further attempts after an attempt is lost to the infrastructure (its agent,
    /// node or executor gone); `None` takes the pilot's default (3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replays: Option<u32>,
    /// Wall-clock limit per attempt. JSON: seconds as a number, or a string with
    /// units (`"90s"`, `"5m"`, `"1h30m"`, `"2d"`, `"500ms"`) or `"H:MM:SS"`.
    #[serde(default, with = "time_limit_serde")]
    pub time_limit: Option<Duration>,
    /// Free-form labels, reported by status and kept in the journal.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Run `argv[0]` as a script with `/bin/sh -c`; `argv` must then hold exactly one
    /// element. Off by default so arguments are never re-interpreted by a shell.
    #[serde(default)]
    pub shell: bool,
    /// Running the task twice does no harm (it writes nothing another attempt could
    /// see half-done). Only such tasks get a speculative copy when they straggle: a
    /// task that runs much longer than its tags' estimate while slots are idle is
    /// started once more elsewhere, the first result wins and the other is stopped.
    #[serde(default)]
    pub idempotent: bool,
    /// A name the other jobs of the same submission can wait for by (`after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Jobs whose tasks must all succeed before this job runs (Slurm's `afterok`):
    /// ids, or names of jobs in the same submission. If one fails or is cancelled,
    /// this job is cancelled ("dependency N failed").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobRef>,
    /// Jobs that must have ended, however, before this job runs (`afterany`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_any: Vec<JobRef>,
    /// Not started before this time (RFC 3339 UTC, e.g. `"2026-12-01T03:00Z"`); a time
    /// already past waits for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<crate::time::Timestamp>,
    /// A periodic job: a new job every this long (as `time_limit`), from `not_before`
    /// (or the submission) on, each with its own result. See `actor/schedules.rs`.
    #[serde(
        default,
        with = "time_limit_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub every: Option<Duration>,
    /// A periodic job's last possible occurrence time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<crate::time::Timestamp>,
    /// A periodic job's number of occurrences at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Data items each task reads: files other tasks wrote, fetched into the node's
    /// scratch directory (`$SAKER_SCRATCH/NAME`) before the task starts. The job prefers
    /// the nodes that hold them (see `docs/data.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// Data items each task writes as files in `$SAKER_SCRATCH`: the pilot learns
    /// where they are. Not for arrays of more than one task (they would share names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
}

fn default_cores() -> u32 {
    1
}

fn default_nodes() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl TaskSpec {
    /// A spec for `argv` with every other field at its default.
    pub fn new(argv: Vec<String>) -> Self {
        SpecDefaults::default().to_spec(argv)
    }

    /// Checks everything the root and agents rely on; call on any spec from outside.
    /// Whether its tasks write items that can be made again by running it once more:
    /// it writes some, and may run twice (idempotent, or a function task).
    pub fn may_remake_items(&self) -> bool {
        !self.writes.is_empty() && (self.idempotent || self.function.is_some())
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(function) = &self.function {
            function.validate()?;
            let command_field = if !self.argv.is_empty() {
                Some("argv")
            } else if !self.env.is_empty() {
                Some("env")
            } else if self.cwd.is_some() {
                Some("cwd")
            } else if self.shell {
                Some("shell")
            } else {
                None
            };
            if let Some(field) = command_field {
                return Err(SpecError::CommandFieldInFunction { field });
            }
            return self.validate_options();
        }
        if self.argv.is_empty() {
            return Err(SpecError::EmptyArgv);
        }
        if self.argv[0].is_empty() {
            return Err(SpecError::EmptyProgram);
        }
        if let Some(position) = self.argv.iter().position(|arg| arg.contains('\0')) {
            return Err(SpecError::NulInArgument { position });
        }
        if self.shell && self.argv.len() != 1 {
            return Err(SpecError::ShellNeedsOneScript {
                count: self.argv.len(),
            });
        }
        for (key, value) in &self.env {
            validate_env(key, value)?;
        }
        if let Some(cwd) = &self.cwd {
            let Some(text) = cwd.to_str() else {
                return Err(SpecError::CwdNotUtf8 { cwd: cwd.clone() });
            };
            if text.is_empty() || text.contains('\0') {
                return Err(SpecError::InvalidCwd { cwd: cwd.clone() });
            }
        }
        self.validate_options()
    }

    /// What every task kind shares: resources, nodes, time limit.
    fn validate_options(&self) -> Result<(), SpecError> {
        if self.cores == 0 {
            return Err(SpecError::ZeroCores);
        }
        if self.nodes == 0 {
            return Err(SpecError::ZeroNodes);
        }
        if self.node.is_some() && self.nodes > 1 {
            return Err(SpecError::NodeWithNodes { nodes: self.nodes });
        }
        self.layout()?;
        if let Some(name) = self
            .resources
            .keys()
            .find(|name| !valid_resource_name(name))
        {
            return Err(SpecError::InvalidResourceName { name: name.clone() });
        }
        if let Some(name) = self
            .reads
            .iter()
            .chain(&self.writes)
            .find(|name| !valid_item_name(name))
        {
            return Err(SpecError::InvalidItemName { name: name.clone() });
        }
        // Each node of a group fetches what it reads; which of them would write an item
        // is the ranks' business, not the pilot's.
        if !self.writes.is_empty() && self.nodes > 1 {
            return Err(SpecError::ItemsOfHpcJob);
        }
        if self.time_limit == Some(Duration::ZERO) {
            return Err(SpecError::ZeroTimeLimit);
        }
        match self.every {
            Some(every) if every < Duration::from_secs(1) => return Err(SpecError::PeriodTooShort),
            Some(_)
                if self.name.is_some() || !self.after.is_empty() || !self.after_any.is_empty() =>
            {
                return Err(SpecError::PeriodicWithDependencies);
            }
            None if self.until.is_some() || self.count.is_some() => {
                return Err(SpecError::BoundsWithoutPeriod);
            }
            _ => {}
        }
        deps::validate(self)
    }

    /// The argv the agent executes: `argv` itself, or `/bin/sh -c SCRIPT` for a shell
    /// spec.
    pub fn command(&self) -> Cow<'_, [String]> {
        if self.shell {
            let script = self.argv.first().cloned().unwrap_or_default();
            Cow::Owned(vec![SHELL_PROGRAM.to_owned(), "-c".to_owned(), script])
        } else {
            Cow::Borrowed(&self.argv)
        }
    }
}

pub use saker_wire::valid_item_name;

/// The data item an object by reference is stored as: `obj-` and its 32 hex digits.
pub fn object_item(object: saker_core::ObjectId) -> String {
    format!("obj-{object}")
}

/// A custom resource's name: short, and plain enough to print and log anywhere.
pub fn valid_resource_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn validate_env(key: &str, value: &str) -> Result<(), SpecError> {
    if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(SpecError::InvalidEnvKey {
            key: key.to_owned(),
        });
    }
    if value.contains('\0') {
        return Err(SpecError::NulInEnvValue {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// Everything of a [`TaskSpec`] but the command: the CLI options (`--cores`,
/// `--priority`, `--retries`, `--time-limit`, `--env`, `--cwd`, `--tag`) that apply to
/// every plain line of a task file or to a command given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecDefaults {
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub cores: u32,
    /// GPUs, memory (MiB) and named resources of each task (`--gpus`, `--mem`,
    /// `--resource`).
    pub gpus: u32,
    pub memory_mib: u32,
    pub resources: BTreeMap<String, u32>,
    /// Data items each task reads and writes (`--reads`, `--writes`).
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub priority: i32,
    pub max_retries: u32,
    pub max_replays: Option<u32>,
    pub time_limit: Option<Duration>,
    pub tags: Vec<String>,
    pub idempotent: bool,
    /// Run on this node only (`--node`).
    pub node: Option<u32>,
    /// HPC options (`--nodes`, `--ranks-per-node`, `--mpi`, …).
    pub hpc: HpcOptions,
}

/// The HPC fields of a spec, as the CLI sets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HpcOptions {
    pub nodes: u32,
    pub ranks_per_node: Option<u32>,
    pub ranks: Option<u32>,
    pub cores_per_rank: Option<u32>,
    pub exclusive: bool,
    pub mpi: Option<MpiKind>,
    pub launcher: Option<LauncherKind>,
}

impl Default for HpcOptions {
    fn default() -> Self {
        HpcOptions {
            nodes: default_nodes(),
            ranks_per_node: None,
            ranks: None,
            cores_per_rank: None,
            exclusive: false,
            mpi: None,
            launcher: None,
        }
    }
}

impl Default for SpecDefaults {
    fn default() -> Self {
        SpecDefaults {
            env: BTreeMap::new(),
            cwd: None,
            cores: default_cores(),
            gpus: 0,
            memory_mib: 0,
            resources: BTreeMap::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            priority: 0,
            max_retries: 0,
            max_replays: None,
            time_limit: None,
            tags: Vec::new(),
            idempotent: false,
            node: None,
            hpc: HpcOptions::default(),
        }
    }
}

impl SpecDefaults {
    /// A spec running `argv` directly (no shell) with these defaults.
    pub fn to_spec(&self, argv: Vec<String>) -> TaskSpec {
        TaskSpec {
            argv,
            function: None,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            cores: self.cores,
            gpus: self.gpus,
            memory_mib: self.memory_mib,
            resources: self.resources.clone(),
            nodes: self.hpc.nodes,
            ranks_per_node: self.hpc.ranks_per_node,
            ranks: self.hpc.ranks,
            cores_per_rank: self.hpc.cores_per_rank,
            exclusive: self.hpc.exclusive,
            mpi: self.hpc.mpi,
            launcher: self.hpc.launcher,
            node: self.node,
            priority: self.priority,
            max_retries: self.max_retries,
            max_replays: self.max_replays,
            time_limit: self.time_limit,
            tags: self.tags.clone(),
            shell: false,
            idempotent: self.idempotent,
            name: None,
            after: Vec::new(),
            after_any: Vec::new(),
            not_before: None,
            every: None,
            until: None,
            count: None,
            reads: self.reads.clone(),
            writes: self.writes.clone(),
        }
    }

    /// Parses a CLI `KEY=VALUE` environment override and adds it.
    pub fn add_env_assignment(&mut self, assignment: &str) -> Result<(), SpecError> {
        let Some((key, value)) = assignment.split_once('=') else {
            return Err(SpecError::EnvAssignmentWithoutEquals {
                text: assignment.to_owned(),
            });
        };
        validate_env(key, value)?;
        self.env.insert(key.to_owned(), value.to_owned());
        Ok(())
    }
}

/// One submission: a spec, run once, or once per index of `array`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    pub spec: TaskSpec,
    #[serde(default)]
    pub array: Option<ArraySpec>,
    /// Bytes of each task's stdout and stderr kept inline in its result (the rest is
    /// spilled to a file under the pilot directory). Default 4096.
    #[serde(default)]
    pub inline_output: Option<u32>,
}

impl JobRequest {
    pub fn single(spec: TaskSpec) -> Self {
        JobRequest {
            spec,
            array: None,
            inline_output: None,
        }
    }

    /// Number of tasks this job creates.
    pub fn task_count(&self) -> u64 {
        self.array.as_ref().map_or(1, ArraySpec::count)
    }

    /// Validates the spec and the output limit (the array was validated when it was
    /// parsed).
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(bytes) = self.inline_output
            && bytes > MAX_INLINE_OUTPUT
        {
            return Err(SpecError::InlineOutputTooLarge { bytes });
        }
        if self.spec.function.is_some() && self.array.is_some() {
            return Err(SpecError::ArrayOfFunction);
        }
        if self.spec.every.is_some() && self.array.is_some() {
            return Err(SpecError::PeriodicArray);
        }
        self.spec.validate()
    }
}

/// Replaces every `{index}` in `arg` by `index`. Substitution happens on the agent;
/// this is the agent's implementation, re-exported so the rule has one home.
pub use saker_wire::messages::expand_index;

/// A task spec or array that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("argv is empty: a task needs a program to run")]
    EmptyArgv,
    #[error("job name {name:?}: a name is 1-128 characters, without control characters")]
    InvalidJobName { name: String },
    #[error("a dependency names job 0; job ids start at 1")]
    DependencyOnJobZero,
    #[error("a periodic job (every) must be a single task, not an array")]
    PeriodicArray,
    #[error("a periodic job cannot wait for other jobs nor be named (after, after_any, name)")]
    PeriodicWithDependencies,
    #[error("every must be at least one second")]
    PeriodTooShort,
    #[error("until and count apply to periodic jobs only (every)")]
    BoundsWithoutPeriod,
    #[error("a dependency names job {name:?}, which is not a valid job name")]
    InvalidDependencyName { name: String },
    #[error("the program (argv[0]) is an empty string")]
    EmptyProgram,
    #[error("argv[{position}] contains a NUL byte")]
    NulInArgument { position: usize },
    #[error("a shell task needs exactly one argv element (the script), got {count}")]
    ShellNeedsOneScript { count: usize },
    #[error("cores must be at least 1")]
    ZeroCores,
    #[error("nodes must be at least 1")]
    ZeroNodes,
    #[error("node (run on one given node) and nodes = {nodes} (an HPC job) exclude each other")]
    NodeWithNodes { nodes: u32 },
    #[error("{field} must be at least 1")]
    ZeroHpcField { field: &'static str },
    #[error(
        "{ranks} ranks do not fit {nodes} nodes of {ranks_per_node} ranks each with at least one on every node"
    )]
    RanksDoNotFit {
        ranks: u32,
        nodes: u32,
        ranks_per_node: u32,
    },
    #[error("a function task cannot be an HPC job (nodes, ranks, mpi)")]
    FunctionAsHpc,
    #[error("launcher script starts its ranks with `saker mpiexec`, served PMI: give mpi pmi")]
    ScriptWithoutPmi,
    #[error("invalid resource name {name:?}: use letters, digits, '_', '-' and '.', at most 64")]
    InvalidResourceName { name: String },
    #[error(
        "invalid data item name {name:?}: use letters, digits, '_', '-' and '.', at most 128, not starting with '.'"
    )]
    InvalidItemName { name: String },
    #[error("an HPC job (nodes > 1) cannot write data items (it may read them)")]
    ItemsOfHpcJob,
    #[error("invalid environment variable name {key:?}: must be non-empty without '=' or NUL")]
    InvalidEnvKey { key: String },
    #[error("the value of environment variable {key:?} contains a NUL byte")]
    NulInEnvValue { key: String },
    #[error("environment override {text:?} is not of the form KEY=VALUE")]
    EnvAssignmentWithoutEquals { text: String },
    #[error("working directory {cwd:?} is not valid UTF-8")]
    CwdNotUtf8 { cwd: PathBuf },
    #[error("working directory {cwd:?} is empty or contains a NUL byte")]
    InvalidCwd { cwd: PathBuf },
    #[error("time limit must be positive")]
    ZeroTimeLimit,
    #[error(
        "invalid duration {text:?}: expected e.g. \"90s\", \"5m\", \"1h30m\", \"2d\" or \"H:MM:SS\""
    )]
    InvalidDuration { text: String },
    #[error("invalid memory amount {text:?}: expected e.g. \"4G\", \"512M\" or MiB as a number")]
    InvalidMemory { text: String },
    #[error("duration {text:?} has no unit: write e.g. \"{text}s\" or \"{text}m\"")]
    DurationWithoutUnit { text: String },
    #[error("array spec is empty")]
    EmptyArray,
    #[error("invalid array item {item:?}: expected N, A-B or A-B:STEP")]
    InvalidArrayItem { item: String },
    #[error("array item {item:?} has an index above {max}", max = u32::MAX)]
    ArrayIndexTooLarge { item: String },
    #[error("array range {item:?} ends before it starts")]
    ReversedArrayRange { item: String },
    #[error("array range {item:?} has step 0")]
    ZeroArrayStep { item: String },
    #[error(
        "array item {item:?} overlaps or precedes the one before it: ranges must be increasing and disjoint"
    )]
    UnorderedArrayRange { item: String },
    #[error("array of {count} or more tasks exceeds the limit of {MAX_ARRAY_TASKS}")]
    ArrayTooLarge { count: u64 },
    #[error("inline output of {bytes} bytes exceeds the limit of {MAX_INLINE_OUTPUT}")]
    InlineOutputTooLarge { bytes: u32 },
    #[error(
        "invalid worker kind {kind:?}: use letters, digits, '_' and '-', at most {max}",
        max = function::MAX_KIND_LEN
    )]
    InvalidWorkerKind { kind: String },
    #[error(
        "function payload of {bytes} bytes exceeds the limit of {MAX_FUNCTION_BYTES}: pass \
         large data as files (a path in the call) or as data items (docs/data.md)"
    )]
    PayloadTooLarge { bytes: usize },
    #[error("a function task takes no {field}: it runs in its worker, not as a command")]
    CommandFieldInFunction { field: &'static str },
    #[error("a function task cannot be an array: submit one job per call")]
    ArrayOfFunction,
    #[error("array throttle '%' in {text:?} is not supported")]
    ArrayThrottleUnsupported { text: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(argv: &[&str]) -> TaskSpec {
        TaskSpec::new(argv.iter().map(|arg| arg.to_string()).collect())
    }

    #[test]
    fn minimal_json_spec_takes_defaults() {
        let parsed: TaskSpec = serde_json::from_str(r#"{"argv": ["echo", "hi"]}"#).unwrap();
        assert_eq!(parsed, spec(&["echo", "hi"]));
        assert_eq!(parsed.cores, 1);
        assert!(parsed.validate().is_ok());
    }

    #[test]
    fn json_spec_round_trips_all_fields() {
        let text = r#"{"argv":["sh"],"env":{"A":"1"},"cwd":"/tmp","cores":4,"priority":-2,
            "max_retries":3,"max_replays":0,"time_limit":"1h30m","tags":["x"],"shell":true,
            "idempotent":true}"#;
        let parsed: TaskSpec = serde_json::from_str(text).unwrap();
        assert_eq!(parsed.max_replays, Some(0));
        // Unset, it is left out, so journals of specs without it do not change.
        assert!(
            !serde_json::to_string(&spec(&["x"]))
                .unwrap()
                .contains("max_replays")
        );
        assert_eq!(parsed.time_limit, Some(Duration::from_secs(5400)));
        assert_eq!(parsed.priority, -2);
        assert!(parsed.idempotent);
        let again: TaskSpec =
            serde_json::from_str(&serde_json::to_string(&parsed).unwrap()).unwrap();
        assert_eq!(again, parsed);
        assert!(
            serde_json::to_string(&parsed)
                .unwrap()
                .contains(r#""time_limit":5400"#)
        );
    }

    #[test]
    fn unknown_spec_field_is_refused() {
        let error = serde_json::from_str::<TaskSpec>(r#"{"argv":["a"],"core":2}"#).unwrap_err();
        assert!(error.to_string().contains("core"), "{error}");
    }

    #[test]
    fn time_limit_accepts_numbers_and_strings() {
        let limit = |json: &str| {
            serde_json::from_str::<TaskSpec>(&format!(r#"{{"argv":["a"],"time_limit":{json}}}"#))
                .map(|spec| spec.time_limit)
        };
        assert_eq!(limit("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(limit("1.5").unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(limit(r#""5m""#).unwrap(), Some(Duration::from_secs(300)));
        assert_eq!(limit("null").unwrap(), None);
        assert!(limit("-1").is_err());
        assert!(limit(r#""90""#).is_err());
    }

    #[test]
    fn validation_rejects_bad_specs() {
        assert_eq!(spec(&[]).validate(), Err(SpecError::EmptyArgv));
        assert_eq!(spec(&[""]).validate(), Err(SpecError::EmptyProgram));
        assert_eq!(
            spec(&["a", "b\0c"]).validate(),
            Err(SpecError::NulInArgument { position: 1 })
        );
        let mut zero_cores = spec(&["a"]);
        zero_cores.cores = 0;
        assert_eq!(zero_cores.validate(), Err(SpecError::ZeroCores));
        for key in ["A=B", "", "A\0"] {
            let mut bad_env = spec(&["a"]);
            bad_env.env.insert(key.to_owned(), "v".to_owned());
            assert!(
                matches!(bad_env.validate(), Err(SpecError::InvalidEnvKey { .. })),
                "{key:?}"
            );
        }
        let mut nul_value = spec(&["a"]);
        nul_value.env.insert("K".to_owned(), "v\0".to_owned());
        assert!(matches!(
            nul_value.validate(),
            Err(SpecError::NulInEnvValue { .. })
        ));
        let mut shell = spec(&["echo a", "b"]);
        shell.shell = true;
        assert_eq!(
            shell.validate(),
            Err(SpecError::ShellNeedsOneScript { count: 2 })
        );
        let mut zero_limit = spec(&["a"]);
        zero_limit.time_limit = Some(Duration::ZERO);
        assert_eq!(zero_limit.validate(), Err(SpecError::ZeroTimeLimit));
    }

    #[test]
    fn shell_spec_runs_through_sh() {
        let mut script = spec(&["echo $HOME | wc"]);
        script.shell = true;
        assert_eq!(
            script.command().as_ref(),
            ["/bin/sh", "-c", "echo $HOME | wc"]
        );
        assert_eq!(spec(&["ls", "-l"]).command().as_ref(), ["ls", "-l"]);
    }

    #[test]
    fn env_assignment_from_cli() {
        let mut defaults = SpecDefaults::default();
        defaults.add_env_assignment("A=b=c").unwrap();
        assert_eq!(defaults.env["A"], "b=c");
        assert!(defaults.add_env_assignment("novalue").is_err());
        assert!(defaults.add_env_assignment("=x").is_err());
    }

    #[test]
    fn job_request_json_with_array() {
        let request: JobRequest =
            serde_json::from_str(r#"{"spec":{"argv":["run","{index}"]},"array":"0-99"}"#).unwrap();
        assert_eq!(request.task_count(), 100);
        let error = serde_json::from_str::<JobRequest>(r#"{"spec":{"argv":["a"]},"array":"3-1"}"#)
            .unwrap_err();
        assert!(
            error.to_string().contains("ends before it starts"),
            "{error}"
        );
    }

    #[test]
    fn inline_output_is_bounded() {
        let mut request = JobRequest::single(spec(&["a"]));
        request.inline_output = Some(MAX_INLINE_OUTPUT);
        assert_eq!(request.validate(), Ok(()));
        request.inline_output = Some(MAX_INLINE_OUTPUT + 1);
        assert!(matches!(
            request.validate(),
            Err(SpecError::InlineOutputTooLarge { .. })
        ));
    }

    #[test]
    fn expand_index_replaces_every_placeholder() {
        assert_eq!(expand_index("in/{index}.dat", 7), "in/7.dat");
        assert_eq!(expand_index("{index}-{index}", 12), "12-12");
        assert!(matches!(expand_index("plain", 3), Cow::Borrowed("plain")));
    }
}
