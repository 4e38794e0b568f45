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
//! tasks are taken, so a queued array of a million tasks is one entry. Adopting a task
//! from the middle of a range (`Core::handle_adopt`) splits it in place: a job may have
//! a few ranges, next to each other in index order. A returned task it takes is only
//! marked taken where it stands (a *dead* entry, which every reader skips) and dropped
//! later in bulk: a new root may adopt every returned task of a long lane, and
//! removing each from the middle would shift the lane each time.
//!
//! Entries do not carry what their tasks need: a 32-byte [`Resources`] would triple a
//! returned task (16 bytes), and a mass node loss returns hundreds of thousands. The
//! caller passes `needs`, which looks the job's resources up (one per job), or says
//! `None` for work a node may not take from here: gangs, which are placed whole by
//! their own pass, and work a node reserved for a gang may not backfill.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::ids::{JobId, TaskId};
use crate::ranges::{Ranges, split};
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

/// One queued task of a job, as its entries hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueuedTask {
    /// Back after an attempt: a returned entry.
    Returned(TaskId),
    /// Never dispatched: this index of one of its fresh ranges.
    Fresh(u32),
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
    /// Dead entries in `returned` (their tasks are in `ReadyQueue::taken`).
    dead: usize,
}

impl Level {
    fn is_empty(&self) -> bool {
        self.returned.len() == self.dead && self.fresh.is_empty()
    }

    /// Whether `entry` of the return lane is dead.
    fn is_dead(&self, taken: &HashSet<TaskId>, entry: &ReturnedTask) -> bool {
        self.dead > 0 && taken.contains(&entry.task)
    }

    /// Drops the dead entries of the return lane.
    fn purge(&mut self, taken: &mut HashSet<TaskId>) {
        if self.dead > 0 {
            self.returned.retain(|entry| !taken.remove(&entry.task));
            self.dead = 0;
        }
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
    /// Tasks of the dead entries (see the module doc): each has exactly one, at its
    /// job's priority. Only looked up, never iterated into an output.
    taken: HashSet<TaskId>,
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
        let key = |range: &FreshRange| (range.job, range.next);
        if fresh.back().is_none_or(|last| key(last) < key(&range)) {
            fresh.push_back(range);
        } else {
            let at = fresh.partition_point(|queued| key(queued) < key(&range));
            fresh.insert(at, range);
        }
    }

    pub(crate) fn push_returned(&mut self, priority: i32, task: ReturnedTask) {
        self.tasks += 1;
        self.entries += 1;
        let level = self.levels.entry(Reverse(priority)).or_default();
        // A taken task back (its adopted attempt ended): its dead entry must go
        // first, or it would come alive again next to this one.
        if level.is_dead(&self.taken, &task) {
            level.purge(&mut self.taken);
        }
        debug_assert!(!self.taken.contains(&task.task), "dead entry elsewhere");
        level.returned.push_back(task);
    }

    /// Drops the level at `key` if it has no live entries, with its dead ones.
    fn drop_if_empty(&mut self, key: Reverse<i32>) {
        if let Some(level) = self.levels.get_mut(&key)
            && level.is_empty()
        {
            level.purge(&mut self.taken);
            self.levels.remove(&key);
        }
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
                .filter(|(_, task)| !level.is_dead(&self.taken, task))
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
            self.drop_if_empty(key);
        }
        // Invariant: `left` only ever shrank from `credit`.
        credit
            .checked_sub(left)
            .expect("used credit fits the credit")
    }

    /// Removes every entry of `job` (queued at `priority`): its fresh ranges and its
    /// returned tasks in queue order.
    pub(crate) fn remove_job(&mut self, job: JobId, priority: i32) -> (Ranges, Vec<ReturnedTask>) {
        let key = Reverse(priority);
        let Some(level) = self.levels.get_mut(&key) else {
            return (Ranges::default(), Vec::new());
        };
        // A pass over the level anyway: its dead entries go too, so none outlives its
        // job's leaving the queue (it could come back elsewhere).
        level.purge(&mut self.taken);
        let mut returned = Vec::new();
        level.returned.retain(|task| {
            let keep = task.job != job;
            if !keep {
                returned.push(*task);
            }
            keep
        });
        // The fresh lane is in job order: the job's ranges are next to each other.
        let at = level.fresh.partition_point(|range| range.job < job);
        let mut fresh = Ranges::default();
        while let Some(range) = level.fresh.get(at).filter(|range| range.job == job) {
            fresh.insert(*range);
            level.fresh.remove(at);
            self.entries -= 1;
        }
        self.drop_if_empty(key);
        self.entries -= returned.len();
        self.tasks -= returned.len() as u64 + fresh.tasks();
        (fresh, returned)
    }

    /// Takes one queued task of `job` (queued at `priority`) out of the queue; false if
    /// it is not there. A fresh range it splits keeps its place, its parts in order.
    pub(crate) fn take_task(&mut self, priority: i32, job: JobId, task: QueuedTask) -> bool {
        let key = Reverse(priority);
        let Some(level) = self.levels.get_mut(&key) else {
            return false;
        };
        match task {
            QueuedTask::Returned(task) => {
                // Marked dead where it stands, not looked for (see the module doc): the
                // caller knows it is queued here. The audit checks the entries add up.
                if level.returned.len() == level.dead || !self.taken.insert(task) {
                    return false;
                }
                level.dead += 1;
                self.entries -= 1;
                // Half dead: dropped at once, in time linear in what is dropped.
                if level.dead * 2 > level.returned.len() {
                    level.purge(&mut self.taken);
                }
            }
            QueuedTask::Fresh(index) => {
                // Ranges are in (job, index) order and disjoint: the first not ending
                // by `index` is the only one that may hold it.
                let at = level
                    .fresh
                    .partition_point(|range| (range.job, range.end) <= (job, index));
                let Some(&range) = level
                    .fresh
                    .get(at)
                    .filter(|range| range.job == job && range.next <= index)
                else {
                    return false;
                };
                level.fresh.remove(at);
                self.entries -= 1;
                for part in split(range, index).into_iter().flatten().rev() {
                    level.fresh.insert(at, part);
                    self.entries += 1;
                }
            }
        }
        self.tasks -= 1;
        self.drop_if_empty(key);
        true
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
        level.purge(&mut self.taken); // as in `remove_job`
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
        self.drop_if_empty(key);
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
        debug_assert!(
            returned.iter().all(|task| !self.taken.contains(&task.task)),
            "a task restored next to its dead entry"
        );
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
            level
                .fresh
                .make_contiguous()
                .sort_by_key(|range| (range.job, range.next));
        }
    }

    /// Checks that every dead entry is counted in its level and its task marked once
    /// (for the audit).
    pub(crate) fn check_dead(&self) -> Result<(), &'static str> {
        let mut dead = 0;
        for level in self.levels.values() {
            let marked = level
                .returned
                .iter()
                .filter(|task| self.taken.contains(&task.task));
            if marked.count() != level.dead {
                return Err("a level's dead entries differ from its count");
            }
            dead += level.dead;
        }
        match dead == self.taken.len() {
            true => Ok(()),
            false => Err("taken tasks differ from the dead entries"),
        }
    }

    /// Calls `visit(priority, job, range)` for every entry in queue order, with the
    /// range of a fresh one (for the audit).
    pub(crate) fn for_each_entry(&self, mut visit: impl FnMut(i32, JobId, Option<&FreshRange>)) {
        for (Reverse(priority), level) in &self.levels {
            for task in &level.returned {
                if !level.is_dead(&self.taken, task) {
                    visit(*priority, task.job, None);
                }
            }
            for range in &level.fresh {
                visit(*priority, range.job, Some(range));
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
            .sum::<usize>()
            + self.taken.capacity() * (size_of::<TaskId>() + 1)
    }
}

#[cfg(test)]
mod tests;
