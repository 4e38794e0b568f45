//! Clients' updates at random times: a job gets a new not-before time (ahead, past or
//! none) or a new time limit, whether it waits, is queued or runs. The ledger checks
//! every later dispatch against the new values; the agents give back what the core
//! asks back.

use rand::RngExt;
use saker_core::{AttemptId, AttemptOutcome, JobId, NodeId, Time};

use super::{Action, World};

/// What an update changes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Change {
    /// Not before this instant (`None`: no time).
    NotBefore(Option<u64>),
    TimeLimit(Option<u64>),
}

impl World {
    /// Schedules `config.updates` updates of random jobs among the first `jobs`.
    pub(super) fn plan_updates(&mut self, jobs: u32, horizon: u64) {
        for _ in 0..self.config.updates {
            let job = JobId(self.rng.random_range(1..=jobs));
            let at = self.rng.random_range(0..=horizon);
            let change = if self.config.time_limits.is_empty() || self.rng.random_bool(0.6) {
                // Ahead by up to 20 ms mostly; sometimes past, sometimes none.
                match self.rng.random_range(0..10) {
                    0 => Change::NotBefore(None),
                    1 => Change::NotBefore(Some(at.saturating_sub(1))),
                    _ => Change::NotBefore(Some(at + self.rng.random_range(1..=20_000))),
                }
            } else {
                let choice = self.rng.random_range(0..self.config.time_limits.len());
                Change::TimeLimit(self.config.time_limits[choice])
            };
            self.schedule(at, Action::Update { job, change });
        }
    }

    pub(super) fn update(&mut self, job: JobId, change: Change) {
        let now = Time(self.now);
        let accepted = match change {
            Change::NotBefore(at) => self
                .core
                .handle_update_not_before(job, at.map(Time), now)
                .is_ok(),
            Change::TimeLimit(limit) => self.core.handle_update_time_limit(job, limit, now).is_ok(),
        };
        // Refused only for a job not submitted yet, ended or cancelled.
        let ended = self
            .core
            .job_counts(job)
            .is_none_or(|counts| counts.is_finished() || counts.cancel_requested);
        assert_eq!(accepted, !ended, "update of job {job} at {now}");
        if !accepted {
            return;
        }
        self.summary.updates += 1;
        match change {
            Change::NotBefore(at) => {
                let ahead = at.filter(|at| *at > self.now).map(Time);
                self.ledger.retimed(job, ahead);
                self.trace(&[20, u64::from(job.0), at.unwrap_or(0)]);
            }
            Change::TimeLimit(limit) => {
                self.ledger.relimited(job, limit);
                self.trace(&[21, u64::from(job.0), limit.unwrap_or(0)]);
            }
        }
    }

    /// The agent gives back `attempt` if it has not started it (else it runs on).
    pub(super) fn give_back(&mut self, node: NodeId, incarnation: u64, attempt: AttemptId) {
        if !self.agent_current(node, incarnation) {
            return;
        }
        let agent = &mut self.agents[node.0 as usize];
        let Some(position) = agent.local.iter().position(|work| work.attempt == attempt) else {
            return;
        };
        let Some(work) = agent.local.remove(position) else {
            return;
        };
        agent.held = super::release(agent.held, work.need);
        self.report(
            node,
            incarnation,
            attempt,
            AttemptOutcome::Cancelled,
            work.need,
        );
        self.start_local(node);
    }
}
