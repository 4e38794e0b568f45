//! Options of submitted tasks: what each needs and how the pilot treats it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use saker_root::results::{JobId, Timestamp};
use saker_root::spec::{JobRef, TaskSpec};

/// What a task needs and how it is treated; the defaults are one core, priority 0,
/// no retries, no time limit. Built with chained setters:
///
/// ```
/// use std::time::Duration;
/// let options = saker::TaskOptions::new().cores(2).priority(5).retries(3)
///     .time_limit(Duration::from_secs(60)).tag("sweep");
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct TaskOptions {
    pub(crate) cores: u32,
    pub(crate) gpus: u32,
    pub(crate) memory_mib: u32,
    pub(crate) priority: i32,
    pub(crate) retries: u32,
    pub(crate) time_limit: Option<Duration>,
    pub(crate) tags: Vec<String>,
    pub(crate) idempotent: bool,
    pub(crate) chunk: Option<usize>,
    pub(crate) node: Option<u32>,
    pub(crate) resources: BTreeMap<String, u32>,
    pub(crate) after: Vec<JobId>,
    pub(crate) after_any: Vec<JobId>,
    pub(crate) not_before: Option<SystemTime>,
    pub(crate) reads: Vec<String>,
    pub(crate) writes: Vec<String>,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            cores: 1,
            gpus: 0,
            memory_mib: 0,
            priority: 0,
            retries: 0,
            time_limit: None,
            tags: Vec::new(),
            idempotent: false,
            chunk: None,
            node: None,
            resources: BTreeMap::new(),
            after: Vec::new(),
            after_any: Vec::new(),
            not_before: None,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }
}

impl TaskOptions {
    pub fn new() -> TaskOptions {
        TaskOptions::default()
    }

    /// Cores each task holds while it runs (default 1).
    pub fn cores(mut self, cores: u32) -> Self {
        self.cores = cores;
        self
    }

    /// GPUs each task holds.
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.gpus = gpus;
        self
    }

    /// Memory each task holds, in MiB.
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// Higher runs first among ready tasks (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Further attempts after the task's own failure: a panic, its time limit. Losses
    /// to the infrastructure (a node gone) are replayed without counting.
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Wall-clock limit of each attempt; past it the attempt fails.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.time_limit = Some(limit);
        self
    }

    /// A label, reported by `saker status` and kept in the journal.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Running the task twice does no harm: it may get a speculative copy when it
    /// straggles.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Inputs per pilot task in `map` (default: enough chunks to keep every core busy
    /// several times over, at most 1,024 inputs each). One input per task gives each
    /// its own retries and result record; larger chunks cost the pilot far less.
    pub fn chunk(mut self, inputs: usize) -> Self {
        self.chunk = Some(inputs.max(1));
        self
    }

    /// Runs each task on node `node` only (its id, as `saker status` lists nodes). A
    /// queued task waits for its node while the node is away.
    pub fn node(mut self, node: u32) -> Self {
        self.node = Some(node);
        self
    }

    /// `amount` of a named resource nodes offer (`--node-resource NAME=N`).
    pub fn resource(mut self, name: impl Into<String>, amount: u32) -> Self {
        self.resources.insert(name.into(), amount);
        self
    }

    /// Runs only after every task of job `job` succeeded (from
    /// [`TaskHandle::job`](crate::TaskHandle::job)); cancelled if one failed.
    pub fn after(mut self, job: JobId) -> Self {
        self.after.push(job);
        self
    }

    /// Runs only after job `job` ended, however.
    pub fn after_any(mut self, job: JobId) -> Self {
        self.after_any.push(job);
        self
    }

    /// Not started before `at`.
    pub fn not_before(mut self, at: SystemTime) -> Self {
        self.not_before = Some(at);
        self
    }

    /// A data item each task reads from `$SAKER_SCRATCH` (docs/data.md): fetched
    /// there first, and the task prefers the nodes that hold it.
    pub fn reads(mut self, item: impl Into<String>) -> Self {
        self.reads.push(item.into());
        self
    }

    /// A data item each task writes as a file in `$SAKER_SCRATCH` (single tasks).
    pub fn writes(mut self, item: impl Into<String>) -> Self {
        self.writes.push(item.into());
        self
    }

    pub(crate) fn apply(&self, spec: &mut TaskSpec) {
        spec.cores = self.cores;
        spec.gpus = self.gpus;
        spec.memory_mib = self.memory_mib;
        spec.priority = self.priority;
        spec.max_retries = self.retries;
        spec.time_limit = self.time_limit;
        spec.tags = self.tags.clone();
        spec.idempotent = self.idempotent;
        spec.node = self.node;
        spec.resources = self.resources.clone();
        spec.after = self.after.iter().map(|job| JobRef::Id(job.0)).collect();
        spec.after_any = self.after_any.iter().map(|job| JobRef::Id(job.0)).collect();
        spec.not_before = self.not_before.map(|at| {
            let micros = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| {
                    since.as_micros().min(u128::from(u64::MAX)) as u64
                });
            Timestamp::from_unix_micros(micros)
        });
        spec.reads = self.reads.clone();
        spec.writes = self.writes.clone();
    }
}
