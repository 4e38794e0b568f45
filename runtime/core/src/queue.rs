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
//!
//! Entries do not carry what their tasks need: a 32-byte [`Resources`] would triple a
//! returned task (16 bytes), and a mass node loss returns hundreds of thousands. The
//! caller passes `needs`, which looks the job's resources up (one per job), or says
//! `None` for work a node may not take from here: gangs, which are placed whole by
//! their own pass, and work a node reserved for a gang may not backfill.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};

use crate::ids::{JobId, TaskId};
use crate::resources::Resources;

/// A task back in the queue after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReturnedTask {
    pub(crate) task: TaskId,
    pub(crate) job: JobId,
}

/// The not-yet-dispatched tasks `next..end` of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreshRange {
    pub(crate) job: JobId,
    pub(crate) next: u32,
    pub(crate) end: u32,
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
    need: Resources,
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

    /// The highest priority with queued work, if any.
    pub(crate) fn top_priority(&self) -> Option<i32> {
        self.levels.keys().next().map(|&Reverse(priority)| priority)
    }

    /// Queued tasks.
    pub(crate) fn tasks(&self) -> u64 {
        self.tasks
    }

    /// Queue entries (ranges plus returned tasks): O(jobs + returned), not O(tasks).
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// Queues a job's never-dispatched tasks in submission order: at the back, unless
    /// the job is older than the last (it waited for other jobs), then in its place,
    /// found by bisection (such a job is usually near the front, where the shift is
    /// short).
    pub(crate) fn push_fresh(&mut self, priority: i32, range: FreshRange) {
        debug_assert!(range.next < range.end);
        self.tasks += u64::from(range.end - range.next);
        self.entries += 1;
        let fresh = &mut self.levels.entry(Reverse(priority)).or_default().fresh;
        if fresh.back().is_none_or(|last| last.job < range.job) {
            fresh.push_back(range);
        } else {
            let at = fresh.partition_point(|queued| queued.job < range.job);
            fresh.insert(at, range);
        }
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

    /// The first entry, in queue order, whose tasks fit a node of `capacity`.
    fn first_fitting(
        &self,
        capacity: &Resources,
        needs: impl Fn(JobId) -> Option<Resources>,
    ) -> Option<Position> {
        for (Reverse(priority), level) in &self.levels {
            let returned = level
                .returned
                .iter()
                .enumerate()
                .map(|(index, task)| (Lane::Returned, index, task.job));
            let fresh = level
                .fresh
                .iter()
                .enumerate()
                .map(|(index, range)| (Lane::Fresh, index, range.job));
            if let Some((lane, index, need)) = returned
                .chain(fresh)
                .filter_map(|(lane, index, job)| Some((lane, index, needs(job)?)))
                .find(|(_, _, need)| need.fits_in(capacity))
            {
                return Some(Position {
                    priority: *priority,
                    lane,
                    index,
                    need,
                });
            }
        }
        None
    }

    /// What the first task a node of `capacity` would be offered needs, if any.
    pub(crate) fn need(
        &self,
        capacity: &Resources,
        needs: impl Fn(JobId) -> Option<Resources>,
    ) -> Option<Resources> {
        self.first_fitting(capacity, needs)
            .map(|position| position.need)
    }

    /// Takes, in queue order, tasks for a node of `capacity` with `credit`, at most
    /// `limit` tasks. Entries that do not fit the node's capacity are skipped; an entry
    /// that fits the capacity but not the remaining credit (in any kind) stops the
    /// take (no backfill past it, so wide tasks are not starved by narrow ones).
    /// Appends to `out` and returns the credit used, which always fits in `credit`.
    pub(crate) fn take(
        &mut self,
        capacity: &Resources,
        credit: Resources,
        limit: usize,
        needs: impl Fn(JobId) -> Option<Resources>,
        out: &mut Vec<Taken>,
    ) -> Resources {
        let mut left = credit;
        let mut taken = 0usize;
        while taken < limit {
            let Some(position) = self.first_fitting(capacity, &needs) else {
                break;
            };
            let Some(after_one) = left.checked_sub(position.need) else {
                break;
            };
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
                    left = after_one;
                    self.tasks -= 1;
                    self.entries -= 1;
                }
                Lane::Fresh => {
                    let range = &mut level.fresh[position.index];
                    // At least one: `after_one` exists.
                    let by_credit = position.need.times_in(&left);
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
                    // Invariant: `amount` copies fit in `left` (times_in).
                    left = left
                        .checked_sub(position.need.saturating_mul(amount))
                        .expect("taken tasks fit the credit left");
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
        // Invariant: `left` only ever shrank from `credit`.
        credit
            .checked_sub(left)
            .expect("used credit fits the credit")
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
    use crate::resources::ResourceKind;

    fn fresh(job: u32, count: u32) -> FreshRange {
        FreshRange {
            job: JobId(job),
            next: 0,
            end: count,
        }
    }

    fn one_core(_: JobId) -> Option<Resources> {
        Some(Resources::cores(1))
    }

    fn cores(n: u32) -> Resources {
        Resources::cores(n)
    }

    #[test]
    fn take_orders_by_priority_then_lane_then_fifo() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(0, fresh(1, 2));
        queue.push_fresh(5, fresh(2, 1));
        queue.push_fresh(0, fresh(3, 1));
        queue.push_returned(
            0,
            ReturnedTask {
                task: TaskId(99),
                job: JobId(4),
            },
        );
        let mut out = Vec::new();
        let used = queue.take(&cores(8), cores(100), 100, one_core, &mut out);
        assert_eq!(used, cores(5));
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
        queue.push_fresh(0, fresh(1, 1));
        queue.push_fresh(0, fresh(2, 3));
        queue.push_fresh(0, fresh(3, 5));
        let needs = |job: JobId| Some(cores([16, 4, 1][job.0 as usize - 1]));
        let mut out = Vec::new();
        // Capacity 8: job 1 never fits and is skipped; job 2 needs 4 per task.
        assert_eq!(
            queue.take(&cores(8), cores(6), 100, needs, &mut out),
            cores(4)
        );
        assert_eq!(
            out,
            vec![Taken::Fresh {
                job: JobId(2),
                start: 0,
                end: 1
            }]
        );
        // Remaining credit 2 < 4: no backfill from job 3.
        assert_eq!(queue.need(&cores(8), needs), Some(cores(4)));
        assert_eq!(queue.need(&cores(64), needs), Some(cores(16)));
        assert_eq!(queue.need(&cores(2), needs), Some(cores(1)));
        assert_eq!(queue.entries(), 3);
        assert_eq!(queue.tasks(), 8);
    }

    #[test]
    fn take_needs_every_kind_to_fit_capacity_and_credit() {
        let gpu = |n: u32| Resources::cores(1).with(ResourceKind::GPUS, n);
        let needs = |job: JobId| {
            Some(match job.0 {
                1 => gpu(4),
                2 => gpu(1),
                _ => cores(1),
            })
        };
        let mut queue = ReadyQueue::default();
        queue.push_fresh(0, fresh(1, 1));
        queue.push_fresh(0, fresh(2, 5));
        queue.push_fresh(0, fresh(3, 5));
        let node = cores(8).with(ResourceKind::GPUS, 2);
        // Job 1 needs more GPUs than the node has: skipped. Job 2 is bounded by the
        // node's 2 GPUs of credit, not its 8 cores, and then blocks job 3.
        let mut out = Vec::new();
        let used = queue.take(&node, node, 100, needs, &mut out);
        assert_eq!(used, gpu(2).with(ResourceKind::CORES, 2));
        assert_eq!(
            out,
            vec![Taken::Fresh {
                job: JobId(2),
                start: 0,
                end: 2
            }]
        );
        assert_eq!(queue.need(&node, needs), Some(gpu(1)));
        // A node without GPUs only sees job 3.
        assert_eq!(queue.need(&cores(8), needs), Some(cores(1)));
        out.clear();
        assert_eq!(
            queue.take(&cores(8), cores(3), 100, needs, &mut out),
            cores(3)
        );
        assert_eq!(
            out,
            vec![Taken::Fresh {
                job: JobId(3),
                start: 0,
                end: 3
            }]
        );
    }

    #[test]
    fn entries_without_a_need_are_skipped() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(0, fresh(1, 1));
        queue.push_fresh(0, fresh(2, 2));
        let needs = |job: JobId| (job.0 != 1).then_some(cores(1));
        let mut out = Vec::new();
        assert_eq!(
            queue.take(&cores(8), cores(8), 100, needs, &mut out),
            cores(2)
        );
        assert_eq!(
            out,
            vec![Taken::Fresh {
                job: JobId(2),
                start: 0,
                end: 2
            }]
        );
        assert_eq!(queue.need(&cores(8), needs), None);
        assert_eq!(queue.tasks(), 1);
    }

    #[test]
    fn remove_job_takes_range_and_returned_tasks() {
        let mut queue = ReadyQueue::default();
        queue.push_fresh(1, fresh(1, 10));
        queue.push_fresh(1, fresh(2, 10));
        for task in [7, 8] {
            queue.push_returned(
                1,
                ReturnedTask {
                    task: TaskId(task),
                    job: JobId(1),
                },
            );
        }
        let (range, returned) = queue.remove_job(JobId(1), 1);
        assert_eq!(range, Some(fresh(1, 10)));
        assert_eq!(returned.len(), 2);
        assert_eq!(queue.tasks(), 10);
        assert_eq!(queue.entries(), 1);
        assert_eq!(queue.remove_job(JobId(1), 1), (None, Vec::new()));
    }

    #[test]
    fn removed_jobs_are_restored_in_submission_order() {
        let mut queue = ReadyQueue::default();
        for job in 1..=5 {
            queue.push_fresh(0, fresh(job, 2));
        }
        let returned = ReturnedTask {
            task: TaskId(50),
            job: JobId(2),
        };
        queue.push_returned(0, returned);
        let (ranges, tasks) = queue.remove_jobs(0, |job| job.0 % 2 == 0);
        assert_eq!(ranges, vec![fresh(2, 2), fresh(4, 2)]);
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
