//! Journal compaction, the pure part: which records of a history a resume still needs,
//! and which results the user's retention (`--keep-results`) keeps.
//!
//! [`compact`] folds a journal's records (a previous base included) into the records of
//! a new base segment. It keeps every submission (a resume replays them to give every
//! job and task its id again, and the core keeps a record per job anyway), those of done
//! jobs stripped of their command, environment and payload, the
//! cancellations, updates and attempt notes of jobs not yet done, the latest occurrence
//! of each schedule, live actors, data items (but those freed that no job not yet done
//! reads), and the results the retention keeps (always those of jobs not yet done). Every done job gets one `finished` record, one
//! letter a task, so a resume knows its tasks are terminal even when their results were
//! dropped: they are never run again. The file work is `saker_journal`'s (`compact.rs`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::records::Record;
use saker_client::results::{JobId, TaskId, TerminalState};
use saker_client::spec::{ArraySpec, JobRequest};

mod run;

pub use run::{CompactionDone, CompactionError, run_compaction};

/// Which results of done jobs a compaction keeps (`--keep-results`). Results of jobs
/// with a task not yet finished are always kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeepResults {
    /// Every result (the default): compaction only drops what resume does not need.
    #[default]
    All,
    /// The last `n` results by sequence number (`0`, or `none`: no result of a done job).
    Last(u64),
    /// Results of tasks that ended within this long before the compaction.
    Within(Duration),
}

/// `--keep-results` that is not `all`, `none`, a count or a duration.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{given}` is not a retention: expected `all`, `none`, a number of results (1000000) or a duration (90s, 30m, 12h, 7d)"
)]
pub struct KeepResultsError {
    given: String,
}

impl FromStr for KeepResults {
    type Err = KeepResultsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || KeepResultsError {
            given: text.to_owned(),
        };
        let text = text.trim();
        match text {
            "all" => return Ok(KeepResults::All),
            "none" => return Ok(KeepResults::Last(0)),
            _ => {}
        }
        if let Ok(count) = text.parse::<u64>() {
            return Ok(KeepResults::Last(count));
        }
        let split = text
            .find(|character: char| !character.is_ascii_digit())
            .ok_or_else(error)?;
        let (number, unit) = text.split_at(split);
        let number: u64 = number.parse().map_err(|_| error())?;
        let seconds = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(error()),
        };
        number
            .checked_mul(seconds)
            .map(|seconds| KeepResults::Within(Duration::from_secs(seconds)))
            .ok_or_else(error)
    }
}

impl fmt::Display for KeepResults {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepResults::All => formatter.write_str("all"),
            KeepResults::Last(0) => formatter.write_str("none"),
            KeepResults::Last(count) => write!(formatter, "{count}"),
            KeepResults::Within(duration) => {
                let seconds = duration.as_secs();
                match seconds {
                    s if s % 86_400 == 0 && s > 0 => write!(formatter, "{}d", s / 86_400),
                    s if s % 3600 == 0 && s > 0 => write!(formatter, "{}h", s / 3600),
                    s if s % 60 == 0 && s > 0 => write!(formatter, "{}m", s / 60),
                    s => write!(formatter, "{s}s"),
                }
            }
        }
    }
}

/// A compaction's output.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacted {
    /// The records of the base segment, a `compaction` record first.
    pub records: Vec<Record>,
    /// The results dropped by this compaction: task and sequence number.
    pub dropped: Vec<(TaskId, u64)>,
    /// Results dropped by every compaction so far, this one included.
    pub compacted_total: u64,
    /// The highest sequence number of a result dropped so far (0: none).
    pub compacted_through: u64,
}

/// One letter a task in a `finished` record.
pub fn state_letter(state: TerminalState) -> char {
    match state {
        TerminalState::Succeeded => 's',
        TerminalState::Failed => 'f',
        TerminalState::Cancelled => 'c',
    }
}

/// The state a `finished` record's letter stands for.
pub fn letter_state(letter: char) -> Option<TerminalState> {
    match letter {
        's' => Some(TerminalState::Succeeded),
        'f' => Some(TerminalState::Failed),
        'c' => Some(TerminalState::Cancelled),
        _ => None,
    }
}

struct Job {
    first_task: TaskId,
    count: u64,
    /// Terminal state by offset, as far as known.
    states: Vec<Option<TerminalState>>,
    finished: u64,
}

impl Job {
    fn finish(&mut self, task: TaskId, state: TerminalState) {
        let Some(slot) = task
            .0
            .checked_sub(self.first_task.0)
            .and_then(|offset| self.states.get_mut(offset as usize))
        else {
            return;
        };
        if slot.is_none() {
            *slot = Some(state);
            self.finished += 1;
        }
    }

    fn done(&self) -> bool {
        self.finished == self.count
    }
}

/// Folds `records` (a whole journal, from its last base on) into the records of a base
/// segment under `keep`, at wall-clock time `now_unix_us`. See the module doc.
pub fn compact(records: Vec<Record>, keep: &KeepResults, now_unix_us: u64) -> Compacted {
    let mut jobs: HashMap<JobId, Job> = HashMap::new();
    let mut job_of_task: Vec<(TaskId, JobId)> = Vec::new();
    let mut finished_tasks: HashSet<TaskId> = HashSet::new();
    let mut ended_actors = HashSet::new();
    let mut last_occurrence: HashMap<JobId, usize> = HashMap::new();
    let (mut compacted_total, mut compacted_through, mut next_seq) = (0, 0, 1);
    for (at, record) in records.iter().enumerate() {
        for (job, first_task, count) in record.submitted_jobs() {
            jobs.insert(
                job,
                Job {
                    first_task,
                    count: u64::from(count),
                    states: vec![None; count as usize],
                    finished: 0,
                },
            );
            job_of_task.push((first_task, job));
        }
        match record {
            Record::Compaction {
                next_seq: seq,
                compacted,
                compacted_through: through,
                ..
            } => {
                next_seq = next_seq.max(*seq);
                compacted_total = *compacted;
                compacted_through = *through;
            }
            Record::ActorEnded { actor, .. } => {
                ended_actors.insert(*actor);
            }
            Record::Occurrence { schedule, .. } => {
                last_occurrence.insert(*schedule, at);
            }
            _ => {}
        }
    }
    // Second pass, once every submission is known: what finished.
    for record in &records {
        match record {
            Record::Result(result) => {
                next_seq = next_seq.max(result.seq + 1);
                finished_tasks.insert(result.task);
                if let Some(job) = jobs.get_mut(&result.job) {
                    job.finish(result.task, result.state);
                }
            }
            Record::Finished { job, states } => {
                if let Some(entry) = jobs.get_mut(job) {
                    for (offset, letter) in states.chars().enumerate() {
                        if let Some(state) = letter_state(letter) {
                            let task = TaskId(entry.first_task.0 + offset as u64);
                            entry.finish(task, state);
                            finished_tasks.insert(task);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    job_of_task.sort_unstable();
    let job_done = |job: &JobId| jobs.get(job).is_some_and(Job::done);
    // Freed items no job not done reads are gone: their records go with them.
    let mut gone: HashSet<String> = records
        .iter()
        .filter_map(|record| match record {
            Record::ItemsFreed { items, .. } => Some(items.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    for record in &records {
        if let Record::Submit { job, request, .. } = record
            && !job_done(job)
        {
            for item in &request.spec.reads {
                gone.remove(item);
            }
        }
    }
    let task_job = |task: TaskId| {
        let at = job_of_task.partition_point(|&(first, _)| first <= task);
        at.checked_sub(1).map(|at| job_of_task[at].1)
    };
    let max_seq = next_seq.saturating_sub(1);
    let keeps = |result: &saker_client::results::ResultRecord| match keep {
        KeepResults::All => true,
        KeepResults::Last(count) => result.seq.saturating_add(*count) > max_seq,
        KeepResults::Within(duration) => {
            let age = duration.as_micros().min(u128::from(u64::MAX)) as u64;
            result.end_time.unix_micros().saturating_add(age) >= now_unix_us
        }
    };

    let mut kept = Vec::new();
    let mut results = Vec::new();
    let mut dropped = Vec::new();
    let mut seen_items = HashSet::new();
    let mut seen_results = HashSet::new();
    for (at, mut record) in records.into_iter().enumerate() {
        if let Record::Submit { job, request, .. } = &mut record
            && job_done(job)
        {
            strip(request);
        }
        if let Record::ItemsFreed { items, .. } = &mut record {
            items.retain(|item| !gone.contains(item));
        }
        let keep_it = match &record {
            // A batch of lines is kept whole: its commands are a few bytes a job.
            Record::PilotStarted { .. }
            | Record::Submit { .. }
            | Record::SubmitLines { .. }
            | Record::ActorEnded { .. }
            | Record::NodeJoined { .. }
            | Record::NodeLeft { .. }
            | Record::Reconciled { .. }
            | Record::Allocation { .. } => true,
            Record::Compaction { .. } | Record::Finished { .. } => false,
            Record::Cancel { job, .. } | Record::Update { job, .. } => !job_done(job),
            Record::Attempt { task, .. } => {
                !finished_tasks.contains(task) && !task_job(*task).is_some_and(|j| job_done(&j))
            }
            Record::ActorSpawned { actor, .. } => !ended_actors.contains(actor),
            Record::Occurrence { schedule, .. } => last_occurrence.get(schedule) == Some(&at),
            Record::Item { item, node, bytes } => {
                !gone.contains(item) && seen_items.insert((item.clone(), *node, *bytes))
            }
            Record::ItemsFreed { items, .. } => !items.is_empty(),
            Record::Recompute { job, .. } => !job_done(job),
            Record::Result(result) => {
                // First accepted result wins, as on resume.
                if seen_results.insert(result.task) {
                    if !job_done(&result.job) || keeps(result) {
                        results.push(Record::Result(result.clone()));
                    } else {
                        dropped.push((result.task, result.seq));
                    }
                }
                false
            }
        };
        if keep_it {
            kept.push(record);
        }
    }
    let mut done: Vec<(&JobId, &Job)> = jobs.iter().filter(|(_, job)| job.done()).collect();
    done.sort_unstable_by_key(|(job, _)| **job);
    for (job, entry) in done {
        let states = entry
            .states
            .iter()
            .map(|state| state.map_or('?', state_letter))
            .collect();
        kept.push(Record::Finished { job: *job, states });
    }
    results.sort_by_key(|record| match record {
        Record::Result(result) => result.seq,
        _ => 0,
    });
    compacted_total += dropped.len() as u64;
    compacted_through = dropped
        .iter()
        .map(|&(_, seq)| seq)
        .fold(compacted_through, u64::max);
    let mut output = Vec::with_capacity(1 + kept.len() + results.len());
    output.push(Record::Compaction {
        next_seq,
        compacted: compacted_total,
        compacted_through,
        keep: keep.to_string(),
        unix_us: now_unix_us,
    });
    output.extend(kept);
    output.extend(results);
    Compacted {
        records: output,
        dropped,
        compacted_total,
        compacted_through,
    }
}

/// What a stripped submission runs: nothing, ever (its tasks are all finished).
pub const COMPACTED_COMMAND: &str = "(compacted)";

/// Shrinks a done job's request to what a resume uses of it: the task count and the
/// shape the core is given. The command, environment, function payload and array
/// indices were for running its tasks, which will not happen again. A schedule's first
/// job is left whole: its later occurrences are made from it.
fn strip(request: &mut JobRequest) {
    let spec = &mut request.spec;
    // A schedule's next occurrence runs it; a job whose items may be made again runs
    // it again when they are lost.
    if spec.every.is_some() || spec.may_remake_items() {
        return;
    }
    match &mut spec.function {
        Some(function) => function.payload.clear(),
        None => {
            spec.argv = vec![COMPACTED_COMMAND.to_owned()];
            spec.shell = false;
        }
    }
    spec.env.clear();
    if let Some(array) = &request.array
        && array.count() > 1
        && let Ok(indices) = format!("0-{}", array.count() - 1).parse::<ArraySpec>()
    {
        request.array = Some(indices);
    }
}

#[cfg(test)]
mod tests;
