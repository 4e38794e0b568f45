//! How far the pilot's work has come: every job's durable results by state (kept in
//! its entry of the [`JobTable`], whose final counts outlive it), the pilot's totals,
//! and the `wait` requests they answer.

use std::sync::Arc;

use super::jobs::{JobEntry, JobTable};
use crate::client::Reply;
use saker_client::WaitReport;
use saker_client::results::{JobId, ResultRecord, TerminalState};

/// Results that must have ended since the last time before a pilot that has gone idle
/// gives its freed memory back: enough that a burst's queue was worth returning, few
/// enough that a pilot fed one task at a time never pays for it.
const RELEASE_AFTER_RESULTS: u64 = 10_000;

/// Pilot-wide counts of durable results, kept as results arrive so that waits and
/// status cost nothing per job.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub durable: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// A `wait` request: answered once every task of `jobs` (of all jobs when `None`) has
/// a durable result.
#[derive(Debug)]
struct Waiter {
    jobs: Option<Vec<JobId>>,
    reply: Reply<WaitReport>,
}

/// The totals and the waits (see the module doc).
#[derive(Debug)]
pub(super) struct Progress {
    totals: Totals,
    waiters: Vec<Waiter>,
    /// `totals.durable` when the root last gave freed memory back, and how many more
    /// results must end in an idle pilot before it does so again.
    released_at: u64,
    release_after: u64,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            totals: Totals::default(),
            waiters: Vec::new(),
            released_at: 0,
            release_after: RELEASE_AFTER_RESULTS,
        }
    }
}

impl Progress {
    pub(super) fn totals(&self) -> Totals {
        self.totals
    }

    /// A task of `job` ended in `state`, durably: counted in its job (whose entry goes
    /// once every task of it has ended) and in the totals.
    pub(super) fn count(&mut self, jobs: &mut JobTable, job: JobId, state: TerminalState) {
        let (failed, cancelled) = match state {
            TerminalState::Succeeded => (0, 0),
            TerminalState::Failed => (1, 0),
            TerminalState::Cancelled => (0, 1),
        };
        if let Some(entry) = jobs.get_mut(&job) {
            entry.durable += 1;
            entry.failed += failed;
            entry.cancelled += cancelled;
            if entry.is_done() {
                jobs.finish(job);
            }
        }
        self.totals.durable += 1;
        self.totals.failed += u64::from(failed);
        self.totals.cancelled += u64::from(cancelled);
    }

    /// Counts durable `results` (see [`Progress::count`]).
    pub(super) fn count_results(&mut self, jobs: &mut JobTable, results: &[Arc<ResultRecord>]) {
        for record in results {
            self.count(jobs, record.job, record.state);
        }
    }

    /// A `wait` for `jobs` (all when `None`, each known), answered now or once they end.
    pub(super) fn wait(
        &mut self,
        jobs: Option<Vec<JobId>>,
        reply: Reply<WaitReport>,
        table: &JobTable,
        tasks: u64,
    ) {
        self.waiters.push(Waiter { jobs, reply });
        self.answer_waits(table, tasks);
    }

    /// Answers every wait whose jobs have ended (`tasks`: all tasks submitted).
    pub(super) fn answer_waits(&mut self, table: &JobTable, tasks: u64) {
        let mut index = 0;
        while index < self.waiters.len() {
            if self.waiters[index].reply.is_closed() {
                self.waiters.swap_remove(index);
                continue;
            }
            // A wait for everything is answered from running totals, so it costs
            // nothing per job however many jobs (task-file lines) the pilot holds.
            let report = match &self.waiters[index].jobs {
                None => (self.totals.durable >= tasks).then(|| WaitReport {
                    succeeded: self.totals.durable - self.totals.failed - self.totals.cancelled,
                    failed: self.totals.failed,
                    cancelled: self.totals.cancelled,
                }),
                // Jobs were checked to exist when the wait arrived.
                Some(jobs) => jobs
                    .iter()
                    .all(|j| table.get(j).is_none_or(JobEntry::is_done))
                    .then(|| {
                        let mut report = WaitReport::default();
                        for job in jobs {
                            let (count, failed, cancelled) = match table.get(job) {
                                Some(entry) => (entry.count, entry.failed, entry.cancelled),
                                None => table.final_counts(job).unwrap_or_default(),
                            };
                            report.failed += u64::from(failed);
                            report.cancelled += u64::from(cancelled);
                            report.succeeded += u64::from(count - failed - cancelled);
                        }
                        report
                    }),
            };
            match report {
                Some(report) => {
                    let waiter = self.waiters.swap_remove(index);
                    let _ = waiter.reply.send(Ok(report));
                }
                None => index += 1,
            }
        }
    }

    /// Whether the root should give the memory its queue held back to the system now:
    /// everything submitted (`tasks`) has ended after a large batch. The allocator
    /// keeps freed memory otherwise, and a pilot that queued a million tasks would
    /// hold their 150 MB for the rest of its life, though what it keeps of finished
    /// work is a few bytes a task.
    pub(super) fn release_memory_now(&mut self, tasks: u64) -> bool {
        let durable = self.totals.durable;
        if durable >= tasks && durable - self.released_at >= self.release_after {
            self.released_at = durable;
            return true;
        }
        false
    }

    /// Waits not answered yet.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Gives memory back after `results` more results instead (tests).
    #[cfg(test)]
    pub(super) fn release_after(&mut self, results: u64) {
        self.release_after = results;
    }
}
