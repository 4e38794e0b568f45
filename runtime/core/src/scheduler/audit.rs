//! An O(state) self-check of the core's redundant bookkeeping, and a heap estimate.
//! Both are for tests and debugging; neither is needed to drive the core.

use std::collections::{BTreeMap, BTreeSet};

use super::{Core, PendingEvent, slot};
use crate::config::Placement;
use crate::horizon::last_start;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::Counts;
use crate::resources::{Resources, Totals};
use crate::task::{AttemptRecord, CopyState, Phase, TaskRecord};
use crate::work::QueuedWork;

/// Two pieces of the core's bookkeeping disagree: a bug in the core.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsistencyError {
    /// The dependency bookkeeping disagrees with itself.
    #[error("dependencies: {problem}")]
    Dependencies { problem: String },
    /// The locality bookkeeping disagrees with itself or with the jobs.
    #[error("locality: {problem}")]
    Locality { problem: String },
    /// The ready queue's bookkeeping disagrees with itself.
    #[error("ready queue: {problem}")]
    Queue {
        /// What is wrong.
        problem: &'static str,
    },
    /// The queued work by kind differs from what the jobs' queued tasks add up to.
    #[error("queued work: the jobs' queued tasks add up to other kinds")]
    QueuedWork,
    /// A counter differs from what the records add up to.
    #[error("{what}: records add up to {counted}, counter says {recorded}")]
    CountMismatch {
        /// Which counter.
        what: &'static str,
        /// What the records add up to.
        counted: u64,
        /// What the counter says.
        recorded: u64,
    },
    /// A task record contradicts the rest of the state.
    #[error("task {task}: {problem}")]
    Task {
        /// The task.
        task: TaskId,
        /// What is wrong.
        problem: &'static str,
    },
    /// A job's place relative to the deadline contradicts the rest of the state.
    #[error("job {job}: {problem}")]
    Job {
        /// The job.
        job: JobId,
        /// What is wrong.
        problem: &'static str,
    },
    /// A live attempt contradicts the rest of the state.
    #[error("attempt {attempt}: {problem}")]
    Attempt {
        /// The attempt.
        attempt: AttemptId,
        /// What is wrong.
        problem: &'static str,
    },
    /// The nodes' credit does not add up to the total kept.
    #[error("credit: nodes add up to {counted}, total says {recorded}")]
    CreditMismatch {
        /// What the nodes' credit adds up to (capped at `u32::MAX` per kind).
        counted: Resources,
        /// What the total says (capped likewise).
        recorded: Resources,
    },
    /// A node's or a gang's bookkeeping contradicts the rest of the state.
    #[error("node {node}: {problem}")]
    Node {
        /// The node (a gang's leader for gang problems).
        node: NodeId,
        /// What is wrong.
        problem: &'static str,
    },
    /// The straggler index contradicts itself.
    #[error("straggler index: {problem}")]
    Stragglers {
        /// What is wrong.
        problem: &'static str,
    },
}

fn expect_equal(what: &'static str, counted: u64, recorded: u64) -> Result<(), ConsistencyError> {
    if counted == recorded {
        Ok(())
    } else {
        Err(ConsistencyError::CountMismatch {
            what,
            counted,
            recorded,
        })
    }
}

/// Rough heap bytes of a BTreeMap/BTreeSet with `len` entries of `entry` bytes: leaves
/// hold up to 11 entries and are on average about two thirds full.
fn btree_bytes(len: usize, entry: usize) -> usize {
    len * (entry * 3 / 2 + 8)
}

impl Core {
    /// Checks that the counters, task records, live attempts (at most two per task, on
    /// distinct nodes), node attempt sets, retry timers, ready queue, straggler index
    /// and finished bitsets agree. O(jobs + records + tasks/64).
    pub fn check_consistency(&self) -> Result<(), ConsistencyError> {
        let mut total = Counts::default();
        let mut copies = 0u64;
        let mut indexed = 0u64;
        let mut per_job: BTreeMap<JobId, Counts> = BTreeMap::new();
        for (task, record) in &self.tasks {
            let (job, index) = match self.locate(*task) {
                Some(crate::jobs::Located::Live(_, job, index)) => (job, index),
                Some(crate::jobs::Located::Finished) => {
                    return Err(ConsistencyError::Task {
                        task: *task,
                        problem: "record for a task of a compacted job",
                    });
                }
                None => {
                    return Err(ConsistencyError::Task {
                        task: *task,
                        problem: "record for a task never submitted",
                    });
                }
            };
            if index != record.index || job.first_task.0 + u64::from(index) != task.0 {
                return Err(ConsistencyError::Task {
                    task: *task,
                    problem: "record names the wrong job or index",
                });
            }
            if job.is_finished_index(index) {
                return Err(ConsistencyError::Task {
                    task: *task,
                    problem: "record for a finished task",
                });
            }
            let counts = per_job.entry(record.job).or_default();
            match record.phase {
                Phase::Queued => counts.queued += 1,
                Phase::Delayed { not_before } => {
                    counts.delayed += 1;
                    if !self.retry_timers.contains(&(not_before, *task)) {
                        return Err(ConsistencyError::Task {
                            task: *task,
                            problem: "delayed without a timer",
                        });
                    }
                }
                Phase::InFlight {
                    attempt,
                    started,
                    copy,
                } => {
                    if started {
                        counts.running += 1;
                    } else {
                        counts.assigned += 1;
                    }
                    self.check_attempt(attempt, *task)?;
                    let live = self.attempts[&attempt];
                    let spec = &self.jobs[slot(record.job)].spec;
                    if !started
                        && !self.gangs.members.contains_key(&attempt)
                        && live.limit() != spec.time_limit
                    {
                        return Err(ConsistencyError::Attempt {
                            attempt,
                            problem: "not started, but not under its job's time limit",
                        });
                    }
                    let mut any_started = live.started().is_some();
                    if let CopyState::Live(copy) = copy.state() {
                        copies += 1;
                        if copy == attempt {
                            return Err(ConsistencyError::Task {
                                task: *task,
                                problem: "its copy is its original",
                            });
                        }
                        self.check_attempt(copy, *task)?;
                        let other = self.attempts[&copy];
                        if other.node == live.node {
                            return Err(ConsistencyError::Task {
                                task: *task,
                                problem: "both copies on one node",
                            });
                        }
                        any_started |= other.started().is_some();
                    }
                    if started != any_started {
                        return Err(ConsistencyError::Task {
                            task: *task,
                            problem: "running flag disagrees with its attempts",
                        });
                    }
                    let job = &self.jobs[slot(record.job)];
                    if let Some(started) = live.started()
                        && self.stragglers.is_enabled()
                        && job.spec.speculative
                        && !job.counts.cancel_requested
                        && copy.state() == CopyState::Absent
                    {
                        indexed += 1;
                        if !self.stragglers.contains(job.spec.class, started, attempt) {
                            return Err(ConsistencyError::Attempt {
                                attempt,
                                problem: "may become a straggler but is not indexed",
                            });
                        }
                    }
                }
            }
        }
        expect_equal(
            "retry timers",
            self.retry_timers.len() as u64,
            self.counts.delayed,
        )?;
        let node_attempts: usize = self.nodes.iter().map(|(_, node)| node.attempts.len()).sum();
        let extra_members: usize = self
            .gangs
            .members
            .values()
            .map(|members| members.len().saturating_sub(1))
            .sum();
        expect_equal(
            "node attempts",
            node_attempts as u64,
            (self.attempts.len() + extra_members) as u64,
        )?;
        expect_equal(
            "live attempts",
            self.attempts.len() as u64,
            self.counts.assigned + self.counts.running + copies,
        )?;
        // Every indexed attempt is one of those counted above, each indexed once.
        expect_equal("indexed attempts", indexed, self.stragglers.len() as u64)?;
        self.stragglers
            .check(self.now)
            .map_err(|problem| ConsistencyError::Stragglers { problem })?;
        if self.counts.speculated < copies {
            return Err(ConsistencyError::CountMismatch {
                what: "speculated copies",
                counted: copies,
                recorded: self.counts.speculated,
            });
        }
        for (node, record) in self.nodes.iter() {
            let mut in_use = Resources::ZERO;
            for attempt in &record.attempts {
                let held_here = self.attempts.get(attempt).is_some_and(|live| {
                    live.node == node
                        || self
                            .gangs
                            .members
                            .get(attempt)
                            .is_some_and(|members| members.contains(&node))
                });
                if !held_here {
                    return Err(ConsistencyError::Attempt {
                        attempt: *attempt,
                        problem: "node holds an attempt that is not live there",
                    });
                }
                let job = self.tasks[&self.attempts[attempt].task].job;
                in_use =
                    in_use.saturating_add(self.shapes.resources(self.jobs[slot(job)].spec.shape));
            }
            if in_use != record.in_use {
                return Err(ConsistencyError::Node {
                    node,
                    problem: "what it holds differs from its attempts' needs",
                });
            }
        }
        self.check_gangs()?;
        let mut credit = Totals::default();
        for (_, node) in self.nodes.iter() {
            credit.add(node.credit);
        }
        if credit != *self.nodes.total_credit() {
            return Err(ConsistencyError::CreditMismatch {
                counted: credit.saturated(),
                recorded: self.nodes.total_credit().saturated(),
            });
        }
        expect_equal(
            "startable cores",
            self.nodes.iter().map(|(_, node)| node.startable()).sum(),
            self.nodes.startable_cores(),
        )?;
        expect_equal(
            "queued tasks",
            self.queue.tasks() + self.horizon.held_tasks() + self.deps.waiting_tasks(),
            self.counts.queued,
        )?;
        self.deps
            .audit()
            .map_err(|problem| ConsistencyError::Dependencies { problem })?;
        self.check_horizon()?;
        self.check_entries()?;
        self.queue
            .check_dead()
            .map_err(|problem| ConsistencyError::Queue { problem })?;
        self.locality
            .audit(|job| {
                self.jobs
                    .get(job.0 as usize - 1)
                    .is_some_and(|j| !j.counts.is_finished())
            })
            .map_err(|problem| ConsistencyError::Locality { problem })?;
        for (position, job) in self.jobs.live() {
            let id = JobId(position as u32 + 1);
            let records = per_job.get(&id).copied().unwrap_or_default();
            let counts = job.counts;
            expect_equal("job delayed", records.delayed, u64::from(counts.delayed))?;
            expect_equal("job assigned", records.assigned, u64::from(counts.assigned))?;
            expect_equal("job running", records.running, u64::from(counts.running))?;
            if records.queued > u64::from(counts.queued) {
                return Err(ConsistencyError::CountMismatch {
                    what: "job queued records",
                    counted: records.queued,
                    recorded: u64::from(counts.queued),
                });
            }
            let partition = counts.queued
                + counts.delayed
                + counts.assigned
                + counts.running
                + counts.terminal();
            expect_equal(
                "job partition",
                u64::from(partition),
                u64::from(counts.count),
            )?;
            expect_equal(
                "job finished bits",
                u64::from(job.finished_count()),
                u64::from(counts.terminal()),
            )?;
            total.queued += u64::from(counts.queued);
            total.delayed += u64::from(counts.delayed);
            total.assigned += u64::from(counts.assigned);
            total.running += u64::from(counts.running);
            total.succeeded += u64::from(counts.succeeded);
            total.failed += u64::from(counts.failed);
            total.cancelled += u64::from(counts.cancelled);
            total.submitted += u64::from(counts.count);
        }
        // Compacted jobs have finished: only their terminal counts remain.
        for counts in self.jobs.compacted_counts() {
            if counts.terminal() != counts.count {
                return Err(ConsistencyError::CountMismatch {
                    what: "compacted job terminal",
                    counted: u64::from(counts.terminal()),
                    recorded: u64::from(counts.count),
                });
            }
            total.succeeded += u64::from(counts.succeeded);
            total.failed += u64::from(counts.failed);
            total.cancelled += u64::from(counts.cancelled);
            total.submitted += u64::from(counts.count);
        }
        expect_equal("submitted", total.submitted, self.counts.submitted)?;
        expect_equal("queued", total.queued, self.counts.queued)?;
        expect_equal("delayed", total.delayed, self.counts.delayed)?;
        expect_equal("assigned", total.assigned, self.counts.assigned)?;
        expect_equal("running", total.running, self.counts.running)?;
        expect_equal("succeeded", total.succeeded, self.counts.succeeded)?;
        expect_equal("failed", total.failed, self.counts.failed)?;
        expect_equal("cancelled", total.cancelled, self.counts.cancelled)?;
        let mut work = QueuedWork::default();
        for (_, job) in self.jobs.live() {
            if job.counts.queued > 0 {
                work.add(&job.spec, job.counts.queued);
            }
        }
        if work != self.work {
            return Err(ConsistencyError::QueuedWork);
        }
        Ok(())
    }

    /// The ready queue holds only work that fits the deadline, the horizon holds the
    /// rest, and every job with queued work is tracked or held as its limit says.
    fn check_horizon(&self) -> Result<(), ConsistencyError> {
        let job_error = |job, problem| Err(ConsistencyError::Job { job, problem });
        let deadline = self.horizon.deadline();
        let fits = |job: JobId| {
            deadline.is_none_or(|deadline| {
                last_start(deadline, self.jobs[slot(job)].spec.time_limit)
                    .is_some_and(|last| self.now <= last)
            })
        };
        let mut tracked = BTreeSet::new();
        for (last, job) in self.horizon.boundaries() {
            let Some(deadline) = deadline else {
                return job_error(job, "tracked without a deadline");
            };
            if last_start(deadline, self.jobs[slot(job)].spec.time_limit) != Some(last) {
                return job_error(job, "tracked under the wrong last start");
            }
            if !fits(job) || self.horizon.is_held(job) {
                return job_error(job, "tracked but does not fit");
            }
            tracked.insert(job);
        }
        let mut held_tasks = 0;
        for (job, held) in self.horizon.held() {
            if fits(job) {
                return job_error(job, "held but fits the deadline");
            }
            // A held job that waits keeps its entries with its dependencies.
            let aside = self.deps.waiting_tasks_of(job).unwrap_or(0);
            if held.tasks() + aside != u64::from(self.jobs[slot(job)].counts.queued) {
                return job_error(job, "held entries differ from its queued tasks");
            }
            if held.fresh.iter().any(|range| range.job != job)
                || held.returned.iter().any(|task| {
                    task.job != job
                        || self
                            .tasks
                            .get(&task.task)
                            .is_none_or(|record| record.phase != Phase::Queued)
                })
            {
                return job_error(job, "held entry of another job or not queued");
            }
            held_tasks += held.tasks();
        }
        expect_equal("held tasks", held_tasks, self.horizon.held_tasks())?;
        let mut problem = None;
        // Per level, the (job, end) of the last fresh range.
        let mut last_fresh: BTreeMap<i32, (JobId, u32)> = BTreeMap::new();
        self.queue.for_each_entry(|priority, job, fresh| {
            if problem.is_some() {
                return;
            }
            if self.horizon.is_held(job) || !fits(job) {
                problem = Some((job, "queued but does not fit the deadline"));
            } else if self.deps.is_waiting(job) {
                problem = Some((job, "queued while it waits"));
            } else if self.jobs[slot(job)].spec.priority != priority {
                problem = Some((job, "queued at another priority"));
            } else if let Some(range) = fresh
                && last_fresh
                    .insert(priority, (job, range.end))
                    .is_some_and(|(last, end)| last > job || (last == job && end > range.next))
            {
                problem = Some((job, "fresh lane out of submission order"));
            }
        });
        if let Some((job, problem)) = problem {
            return job_error(job, problem);
        }
        if deadline.is_some() {
            for (position, record) in self.jobs.live() {
                let job = JobId(position as u32 + 1);
                let waiting = record.counts.queued + record.counts.delayed;
                if waiting > 0 && !tracked.contains(&job) && !self.horizon.is_held(job) {
                    return job_error(job, "has queued work but is neither tracked nor held");
                }
            }
        }
        Ok(())
    }

    /// Each job's queued tasks are exactly its entries, wherever they are (queue,
    /// horizon, dependencies): its fresh ranges, disjoint and inside the job, holding
    /// no task that has a record, and one returned entry per queued record.
    fn check_entries(&self) -> Result<(), ConsistencyError> {
        let job_error = |job, problem| Err(ConsistencyError::Job { job, problem });
        let mut ranges: BTreeMap<JobId, Vec<(u32, u32)>> = BTreeMap::new();
        let mut returned: BTreeMap<JobId, u64> = BTreeMap::new();
        self.queue.for_each_entry(|_, job, fresh| match fresh {
            Some(range) => ranges.entry(job).or_default().push((range.next, range.end)),
            None => *returned.entry(job).or_default() += 1,
        });
        for (job, held) in self.horizon.held().chain(self.deps.entries()) {
            let fresh = held.fresh.iter().map(|range| (range.next, range.end));
            ranges.entry(job).or_default().extend(fresh);
            *returned.entry(job).or_default() += held.returned.len() as u64;
        }
        ranges
            .values_mut()
            .for_each(|ranges| ranges.sort_unstable());
        let mut queued: BTreeMap<JobId, u64> = BTreeMap::new();
        for (task, record) in &self.tasks {
            if record.phase == Phase::Queued {
                *queued.entry(record.job).or_default() += 1;
            }
            let index = record.index;
            let holds = ranges.get(&record.job).is_some_and(|ranges| {
                let at = ranges.partition_point(|&(_, end)| end <= index);
                ranges.get(at).is_some_and(|&(next, _)| next <= index)
            });
            if holds {
                return Err(ConsistencyError::Task {
                    task: *task,
                    problem: "has a record but is in a fresh range",
                });
            }
        }
        for job in ranges.keys().chain(returned.keys()) {
            if self
                .job(*job)
                .is_none_or(|record| record.counts.is_finished())
            {
                return job_error(*job, "queued entries of a finished or unknown job");
            }
        }
        for (position, record) in self.jobs.live() {
            let job = JobId(position as u32 + 1);
            let ranges = ranges.get(&job).map_or(&[][..], |ranges| &ranges[..]);
            if ranges.iter().any(|&(next, end)| next >= end)
                || ranges.windows(2).any(|pair| pair[0].1 > pair[1].0)
                || ranges
                    .last()
                    .is_some_and(|&(_, end)| end > record.counts.count)
            {
                return job_error(job, "fresh ranges empty, overlapping or outside the job");
            }
            let fresh: u64 = ranges
                .iter()
                .map(|&(next, end)| u64::from(end - next))
                .sum();
            let returned = returned.get(&job).copied().unwrap_or(0);
            if returned != queued.get(&job).copied().unwrap_or(0)
                || fresh + returned != u64::from(record.counts.queued)
            {
                return job_error(job, "queued entries differ from its queued tasks");
            }
        }
        Ok(())
    }

    /// Every live gang attempt spans its job's node count of distinct live nodes, its
    /// leader first, each holding it; the gang queue lists exactly the unfinished gang
    /// jobs; a reservation holds the head's node count of distinct nodes.
    fn check_gangs(&self) -> Result<(), ConsistencyError> {
        let attempt_error = |attempt, problem| Err(ConsistencyError::Attempt { attempt, problem });
        for (attempt, members) in &self.gangs.members {
            let Some(live) = self.attempts.get(attempt) else {
                return attempt_error(*attempt, "gang members of an attempt that is not live");
            };
            let job = self.tasks[&live.task].job;
            let size = self.gang_size(job);
            if size != Some(members.len() as u32) || members.first() != Some(&live.node) {
                return attempt_error(*attempt, "gang members differ from its job's gang");
            }
            let distinct: BTreeSet<NodeId> = members.iter().copied().collect();
            if distinct.len() != members.len() {
                return attempt_error(*attempt, "a node twice in one gang");
            }
            if members.iter().any(|node| {
                self.nodes
                    .get(*node)
                    .is_none_or(|record| !record.attempts.contains(attempt))
            }) {
                return attempt_error(*attempt, "a gang member does not hold it");
            }
        }
        for (attempt, live) in &self.attempts {
            let job = self.tasks[&live.task].job;
            if self.gang_size(job).is_some() != self.gangs.members.contains_key(attempt) {
                return attempt_error(*attempt, "gang attempt without members, or the reverse");
            }
        }
        for (position, record) in self.jobs.live() {
            let job = JobId(position as u32 + 1);
            let gang = matches!(
                self.shapes.placement(record.spec.shape),
                Placement::Gang { .. }
            );
            let listed = self
                .gangs
                .jobs
                .contains(&(std::cmp::Reverse(record.spec.priority), job));
            if listed != (gang && !record.counts.is_finished()) {
                return Err(ConsistencyError::Job {
                    job,
                    problem: "gang queue disagrees with its placement or state",
                });
            }
        }
        if let Some(attempt) = self
            .gangs
            .returning
            .iter()
            .find(|attempt| !self.attempts.contains_key(*attempt))
        {
            return attempt_error(*attempt, "asked back but not live");
        }
        if let Some(held) = &self.gangs.reservation {
            let size = self.gang_size(held.job).unwrap_or(0) as usize;
            if held.nodes.len() != size || held.nodes.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(ConsistencyError::Job {
                    job: held.job,
                    problem: "reservation is not its node count of distinct nodes",
                });
            }
        }
        Ok(())
    }

    fn check_attempt(&self, attempt: AttemptId, task: TaskId) -> Result<(), ConsistencyError> {
        let Some(live) = self.attempts.get(&attempt) else {
            return Err(ConsistencyError::Task {
                task,
                problem: "in flight under an attempt that is not live",
            });
        };
        if live.task != task {
            return Err(ConsistencyError::Attempt {
                attempt,
                problem: "live attempt names another task",
            });
        }
        match self.nodes.get(live.node) {
            Some(node) if node.attempts.contains(&attempt) => Ok(()),
            _ => Err(ConsistencyError::Attempt {
                attempt,
                problem: "live attempt missing from its node",
            }),
        }
    }

    /// A rough estimate of the heap the core holds, in bytes: collections' capacities
    /// times element sizes, B-trees at an assumed fill. For memory tests and metrics.
    pub fn heap_estimate(&self) -> usize {
        let jobs = self.jobs.heap_bytes();
        let tasks = btree_bytes(
            self.tasks.len(),
            size_of::<TaskId>() + size_of::<TaskRecord>(),
        );
        let attempts =
            self.attempts.capacity() * (size_of::<AttemptId>() + size_of::<AttemptRecord>() + 1);
        let timers = btree_bytes(self.retry_timers.len(), size_of::<(Time, TaskId)>());
        let events = self.events.capacity() * size_of::<PendingEvent>();
        jobs + tasks
            + attempts
            + timers
            + events
            + self.queue.heap_bytes()
            + self.horizon.heap_bytes()
            + self.nodes.heap_bytes()
            + self.stragglers.heap_bytes()
            + self.work.heap_bytes()
            + self.scratch.capacity() * size_of::<crate::queue::Taken>()
    }
}
