//! Options of submitted tasks: what each needs and how the pilot treats it.

use std::time::Duration;

use saker_root::spec::TaskSpec;

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
    }
}
