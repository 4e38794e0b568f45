//! Options of submitted tasks: what each needs and how the pilot treats it.

use std::time::{Duration, SystemTime};

use saker_client::results::{JobId, Timestamp};
use saker_client::spec::{FunctionSpec, JobRef, TaskSpec};

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
    /// Each task's spec but its call: what the setters write (argv stays empty).
    pub(crate) spec: TaskSpec,
    pub(crate) chunk: Option<usize>,
}

impl Default for TaskOptions {
    fn default() -> Self {
        TaskOptions {
            spec: TaskSpec::new(Vec::new()),
            chunk: None,
        }
    }
}

impl TaskOptions {
    pub fn new() -> TaskOptions {
        TaskOptions::default()
    }

    /// Cores each task holds while it runs (default 1).
    pub fn cores(mut self, cores: u32) -> Self {
        self.spec.cores = cores;
        self
    }

    /// GPUs each task holds.
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.spec.gpus = gpus;
        self
    }

    /// Memory each task holds, in MiB.
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.spec.memory_mib = mib;
        self
    }

    /// Higher runs first among ready tasks (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.spec.priority = priority;
        self
    }

    /// Further attempts after the task's own failure: a panic, its time limit. Losses
    /// to the infrastructure (a node gone) are replayed without counting.
    pub fn retries(mut self, retries: u32) -> Self {
        self.spec.max_retries = retries;
        self
    }

    /// Wall-clock limit of each attempt; past it the attempt fails.
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.spec.time_limit = Some(limit);
        self
    }

    /// A label, reported by `saker status` and kept in the journal.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.spec.tags.push(tag.into());
        self
    }

    /// Running the task twice does no harm: it may get a speculative copy when it
    /// straggles.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.spec.idempotent = idempotent;
        self
    }

    /// Inputs per pilot task in `map` (default: enough chunks to keep every core busy
    /// several times over, at most 1,024 inputs each). One input per task gives each
    /// its own retries and result record; larger chunks cost the pilot far less.
    pub fn chunk(mut self, inputs: usize) -> Self {
        self.chunk = Some(inputs.max(1));
        self
    }

    /// Runs each task on node `node` only: its id, from 0, as `saker status` lists
    /// nodes and [`crate::node`] returns them. A queued task waits for its node while
    /// the node is away; a node the pilot cannot have is refused at submission.
    pub fn node(mut self, node: u32) -> Self {
        self.spec.node = Some(node);
        self
    }

    /// `amount` of a named resource nodes offer (`--node-resource NAME=N`).
    pub fn resource(mut self, name: impl Into<String>, amount: u32) -> Self {
        self.spec.resources.insert(name.into(), amount);
        self
    }

    /// Runs only after every task of job `job` succeeded (from
    /// [`TaskHandle::job`](crate::TaskHandle::job)); cancelled if one failed.
    pub fn after(mut self, job: JobId) -> Self {
        self.spec.after.push(JobRef::Id(job.0));
        self
    }

    /// Runs only after job `job` ended, however.
    pub fn after_any(mut self, job: JobId) -> Self {
        self.spec.after_any.push(JobRef::Id(job.0));
        self
    }

    /// Not started before `at`.
    pub fn not_before(mut self, at: SystemTime) -> Self {
        let micros = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| {
                since.as_micros().min(u128::from(u64::MAX)) as u64
            });
        self.spec.not_before = Some(Timestamp::from_unix_micros(micros));
        self
    }

    /// A data item each task reads from `$SAKER_SCRATCH` (docs/data.md): fetched
    /// there first, and the task prefers the nodes that hold it.
    pub fn reads(mut self, item: impl Into<String>) -> Self {
        self.spec.reads.push(item.into());
        self
    }

    /// A data item each task writes as a file in `$SAKER_SCRATCH` (single tasks).
    pub fn writes(mut self, item: impl Into<String>) -> Self {
        self.spec.writes.push(item.into());
        self
    }

    /// The spec of one task: the options' spec calling `function`.
    pub(crate) fn spec(&self, function: FunctionSpec) -> TaskSpec {
        TaskSpec {
            function: Some(function),
            ..self.spec.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> FunctionSpec {
        FunctionSpec {
            kind: "rust".to_owned(),
            payload: vec![1, 2],
        }
    }

    #[test]
    fn defaults_are_one_core_and_nothing_else() {
        let spec = TaskOptions::new().spec(call());
        assert_eq!((spec.cores, spec.priority, spec.max_retries), (1, 0, 0));
        assert_eq!(spec.time_limit, None);
        assert!(spec.argv.is_empty());
        assert_eq!(spec.function, Some(call()));
        assert_eq!(TaskOptions::new().chunk, None);
        assert_eq!(spec.validate(), Ok(()));
    }

    #[test]
    fn setters_write_the_spec() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(5);
        let options = TaskOptions::new()
            .cores(2)
            .gpus(1)
            .memory_mib(512)
            .priority(-3)
            .retries(4)
            .time_limit(Duration::from_secs(60))
            .tag("a")
            .tag("b")
            .idempotent(true)
            .chunk(0)
            .node(3)
            .resource("licence", 2)
            .after(JobId(7))
            .after_any(JobId(8))
            .not_before(at)
            .reads("in")
            .writes("out");
        assert_eq!(options.chunk, Some(1));
        let spec = options.spec(call());
        assert_eq!((spec.cores, spec.gpus, spec.memory_mib), (2, 1, 512));
        assert_eq!((spec.priority, spec.max_retries), (-3, 4));
        assert_eq!(spec.time_limit, Some(Duration::from_secs(60)));
        assert_eq!(spec.tags, ["a", "b"]);
        assert!(spec.idempotent);
        assert_eq!(spec.node, Some(3));
        assert_eq!(spec.resources["licence"], 2);
        assert_eq!(spec.after, [JobRef::Id(7)]);
        assert_eq!(spec.after_any, [JobRef::Id(8)]);
        assert_eq!(spec.not_before, Some(Timestamp::from_unix_micros(5)));
        assert_eq!(
            (spec.reads, spec.writes),
            (vec!["in".to_owned()], vec!["out".to_owned()])
        );
    }
}
