//! Submissions that wait for their own tasks (`submit` with `wait`): answered in the
//! turn their last result becomes durable, with the results in hand (they are not kept
//! in the root's memory otherwise, and reading them back from the journal would take a
//! thread and a file read).

use std::collections::HashMap;
use std::sync::Arc;

use crate::client::Reply;
use saker_client::results::{JobId, ResultRecord, TerminalState};
use saker_client::{SubmitReply, SubmitWait, SubmittedJob, WaitReport};

/// Every submission waiting for its tasks, by job.
#[derive(Debug, Default)]
pub(super) struct SubmitWaiters {
    next: u64,
    /// The waiter of each job of a waiting submission.
    by_job: HashMap<JobId, u64>,
    waiting: HashMap<u64, SubmitWaiter>,
}

#[derive(Debug)]
struct SubmitWaiter {
    reply: Reply<SubmitReply>,
    jobs: Vec<SubmittedJob>,
    /// Tasks without a durable result yet.
    remaining: u64,
    ended: WaitReport,
    /// Kept for `wait: "results"`.
    results: Option<Vec<Arc<ResultRecord>>>,
}

impl SubmitWaiters {
    /// `jobs` (just submitted, with no result yet) are answered on `reply` once every
    /// task of them has a durable result.
    pub(super) fn add(
        &mut self,
        jobs: Vec<SubmittedJob>,
        wait: SubmitWait,
        reply: Reply<SubmitReply>,
    ) {
        let remaining: u64 = jobs.iter().map(|job| job.count).sum();
        let results = (wait == SubmitWait::Results).then(|| Vec::with_capacity(remaining as usize));
        let waiter = SubmitWaiter {
            reply,
            jobs,
            remaining,
            ended: WaitReport::default(),
            results,
        };
        if remaining == 0 {
            return waiter.answer();
        }
        self.next += 1;
        for job in &waiter.jobs {
            self.by_job.insert(job.job, self.next);
        }
        self.waiting.insert(self.next, waiter);
    }

    /// `record` is durable: its submission is answered if it was the last it waited for.
    pub(super) fn note(&mut self, record: &Arc<ResultRecord>) {
        if self.by_job.is_empty() {
            return;
        }
        let Some(&id) = self.by_job.get(&record.job) else {
            return;
        };
        let Some(waiter) = self.waiting.get_mut(&id) else {
            return;
        };
        match record.state {
            TerminalState::Succeeded => waiter.ended.succeeded += 1,
            TerminalState::Failed => waiter.ended.failed += 1,
            TerminalState::Cancelled => waiter.ended.cancelled += 1,
        }
        if let Some(results) = &mut waiter.results {
            results.push(Arc::clone(record));
        }
        waiter.remaining = waiter.remaining.saturating_sub(1);
        if waiter.remaining == 0
            && let Some(waiter) = self.waiting.remove(&id)
        {
            for job in &waiter.jobs {
                self.by_job.remove(&job.job);
            }
            waiter.answer();
        }
    }

    /// Submissions still waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }
}

impl SubmitWaiter {
    fn answer(self) {
        // A client that went away has nobody to tell.
        let _ = self.reply.send(Ok(SubmitReply {
            jobs: self.jobs,
            ended: Some(self.ended),
            results: self.results,
        }));
    }
}
