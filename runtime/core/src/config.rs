//! Configuration of the core and of one job submission.

use crate::ids::NodeId;
use crate::resources::{ResourceKind, Resources};

/// Exponential backoff before a failed task is retried: the `n`-th retry of a task
/// waits `min(base_micros * factor^(n-1), max_micros)`.
///
/// Integer arithmetic on purpose: the delay is part of the core's deterministic
/// output, and an integer factor is all retry policies need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the first retry, in microseconds.
    pub base_micros: u64,
    /// Multiplier per further retry (1 = constant delay).
    pub factor: u32,
    /// Upper bound of the delay, in microseconds.
    pub max_micros: u64,
}

impl Backoff {
    /// No delay at all: a failed task is requeued at once.
    pub const NONE: Backoff = Backoff {
        base_micros: 0,
        factor: 1,
        max_micros: 0,
    };

    /// The delay before retry number `retry` (1-based; 0 is treated as 1). A factor
    /// of 0 is treated as 1.
    pub fn delay_micros(&self, retry: u32) -> u64 {
        let exponent = retry.saturating_sub(1);
        let growth = u64::from(self.factor.max(1)).checked_pow(exponent);
        let delay = growth.map_or(u64::MAX, |growth| self.base_micros.saturating_mul(growth));
        let delay = if self.base_micros == 0 { 0 } else { delay };
        delay.min(self.max_micros)
    }
}

impl Default for Backoff {
    /// One second, doubling, at most one minute.
    fn default() -> Self {
        Backoff {
            base_micros: 1_000_000,
            factor: 2,
            max_micros: 60_000_000,
        }
    }
}

/// Policy knobs of a [`Core`](crate::Core).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// Most assignments carried by one [`Dispatch`](crate::Dispatch). Bounds the size of
    /// one frame to an agent; 0 is treated as 1.
    pub max_bundle: u32,
    /// Delay before a task's own failure is retried.
    pub retry_backoff: Backoff,
    /// Replays (infrastructure losses) a task survives when its job does not say.
    pub default_max_replays: u32,
    /// Speculative copies of stragglers, for jobs that allow them
    /// ([`JobSpec::speculative`]). `None` turns speculation off for every job.
    pub speculation: Option<Speculation>,
    /// How long queued work waits for the nodes it prefers ([`Core::handle_prefer`],
    /// where its data is) before any node may take it, in µs; 0: never waits.
    ///
    /// [`Core::handle_prefer`]: crate::Core::handle_prefer
    pub locality_wait_micros: u64,
    /// Which life of the pilot's root this core serves: 1 for the first root, one more
    /// for each takeover or resume. Each term numbers its attempts apart from every
    /// other's ([`AttemptId::first_of_term`]), so an attempt an earlier root
    /// dispatched, still held by an agent, never shares an id with this core's and can
    /// be adopted ([`Core::handle_adopt`]). 0 is treated as 1.
    ///
    /// [`AttemptId::first_of_term`]: crate::AttemptId::first_of_term
    /// [`Core::handle_adopt`]: crate::Core::handle_adopt
    pub term: u32,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            max_bundle: 1024,
            retry_backoff: Backoff::default(),
            default_max_replays: 3,
            speculation: Some(Speculation::default()),
            locality_wait_micros: 1_000_000,
            term: 1,
        }
    }
}

/// When a running attempt is a *straggler* that gets a speculative copy.
///
/// Jobs of one estimate class ([`JobSpec::class`]) share a runtime estimate: the mean
/// `m` and standard deviation `s` of the run times of their successful attempts (from
/// the `started` report to the result), speculative jobs or not. Once a class has
/// `min_samples` of them, a started attempt of a speculative job that has run longer
/// than `factor_percent / 100 * (m + 2 s)` is a straggler; when a node has credit and
/// no ordinary work for it, a copy of the task starts on another node. The first
/// success wins; the other attempt is told to stop. A task gets at most one copy each
/// time it leaves the queue (a retry or replay may get another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Speculation {
    /// The factor `P` over the estimate, in percent (150 = one and a half times).
    pub factor_percent: u32,
    /// Successful attempts of a class needed before it has an estimate (0 counts as 1).
    pub min_samples: u32,
}

impl Default for Speculation {
    /// 150 percent of the estimate, after 5 samples.
    fn default() -> Self {
        Speculation {
            factor_percent: 150,
            min_samples: 5,
        }
    }
}

/// Where the tasks of a job run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "rkyv",
    derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
    rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), compare(PartialEq))
)]
pub enum Placement {
    /// Each task on one node, needing [`JobSpec::resources`] there.
    #[default]
    Single,
    /// Each task on `nodes` distinct nodes at once, needing [`JobSpec::resources`] free
    /// on each (an MPI-style job run by a group): one attempt spans them all, starts
    /// whole or not at all, and ends whole. See the core's gang rules.
    Gang {
        /// Nodes per task.
        nodes: u32,
    },
    /// Each task on `node` only, needing [`JobSpec::resources`] there. Queued tasks
    /// wait for that node (while it is lost, until it registers again); they are
    /// never speculated elsewhere.
    Node {
        /// The node.
        node: NodeId,
    },
}

/// How a job waits for another (Slurm's `afterok` and `afterany`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DependencyKind {
    /// Runs once the other job's tasks all succeeded; is cancelled if any failed or
    /// was cancelled.
    Success,
    /// Runs once the other job's tasks are all terminal, however they ended.
    Any,
}

/// One job another waits for ([`Core::handle_submit_after`](crate::Core::handle_submit_after)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dependency {
    /// The job waited for: submitted before the waiting one.
    pub job: crate::ids::JobId,
    pub kind: DependencyKind,
}

/// What a submission asks for. One spec describes `count` identical tasks (an array
/// when `count > 1`); the driver keeps the per-index payloads, the core only schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// Number of tasks (at least 1).
    pub count: u32,
    /// What each task occupies on its node (at least one core). Every kind counts
    /// against the node's capacity and credit.
    pub resources: Resources,
    /// One node per task (the default), or a gang of nodes.
    pub placement: Placement,
    /// Higher runs first; equal priorities run in submission order.
    pub priority: i32,
    /// Failures of the task's own making that are retried; one more fails the task.
    pub max_retries: u32,
    /// Infrastructure losses that are replayed; one more fails the task.
    /// `None` takes [`CoreConfig::default_max_replays`].
    pub max_replays: Option<u32>,
    /// Longest one attempt may run, in microseconds (the driver enforces it; the core
    /// only plans with it). `None`: unknown or unbounded. Once a deadline is set
    /// ([`Core::handle_deadline`](crate::Core::handle_deadline)), an attempt starts
    /// only if it can finish by then, and a task without a limit only before it.
    pub time_limit: Option<u64>,
    /// Estimate class: jobs of one class share one runtime estimate (see
    /// [`Speculation`]). The driver maps a task's tags to a class id; 0 is the default.
    pub class: u32,
    /// The tasks are idempotent: a straggler may get a speculative copy running at the
    /// same time (see [`Speculation`]). Off by default.
    pub speculative: bool,
}

impl JobSpec {
    /// One single-core task on one node, priority 0, no retries, default replays, no time limit,
    /// class 0, not speculative.
    pub const fn single() -> JobSpec {
        JobSpec {
            count: 1,
            resources: Resources::cores(1),
            placement: Placement::Single,
            priority: 0,
            max_retries: 0,
            max_replays: None,
            time_limit: None,
            class: 0,
            speculative: false,
        }
    }

    /// An array of `count` single-core tasks, otherwise like [`JobSpec::single`].
    pub const fn array(count: u32) -> JobSpec {
        JobSpec {
            count,
            ..JobSpec::single()
        }
    }

    /// This spec with `cores` cores per task (other kinds unchanged).
    pub const fn with_cores(self, cores: u32) -> JobSpec {
        JobSpec {
            resources: self.resources.with(ResourceKind::CORES, cores),
            ..self
        }
    }

    /// This spec with `resources` per task.
    pub const fn with_resources(self, resources: Resources) -> JobSpec {
        JobSpec { resources, ..self }
    }

    /// This spec with `placement`.
    pub const fn with_placement(self, placement: Placement) -> JobSpec {
        JobSpec { placement, ..self }
    }

    /// This spec with `priority`.
    pub const fn with_priority(self, priority: i32) -> JobSpec {
        JobSpec { priority, ..self }
    }

    /// This spec with `max_retries`.
    pub const fn with_max_retries(self, max_retries: u32) -> JobSpec {
        JobSpec {
            max_retries,
            ..self
        }
    }

    /// This spec with an explicit replay bound.
    pub const fn with_max_replays(self, max_replays: u32) -> JobSpec {
        JobSpec {
            max_replays: Some(max_replays),
            ..self
        }
    }

    /// This spec with a time limit per attempt of `micros` microseconds.
    pub const fn with_time_limit_micros(self, micros: u64) -> JobSpec {
        JobSpec {
            time_limit: Some(micros),
            ..self
        }
    }

    /// This spec in estimate class `class`.
    pub const fn with_class(self, class: u32) -> JobSpec {
        JobSpec { class, ..self }
    }

    /// This spec with speculative copies allowed (`true`) or not.
    pub const fn with_speculation(self, speculative: bool) -> JobSpec {
        JobSpec {
            speculative,
            ..self
        }
    }
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec::single()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_and_caps() {
        let backoff = Backoff {
            base_micros: 100,
            factor: 3,
            max_micros: 1_000,
        };
        assert_eq!(backoff.delay_micros(0), 100);
        assert_eq!(backoff.delay_micros(1), 100);
        assert_eq!(backoff.delay_micros(2), 300);
        assert_eq!(backoff.delay_micros(3), 900);
        assert_eq!(backoff.delay_micros(4), 1_000);
        assert_eq!(backoff.delay_micros(u32::MAX), 1_000);
        assert_eq!(Backoff::NONE.delay_micros(7), 0);
        let constant = Backoff {
            factor: 1,
            ..backoff
        };
        assert_eq!(constant.delay_micros(u32::MAX), 100);
    }
}
