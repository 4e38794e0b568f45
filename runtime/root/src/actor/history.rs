//! Results once durable: kept in the journal, not in the root's memory. The root keeps
//! an index of where each result is ([`ResultIndex`]: 8 bytes a task) and reads them
//! back through a [`ResultSource`] (the journal in a pilot, memory in unit tests),
//! on threads of their own, never on the root's.
//!
//! Results are journaled in the order they are numbered (`seq`), one group after the
//! other, so the results from some `seq` on are the journal's result records from the
//! position of that one on. The index keeps one position every [`MARK_EVERY`] results
//! to start such a read near its first result.

use std::path::PathBuf;
use std::sync::Arc;

use saker_journal::{JournalReader, Position};
use tokio::sync::mpsc;

use super::ctx::Ctx;
use super::results::Results;
use crate::client::{ErrorKind, Reply, RequestError, ResultSink, ResultsItem, StreamEnd};
use crate::records::Record;
use crate::results::{ResultRecord, TaskId};

/// Results between two of the index's marks.
const MARK_EVERY: u64 = 1024;
/// Task slots the index grows by.
const GROWTH: usize = 65_536;
/// A task's slot when its result was dropped by a compaction. Never a real position:
/// segment numbers start at 1, so a packed position is at least 2^40.
const COMPACTED: u64 = 1;

/// Where durable results are read back from.
pub trait ResultSource: std::fmt::Debug + Send + Sync + 'static {
    /// The result at `position`.
    fn read(&self, position: Position) -> Result<Arc<ResultRecord>, String>;

    /// The results from `position` on, in journal order, each given to `visit` until
    /// it returns false.
    fn read_from(
        &self,
        position: Position,
        visit: &mut dyn FnMut(Arc<ResultRecord>) -> bool,
    ) -> Result<(), String>;
}

/// A pilot's results: its journal.
#[derive(Debug)]
pub struct JournalResults {
    pub directory: PathBuf,
}

impl ResultSource for JournalResults {
    fn read(&self, position: Position) -> Result<Arc<ResultRecord>, String> {
        match saker_journal::read_at::<Record>(&self.directory, position) {
            Ok(Record::Result(record)) => Ok(record),
            Ok(_) => Err(format!("the journal holds no result at {position}")),
            Err(error) => Err(saker_actors::error_chain(&error)),
        }
    }

    fn read_from(
        &self,
        position: Position,
        visit: &mut dyn FnMut(Arc<ResultRecord>) -> bool,
    ) -> Result<(), String> {
        let reader = JournalReader::<Record>::open_at(&self.directory, position)
            .map_err(|error| saker_actors::error_chain(&error))?;
        for record in reader {
            match record {
                Ok(Record::Result(result)) => {
                    if !visit(result) {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(error) => return Err(saker_actors::error_chain(&error)),
            }
        }
        Ok(())
    }
}

/// Where each durable result is. See the module doc.
#[derive(Debug, Default)]
pub(super) struct ResultIndex {
    /// Packed position of each task's result by task id (index `id - 1`); 0: none.
    by_task: Vec<u64>,
    /// (seq, position) of every [`MARK_EVERY`]th result, and of the first.
    marks: Vec<(u64, Position)>,
    /// Results indexed.
    count: u64,
    /// The highest `seq` indexed.
    last_seq: u64,
}

impl ResultIndex {
    /// Result `seq` of `task` is at `position`. Results come in `seq` order.
    pub(super) fn insert(&mut self, task: TaskId, seq: u64, position: Position) {
        // Grown a chunk at a time, not doubled (`set`): 8 bytes a finished task, and
        // at most a chunk (512 KiB) spare.
        if let Some(packed) = position.pack() {
            self.set(task, packed);
        }
        if self.count.is_multiple_of(MARK_EVERY) {
            self.marks.push((seq, position));
        }
        self.count += 1;
        self.last_seq = self.last_seq.max(seq);
    }

    /// Where `task`'s result is, if it has one.
    pub(super) fn find(&self, task: TaskId) -> Option<Position> {
        let packed = self.slot(task)?;
        (packed != 0 && packed != COMPACTED).then(|| Position::unpack(packed))
    }

    /// Whether `task` had a result that a compaction dropped.
    pub(super) fn is_compacted(&self, task: TaskId) -> bool {
        self.slot(task) == Some(COMPACTED)
    }

    fn slot(&self, task: TaskId) -> Option<u64> {
        let slot = (task.0 as usize).checked_sub(1)?;
        self.by_task.get(slot).copied()
    }

    fn set(&mut self, task: TaskId, packed: u64) {
        let Some(slot) = (task.0 as usize).checked_sub(1) else {
            return;
        };
        if slot >= self.by_task.len() {
            let len = (slot + 1).next_multiple_of(GROWTH);
            self.by_task.reserve_exact(len - self.by_task.len());
            self.by_task.resize(len, 0);
        }
        self.by_task[slot] = packed;
    }

    /// `task`'s result was dropped by a compaction (found on resume).
    pub(super) fn mark_compacted(&mut self, task: TaskId) {
        self.set(task, COMPACTED);
    }

    /// A compaction wrote base segment `base`: the results it kept are now at the
    /// positions given (in `seq` order), those it dropped are gone. Results after the
    /// seal (in segments above `base`) keep their positions and marks.
    pub(super) fn apply_compaction(
        &mut self,
        base: saker_journal::SegmentNumber,
        kept: &[(TaskId, u64, Position)],
        dropped: &[(TaskId, u64)],
    ) {
        for &(task, _) in dropped {
            self.set(task, COMPACTED);
        }
        let mut marks: Vec<(u64, Position)> = kept
            .iter()
            .enumerate()
            .filter(|(at, _)| (*at as u64).is_multiple_of(MARK_EVERY))
            .map(|(_, &(_, seq, position))| (seq, position))
            .collect();
        for &(task, _, position) in kept {
            if let Some(packed) = position.pack() {
                self.set(task, packed);
            }
        }
        marks.extend(
            self.marks
                .iter()
                .filter(|(_, position)| position.segment > base),
        );
        marks.sort_by_key(|&(seq, _)| seq);
        self.marks = marks;
    }

    /// A position at or before result `seq` (or at the first result kept, when
    /// earlier ones were compacted away), from which reading finds it.
    pub(super) fn start_for(&self, seq: u64) -> Option<Position> {
        let at = self.marks.partition_point(|&(marked, _)| marked <= seq);
        let (_, position) = self.marks.get(at.saturating_sub(1))?;
        Some(*position)
    }

    /// Results indexed.
    pub(super) fn len(&self) -> u64 {
        self.count
    }

    /// The last durable result's `seq` (0: none yet).
    pub(super) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Heap bytes held, for the memory rows.
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.by_task.capacity() * 8 + self.marks.capacity() * size_of::<(u64, Position)>()
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
        let history = start.map(|start| History {
            source: ctx.journal.results(),
            start,
            from,
            last,
            _reading: Arc::clone(&self.log.readers),
        });
        let compacted = if from <= self.log.compacted_through {
            self.log.compacted
        } else {
            0
        };
        tokio::spawn(feed_results(history, live, last + 1, compacted, sink));
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
                RequestError::new(
                    ErrorKind::Internal,
                    format!("reading task {task}'s result: {error}"),
                )
            });
            let _ = reply.send(answer);
        });
    }
}

/// What a stream reads from the journal: results `from..=last`, starting the read at
/// `start`.
struct History {
    source: Arc<dyn ResultSource>,
    start: Position,
    from: u64,
    last: u64,
    /// Keeps the segments `start` may be in (see `ResultLog::readers`).
    _reading: Arc<()>,
}

/// Feeds one results stream: the history, then live results until the client or the
/// pilot goes away, then `end`.
async fn feed_results(
    history: Option<History>,
    live: Option<mpsc::UnboundedReceiver<Arc<ResultRecord>>>,
    mut next: u64,
    compacted: u64,
    sink: ResultSink,
) {
    if let Some(history) = history {
        let history_sink = sink.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut gone = false;
            // A compaction renaming its base into place while this reads can show
            // results again; each is sent once, in order.
            let mut sent = history.from - 1;
            let outcome = history.source.read_from(history.start, &mut |record| {
                if record.seq <= sent {
                    return true;
                }
                sent = record.seq;
                if record.seq > history.last {
                    return false;
                }
                let last = record.seq == history.last;
                gone = history_sink
                    .blocking_send(ResultsItem::Record(record))
                    .is_err();
                !gone && !last
            });
            (outcome, gone)
        })
        .await;
        match read {
            Ok((_, true)) => return,
            Ok((Ok(()), false)) => {}
            Ok((Err(error), false)) => {
                let error =
                    RequestError::new(ErrorKind::Internal, format!("reading results: {error}"));
                let _ = sink.send(ResultsItem::Error(error)).await;
                return;
            }
            Err(error) => {
                let error =
                    RequestError::new(ErrorKind::Internal, format!("reading results: {error}"));
                let _ = sink.send(ResultsItem::Error(error)).await;
                return;
            }
        }
    }
    if let Some(mut live) = live {
        while let Some(record) = live.recv().await {
            next = record.seq + 1;
            if sink.send(ResultsItem::Record(record)).await.is_err() {
                return;
            }
        }
    }
    let _ = sink
        .send(ResultsItem::End(StreamEnd { next, compacted }))
        .await;
}

#[cfg(test)]
mod tests {
    use saker_journal::SegmentNumber;

    use super::*;

    fn at(offset: u64) -> Position {
        Position {
            segment: SegmentNumber(1),
            offset,
        }
    }

    #[test]
    fn results_are_found_by_task_and_reads_start_at_a_mark_before_their_seq() {
        let mut index = ResultIndex::default();
        for seq in 1..=3000u64 {
            index.insert(TaskId(3001 - seq), seq, at(seq * 100));
        }
        assert_eq!(index.find(TaskId(3000)), Some(at(100)));
        assert_eq!(index.find(TaskId(1)), Some(at(300_000)));
        assert_eq!(index.find(TaskId(3001)), None);
        assert_eq!(index.find(TaskId(0)), None);
        assert_eq!(index.start_for(1), Some(at(100)));
        assert_eq!(index.start_for(1024), Some(at(100)));
        assert_eq!(index.start_for(1025), Some(at(102_500)));
        assert_eq!(index.start_for(2999), Some(at(204_900)));
        // One chunk of slots, exactly (no doubling), and three marks.
        let marks = 3 * size_of::<(u64, Position)>();
        let bytes = index.heap_bytes();
        assert!(bytes <= GROWTH * 8 + 2 * marks, "{bytes} bytes");
    }

    #[test]
    fn a_compaction_moves_kept_results_marks_dropped_ones_and_keeps_later_ones() {
        let mut index = ResultIndex::default();
        for seq in 1..=5u64 {
            index.insert(TaskId(seq), seq, at(seq * 100));
        }
        let later = Position {
            segment: SegmentNumber(3),
            offset: 16,
        };
        index.insert(TaskId(6), 6, later);
        // The base is segment 2: task 4 and 5 kept there, 1..=3 dropped.
        let base = |offset| Position {
            segment: SegmentNumber(2),
            offset,
        };
        index.apply_compaction(
            SegmentNumber(2),
            &[(TaskId(4), 4, base(40)), (TaskId(5), 5, base(50))],
            &[(TaskId(1), 1), (TaskId(2), 2), (TaskId(3), 3)],
        );
        assert_eq!(index.find(TaskId(4)), Some(base(40)));
        assert_eq!(index.find(TaskId(6)), Some(later));
        for task in 1..=3 {
            assert_eq!(index.find(TaskId(task)), None);
            assert!(index.is_compacted(TaskId(task)));
        }
        assert!(!index.is_compacted(TaskId(7)));
        // A stream from before the first kept result starts at it.
        assert_eq!(index.start_for(1), Some(base(40)));
        assert_eq!(index.start_for(6), Some(base(40)));
        assert_eq!((index.len(), index.last_seq()), (6, 6));
    }
}
