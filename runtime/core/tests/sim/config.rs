//! The knobs of one simulated run and what it reports.

use saker_core::{Resources, Speculation, Time};

/// Knobs of one run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub nodes: u32,
    pub cores_per_node: u32,
    /// Extra credit an agent asks for beyond its capacity (local prefetch), in cores
    /// and, on nodes with GPUs, in GPUs.
    pub prefetch: u32,
    pub tasks: u64,
    pub max_array: u32,
    /// Probability that a job is a single task rather than an array.
    pub single_fraction: f64,
    /// Cores per task, drawn uniformly from this list per job.
    pub core_choices: Vec<u32>,
    pub duration_micros: (u64, u64),
    pub latency_micros: (u64, u64),
    /// Submissions are spread over this window from time 0.
    pub submit_window_micros: u64,
    pub fail_probability: f64,
    pub lost_probability: f64,
    pub max_retries: u32,
    /// Node crashes, at uniform random times in the submission window and after.
    pub crashes: u32,
    /// Partitions: the root declares a node lost while its agent keeps running and
    /// reporting (late results must come back as duplicates), then it reconnects.
    pub partitions: u32,
    pub detect_delay_micros: u64,
    pub rejoin_delay_micros: u64,
    /// Jobs cancelled at random times.
    pub cancels: u32,
    pub max_bundle: u32,
    /// Full O(tasks) sweep every this many steps (and at the end).
    pub sweep_every: u64,
    /// Time limit per job, drawn uniformly from this list (empty: none, and no draw,
    /// so runs without limits stay as they were). A task never runs longer than its
    /// job's limit.
    pub time_limits: Vec<Option<u64>>,
    /// The allocation's end, if the run has one.
    pub deadline: Option<DeadlinePlan>,
    /// The core's speculation policy.
    pub speculation: Option<Speculation>,
    /// Probability that a job is speculative (0: none, and no draw, so runs without
    /// speculation stay as they were).
    pub speculative_fraction: f64,
    /// Probability that a job is pinned to one node, drawn at random (0: none, and no
    /// draw, so runs without pins stay as they were). Only in worlds without a mix of
    /// node shapes, where every task fits every node.
    pub pinned_fraction: f64,
    /// This fraction of single-node jobs prefers one or two random nodes (where its
    /// data would be), waiting up to 2 ms for them (0: no draw, so runs without
    /// preferences stay as they were).
    pub preferring_fraction: f64,
    /// This fraction of jobs waits for one to three earlier jobs (random shapes: the
    /// one just before makes chains, several make fan-ins, a popular one fan-outs),
    /// each after success or after any end (0: no draw, so runs without dependencies
    /// stay as they were).
    pub dependency_fraction: f64,
    /// Jobs are spread over this many estimate classes (drawn only with speculative
    /// jobs). Each class scales the duration range by its number plus one, so classes
    /// differ.
    pub classes: u32,
    /// Heavy tail: this fraction of attempts runs `slow_factor` times longer than drawn
    /// (still within its job's time limit). 0: no draw.
    pub slow_fraction: f64,
    pub slow_factor: u64,
    /// Kinds beyond cores (`None`: cores only, and no draws, so such runs stay as
    /// they were).
    pub mix: Option<ResourceMix>,
    /// Updates at random times, each a new not-before time or a new time limit (from
    /// `time_limits`) for a random job (0: no draws).
    pub updates: u32,
}

/// Nodes and tasks that deal in GPUs, memory and custom kinds too.
#[derive(Clone, Debug)]
pub struct ResourceMix {
    /// Node `i` has capacity `node_shapes[i % len]` (cores included; `cores_per_node`
    /// is unused). Every task must fit the first shape, which node 0 always has.
    pub node_shapes: Vec<Resources>,
    /// Added to each job's cores, drawn uniformly per job.
    pub task_extras: Vec<Resources>,
}

/// When the root learns the allocation's end, and what it does about it.
#[derive(Clone, Copy, Debug)]
pub struct DeadlinePlan {
    /// When `handle_deadline` is called (`None`: never).
    pub set_at: Option<u64>,
    /// The deadline passed.
    pub deadline: u64,
    /// When the deadline is lifted again (`handle_deadline(None)`), if ever.
    pub cleared_at: Option<u64>,
    /// When the root drains (`handle_drain`), if ever.
    pub drain_at: Option<u64>,
}

/// What one run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub steps: u64,
    pub makespan: Time,
    pub tasks: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub retries: u64,
    pub replays: u64,
    pub duplicates: u64,
    pub dispatches: u64,
    /// Tasks that never ran to a terminal state (deadline or drain).
    pub unstarted: u64,
    /// Speculative copies issued, and copies whose success finished their task.
    pub speculated: u64,
    pub copies_won: u64,
    /// Attempts that failed, were lost or stopped while their task's copy went on.
    pub continued: u64,
    /// Attempts dispatched whose task needs more than cores, speculative copies of
    /// such tasks, and dispatches that a kind other than cores bounded (see the ledger).
    pub non_core_attempts: u64,
    pub non_core_copies: u64,
    pub bound_by_other_kinds: u64,
    pub sweeps: u64,
    /// Jobs submitted with dependencies.
    pub dependent_jobs: u64,
    /// Jobs that preferred nodes.
    pub preferring_jobs: u64,
    /// Updates the core accepted (the job had not ended), and attempts asked back.
    pub updates: u64,
    pub asked_back: u64,
    /// FNV-1a over every output of the core, for determinism checks.
    pub trace: u64,
}
