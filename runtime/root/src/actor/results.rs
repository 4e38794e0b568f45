//! The root's book of attempts and results: what an accepted attempt left for its
//! task's record, why earlier attempts did not count, what this turn produced for the
//! journal, and, once durable, where each result is and who waits for it.

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::{NodeId, TaskId};
use tokio::sync::mpsc;

use super::clients::Waiter;
use super::rates::{MinuteRate, RateWindow};
use crate::attempts::AttemptNote;
use crate::records::Record;
use crate::results::ResultRecord;

/// Results that must have ended since the last time before a pilot that has gone idle
/// gives its freed memory back: enough that a burst's queue was worth returning, few
/// enough that a pilot fed one task at a time never pays for it.
const RELEASE_AFTER_RESULTS: u64 = 10_000;

/// Attempts in flight and results: settled, journaled, durable, waited for.
#[derive(Debug, Default)]
pub(super) struct Results {
    pub attempts: AttemptTable,
    pub unjournaled: Unjournaled,
    pub log: ResultLog,
}

/// Pilot-wide counts of durable results, kept as results arrive so that waits and
/// status cost nothing per job.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub tasks: u64,
    pub durable: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// What a result record keeps of an accepted attempt, read out of the agent's report
/// once and kept until the core reports the task finished.
#[derive(Debug)]
pub(super) struct Detail {
    pub node: NodeId,
    pub executor: Option<u32>,
    /// When the agent received the dispatch (0: not known).
    pub received_unix_us: u64,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_path: Option<String>,
    pub stderr_path: Option<String>,
    pub output: Option<Vec<u8>>,
    /// For an HPC job: its nodes and how each of its processes ended.
    pub gang: Option<crate::results::GangRecord>,
}

/// What attempts left behind that a task's result record will need.
#[derive(Debug, Default)]
pub(super) struct AttemptTable {
    /// The accepted attempt of each task the core has not finished yet.
    pub details: HashMap<TaskId, Detail>,
    /// Earlier attempts of tasks not yet finished.
    pub history: HashMap<TaskId, Vec<AttemptNote>>,
    /// When each task in motion was last dispatched (unix µs): its result's
    /// `dispatch_time`. Removed when the task finishes, so it holds what is in flight.
    pub dispatched: HashMap<TaskId, u64>,
}

/// What this turn produced for the journal; journaled together at the end of it.
#[derive(Debug, Default)]
pub(super) struct Unjournaled {
    pub results: Vec<Arc<ResultRecord>>,
    /// Records no one waits on: attempts that ended without counting, nodes that
    /// joined or left.
    pub records: Vec<Record>,
}

/// Durable results and everything that waits on them.
#[derive(Debug)]
pub(super) struct ResultLog {
    pub next_seq: u64,
    /// Where each durable result is in the journal (the results themselves are not
    /// kept: see `history.rs`).
    pub index: super::history::ResultIndex,
    /// Results dropped by compactions under the retention, and the highest `seq`
    /// among them (a stream from at or below it is told how many).
    pub compacted: u64,
    pub compacted_through: u64,
    /// Held by every read of results under way: segments a compaction superseded are
    /// deleted only once no read that may hold a position in them is left.
    pub readers: Arc<()>,
    pub totals: Totals,
    pub followers: Vec<mpsc::UnboundedSender<Arc<ResultRecord>>>,
    pub rate: RateWindow,
    pub minute: MinuteRate,
    pub stages: super::stages::Stages,
    pub waiters: Vec<Waiter>,
    /// Submissions answered once their own tasks have ended.
    pub submit_waiters: super::waiters::SubmitWaiters,
    /// `totals.durable` when the root last gave freed memory back, and how many more
    /// results must end in an idle pilot before it does so again (see
    /// [`Port::release_memory`]).
    pub released_at: u64,
    pub release_after: u64,
}

impl Default for ResultLog {
    fn default() -> Self {
        ResultLog {
            next_seq: 1,
            index: Default::default(),
            compacted: 0,
            compacted_through: 0,
            readers: Arc::new(()),
            totals: Totals::default(),
            followers: Vec::new(),
            rate: RateWindow::default(),
            minute: MinuteRate::default(),
            stages: Default::default(),
            waiters: Vec::new(),
            submit_waiters: Default::default(),
            released_at: 0,
            release_after: RELEASE_AFTER_RESULTS,
        }
    }
}
