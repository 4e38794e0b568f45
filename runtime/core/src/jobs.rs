//! The core's job records by id, in pages, so that finished history costs about a byte
//! a job.
//!
//! A job record is about 120 bytes: its spec, its bitset, its counters. Once a job has
//! finished, the core still answers for it (its final counts for `job_counts`, a
//! dependency on it, a late result or `task_status` of one of its tasks), but needs
//! nothing else of it. So records live in pages of [`PAGE`] consecutive jobs; when
//! every job of a full page has finished, the page is compacted into one byte per job
//! (how it ended, whether it was cancelled) plus the final counts of its jobs of
//! several tasks. A pilot that has run ten million task-file lines keeps ten megabytes
//! of this, not a gigabyte.
//!
//! A compacted job has no [`JobRecord`]: indexing one panics, as indexing a job that
//! does not exist would. Code that may meet a finished job asks [`JobStore::counts`]
//! or [`JobStore::locate`]; the rest only touches jobs with work in flight.

use std::ops::{Index, IndexMut};

use crate::ids::{JobId, TaskId};
use crate::output::JobCounts;
use crate::task::JobRecord;

/// Jobs per page.
pub(crate) const PAGE: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct JobStore {
    pages: Vec<Page>,
    len: usize,
}

#[derive(Debug)]
enum Page {
    Live {
        records: Vec<JobRecord>,
        /// Jobs of the page that have finished (each counted once).
        finished: u32,
    },
    Done(DonePage),
}

/// A page whose every job finished: what the core still answers for them.
#[derive(Debug)]
struct DonePage {
    first_task: TaskId,
    /// Per job: [`SUCCEEDED`], [`FAILED`] or [`CANCELLED`] for a job of one task,
    /// [`SEVERAL`] for one of several (its counts are in `several`), with
    /// [`CANCEL_REQUESTED`] set if the job was cancelled.
    states: Box<[u8]>,
    /// Jobs of several tasks: their place in the page and final counts, by place.
    several: Box<[(u16, JobCounts)]>,
}

const SUCCEEDED: u8 = 1;
const FAILED: u8 = 2;
const CANCELLED: u8 = 3;
const SEVERAL: u8 = 4;
const STATE: u8 = 0x7;
const CANCEL_REQUESTED: u8 = 0x80;

/// Where a task's job is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Located<'a> {
    /// The job, its record and the task's index in it.
    Live(JobId, &'a JobRecord, u32),
    /// The job has finished and been compacted: so has the task.
    Finished,
}

impl JobStore {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push(&mut self, record: JobRecord) {
        match self.pages.last_mut() {
            Some(Page::Live { records, .. }) if records.len() < PAGE => records.push(record),
            _ => {
                // Grown by doubling: a full page's capacity is exactly PAGE (a power
                // of two), and a pilot of few jobs does not hold a page's worth.
                self.pages.push(Page::Live {
                    records: vec![record],
                    finished: 0,
                });
            }
        }
        self.len += 1;
    }

    /// The record of job `index` (id − 1), `None` if there is none or it was compacted.
    pub(crate) fn get(&self, index: usize) -> Option<&JobRecord> {
        match self.pages.get(index / PAGE)? {
            Page::Live { records, .. } => records.get(index % PAGE),
            Page::Done(_) => None,
        }
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut JobRecord> {
        match self.pages.get_mut(index / PAGE)? {
            Page::Live { records, .. } => records.get_mut(index % PAGE),
            Page::Done(_) => None,
        }
    }

    /// The counts of job `index`, compacted or not; `None` if there is no such job.
    pub(crate) fn counts(&self, index: usize) -> Option<JobCounts> {
        match self.pages.get(index / PAGE)? {
            Page::Live { records, .. } => records.get(index % PAGE).map(|r| r.counts),
            Page::Done(page) => page.counts(index % PAGE),
        }
    }

    /// Marks a compacted job cancelled (a cancel of a finished job is remembered, as it
    /// is in a record).
    pub(crate) fn set_cancel_requested(&mut self, index: usize) {
        match self.pages.get_mut(index / PAGE) {
            Some(Page::Live { records, .. }) => {
                if let Some(record) = records.get_mut(index % PAGE) {
                    record.counts.cancel_requested = true;
                }
            }
            Some(Page::Done(page)) => {
                if let Some(state) = page.states.get_mut(index % PAGE) {
                    *state |= CANCEL_REQUESTED;
                }
            }
            None => {}
        }
    }

    /// The live records with their indexes, in id order.
    pub(crate) fn live(&self) -> impl Iterator<Item = (usize, &JobRecord)> {
        self.pages.iter().enumerate().flat_map(|(page, content)| {
            let records: &[JobRecord] = match content {
                Page::Live { records, .. } => records,
                Page::Done(_) => &[],
            };
            records
                .iter()
                .enumerate()
                .map(move |(at, record)| (page * PAGE + at, record))
        })
    }

    /// The counts of every compacted job.
    pub(crate) fn compacted_counts(&self) -> impl Iterator<Item = JobCounts> + '_ {
        self.pages.iter().flat_map(|page| {
            let done = match page {
                Page::Done(done) => Some(done),
                Page::Live { .. } => None,
            };
            done.into_iter()
                .flat_map(|done| (0..done.states.len()).filter_map(|at| done.counts(at)))
        })
    }

    /// The job of `task`, `None` if it was never submitted.
    pub(crate) fn locate(&self, task: TaskId) -> Option<Located<'_>> {
        let page = self
            .pages
            .partition_point(|page| page.first_task() <= task)
            .checked_sub(1)?;
        match self.pages.get(page)? {
            Page::Live { records, .. } => {
                let at = records
                    .partition_point(|job| job.first_task <= task)
                    .checked_sub(1)?;
                let job = records.get(at)?;
                let index = u32::try_from(task.0 - job.first_task.0).ok()?;
                // Ids are positions plus one, and fit u32 (submission checks).
                let id = JobId((page * PAGE + at + 1) as u32);
                (index < job.counts.count).then_some(Located::Live(id, job, index))
            }
            Page::Done(page) => page.holds(task).then_some(Located::Finished),
        }
    }

    /// Job `index` has just finished (called once per job): a full page whose every
    /// job has is compacted.
    pub(crate) fn finished(&mut self, index: usize) {
        let Some(page) = self.pages.get_mut(index / PAGE) else {
            return;
        };
        let Page::Live { records, finished } = page else {
            return;
        };
        *finished += 1;
        if *finished as usize == PAGE && records.len() == PAGE {
            *page = Page::Done(DonePage::new(records));
        }
    }

    /// Bytes held beyond `size_of::<JobStore>()`, for the memory audit.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.pages.capacity() * size_of::<Page>()
            + self
                .pages
                .iter()
                .map(|page| match page {
                    Page::Live { records, .. } => {
                        records.capacity() * size_of::<JobRecord>()
                            + records.iter().map(JobRecord::heap_bytes).sum::<usize>()
                    }
                    Page::Done(page) => {
                        page.states.len() + page.several.len() * size_of::<(u16, JobCounts)>()
                    }
                })
                .sum::<usize>()
    }
}

impl Page {
    fn first_task(&self) -> TaskId {
        match self {
            // A page is created with its first record.
            Page::Live { records, .. } => {
                records.first().map_or(TaskId(u64::MAX), |r| r.first_task)
            }
            Page::Done(page) => page.first_task,
        }
    }
}

impl DonePage {
    fn new(records: &[JobRecord]) -> DonePage {
        let mut several = Vec::new();
        let states = records
            .iter()
            .enumerate()
            .map(|(at, record)| {
                let counts = record.counts;
                let state = match (counts.count, counts.succeeded, counts.failed) {
                    (1, 1, _) => SUCCEEDED,
                    (1, _, 1) => FAILED,
                    (1, _, _) => CANCELLED,
                    _ => {
                        several.push((at as u16, counts));
                        SEVERAL
                    }
                };
                if counts.cancel_requested {
                    state | CANCEL_REQUESTED
                } else {
                    state
                }
            })
            .collect();
        DonePage {
            first_task: records.first().map_or(TaskId(0), |r| r.first_task),
            states,
            several: several.into_boxed_slice(),
        }
    }

    fn count(&self, at: usize) -> u32 {
        match self.states[at] & STATE {
            SEVERAL => self.several_counts(at).map_or(1, |counts| counts.count),
            _ => 1,
        }
    }

    fn several_counts(&self, at: usize) -> Option<JobCounts> {
        let found = self
            .several
            .binary_search_by_key(&(at as u16), |&(place, _)| place)
            .ok()?;
        Some(self.several[found].1)
    }

    fn counts(&self, at: usize) -> Option<JobCounts> {
        let state = *self.states.get(at)?;
        let single = JobCounts {
            count: 1,
            cancel_requested: state & CANCEL_REQUESTED != 0,
            ..JobCounts::default()
        };
        Some(match state & STATE {
            SUCCEEDED => JobCounts {
                succeeded: 1,
                ..single
            },
            FAILED => JobCounts {
                failed: 1,
                ..single
            },
            CANCELLED => JobCounts {
                cancelled: 1,
                ..single
            },
            _ => JobCounts {
                cancel_requested: single.cancel_requested,
                ..self.several_counts(at)?
            },
        })
    }

    /// Whether `task` (at or after the page's first) belongs to one of its jobs. Tasks
    /// are numbered consecutively across jobs, so the page's tasks are one range.
    fn holds(&self, task: TaskId) -> bool {
        let tasks: u64 = (0..self.states.len())
            .map(|at| u64::from(self.count(at)))
            .sum();
        task.0 - self.first_task.0 < tasks
    }
}

impl Index<usize> for JobStore {
    type Output = JobRecord;

    fn index(&self, index: usize) -> &JobRecord {
        // Invariant: callers index jobs with work in flight, never compacted ones.
        self.get(index)
            .expect("the record of a job that has not finished")
    }
}

impl IndexMut<usize> for JobStore {
    fn index_mut(&mut self, index: usize) -> &mut JobRecord {
        // Invariant: as for `index`.
        self.get_mut(index)
            .expect("the record of a job that has not finished")
    }
}
