//! The ready queue: what runs next.
//!
//! Order: priority (higher first); within a priority level, the *return lane* (tasks
//! that already left the queue once and came back: replays, and retries whose backoff
//! expired) before the *fresh lane* (never-dispatched work, in submission order). Both
//! lanes are FIFO. A task only leaves the fresh lane from the head of the work a node
//! can run, so everything still fresh at its level was submitted later or is the rest
//! of its own job: sending returned tasks first keeps submission order in spirit and
//! does not make a job's tail wait behind later jobs.
//!
//! The fresh lane holds one *range* per job (job, next index, end), expanded only as
//! tasks are taken, so a queued array of a million tasks is one entry.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use crate::ids::{JobId, TaskId};

/// A task back in the queue after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReturnedTask {
    pub(crate) task: TaskId,
    pub(crate) job: JobId,
    pub(crate) cores: u32,
}

/// The not-yet-dispatched tasks `next..end` of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreshRange {
    pub(crate) job: JobId,
    pub(crate) next: u32,
    pub(crate) end: u32,
    pub(crate) cores: u32,
}

/// What one [`ReadyQueue::take`] step removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    Returned(ReturnedTask),
    Fresh { job: JobId, start: u32, end: u32 },
}

#[derive(Debug, Default)]
struct Level {
    returned: VecDeque<ReturnedTask>,
    fresh: VecDeque<FreshRange>,
}

impl Level {
    fn is_empty(&self) -> bool {
        self.returned.is_empty() && self.fresh.is_empty()
    }
}

#[derive(Clone, Copy, Debug)]
enum Lane {
    Returned,
    Fresh,
}

#[derive(Clone, Copy, Debug)]
struct Position {
    priority: i32,
    lane: Lane,
    index: usize,
    cores: u32,
}

/// Priority levels of return and fresh lanes. See the module doc for the order.
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    levels: BTreeMap<Reverse<i32>, Level>,
    tasks: u64,
    entries: usize,
}

impl ReadyQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Queued tasks.
    pub(crate) fn tasks(&self) -> u64 {
        self.tasks
    }

    /// Queue entries (ranges plus returned tasks): O(jobs + returned), not O(tasks).
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    pub(crate) fn push_fresh(&mut self, priority: i32, range: FreshRange) {
        debug_assert!(range.next < range.end);
        self.tasks += u64::from(range.end - range.next);
        self.entries += 1;
        self.levels
            .entry(Reverse(priority))
            .or_default()
            .fresh
            .push_back(range);
    }

    pub(crate) fn push_returned(&mut self, priority: i32, task: ReturnedTask) {
        self.tasks += 1;
        self.entries += 1;
        self.levels
            .entry(Reverse(priority))
            .or_default()
            .returned
            .push_back(task);
    }

    /// The first entry, in queue order, whose tasks fit a node of `capacity` cores.
    fn first_fitting(&self, capacity: u32) -> Option<Position> {
        for (Reverse(priority), level) in &self.levels {
            let returned = level
                .returned
                .iter()
                .enumerate()
                .map(|(index, task)| (Lane::Returned, index, task.cores));
            let fresh = level
                .fresh
                .iter()
                .enumerate()
                .map(|(index, range)| (Lane::Fresh, index, range.cores));
            if let Some((lane, index, cores)) = returned
                .chain(fresh)
                .find(|&(_, _, cores)| cores <= capacity)
            {
                return Some(Position {
                    priority: *priority,
                    lane,
                    index,
                    cores,
                });
            }
        }
        None
    }

    /// Cores of the first task a node of `capacity` cores would be offered, if any.
    pub(crate) fn need(&self, capacity: u32) -> Option<u32> {
        self.first_fitting(capacity).map(|position| position.cores)
    }

    /// Takes, in queue order, tasks for a node of `capacity` cores with `credit` cores
    /// of credit, at most `limit` tasks. Entries too wide for the node's capacity are
    /// skipped; an entry that fits the capacity but not the remaining credit stops the
    /// take (no backfill past it, so wide tasks are not starved by narrow ones).
    /// Appends to `out` and returns the credit used.
    pub(crate) fn take(
        &mut self,
        capacity: u32,
        credit: u32,
        limit: usize,
        out: &mut Vec<Taken>,
    ) -> u32 {
        let mut left = credit;
        let mut taken = 0usize;
        while taken < limit {
            let Some(position) = self.first_fitting(capacity) else {
                break;
            };
            if position.cores > left {
                break;
            }
            let key = Reverse(position.priority);
            // Invariant: first_fitting returned a position inside this level.
            let level = self.levels.get_mut(&key).expect("position names a level");
            match position.lane {
                Lane::Returned => {
                    let task = level
                        .returned
                        .remove(position.index)
                        .expect("position names a returned task");
                    out.push(Taken::Returned(task));
                    taken += 1;
                    left -= position.cores;
                    self.tasks -= 1;
                    self.entries -= 1;
                }
                Lane::Fresh => {
                    let range = &mut level.fresh[position.index];
                    let by_credit = left / position.cores;
                    let amount = (range.end - range.next)
                        .min(by_credit)
                        .min(u32::try_from(limit - taken).unwrap_or(u32::MAX));
                    out.push(Taken::Fresh {
                        job: range.job,
                        start: range.next,
                        end: range.next + amount,
                    });
                    range.next += amount;
                    taken += amount as usize;
                    left -= amount * position.cores;
                    self.tasks -= u64::from(amount);
                    if range.next == range.end {
                        level.fresh.remove(position.index);
                        self.entries -= 1;
                    }
                }
            }
            if level.is_empty() {
                self.levels.remove(&key);
            }
        }
        credit - left
    }

    /// Removes every entry of `job` (queued at `priority`): its fresh range, if any, and
    /// its returned tasks in queue order.
    pub(crate) fn remove_job(
        &mut self,
        job: JobId,
        priority: i32,
    ) -> (Option<FreshRange>, Vec<ReturnedTask>) {
        let key = Reverse(priority);
        let Some(level) = self.levels.get_mut(&key) else {
            return (None, Vec::new());
        };
        let mut returned = Vec::new();
        level.returned.retain(|task| {
            let keep = task.job != job;
            if !keep {
                returned.push(*task);
            }
            keep
        });
        let fresh = level
            .fresh
            .iter()
            .position(|range| range.job == job)
            .and_then(|index| level.fresh.remove(index));
        if level.is_empty() {
            self.levels.remove(&key);
        }
        let removed_entries = returned.len() + usize::from(fresh.is_some());
        let removed_tasks =
            returned.len() as u64 + fresh.map_or(0, |range| u64::from(range.end - range.next));
        self.entries -= removed_entries;
        self.tasks -= removed_tasks;
        (fresh, returned)
    }

    /// Removes every entry, queued at `priority`, of the jobs `matches` selects: their
    /// fresh ranges and returned tasks, each in queue order. One pass over the level,
    /// however many jobs match, so holding back many jobs at one instant stays linear.
    pub(crate) fn remove_jobs(
        &mut self,
        priority: i32,
        mut matches: impl FnMut(JobId) -> bool,
    ) -> (Vec<FreshRange>, Vec<ReturnedTask>) {
        let key = Reverse(priority);
        let Some(level) = self.levels.get_mut(&key) else {
            return (Vec::new(), Vec::new());
        };
        let mut returned = Vec::new();
        level.returned.retain(|task| {
            let keep = !matches(task.job);
            if !keep {
                returned.push(*task);
            }
            keep
        });
        let mut fresh = Vec::new();
        level.fresh.retain(|range| {
            let keep = !matches(range.job);
            if !keep {
                fresh.push(*range);
            }
            keep
        });
        if level.is_empty() {
            self.levels.remove(&key);
        }
        self.entries -= returned.len() + fresh.len();
        self.tasks -= returned.len() as u64
            + fresh
                .iter()
                .map(|range| u64::from(range.end - range.next))
                .sum::<u64>();
        (fresh, returned)
    }

    /// Puts back entries that [`ReadyQueue::remove_jobs`] took out of level `priority`:
    /// fresh ranges at their submission place (the fresh lane is in job order, as jobs
    /// are pushed in id order), returned tasks behind those already in the return
    /// lane, in the order given.
    pub(crate) fn restore(
        &mut self,
        priority: i32,
        fresh: Vec<FreshRange>,
        returned: Vec<ReturnedTask>,
    ) {
        if fresh.is_empty() && returned.is_empty() {
            return;
        }
        self.entries += fresh.len() + returned.len();
        self.tasks += returned.len() as u64
            + fresh
                .iter()
                .map(|range| u64::from(range.end - range.next))
                .sum::<u64>();
        let level = self.levels.entry(Reverse(priority)).or_default();
        level.returned.extend(returned);
        if !fresh.is_empty() {
            level.fresh.extend(fresh);
            // Two sorted runs: the stable sort merges them in linear time.
            level.fresh.make_contiguous().sort_by_key(|range| range.job);
        }
    }

    /// Calls `visit(priority, job, fresh)` for every entry, in queue order (for the audit).
    pub(crate) fn for_each_entry(&self, mut visit: impl FnMut(i32, JobId, bool)) {
        for (Reverse(priority), level) in &self.levels {
            for task in &level.returned {
                visit(*priority, task.job, false);
            }
            for range in &level.fresh {
                visit(*priority, range.job, true);
            }
        }
    }

    /// Rough heap footprint, for memory tests.
    pub(crate) fn heap_bytes(&self) -> usize {
        let per_level = size_of::<Level>() + size_of::<Reverse<i32>>() + 16;
        self.levels
            .values()
            .map(|level| {
                per_level
                    + level.returned.capacity() * size_of::<ReturnedTask>()
                    + level.fresh.capacity() * size_of::<FreshRange>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(job: u32, count: u32, cores: u32) -> FreshRange {
        FreshRange {
            job: JobId(job),
            next: 0,
            end: count,
            cores,
        }
    }

    #[test]
    fn take_orders_by_priority_then_lane_then_fifo() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(0, fresh(1, 2, 1));
        queue.push_fresh(5, fresh(2, 1, 1));
        queue.push_fresh(0, fresh(3, 1, 1));
        queue.push_returned(
            0,
            ReturnedTask {
                task: TaskId(99),
                job: JobId(4),
                cores: 1,
            },
        );
        let mut out = Vec::new();
        let used = queue.take(8, 100, 100, &mut out);
        assert_eq!(used, 5);
        assert_eq!(
            out,
            vec![
                Taken::Fresh {
                    job: JobId(2),
                    start: 0,
                    end: 1
                },
                Taken::Returned(ReturnedTask {
                    task: TaskId(99),
                    job: JobId(4),
                    cores: 1
                }),
                Taken::Fresh {
                    job: JobId(1),
                    start: 0,
                    end: 2
                },
                Taken::Fresh {
                    job: JobId(3),
                    start: 0,
                    end: 1
                },
            ]
        );
        assert!(queue.is_empty());
        assert_eq!(queue.tasks(), 0);
    }

    #[test]
    fn take_skips_too_wide_entries_but_blocks_on_credit() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(0, fresh(1, 1, 16));
        queue.push_fresh(0, fresh(2, 3, 4));
        queue.push_fresh(0, fresh(3, 5, 1));
        let mut out = Vec::new();
        // Capacity 8: job 1 never fits and is skipped; job 2 needs 4 per task.
        assert_eq!(queue.take(8, 6, 100, &mut out), 4);
        assert_eq!(
            out,
            vec![Taken::Fresh {
                job: JobId(2),
                start: 0,
                end: 1
            }]
        );
        // Remaining credit 2 < 4: no backfill from job 3.
        assert_eq!(queue.need(8), Some(4));
        assert_eq!(queue.need(64), Some(16));
        assert_eq!(queue.need(2), Some(1));
        assert_eq!(queue.entries(), 3);
        assert_eq!(queue.tasks(), 8);
    }

    #[test]
    fn remove_job_takes_range_and_returned_tasks() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(1, fresh(1, 10, 1));
        queue.push_fresh(1, fresh(2, 10, 1));
        for task in [7, 8] {
            queue.push_returned(
                1,
                ReturnedTask {
                    task: TaskId(task),
                    job: JobId(1),
                    cores: 1,
                },
            );
        }
        let (range, returned) = queue.remove_job(JobId(1), 1);
        assert_eq!(range, Some(fresh(1, 10, 1)));
        assert_eq!(returned.len(), 2);
        assert_eq!(queue.tasks(), 10);
        assert_eq!(queue.entries(), 1);
        assert_eq!(queue.remove_job(JobId(1), 1), (None, Vec::new()));
    }

    #[test]
    fn removed_jobs_are_restored_in_submission_order() {
        let mut queue = ReadyQueue::default();
        for job in 1..=5 {
            queue.push_fresh(0, fresh(job, 2, 1));
        }
        let returned = ReturnedTask {
            task: TaskId(50),
            job: JobId(2),
            cores: 1,
        };
        queue.push_returned(0, returned);
        let (ranges, tasks) = queue.remove_jobs(0, |job| job.0 % 2 == 0);
        assert_eq!(ranges, vec![fresh(2, 2, 1), fresh(4, 2, 1)]);
        assert_eq!(tasks, vec![returned]);
        assert_eq!((queue.entries(), queue.tasks()), (3, 6));
        queue.restore(0, ranges, tasks);
        assert_eq!((queue.entries(), queue.tasks()), (6, 11));
        let mut order = Vec::new();
        queue.for_each_entry(|_, job, fresh| order.push((job.0, fresh)));
        assert_eq!(
            order,
            vec![
                (2, false),
                (1, true),
                (2, true),
                (3, true),
                (4, true),
                (5, true)
            ]
        );
        let (ranges, tasks) = queue.remove_jobs(0, |_| true);
        assert_eq!((ranges.len(), tasks.len()), (5, 1));
        assert!(queue.is_empty() && queue.levels.is_empty());
    }
}
