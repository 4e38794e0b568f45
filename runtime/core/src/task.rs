//! Per-job and per-task bookkeeping.
//!
//! A job record exists for every submitted job and costs a fixed size plus one bit per
//! task (the finished bitset, released when the job finishes). A task record exists
//! only while the task is in flight, waiting for a retry, or queued again after an
//! attempt: a never-dispatched task and a finished task have none.

use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::{Counts, JobCounts, TerminalState};
use crate::stored::StoredSpec;
use crate::work::QueuedWork;

/// Which partition of [`Counts`] a task is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    Queued,
    Delayed,
    Assigned,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl From<TerminalState> for Bucket {
    fn from(state: TerminalState) -> Bucket {
        match state {
            TerminalState::Succeeded => Bucket::Succeeded,
            TerminalState::Failed => Bucket::Failed,
            TerminalState::Cancelled => Bucket::Cancelled,
        }
    }
}

pub(crate) fn count_mut(counts: &mut Counts, bucket: Bucket) -> &mut u64 {
    match bucket {
        Bucket::Queued => &mut counts.queued,
        Bucket::Delayed => &mut counts.delayed,
        Bucket::Assigned => &mut counts.assigned,
        Bucket::Running => &mut counts.running,
        Bucket::Succeeded => &mut counts.succeeded,
        Bucket::Failed => &mut counts.failed,
        Bucket::Cancelled => &mut counts.cancelled,
    }
}

fn job_count_mut(counts: &mut JobCounts, bucket: Bucket) -> &mut u32 {
    match bucket {
        Bucket::Queued => &mut counts.queued,
        Bucket::Delayed => &mut counts.delayed,
        Bucket::Assigned => &mut counts.assigned,
        Bucket::Running => &mut counts.running,
        Bucket::Succeeded => &mut counts.succeeded,
        Bucket::Failed => &mut counts.failed,
        Bucket::Cancelled => &mut counts.cancelled,
    }
}

/// Jobs of fewer tasks keep their finished bits inline (see `JobRecord::finished`).
const SMALL_LIMIT: u32 = 64;
/// Bit 63 of an inline bitset: the job was released.
const RELEASED: u64 = 1 << 63;

/// One submitted job.
#[derive(Debug)]
pub(crate) struct JobRecord {
    pub(crate) spec: StoredSpec,
    /// `spec.max_replays` resolved against the config at submission.
    pub(crate) max_replays: u32,
    pub(crate) first_task: TaskId,
    /// One bit per task, set when the task becomes terminal: the last line of defence
    /// for exactly-once acceptance. Emptied when the whole job is finished (the counts
    /// then say every bit would be set). A job of fewer than 64 tasks (most jobs: a
    /// task file is a job per line) keeps its bits in `small` and allocates nothing;
    /// its bit 63 says the job was released.
    finished: Box<[u64]>,
    small: u64,
    pub(crate) counts: JobCounts,
}

impl JobRecord {
    pub(crate) fn new(spec: StoredSpec, max_replays: u32, first_task: TaskId) -> JobRecord {
        let words = spec.count.div_ceil(64) as usize;
        JobRecord {
            spec,
            max_replays,
            first_task,
            finished: if spec.count >= SMALL_LIMIT {
                vec![0; words].into_boxed_slice()
            } else {
                Box::default()
            },
            small: 0,
            counts: JobCounts {
                count: spec.count,
                queued: spec.count,
                ..JobCounts::default()
            },
        }
    }

    pub(crate) fn task(&self, index: u32) -> TaskId {
        TaskId(self.first_task.0 + u64::from(index))
    }

    /// Moves `amount` tasks between partitions of this job's and the global counters,
    /// and into or out of the queued work.
    pub(crate) fn shift(
        &mut self,
        global: &mut Counts,
        work: &mut QueuedWork,
        from: Bucket,
        to: Bucket,
        amount: u32,
    ) {
        if from == Bucket::Queued {
            work.remove(&self.spec, amount);
        }
        if to == Bucket::Queued {
            work.add(&self.spec, amount);
        }
        *job_count_mut(&mut self.counts, from) -= amount;
        *job_count_mut(&mut self.counts, to) += amount;
        *count_mut(global, from) -= u64::from(amount);
        *count_mut(global, to) += u64::from(amount);
    }

    fn words(&self) -> &[u64] {
        if self.counts.count >= SMALL_LIMIT {
            &self.finished
        } else {
            std::slice::from_ref(&self.small)
        }
    }

    fn words_mut(&mut self) -> &mut [u64] {
        if self.counts.count >= SMALL_LIMIT {
            &mut self.finished
        } else {
            std::slice::from_mut(&mut self.small)
        }
    }

    pub(crate) fn is_finished_index(&self, index: u32) -> bool {
        if self.counts.is_finished() {
            return true;
        }
        let word = self.words()[(index / 64) as usize];
        word & (1 << (index % 64)) != 0
    }

    /// Marks one task finished; false if it already was (a bug upstream, refused).
    pub(crate) fn mark_finished(&mut self, index: u32) -> bool {
        if self.is_finished_index(index) {
            return false;
        }
        self.words_mut()[(index / 64) as usize] |= 1 << (index % 64);
        true
    }

    /// Marks `start..end` finished (all must be unfinished).
    pub(crate) fn mark_range_finished(&mut self, start: u32, end: u32) {
        let mut index = start;
        let words = self.words_mut();
        while index < end {
            let bit = index % 64;
            if bit == 0 && end - index >= 64 {
                words[(index / 64) as usize] = u64::MAX;
                index += 64;
            } else {
                words[(index / 64) as usize] |= 1 << bit;
                index += 1;
            }
        }
    }

    /// Releases the bitset once every task is terminal.
    pub(crate) fn release_if_finished(&mut self) -> bool {
        if !self.counts.is_finished() {
            return false;
        }
        if self.counts.count < SMALL_LIMIT {
            let released = self.small & RELEASED != 0;
            self.small |= RELEASED;
            return !released;
        }
        if !self.finished.is_empty() {
            self.finished = Box::default();
            return true;
        }
        false
    }

    /// Tasks marked finished (popcount of the bitset).
    pub(crate) fn finished_count(&self) -> u32 {
        if self.counts.is_finished() {
            return self.counts.count;
        }
        self.words().iter().map(|word| word.count_ones()).sum()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.finished.len() * size_of::<u64>()
    }
}

/// Where a task with a record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// In the ready queue's return lane.
    Queued,
    /// Waiting for its retry backoff.
    Delayed { not_before: Time },
    /// Dispatched. `attempt` is the original attempt (or the copy, once the original
    /// ended while its copy lived on); `started` once either live attempt's node said
    /// so (the task is then `Running`).
    InFlight {
        attempt: AttemptId,
        started: bool,
        copy: CopySlot,
    },
}

impl Phase {
    /// In flight under `attempt`, not started, no copy yet.
    pub(crate) fn dispatched(attempt: AttemptId) -> Phase {
        Phase::InFlight {
            attempt,
            started: false,
            copy: CopySlot::ABSENT,
        }
    }
}

/// A [`CopyState`] packed into one word, to keep task records small (an enum with a
/// payload would take two): a copy is an attempt this core issued, numbered from its
/// term's first id (at least 1) and never up to `u64::MAX`, so those two values are
/// free for the states without a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopySlot(u64);

impl CopySlot {
    pub(crate) const ABSENT: CopySlot = CopySlot(0);
    pub(crate) const SPENT: CopySlot = CopySlot(u64::MAX);

    pub(crate) fn live(copy: AttemptId) -> CopySlot {
        debug_assert!(copy.0 != 0 && copy.0 != u64::MAX);
        CopySlot(copy.0)
    }

    pub(crate) fn state(self) -> CopyState {
        match self {
            CopySlot::ABSENT => CopyState::Absent,
            CopySlot::SPENT => CopyState::Spent,
            CopySlot(copy) => CopyState::Live(AttemptId(copy)),
        }
    }
}

/// Whether an in-flight task has a speculative copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyState {
    /// No copy yet: the attempt may become a straggler and get one.
    Absent,
    /// This copy is live next to the task's attempt, on another node.
    Live(AttemptId),
    /// A copy was issued and one of the two attempts ended, or the straggler could
    /// never get one (deadline): no further copy until the task is dispatched again.
    Spent,
}

/// A task that has left the queue at least once and is not terminal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TaskRecord {
    pub(crate) job: JobId,
    pub(crate) index: u32,
    /// Attempts dispatched so far.
    pub(crate) attempts: u32,
    /// Own failures so far (retries taken = failures while not failed).
    pub(crate) failures: u32,
    /// Infrastructure losses so far.
    pub(crate) replays: u32,
    pub(crate) phase: Phase,
}

/// A live attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttemptRecord {
    pub(crate) task: TaskId,
    pub(crate) node: NodeId,
    /// Whether its node reported it started, and when (the start of its run time).
    /// Two fields rather than an `Option<Time>`: the flag fits in padding, the option
    /// would not, and there is one record per attempt in flight.
    started: bool,
    started_at: Time,
    /// The time limit it runs under, [`NO_LIMIT`] for none: its job's when it was
    /// dispatched, or when the job's limit changed before it started. A started
    /// attempt keeps the limit its node enforces, whatever the job's says later.
    limit: u64,
}

/// [`AttemptRecord::limit`] of an attempt without one (an `Option` would add 8 bytes).
const NO_LIMIT: u64 = u64::MAX;

impl AttemptRecord {
    /// A fresh attempt of `task` on `node` under `limit`, not started.
    pub(crate) fn new(task: TaskId, node: NodeId, limit: Option<u64>) -> AttemptRecord {
        AttemptRecord {
            task,
            node,
            started: false,
            started_at: Time::ZERO,
            limit: limit.unwrap_or(NO_LIMIT),
        }
    }

    /// The time limit it runs under.
    pub(crate) fn limit(&self) -> Option<u64> {
        (self.limit != NO_LIMIT).then_some(self.limit)
    }

    /// Its job's limit changed before it started: it will run under `limit`.
    pub(crate) fn set_limit(&mut self, limit: Option<u64>) {
        self.limit = limit.unwrap_or(NO_LIMIT);
    }

    /// When its node reported it started, if it did.
    pub(crate) fn started(&self) -> Option<Time> {
        self.started.then_some(self.started_at)
    }

    /// Records the start at `now`.
    pub(crate) fn start(&mut self, now: Time) {
        self.started = true;
        self.started_at = now;
    }
}
