//! Adoption: a new root takes over attempts that an earlier root dispatched
//! ([`Core::handle_adopt`]).
//!
//! After a takeover or a resume the core is rebuilt from the journal
//! ([`Core::handle_restore_job`]), which queues every unfinished task again, while
//! agents still run some of them. An agent lists the attempts it holds in its hello;
//! adopting one takes its task out of wherever the core keeps it waiting and puts it in
//! flight on that node as a dispatch there would, so the task runs once, not twice.
//! Each root numbers its attempts in its own term ([`AttemptId::first_of_term`]), so an
//! adopted id never meets one this core issues.

use std::collections::BTreeSet;

use super::{Core, slot};
use crate::config::Placement;
use crate::error::AdoptError;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::jobs::Located;
use crate::queue::QueuedTask;
use crate::task::{AttemptRecord, Bucket, CopySlot, Phase, TaskRecord};

/// Where a task that may be adopted waits.
enum Waits {
    /// For its retry backoff, until then.
    Delayed(Time),
    /// In its job's queue entries, wherever they are.
    Queued(QueuedTask),
}

impl Core {
    /// The term this core numbers its attempts in ([`CoreConfig::term`], 0 read as 1).
    ///
    /// [`CoreConfig::term`]: crate::CoreConfig::term
    pub fn term(&self) -> u32 {
        AttemptId::first_of_term(self.config.term).term()
    }

    /// `node` still runs (or has just finished) `attempt` of `task`, dispatched by an
    /// earlier root (`attempt` is of an earlier term, [`CoreConfig::term`]): the task
    /// is put in flight under `attempt` on `node` exactly as if [`Core::poll_dispatch`]
    /// had sent it there, so it runs once, not twice. Call it for each attempt an agent
    /// lists in its hello, once its node has joined and before the results it sends
    /// with it. `started`, if the agent had started it, is when (the driver's clock, as
    /// `now`; a later time counts as `now`): the attempt is then running, and its time
    /// limit and run time count from then.
    ///
    /// The task must be waiting to be dispatched: queued (fresh or back after an
    /// attempt, held past the deadline, aside until its job's time, pinned or waiting
    /// for the nodes it prefers) or waiting for its retry backoff. It leaves that place
    /// and is not dispatched again while the attempt lives. The node's resources in use
    /// grow by the task's need; its credit does not change (an agent grants credit only
    /// for what is free). Nothing is emitted or dispatched. From then on the attempt is
    /// like any other: [`Core::handle_started`], [`Core::handle_result`] (once; a second
    /// result is a duplicate), cancellation, node loss (it is replayed), time limits and
    /// speculation treat it as they treat the core's own.
    /// [`Counts::adopted`](crate::Counts::adopted) counts adoptions.
    ///
    /// Errors ([`AdoptError`]; nothing changes but the clock): the node is not live;
    /// the attempt is no root's, not of an earlier term, or live already; the task is
    /// unknown, finished, of a cancelled job, of a gang job (adopted with all its
    /// members, [`Core::handle_adopt_gang`]), in flight, or of a job waiting for other jobs. The driver then stops the attempt on
    /// its node; the task runs from the queue.
    ///
    /// [`CoreConfig::term`]: crate::CoreConfig::term
    pub fn handle_adopt(
        &mut self,
        node: NodeId,
        task: TaskId,
        attempt: AttemptId,
        started: Option<Time>,
        now: Time,
    ) -> Result<(), AdoptError> {
        self.observe(now);
        self.adopt_on(&[node], task, attempt, started)
    }

    /// The gang attempt `attempt` of `task` still runs (or has just ended) on
    /// `members` (leader first), as an earlier root dispatched it: it is put in flight
    /// there as [`Core::poll_dispatch`] would have placed it, so the job runs once.
    /// Call it once every member's agent has listed its part of the attempt in its
    /// hello. As [`Core::handle_adopt`] in all else: the task must be waiting to be
    /// dispatched; each member's resources in use grow by the job's need; from then on
    /// it is a gang attempt like any other (one result ends it on every member, the
    /// loss of a member replays it).
    ///
    /// Errors ([`AdoptError`]; nothing changes but the clock): those of
    /// [`Core::handle_adopt`] (any member not live), but the task must be of a gang job
    /// ([`AdoptError::NotGang`] otherwise) and `members` its distinct nodes, as many as
    /// the job's gang has ([`AdoptError::Members`]). The driver then stops every
    /// member's part; the task runs from the queue.
    pub fn handle_adopt_gang(
        &mut self,
        members: &[NodeId],
        task: TaskId,
        attempt: AttemptId,
        started: Option<Time>,
        now: Time,
    ) -> Result<(), AdoptError> {
        self.observe(now);
        self.adopt_on(members, task, attempt, started)
    }

    /// Adopts `attempt` of `task` on `members`: one node, or a gang's members.
    fn adopt_on(
        &mut self,
        members: &[NodeId],
        task: TaskId,
        attempt: AttemptId,
        started: Option<Time>,
    ) -> Result<(), AdoptError> {
        let (job, index, waits) = self.adoptable(members, task, attempt)?;
        let from = match waits {
            Waits::Delayed(not_before) => {
                self.retry_timers.remove(&(not_before, task));
                Bucket::Delayed
            }
            Waits::Queued(entry) => {
                // Where `requeue` puts a job's work: aside while the job waits, held
                // while it does not fit the deadline, else in the queue.
                let priority = self.jobs[slot(job)].spec.priority;
                let taken = if self.deps.is_waiting(job) {
                    self.deps.take_task(job, entry)
                } else if self.horizon.is_held(job) {
                    self.horizon.take_task(job, entry)
                } else {
                    self.queue.take_task(priority, job, entry)
                };
                if !taken {
                    debug_assert!(false, "queued task {task} is in no entry");
                    return Err(AdoptError::NotQueued { task });
                }
                Bucket::Queued
            }
        };
        let started = started.map(|at| at.min(self.now));
        let phase = Phase::InFlight {
            attempt,
            started: started.is_some(),
            copy: CopySlot::ABSENT,
        };
        match self.tasks.get_mut(&task) {
            Some(record) => {
                record.attempts += 1;
                record.phase = phase;
            }
            None => {
                let record = TaskRecord {
                    job,
                    index,
                    attempts: 1,
                    failures: 0,
                    replays: 0,
                    phase,
                };
                self.tasks.insert(task, record);
            }
        }
        let to = match started {
            Some(_) => Bucket::Running,
            None => Bucket::Assigned,
        };
        let record = &mut self.jobs[slot(job)];
        record.shift(&mut self.counts, &mut self.work, from, to, 1);
        let need = self.shapes.resources(record.spec.shape);
        let mut live = AttemptRecord::new(task, members[0], record.spec.time_limit);
        if let Some(at) = started {
            live.start(at);
        }
        self.attempts.insert(attempt, live);
        for &node in members {
            self.nodes.attach(node, attempt, need);
        }
        let gang = self.gang_size(job).is_some();
        if gang {
            self.gangs.members.insert(attempt, members.into());
        }
        if let Some(at) = started {
            self.index_started(attempt, task, at);
        }
        self.counts.adopted += 1;
        // A gang's reservation judged these nodes without the attempt (or was this
        // gang's own): made again at the next dispatch, with it.
        if self.gangs.reservation.as_ref().is_some_and(|held| {
            (gang && held.job == job) || members.iter().any(|&node| held.holds(node))
        }) {
            self.release_reservation();
        }
        Ok(())
    }

    /// Whether `attempt` of `task` may be adopted on `members` (one node, or a gang's
    /// members): its job, its index and where it waits, or why not. Changes nothing.
    fn adoptable(
        &self,
        members: &[NodeId],
        task: TaskId,
        attempt: AttemptId,
    ) -> Result<(JobId, u32, Waits), AdoptError> {
        if let Some(&node) = members.iter().find(|&&node| self.nodes.get(node).is_none()) {
            return Err(AdoptError::UnknownNode { node });
        }
        if attempt.number() == 0 {
            return Err(AdoptError::InvalidAttempt { attempt });
        }
        let term = self.term();
        if attempt.term() >= term {
            return Err(AdoptError::NotEarlierTerm { attempt, term });
        }
        if let Some(live) = self.attempts.get(&attempt) {
            let task = live.task;
            return Err(AdoptError::AttemptLive { attempt, task });
        }
        let (job, record, index) = match self.locate(task) {
            None => return Err(AdoptError::UnknownTask { task }),
            Some(Located::Finished) => return Err(AdoptError::Finished { task }),
            Some(Located::Live(job, record, index)) => (job, record, index),
        };
        if record.counts.cancel_requested {
            return Err(AdoptError::Cancelled { task, job });
        }
        if record.is_finished_index(index) {
            return Err(AdoptError::Finished { task });
        }
        match (self.shapes.placement(record.spec.shape), members.len()) {
            (Placement::Gang { .. }, 1) => return Err(AdoptError::Gang { task, job }),
            (Placement::Gang { nodes }, got) => {
                let distinct = members.iter().collect::<BTreeSet<_>>().len();
                if got != nodes as usize || distinct != got {
                    let expected = nodes;
                    return Err(AdoptError::Members { task, expected });
                }
            }
            (_, 1) => {}
            _ => return Err(AdoptError::NotGang { task, job }),
        }
        let waits = match self.tasks.get(&task).map(|record| record.phase) {
            Some(Phase::InFlight { attempt, .. }) => {
                return Err(AdoptError::InFlight { task, attempt });
            }
            Some(Phase::Delayed { not_before }) => Waits::Delayed(not_before),
            Some(Phase::Queued) => Waits::Queued(QueuedTask::Returned(task)),
            None => Waits::Queued(QueuedTask::Fresh(index)),
        };
        if self.deps.waits_for_jobs(job) {
            return Err(AdoptError::WaitingForJobs { task, job });
        }
        Ok((job, index, waits))
    }
}
