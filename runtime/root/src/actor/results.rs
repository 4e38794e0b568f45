//! The root's book of attempts and results: what an accepted attempt left for its
//! task's record, why earlier attempts did not count, what this turn produced for the
//! journal, and, once durable, where each result is and who waits for it.

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::{AttemptOutcome, Disposition, NodeId, TaskId};
use saker_journal::Position;
use tokio::sync::mpsc;

use super::ctx::Ctx;
use super::jobs::JobEntry;
use super::journal::AfterJournal;
use super::rates::{MinuteRate, RateWindow};
use super::submissions::Submissions;
use crate::attempts::{AttemptEnd, AttemptNote};
use crate::client::{Reply, WaitReport};
use crate::records::Record;
use crate::results::{Failure, JobId, ResultRecord, TerminalState, Timestamp};

/// Results that must have ended since the last time before a pilot that has gone idle
/// gives its freed memory back: enough that a burst's queue was worth returning, few
/// enough that a pilot fed one task at a time never pays for it.
const RELEASE_AFTER_RESULTS: u64 = 10_000;

/// A task the core finished ([`saker_core::Event::TaskFinished`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct FinishedTask {
    pub task: TaskId,
    pub job: JobId,
    /// Its offset in its job (an array's index is looked up from it).
    pub offset: u32,
    pub state: TerminalState,
    pub attempts: u32,
}

impl FinishedTask {
    /// The task a core event says finished; any other event is given back.
    pub(super) fn from_event(event: saker_core::Event) -> Result<FinishedTask, saker_core::Event> {
        match event {
            saker_core::Event::TaskFinished {
                task,
                job,
                index,
                state,
                attempts,
            } => Ok(FinishedTask {
                task,
                job,
                offset: index,
                state,
                attempts,
            }),
            other => Err(other),
        }
    }
}

/// A `wait` request: answered once every task of `jobs` (of all jobs when `None`) has
/// a durable result.
#[derive(Debug)]
pub(crate) struct Waiter {
    pub jobs: Option<Vec<JobId>>,
    pub reply: Reply<WaitReport>,
}

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
    /// How it failed, when it did (see [`Failure`]).
    pub failure: Option<Failure>,
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
    /// Each task in motion: when it was last dispatched, and whether that attempt
    /// started. Removed when the task finishes, so it holds what is in flight.
    pub dispatched: HashMap<TaskId, Dispatched>,
}

/// A task's latest dispatch, in [`AttemptTable::dispatched`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Dispatched {
    /// When (unix µs): its result's `dispatch_time`.
    pub at_us: u64,
    /// The attempt its agent said started, and when (unix µs): the start time of a
    /// note for an attempt lost with its node.
    pub started: Option<(u64, u64)>,
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

impl Results {
    /// Hands an attempt's outcome to the core: an accepted one keeps `detail` for the
    /// task's record, one that does not count is noted in the task's history.
    pub(super) fn settle(
        &mut self,
        ctx: &mut Ctx,
        task: TaskId,
        attempt: saker_core::AttemptId,
        outcome: AttemptOutcome,
        detail: Detail,
        note: AttemptNote,
    ) {
        self.settle_with(
            ctx,
            task,
            attempt,
            outcome,
            || detail,
            |end| AttemptNote { end, ..note },
        );
    }

    pub(super) fn settle_with(
        &mut self,
        ctx: &mut Ctx,
        task: TaskId,
        attempt: saker_core::AttemptId,
        outcome: AttemptOutcome,
        detail: impl FnOnce() -> Detail,
        note: impl FnOnce(AttemptEnd) -> AttemptNote,
    ) {
        let now = ctx.now();
        let end = match ctx.core.handle_result(attempt, outcome, now) {
            Disposition::Accepted { state, .. } => {
                let mut detail = detail();
                if outcome == AttemptOutcome::Lost && state == TerminalState::Failed {
                    // Lost with no replay left: that loss failed the task.
                    let reason = detail.reason.take().unwrap_or_else(|| "lost".into());
                    detail.reason = Some(format!("{reason}; no replays left"));
                }
                self.attempts.details.insert(task, detail);
                return;
            }
            Disposition::WillRetry { .. } => AttemptEnd::Failed,
            Disposition::WillReplay { .. } => AttemptEnd::Lost,
            // One of two speculative copies ended; the other runs on.
            Disposition::Continues { .. } if outcome == AttemptOutcome::Failed => {
                AttemptEnd::Failed
            }
            Disposition::Continues { .. } => AttemptEnd::Lost,
            // Given back unstarted for a gang's reservation: as if never dispatched.
            Disposition::Returned { .. } | Disposition::Duplicate | Disposition::UnknownAttempt => {
                return;
            }
        };
        self.note_attempt(task, note(end));
    }

    /// Builds the result record of a task the core has just finished, with what its
    /// accepted attempt left (if one was).
    pub(super) fn finish_task(
        &mut self,
        ctx: &mut Ctx,
        submissions: &Submissions,
        finished: FinishedTask,
    ) {
        let FinishedTask {
            task,
            job,
            offset,
            state,
            attempts,
        } = finished;
        let detail = self.attempts.details.remove(&task);
        let Some(entry) = submissions.jobs.get(&job) else {
            return;
        };
        // Counted when durable (`Results::count_durable`), not here.
        let index = entry.array_index(offset);
        let submit_time = Timestamp::from_unix_micros(entry.submitted_us);
        let accepted = ctx.timestamp();
        let seq = self.log.next_seq;
        self.log.next_seq += 1;
        let history = self.attempts.history.remove(&task).unwrap_or_default();
        let dispatched = self.attempts.dispatched.remove(&task).map(|d| d.at_us);
        // The core counts attempts since this root started; the history survives a
        // resume, so it is the better count after one.
        let attempts = attempts.max(history.len() as u32 + u32::from(detail.is_some()));
        let mut record = ResultRecord {
            task,
            job,
            index,
            state,
            exit_code: None,
            signal: None,
            reason: None,
            failure: None,
            attempts,
            node: None,
            node_id: None,
            executor: None,
            submit_time,
            dispatch_time: dispatched.map(Timestamp::from_unix_micros),
            received_time: None,
            start_time: None,
            end_time: accepted,
            accept_time: Some(accepted),
            stdout: String::new(),
            stderr: String::new(),
            stdout_path: None,
            stderr_path: None,
            output: None,
            seq,
            history,
            gang: None,
        };
        match detail {
            Some(detail) => {
                record.node = Some(ctx.hostname_of(detail.node));
                record.node_id = Some(detail.node.0);
                record.executor = detail.executor;
                record.received_time = (detail.received_unix_us > 0)
                    .then(|| Timestamp::from_unix_micros(detail.received_unix_us));
                record.start_time = Some(Timestamp::from_unix_micros(detail.start_unix_us));
                record.end_time = Timestamp::from_unix_micros(detail.end_unix_us);
                record.exit_code = detail.exit_code;
                record.signal = detail.signal;
                record.reason = detail.reason;
                record.failure = detail.failure.filter(|_| state == TerminalState::Failed);
                record.stdout = detail.stdout;
                record.stderr = detail.stderr;
                record.stdout_path = detail.stdout_path;
                record.stderr_path = detail.stderr_path;
                record.output = detail.output;
                record.gang = detail.gang;
            }
            None if state == TerminalState::Cancelled => {
                record.reason = Some(match submissions.dependency_failed.get(&job) {
                    Some(dependency) => format!("dependency {dependency} failed"),
                    None => "cancelled before it started".into(),
                });
            }
            // Its last attempt was lost with its node and no replay was left: that
            // loss is the attempt that counted, not history.
            None => match record.history.pop() {
                Some(last) if last.end == AttemptEnd::Lost => {
                    record.reason = Some(format!("{}; no replays left", last.reason));
                    record.failure = Some(Failure::Lost);
                    record.node = last.node;
                    record.start_time = last.start_time;
                    record.end_time = last.end_time;
                }
                other => {
                    record.history.extend(other);
                    record.reason = Some("no attempt result".into());
                }
            },
        }
        self.unjournaled.results.push(Arc::new(record));
    }

    /// Keeps (and journals) why an attempt did not count.
    pub(super) fn note_attempt(&mut self, task: TaskId, note: AttemptNote) {
        self.unjournaled.records.push(Record::Attempt {
            task,
            note: note.clone(),
        });
        self.attempts.history.entry(task).or_default().push(note);
    }

    /// Journals this turn's accepted results as one group; they reach clients when the
    /// journal calls back.
    pub(super) fn journal(&mut self, ctx: &mut Ctx) {
        if self.unjournaled.results.is_empty() && self.unjournaled.records.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.unjournaled.results);
        let mut records = std::mem::take(&mut self.unjournaled.records);
        records.extend(results.iter().map(|r| Record::Result(Arc::clone(r))));
        ctx.append(records, AfterJournal::Results(results));
    }

    /// Results the journal made durable, at `positions`: indexed, counted, and passed
    /// to the streams that follow them. Not kept.
    pub(super) fn on_durable(
        &mut self,
        ctx: &mut Ctx,
        submissions: &mut Submissions,
        results: Vec<Arc<ResultRecord>>,
        positions: Vec<Position>,
    ) {
        let now = ctx.now();
        for (record, position) in results.into_iter().zip(positions) {
            self.count_durable(submissions, &record);
            self.log.index.insert(record.task, record.seq, position);
            self.log.submit_waiters.note(&record);
            self.log
                .followers
                .retain(|sink| sink.send(record.clone()).is_ok());
        }
        self.log.rate.record(now, self.log.index.len());
        self.log.minute.record(now, self.log.totals.durable);
        self.check_waiters(submissions);
        self.release_memory_if_idle(ctx, submissions);
    }

    /// Once everything submitted has ended after a large batch, gives the memory its
    /// queue held back to the system: the allocator keeps freed memory otherwise, and
    /// a pilot that queued a million tasks would hold their 150 MB for the rest of
    /// its life, though what it keeps of finished work is a few bytes a task.
    fn release_memory_if_idle(&mut self, ctx: &mut Ctx, submissions: &Submissions) {
        let totals = self.log.totals;
        if totals.durable >= submissions.tasks
            && totals.durable - self.log.released_at >= self.log.release_after
        {
            self.log.released_at = totals.durable;
            ctx.port.release_memory();
        }
    }

    pub(super) fn check_waiters(&mut self, submissions: &Submissions) {
        let mut index = 0;
        while index < self.log.waiters.len() {
            if self.log.waiters[index].reply.is_closed() {
                self.log.waiters.swap_remove(index);
                continue;
            }
            // A wait for everything is answered from running totals, so it costs
            // nothing per job however many jobs (task-file lines) the pilot holds.
            let report = match &self.log.waiters[index].jobs {
                None => (self.log.totals.durable >= submissions.tasks).then(|| WaitReport {
                    succeeded: self.log.totals.durable
                        - self.log.totals.failed
                        - self.log.totals.cancelled,
                    failed: self.log.totals.failed,
                    cancelled: self.log.totals.cancelled,
                }),
                // Jobs were checked to exist when the wait arrived.
                Some(jobs) => jobs
                    .iter()
                    .all(|j| submissions.jobs.get(j).is_none_or(JobEntry::is_done))
                    .then(|| {
                        let mut report = WaitReport::default();
                        for job in jobs {
                            let (count, failed, cancelled) = match submissions.jobs.get(job) {
                                Some(entry) => (entry.count, entry.failed, entry.cancelled),
                                None => submissions.jobs.final_counts(job).unwrap_or_default(),
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
                    let waiter = self.log.waiters.swap_remove(index);
                    let _ = waiter.reply.send(Ok(report));
                }
                None => index += 1,
            }
        }
    }

    /// Counts a durable result in its job and in the pilot's totals.
    pub(super) fn count_durable(&mut self, submissions: &mut Submissions, record: &ResultRecord) {
        self.count_durable_state(submissions, record.job, record.state);
        self.log.stages.record(record);
    }

    /// Counts a task of `job` that ended in `state` durably.
    pub(super) fn count_durable_state(
        &mut self,
        submissions: &mut Submissions,
        job: crate::results::JobId,
        state: crate::results::TerminalState,
    ) {
        let (failed, cancelled) = match state {
            crate::results::TerminalState::Succeeded => (0, 0),
            crate::results::TerminalState::Failed => (1, 0),
            crate::results::TerminalState::Cancelled => (0, 1),
        };
        if let Some(entry) = submissions.jobs.get_mut(&job) {
            entry.durable += 1;
            entry.failed += failed;
            entry.cancelled += cancelled;
            if entry.is_done() {
                submissions.jobs.finish(job);
            }
        }
        self.log.totals.durable += 1;
        self.log.totals.failed += u64::from(failed);
        self.log.totals.cancelled += u64::from(cancelled);
    }
}
