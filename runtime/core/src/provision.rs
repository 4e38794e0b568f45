//! Elastic provisioning, the pure part: from the queue's backlog, the pilot's batch
//! allocations and the time, which allocations to ask the batch system for, which
//! pending ones to cancel and which idle ones to release.
//!
//! The [`Provisioner`] is driven like the [`Core`](crate::Core): the caller reads the
//! backlog and its allocations, calls [`Provisioner::decide`] every round (a few
//! seconds), and carries the [`Decision`]s out (libslurm submit and cancel, draining
//! an allocation's agents). No I/O, no clock; each decision carries its reason for
//! `status` and the journal.
//!
//! # When to grow
//!
//! The backlog's work (estimated core-seconds of queued tasks) is spread over the
//! nodes that will last: running allocations not ending within
//! [`ProvisionConfig::replace_ahead`], plus pending ones. If draining it would take
//! longer than [`ProvisionConfig::grow_after`], or a queued HPC job needs more nodes
//! than that, the pilot *wants* enough nodes to drain it within that time (at least
//! the widest HPC job, at most [`ProvisionConfig::max_nodes`]). An allocation close to
//! its end does not count as lasting, so while work remains its replacement is asked
//! for ahead of time.
//!
//! # How fast: the policies (Falkon's)
//!
//! Each round in which more nodes are wanted than the pilot has or has asked for:
//!
//! * [`Policy::One`]: one allocation at a time; a new one only once none is pending.
//! * [`Policy::Additive`]: one more allocation every round.
//! * [`Policy::Exponential`]: 1, 2, 4, … allocations in consecutive rounds that want
//!   more (the count starts again at 1 after a round that wants none).
//! * [`Policy::All`]: every allocation still wanted, at once.
//!
//! In every policy, no submission makes the nodes running and pending exceed
//! `max_nodes`, or the pending allocations exceed `max_pending`. An allocation ending
//! soon still holds its nodes, so a replacement overlaps it only where `max_nodes`
//! leaves room.
//!
//! # When to shrink
//!
//! Pending allocations the pilot no longer needs (the lasting nodes alone cover what
//! it wants) are cancelled, newest first. A running allocation whose nodes have all
//! been idle for [`ProvisionConfig::idle_release`] while nothing is queued is
//! released. [`Provisioner::pause`] stops submissions (cancels and releases go on).

use std::fmt;

use crate::Time;

/// How many allocations a round that wants more asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    One,
    #[default]
    Additive,
    Exponential,
    All,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::One => "one",
            Policy::Additive => "additive",
            Policy::Exponential => "exponential",
            Policy::All => "all",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "one" => Ok(Policy::One),
            "additive" => Ok(Policy::Additive),
            "exponential" => Ok(Policy::Exponential),
            "all" => Ok(Policy::All),
            other => Err(format!(
                "`{other}` is not a policy: expected one, additive, exponential or all"
            )),
        }
    }
}

/// The pilot's provisioning settings. Durations in microseconds, as [`Time`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionConfig {
    pub policy: Policy,
    /// Nodes of each allocation asked for.
    pub nodes_per_allocation: u32,
    /// Cores the pilot expects a node to have (until it has seen one).
    pub cores_per_node: u32,
    /// Nodes running and pending together never exceed this.
    pub max_nodes: u32,
    /// Allocations pending at once never exceed this.
    pub max_pending: u32,
    /// Grow when the backlog would take longer than this on the lasting nodes.
    pub grow_after_us: u64,
    /// Release a running allocation idle this long with nothing queued.
    pub idle_release_us: u64,
    /// An allocation this close to its end does not count as lasting (its
    /// replacement is asked for while work remains).
    pub replace_ahead_us: u64,
}

/// The queue as the provisioner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Backlog {
    /// Tasks queued (not yet started).
    pub queued: u64,
    /// Their estimated work, in core-seconds (time limits, estimates, or a default
    /// per task).
    pub core_seconds: f64,
    /// Nodes of the widest queued HPC job (0 without one).
    pub widest_gang: u32,
}

/// Where an allocation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationState {
    /// Submitted, not yet running.
    Pending,
    /// Running; `end` is when the batch system ends it (if known), `idle_since` when
    /// its nodes last all became idle (`None`: something runs on them).
    Running {
        end: Option<Time>,
        idle_since: Option<Time>,
    },
    /// Being released or cancelled: counts for nothing.
    Ending,
}

/// One allocation of the pilot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationView {
    /// The pilot's number for it.
    pub id: u64,
    pub nodes: u32,
    /// Cores per node, once its agents have said.
    pub cores_per_node: Option<u32>,
    pub submitted: Time,
    pub state: AllocationState,
}

/// What to do, and why.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Ask the batch system for an allocation of `nodes` nodes.
    Submit { nodes: u32, reason: String },
    /// Cancel a pending allocation.
    Cancel { allocation: u64, reason: String },
    /// End a running allocation (its agents leave, then the job is cancelled).
    Release { allocation: u64, reason: String },
}

impl Decision {
    pub fn reason(&self) -> &str {
        match self {
            Decision::Submit { reason, .. }
            | Decision::Cancel { reason, .. }
            | Decision::Release { reason, .. } => reason,
        }
    }
}

/// The provisioner's own state between rounds.
#[derive(Debug, Clone)]
pub struct Provisioner {
    config: ProvisionConfig,
    /// Consecutive rounds that wanted more (the exponential policy's exponent).
    growing_rounds: u32,
    paused: bool,
}

/// Seconds, shown.
struct Seconds(u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0 / 1_000_000;
        if seconds >= 3600 {
            write!(f, "{}h{:02}m", seconds / 3600, seconds / 60 % 60)
        } else if seconds >= 60 {
            write!(f, "{}m{:02}s", seconds / 60, seconds % 60)
        } else {
            write!(f, "{seconds}s")
        }
    }
}

impl Provisioner {
    pub fn new(config: ProvisionConfig) -> Provisioner {
        Provisioner {
            config,
            growing_rounds: 0,
            paused: false,
        }
    }

    pub fn config(&self) -> &ProvisionConfig {
        &self.config
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Stops (or resumes) submitting allocations.
    pub fn pause(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// One round: what to submit, cancel and release now.
    pub fn decide(
        &mut self,
        now: Time,
        backlog: &Backlog,
        allocations: &[AllocationView],
    ) -> Vec<Decision> {
        let config = self.config;
        let mut decisions = Vec::new();
        let cores_per_node = allocations
            .iter()
            .find_map(|a| a.cores_per_node)
            .unwrap_or(config.cores_per_node)
            .max(1);
        let ending_soon = |end: Option<Time>| {
            end.is_some_and(|end| end.as_micros() <= now.as_micros() + config.replace_ahead_us)
        };
        let mut lasting = 0u32;
        let mut running_nodes = 0u32;
        let mut pending: Vec<&AllocationView> = Vec::new();
        for allocation in allocations {
            match allocation.state {
                AllocationState::Pending => pending.push(allocation),
                AllocationState::Running { end, .. } => {
                    running_nodes += allocation.nodes;
                    if !ending_soon(end) {
                        lasting += allocation.nodes;
                    }
                }
                AllocationState::Ending => {}
            }
        }
        let pending_nodes: u32 = pending.iter().map(|a| a.nodes).sum();
        let wanted = self.wanted_nodes(backlog, cores_per_node);

        // Shrink: pending allocations the lasting nodes make unnecessary.
        let mut excess = (lasting + pending_nodes).saturating_sub(wanted);
        pending.sort_by_key(|a| std::cmp::Reverse((a.submitted, a.id)));
        let mut cancelled = Vec::new();
        for allocation in &pending {
            if allocation.nodes <= excess {
                excess -= allocation.nodes;
                cancelled.push(allocation.id);
                decisions.push(Decision::Cancel {
                    allocation: allocation.id,
                    reason: format!(
                        "no longer needed: {} queued tasks fit the {lasting} nodes running",
                        backlog.queued
                    ),
                });
            }
        }
        let pending_left = pending.len() as u32 - cancelled.len() as u32;
        let pending_nodes_left: u32 = pending
            .iter()
            .filter(|a| !cancelled.contains(&a.id))
            .map(|a| a.nodes)
            .sum();

        // Release: running allocations idle long enough with nothing queued.
        for allocation in allocations {
            if let AllocationState::Running {
                idle_since: Some(idle),
                ..
            } = allocation.state
            {
                let idle_for = now.as_micros().saturating_sub(idle.as_micros());
                if backlog.queued == 0 && idle_for >= config.idle_release_us {
                    decisions.push(Decision::Release {
                        allocation: allocation.id,
                        reason: format!("idle for {} with nothing queued", Seconds(idle_for)),
                    });
                }
            }
        }

        // Grow.
        let have = lasting + pending_nodes_left;
        if wanted <= have {
            self.growing_rounds = 0;
            return decisions;
        }
        if self.paused {
            return decisions;
        }
        let per = config.nodes_per_allocation.max(1);
        let still_wanted = (wanted - have).div_ceil(per);
        let count = match config.policy {
            Policy::One if pending_left > 0 => 0,
            Policy::One | Policy::Additive => 1,
            Policy::Exponential => 1u32
                .checked_shl(self.growing_rounds)
                .unwrap_or(u32::MAX)
                .min(still_wanted),
            Policy::All => still_wanted,
        };
        self.growing_rounds = self.growing_rounds.saturating_add(1);
        let why = self.why(backlog, lasting, running_nodes, cores_per_node);
        let mut nodes_total = running_nodes + pending_nodes_left;
        // Pending allocations may not exceed max_pending, with these included.
        let room = config.max_pending.saturating_sub(pending_left);
        for _ in 0..count.min(room) {
            let nodes = per.min(config.max_nodes.saturating_sub(nodes_total));
            if nodes == 0 {
                break;
            }
            nodes_total += nodes;
            decisions.push(Decision::Submit {
                nodes,
                reason: why.clone(),
            });
        }
        decisions
    }

    /// Nodes that drain the backlog within `grow_after`, at least the widest HPC job,
    /// at most `max_nodes`; none without a backlog.
    fn wanted_nodes(&self, backlog: &Backlog, cores_per_node: u32) -> u32 {
        if backlog.queued == 0 {
            return 0;
        }
        let window = (self.config.grow_after_us as f64 / 1e6).max(1.0);
        let by_work = (backlog.core_seconds / (window * f64::from(cores_per_node))).ceil();
        let by_work = if by_work.is_finite() && by_work > 0.0 {
            by_work.min(f64::from(u32::MAX)) as u32
        } else {
            1
        };
        by_work
            .max(backlog.widest_gang)
            .max(1)
            .min(self.config.max_nodes)
    }

    fn why(&self, backlog: &Backlog, lasting: u32, running: u32, cores_per_node: u32) -> String {
        if lasting < running {
            return format!(
                "{} queued tasks, and {} running node{} end within {}: replacing them",
                backlog.queued,
                running - lasting,
                if running - lasting == 1 { "" } else { "s" },
                Seconds(self.config.replace_ahead_us)
            );
        }
        if backlog.widest_gang > lasting {
            return format!(
                "an HPC job needs {} nodes; {lasting} will last",
                backlog.widest_gang
            );
        }
        if lasting == 0 {
            return format!("{} queued tasks and no node", backlog.queued);
        }
        let seconds = backlog.core_seconds / f64::from(lasting * cores_per_node);
        format!(
            "{} queued tasks ({:.0} core-s) would take {} on {lasting} node{} (more than {})",
            backlog.queued,
            backlog.core_seconds,
            Seconds((seconds * 1e6) as u64),
            if lasting == 1 { "" } else { "s" },
            Seconds(self.config.grow_after_us)
        )
    }
}

#[cfg(test)]
mod tests;
