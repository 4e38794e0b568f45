//! The root's book of attempts and results: what an accepted attempt left for its
//! task's record, why earlier attempts did not count, what this turn produced for the
//! journal, and, once durable, where each result is and who follows them.
//!
//! How far each job has come (its durable results by state) is its submission's
//! ([`super::submissions`]); the router hands each durable result to both.

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::{AttemptOutcome, Disposition, NodeId, TaskId};
use saker_journal::Position;
use tokio::sync::mpsc;

use super::ctx::Ctx;
use super::journal::AfterJournal;
use crate::client::{Reply, ResultSink};
use crate::compact::CompactionDone;
use crate::records::Record;
use index::ResultIndex;
use rates::{MinuteRate, RateWindow};
use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::{Failure, JobId, ResultRecord, TerminalState, Timestamp};
use saker_client::{ErrorKind, RequestError, StageSummary, SubmitReply, SubmitWait, SubmittedJob};

mod index;
mod journaled;
mod rates;
mod resume;
mod stages;
mod streams;
mod waiters;

pub(crate) use journaled::Journaled;

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

/// What a finished task's record takes from its job.
#[derive(Debug, Clone, Copy)]
pub(super) struct JobFacts {
    /// Its array index, for a task of an array.
    pub index: Option<u32>,
    pub submitted_us: u64,
    /// The job it needed to succeed and that did not, if it was cancelled for that.
    pub dependency_failed: Option<JobId>,
}

/// Attempts in flight and results: settled, journaled, durable, followed.
#[derive(Debug, Default)]
pub(super) struct Results {
    attempts: AttemptTable,
    unjournaled: Unjournaled,
    log: ResultLog,
}

/// What a result record keeps of an accepted attempt, read out of the agent's report
/// once and kept until the core reports the task finished.
#[derive(Debug)]
pub(super) struct Detail {
    pub node: NodeId,
    /// Its host name, as the record shows it.
    pub host: String,
    pub executor: Option<u32>,
    /// When the agent received the dispatch (0: not known).
    pub received_unix_us: u64,
    /// How long it waited for data items on its node (µs; 0: none).
    pub fetch_us: u64,
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
    pub gang: Option<saker_client::results::GangRecord>,
}

/// What attempts left behind that a task's result record will need.
#[derive(Debug, Default)]
struct AttemptTable {
    /// The accepted attempt of each task the core has not finished yet.
    details: HashMap<TaskId, Detail>,
    /// Earlier attempts of tasks not yet finished.
    history: HashMap<TaskId, Vec<AttemptNote>>,
    /// Each task in motion: when it was last dispatched, and whether that attempt
    /// started. Removed when the task finishes, so it holds what is in flight.
    dispatched: HashMap<TaskId, Dispatched>,
}

/// A task's latest dispatch, in [`AttemptTable::dispatched`].
#[derive(Debug, Clone, Copy)]
struct Dispatched {
    /// When (unix µs): its result's `dispatch_time`.
    at_us: u64,
    /// The attempt its agent said started, and when (unix µs): the start time of a
    /// note for an attempt lost with its node.
    started: Option<(u64, u64)>,
}

/// What this turn produced for the journal; journaled together at the end of it.
#[derive(Debug, Default)]
struct Unjournaled {
    results: Vec<Arc<ResultRecord>>,
    /// Records no one waits on: attempts that ended without counting, nodes that
    /// joined or left.
    records: Vec<Record>,
    /// Per node, its last report read: once the next append is durable, so are its
    /// results (appends are durable in order), and the node is told so.
    reports: std::collections::BTreeMap<saker_core::NodeId, u64>,
}

/// Durable results and everything that follows them.
#[derive(Debug)]
struct ResultLog {
    next_seq: u64,
    /// Where each durable result is in the journal (the results themselves are not
    /// kept: see `index.rs`).
    index: ResultIndex,
    /// Results dropped by compactions under the retention, and the highest `seq`
    /// among them (a stream from at or below it is told how many).
    compacted: u64,
    compacted_through: u64,
    /// Held by every read of results under way: segments a compaction superseded are
    /// deleted only once no read that may hold a position in them is left.
    readers: Arc<()>,
    followers: Vec<mpsc::UnboundedSender<Arc<ResultRecord>>>,
    rate: RateWindow,
    minute: MinuteRate,
    stages: stages::Stages,
    /// Submissions answered once their own tasks have ended.
    submit_waiters: waiters::SubmitWaiters,
}

impl Default for ResultLog {
    fn default() -> Self {
        ResultLog {
            next_seq: 1,
            index: Default::default(),
            compacted: 0,
            compacted_through: 0,
            readers: Arc::new(()),
            followers: Vec::new(),
            rate: RateWindow::default(),
            minute: MinuteRate::default(),
            stages: Default::default(),
            submit_waiters: Default::default(),
        }
    }
}

impl Results {
    /// `task` was dispatched at `at_us` (unix µs): its result's `dispatch_time`.
    pub(super) fn dispatched(&mut self, task: TaskId, at_us: u64) {
        let dispatched = Dispatched {
            at_us,
            started: None,
        };
        self.attempts.dispatched.insert(task, dispatched);
    }

    /// Its agent says `attempt` of `task` started at `at_us` (unix µs). Noted in
    /// place: no map grows per task for it.
    pub(super) fn started(&mut self, task: TaskId, attempt: saker_core::AttemptId, at_us: u64) {
        if let Some(dispatched) = self.attempts.dispatched.get_mut(&task) {
            dispatched.started = Some((attempt.0, at_us));
        }
    }

    /// `record` goes to the journal with this turn's results; nothing waits on it.
    pub(super) fn journal_later(&mut self, record: Record) {
        self.unjournaled.records.push(record);
    }

    /// `lost` (task, attempt) ran on `node` (`host`), lost at `end_time` for `why`:
    /// each is noted in its task's history, started when its agent said it did.
    pub(super) fn lost_with_node(
        &mut self,
        lost: Vec<(TaskId, saker_core::AttemptId)>,
        host: &str,
        why: &str,
        end_time: Timestamp,
    ) {
        for (task, attempt) in lost {
            let start_time = self
                .attempts
                .dispatched
                .get(&task)
                .and_then(|dispatched| dispatched.started)
                .filter(|(started, _)| *started == attempt.0)
                .map(|(_, at)| Timestamp::from_unix_micros(at));
            self.note_attempt(
                task,
                AttemptNote {
                    attempt: attempt.0,
                    end: AttemptEnd::Lost,
                    reason: why.to_owned(),
                    exit_code: None,
                    signal: None,
                    node: Some(host.to_owned()),
                    start_time,
                    end_time,
                },
            );
        }
    }

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
    pub(super) fn finish_task(&mut self, ctx: &mut Ctx, finished: FinishedTask, job: JobFacts) {
        let FinishedTask {
            task,
            job: job_id,
            offset: _,
            state,
            attempts,
        } = finished;
        let detail = self.attempts.details.remove(&task);
        // Counted when durable (by its submission), not here.
        let index = job.index;
        let submit_time = Timestamp::from_unix_micros(job.submitted_us);
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
            job: job_id,
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
            fetch_us: None,
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
                record.node = Some(detail.host);
                record.node_id = Some(detail.node.0);
                record.executor = detail.executor;
                record.received_time = (detail.received_unix_us > 0)
                    .then(|| Timestamp::from_unix_micros(detail.received_unix_us));
                record.fetch_us = (detail.fetch_us > 0).then_some(detail.fetch_us);
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
                record.reason = Some(match job.dependency_failed {
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
        // Reports whose results were not journaled (duplicates, say) wait for the
        // next append: what was read before it is durable only with it.
        if self.unjournaled.results.is_empty() && self.unjournaled.records.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.unjournaled.results);
        let mut records = std::mem::take(&mut self.unjournaled.records);
        records.extend(results.iter().map(|r| Record::Result(Arc::clone(r))));
        let reports = std::mem::take(&mut self.unjournaled.reports);
        ctx.append(
            records,
            AfterJournal::Results(results, reports.into_iter().collect()),
        );
    }

    /// `node`'s report `seq` was read: its results go to the journal with this turn's.
    pub(super) fn report_read(&mut self, node: saker_core::NodeId, seq: u64) {
        if seq > 0 {
            self.unjournaled.reports.insert(node, seq);
        }
    }

    /// Results the journal made durable, at `positions`: indexed, their stages
    /// timed, and passed to the streams that follow them. Not kept.
    pub(super) fn on_durable(
        &mut self,
        ctx: &mut Ctx,
        results: &[Arc<ResultRecord>],
        positions: Vec<Position>,
    ) {
        let now = ctx.now();
        for (record, position) in results.iter().zip(positions) {
            self.log.stages.record(record);
            self.log.index.insert(record.task, record.seq, position);
            self.log.submit_waiters.note(record);
            self.log
                .followers
                .retain(|sink| sink.send(record.clone()).is_ok());
        }
        let indexed = self.log.index.len();
        self.log.rate.record(now, indexed);
        self.log.minute.record(now, indexed);
    }
}

impl Results {
    /// A results stream: the durable results from `from` on (read from the journal on
    /// a thread of its own), then, with `follow`, each new one as it becomes durable.
    pub(super) fn on_results(&mut self, ctx: &Ctx, from: u64, follow: bool, sink: ResultSink) {
        let from = from.max(1);
        let last = self.log.index.last_seq();
        let start = (from <= last)
            .then(|| self.log.index.start_for(from))
            .flatten();
        // Registered now: a result made durable from here on is live, not history.
        let live = follow.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.log.followers.push(tx);
            rx
        });
        let history = start.map(|start| streams::History {
            source: ctx.journal.results(),
            start,
            from,
            last,
            reading: Arc::clone(&self.log.readers),
        });
        let compacted = if from <= self.log.compacted_through {
            self.log.compacted
        } else {
            0
        };
        tokio::spawn(streams::feed_results(
            history,
            live,
            last + 1,
            compacted,
            sink,
        ));
    }

    /// One task's result, read from the journal on a thread of its own.
    pub(super) fn on_result(
        &mut self,
        ctx: &Ctx,
        keep: &crate::compact::KeepResults,
        task: TaskId,
        reply: Reply<Arc<ResultRecord>>,
    ) {
        let Some(position) = self.log.index.find(task) else {
            if self.log.index.is_compacted(task) {
                let message = format!(
                    "task {task}'s result was compacted away (--keep-results {})",
                    keep
                );
                let _ = reply.send(Err(RequestError::new(ErrorKind::Compacted, message)));
                return;
            }
            let message = format!("task {task} has no result (unknown, or not finished)");
            let _ = reply.send(Err(RequestError::new(ErrorKind::NoResult, message)));
            return;
        };
        let source = ctx.journal.results();
        let reading = Arc::clone(&self.log.readers);
        tokio::task::spawn_blocking(move || {
            let _reading = reading;
            let answer = source.read(position).map_err(|error| {
                let error = saker_actors::error_chain(&error);
                RequestError::new(
                    ErrorKind::Internal,
                    format!("reading task {task}'s result: {error}"),
                )
            });
            let _ = reply.send(answer);
        });
    }
}

impl Results {
    /// `jobs`, just submitted, are answered on `reply` once every task of them has a
    /// durable result (`wait`: with the results, or their counts).
    pub(super) fn wait_for_submitted(
        &mut self,
        jobs: Vec<SubmittedJob>,
        wait: SubmitWait,
        reply: Reply<SubmitReply>,
    ) {
        self.log.submit_waiters.add(jobs, wait, reply);
    }

    /// The results this turn produced, not journaled yet.
    #[cfg(test)]
    pub(crate) fn unjournaled_results(&self) -> &[Arc<ResultRecord>] {
        &self.unjournaled.results
    }

    /// Submissions waiting for their tasks' results.
    #[cfg(test)]
    pub(crate) fn submissions_waiting(&self) -> usize {
        self.log.submit_waiters.len()
    }

    /// Ends every stream that follows new results (with `end`: the pilot stops).
    pub(super) fn end_streams(&mut self) {
        self.log.followers.clear();
    }

    /// Results per second over the last few seconds and over the last minute.
    pub(super) fn rates(&self, ctx: &Ctx) -> (f64, f64) {
        let now = ctx.now();
        let indexed = self.log.index.len();
        (
            self.log.rate.rate(now, indexed),
            self.log.minute.rate(now, indexed),
        )
    }

    /// The longest run of an attempt so far (µs), if any ran.
    pub(super) fn longest_run_micros(&self) -> Option<u64> {
        self.log.stages.longest_run_micros()
    }

    /// Per-stage percentiles of the results so far.
    pub(super) fn stages(&self) -> Vec<StageSummary> {
        self.log.stages.summaries()
    }

    /// A compaction ended: the index follows the kept results to the base segment,
    /// and learns which were dropped. The readers of the superseded segments, which
    /// are deleted once every one of them is gone.
    pub(super) fn compacted(&mut self, done: &CompactionDone) -> Arc<()> {
        let log = &mut self.log;
        log.index
            .apply_compaction(done.base, &done.kept, &done.dropped);
        log.compacted = done.compacted_total;
        log.compacted_through = done.compacted_through;
        std::mem::replace(&mut log.readers, Arc::new(()))
    }
}

#[cfg(test)]
mod tests;
