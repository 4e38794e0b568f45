//! Results once durable: kept in the journal, not in the root's memory. The root keeps
//! an index of where each result is ([`ResultIndex`]: 8 bytes a task) and reads them
//! back through a [`ResultSource`](crate::actor::journal::ResultSource) (the journal
//! in a pilot, memory in unit tests),
//! on threads of their own, never on the root's.
//!
//! Results are journaled in the order they are numbered (`seq`), one group after the
//! other, so the results from some `seq` on are the journal's result records from the
//! position of that one on. The index keeps one position every [`MARK_EVERY`] results
//! to start such a read near its first result.

use saker_journal::Position;

use saker_client::results::TaskId;

/// Results between two of the index's marks.
const MARK_EVERY: u64 = 1024;
/// Task slots the index grows by.
const GROWTH: usize = 65_536;
/// A task's slot when its result was dropped by a compaction. Never a real position:
/// segment numbers start at 1, so a packed position is at least 2^40.
const COMPACTED: u64 = 1;

/// Where each durable result is. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct ResultIndex {
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
