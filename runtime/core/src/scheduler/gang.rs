//! Gangs: jobs whose every task runs on `nodes` distinct nodes at once
//! ([`Placement::Gang`](crate::Placement)), and the reservation that keeps them from
//! starving behind small work.
//!
//! A gang's task has one attempt that spans all its member nodes (the first is the
//! group's leader). It is placed whole, only on nodes whose *free* capacity (capacity
//! minus what live attempts hold) and credit both cover its need: credit alone may
//! include an agent's prefetch margin, and a member that had to queue behind
//! prefetched work would start late. It ends whole: one result for the attempt frees
//! every member; the loss of any member node ends it on all of them
//! ([`Event::CancelAttempt`] to each survivor) and replays the task.
//!
//! **Order.** Gangs wait in the ready queue like other work (priority, deadline
//! holding, waiting and cancellation apply unchanged), but single-node dispatch skips them;
//! this pass places them, before single-node work, in (priority, submission) order,
//! as long as no queued single-node work has a higher priority.
//!
//! **Reservation (EASY backfill).** The first queued gang that cannot start now (the
//! *head*) reserves the `nodes` nodes expected to have its need free soonest, judged
//! from the time limits of what runs there (an attempt not yet started counts from
//! now). A reserved node takes single-node work of the head's priority or lower only
//! if that work has a time limit and ends by the expected start, and never more than
//! it has free (no prefetch); work of higher priority is not held back. Work without
//! a time limit is never backfilled onto a reserved node, so a reserved node running
//! such work holds the gang until it ends (the expected start is then unknown).
//! Other gangs may start meanwhile only on unreserved nodes. The head therefore starts
//! no later than the longest time limit on its nodes when it was made head (plus any
//! work without a limit already running there), unless higher-priority work arrives.
//! The reservation is made again when the head changes or one of its nodes is lost.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};

use super::{Core, PendingEvent, slot};
use crate::config::Placement;
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::{Assignment, Dispatch, Disposition, Event, GangReservation};
use crate::queue::ReturnedTask;
use crate::resources::Resources;
use crate::task::{AttemptRecord, Bucket, Phase, TaskRecord};

/// How many queued gangs one [`Core::poll_dispatch`] tries to place. Bounds the cost
/// of a dispatch when many gangs wait; those further back wait for the ones ahead.
const SCAN: usize = 16;

/// The gang state of a [`Core`].
#[derive(Debug, Default)]
pub(super) struct Gangs {
    /// Gang jobs not yet finished, in placement order.
    pub(super) jobs: BTreeSet<(Reverse<i32>, JobId)>,
    /// The member nodes of each live gang attempt, leader first.
    pub(super) members: HashMap<AttemptId, Box<[NodeId]>>,
    pub(super) reservation: Option<Reservation>,
    /// Attempts a node was asked to give back unstarted (it is reserved for a gang,
    /// or their job was given a later time or a limit past the deadline).
    pub(super) returning: HashSet<AttemptId>,
    /// Nodes lost under a gang job's attempts (ids that may join again as new
    /// nodes): its replays go elsewhere when enough other nodes are free.
    pub(super) avoid: HashMap<JobId, BTreeSet<NodeId>>,
}

/// Nodes held for the head gang.
#[derive(Debug)]
pub(super) struct Reservation {
    pub(super) job: JobId,
    pub(super) priority: i32,
    /// Ascending.
    pub(super) nodes: Vec<NodeId>,
    pub(super) start: Option<Time>,
    /// Reserved nodes kept out of the rotation because they could take nothing;
    /// they go back when the reservation ends.
    pub(super) aside: Vec<NodeId>,
}

impl Reservation {
    pub(super) fn holds(&self, node: NodeId) -> bool {
        self.nodes.binary_search(&node).is_ok()
    }
}

impl Core {
    /// Nodes per task if `job` is a gang.
    pub(super) fn gang_size(&self, job: JobId) -> Option<u32> {
        match self.shapes.placement(self.jobs[slot(job)].spec.shape) {
            Placement::Single | Placement::Node { .. } => None,
            Placement::Gang { nodes } => Some(nodes),
        }
    }

    /// A job enters the queue (at submission, or once what it waited for has ended): a
    /// gang joins the gang queue. New work may be admitted on the nodes a reservation
    /// set aside, so they go back to the rotation.
    pub(super) fn note_gang(&mut self, job: JobId, priority: i32, placement: Placement) {
        if matches!(placement, Placement::Gang { .. }) {
            self.gangs.jobs.insert((Reverse(priority), job));
            self.nodes.index_free(true);
        }
        self.restore_aside();
    }

    /// A job waits (for other jobs, or its time): a gang is listed already, so that it
    /// stays listed while it waits again after an update; dispatch skips it meanwhile.
    pub(super) fn list_gang(&mut self, job: JobId) {
        let spec = self.jobs[slot(job)].spec;
        if matches!(self.shapes.placement(spec.shape), Placement::Gang { .. }) {
            self.gangs.jobs.insert((Reverse(spec.priority), job));
            self.nodes.index_free(true);
        }
    }

    /// A gang attempt of `job` lost its member `node`: replays go elsewhere if they can.
    pub(super) fn note_lost_member(&mut self, job: JobId, node: NodeId) {
        self.gangs.avoid.entry(job).or_default().insert(node);
    }

    /// A gang job's priority changed: its place in the gang queue moves.
    pub(super) fn move_gang(&mut self, job: JobId, from: i32, to: i32) {
        if self.gangs.jobs.remove(&(Reverse(from), job)) {
            self.gangs.jobs.insert((Reverse(to), job));
        }
    }

    /// A finished job leaves the gang queue; the free-capacity index goes with the last.
    pub(super) fn forget_gang(&mut self, job: JobId, priority: i32) {
        self.gangs.avoid.remove(&job);
        if self.gangs.jobs.remove(&(Reverse(priority), job)) && self.gangs.jobs.is_empty() {
            self.nodes.index_free(false);
        }
    }

    /// The member nodes of a live gang attempt, leader first.
    pub fn gang_members(&self, attempt: AttemptId) -> Option<&[NodeId]> {
        self.gangs.members.get(&attempt).map(|members| &members[..])
    }

    /// Gang tasks queued (waiting to start whole) and gang attempts in flight.
    pub fn gang_counts(&self) -> (u64, u64) {
        let waiting = self
            .gangs
            .jobs
            .iter()
            .map(|&(_, job)| u64::from(self.jobs[slot(job)].counts.queued))
            .sum();
        (waiting, self.gangs.members.len() as u64)
    }

    /// Nodes per task of the widest gang job with tasks queued (0 without one): what an
    /// elastic pilot must have at least for it to start.
    pub fn widest_queued_gang(&self) -> u32 {
        self.gangs
            .jobs
            .iter()
            .filter(|&&(_, job)| self.jobs[slot(job)].counts.queued > 0)
            .filter_map(|&(_, job)| self.gang_size(job))
            .max()
            .unwrap_or(0)
    }

    /// The nodes currently held for the head gang, if any.
    pub fn reservation(&self) -> Option<GangReservation> {
        self.gangs
            .reservation
            .as_ref()
            .map(|reservation| GangReservation {
                job: reservation.job,
                nodes: reservation.nodes.clone(),
                start: reservation.start,
            })
    }

    /// Places the first queued gang that can start now, if any; otherwise makes sure
    /// the head gang has its reservation. Called first by [`Core::poll_dispatch`].
    pub(super) fn dispatch_gang(&mut self) -> Option<Dispatch> {
        if self.gangs.jobs.is_empty() {
            return None;
        }
        let candidates: Vec<(i32, JobId)> = self
            .gangs
            .jobs
            .iter()
            .map(|&(Reverse(priority), job)| (priority, job))
            .filter(|&(_, job)| {
                self.jobs[slot(job)].counts.queued > 0
                    && !self.horizon.is_held(job)
                    && !self.deps.is_waiting(job)
            })
            .take(SCAN)
            .collect();
        let Some(&(head_priority, head)) = candidates.first() else {
            self.release_reservation();
            return None;
        };
        let top_single = self.queue.top_priority();
        let mut head_blocked = false;
        for (priority, job) in candidates {
            if top_single.is_some_and(|top| top > priority) {
                break;
            }
            let need = self.shapes.resources(self.jobs[slot(job)].spec.shape);
            // Invariant: candidates are gang jobs.
            let size = self.gang_size(job).expect("a gang job") as usize;
            let reservation = self.gangs.reservation.as_ref();
            let held =
                |node: NodeId| head_blocked && reservation.is_some_and(|held| held.holds(node));
            // A replay prefers nodes other than those its earlier attempts lost.
            let avoid = self.gangs.avoid.get(&job);
            let mut chosen: Vec<NodeId> = self
                .nodes
                .free_for(need, |node| {
                    held(node) || avoid.is_some_and(|lost| lost.contains(&node))
                })
                .take(size)
                .collect();
            if chosen.len() < size && avoid.is_some() {
                chosen = self.nodes.free_for(need, held).take(size).collect();
            }
            if chosen.len() == size {
                return Some(self.start_gang(job, priority, need, chosen));
            }
            head_blocked = true;
        }
        self.ensure_reservation(head, head_priority);
        None
    }

    /// Creates the attempt of one queued task of gang `job` on `members`.
    fn start_gang(
        &mut self,
        job: JobId,
        priority: i32,
        need: Resources,
        members: Vec<NodeId>,
    ) -> Dispatch {
        let (mut fresh, mut returned) = self.queue.remove_job(job, priority);
        let attempt = AttemptId(self.next_attempt);
        self.next_attempt += 1;
        let (task, index) = if returned.is_empty() {
            // Invariant: the job has queued tasks and is not held, so they are in the
            // queue: returned ones or a fresh range.
            let index = fresh
                .iter()
                .next()
                .expect("a queued gang has tasks in the queue")
                .next;
            fresh.take_index(index);
            let task = self.jobs[slot(job)].task(index);
            self.tasks.insert(
                task,
                TaskRecord {
                    job,
                    index,
                    attempts: 1,
                    failures: 0,
                    replays: 0,
                    phase: Phase::dispatched(attempt),
                },
            );
            self.queue
                .restore(priority, fresh.into_iter().collect(), Vec::new());
            (task, index)
        } else {
            let first = returned.remove(0);
            // Invariant: a returned task has a queued record.
            let record = self
                .tasks
                .get_mut(&first.task)
                .expect("returned task has a record");
            record.attempts += 1;
            record.phase = Phase::dispatched(attempt);
            let index = record.index;
            self.queue
                .restore(priority, fresh.into_iter().collect(), returned);
            (first.task, index)
        };
        let record = &mut self.jobs[slot(job)];
        record.shift(
            &mut self.counts,
            &mut self.work,
            Bucket::Queued,
            Bucket::Assigned,
            1,
        );
        let limit = record.spec.time_limit;
        for &node in &members {
            self.nodes.debit(node, need);
            self.nodes.attach(node, attempt, need);
        }
        self.attempts
            .insert(attempt, AttemptRecord::new(task, members[0], limit));
        self.gangs
            .members
            .insert(attempt, members.clone().into_boxed_slice());
        // The reservation is spent when its gang starts, and stale when a gang ahead of
        // it (a replay, a higher priority) took some of its nodes: made again then.
        if self
            .gangs
            .reservation
            .as_ref()
            .is_some_and(|held| held.job == job || members.iter().any(|node| held.holds(*node)))
        {
            self.release_reservation();
        }
        Dispatch {
            node: members[0],
            assignments: vec![Assignment {
                task,
                attempt,
                job,
                index,
            }],
            members,
        }
    }

    /// Keeps the reservation if it is for `head` and all its nodes are live; makes it
    /// anew otherwise.
    fn ensure_reservation(&mut self, head: JobId, priority: i32) {
        if let Some(held) = &self.gangs.reservation
            && held.job == head
            && held
                .nodes
                .iter()
                .all(|&node| self.nodes.get(node).is_some())
        {
            return;
        }
        self.release_reservation();
        let need = self.shapes.resources(self.jobs[slot(head)].spec.shape);
        // Invariant: the head is a gang job.
        let size = self.gang_size(head).expect("a gang job") as usize;
        let mut expected: Vec<(Option<Time>, NodeId)> = self
            .nodes
            .iter()
            .filter(|(_, record)| need.fits_in(&record.capacity))
            .map(|(node, record)| {
                let at = self.free_at(record.capacity, &record.attempts, need);
                (at, node)
            })
            .collect();
        if expected.len() < size {
            return; // it cannot run on the nodes there are; nothing to hold
        }
        // Known times first, earliest first; ties by node id (no hash order leaks).
        expected.sort_unstable_by_key(|&(at, node)| (at.is_none(), at, node));
        expected.truncate(size);
        let start = expected
            .iter()
            .map(|&(at, _)| at)
            .try_fold(Time::ZERO, |latest, at| at.map(|at| latest.max(at)));
        let mut nodes: Vec<NodeId> = expected.into_iter().map(|(_, node)| node).collect();
        nodes.sort_unstable();
        for &node in &nodes {
            self.ask_back_unstarted(node);
        }
        self.gangs.reservation = Some(Reservation {
            job: head,
            priority,
            nodes,
            start,
            aside: Vec::new(),
        });
    }

    /// When a node of `capacity` with `attempts` live will have `need` free, if the
    /// attempts end by their time limits; `None` if that needs one without a limit.
    ///
    /// Attempts the node has started (and gang parts, which never queue) hold their
    /// resources until their limits. Those not known to have started wait in the
    /// agent's queue and are asked back (`Event::ReturnUnstarted`), but the ones at its
    /// head that fit the cores free now may start before the request arrives: they
    /// count as running from now to their limits. The rest will be given back.
    fn free_at(
        &self,
        capacity: Resources,
        attempts: &BTreeSet<AttemptId>,
        need: Resources,
    ) -> Option<Time> {
        let mut ends: Vec<(Option<Time>, Resources)> = Vec::new();
        let mut queued = Vec::new();
        let mut held = Resources::ZERO;
        for attempt in attempts {
            // Invariant: a node's attempt set holds live attempts with records.
            let live = &self.attempts[attempt];
            let job = &self.jobs[slot(self.tasks[&live.task].job)];
            let resources = self.shapes.resources(job.spec.shape);
            let limit = live.limit();
            let started =
                live.started()
                    .or(self.gangs.members.contains_key(attempt).then_some(self.now));
            match started {
                Some(from) => {
                    held = held.saturating_add(resources);
                    let end = limit.map(|limit| from.saturating_add_micros(limit).max(self.now));
                    ends.push((end, resources));
                }
                None => queued.push((limit, resources)),
            }
        }
        let mut free = capacity.checked_sub(held).unwrap_or(Resources::ZERO);
        // The queue's head, in dispatch order, as far as it fits what is free now.
        for (limit, resources) in queued {
            let Some(left) = free.checked_sub(resources) else {
                break;
            };
            free = left;
            ends.push((
                limit.map(|limit| self.now.saturating_add_micros(limit)),
                resources,
            ));
        }
        if need.fits_in(&free) {
            return Some(self.now);
        }
        ends.sort_unstable_by_key(|&(end, _)| (end.is_none(), end));
        for (end, resources) in ends {
            free = free.saturating_add(resources);
            if need.fits_in(&free) {
                return end;
            }
        }
        None
    }

    /// Asks a reserved node for the attempts it has not started (see
    /// [`Event::ReturnUnstarted`]).
    fn ask_back_unstarted(&mut self, node: NodeId) {
        let Some(record) = self.nodes.get(node) else {
            return;
        };
        let attempts: Vec<AttemptId> = record
            .attempts
            .iter()
            .copied()
            .filter(|attempt| {
                self.attempts[attempt].started().is_none()
                    && !self.gangs.members.contains_key(attempt)
                    && !self.gangs.returning.contains(attempt)
            })
            .collect();
        for attempt in attempts {
            self.gangs.returning.insert(attempt);
            self.events
                .push_back(PendingEvent::Ready(Event::ReturnUnstarted {
                    node,
                    attempt,
                }));
        }
    }

    /// A task whose attempt a reserved node gave back unstarted: queued again ahead of
    /// fresh work, counted neither as a failure nor as a replay.
    pub(super) fn requeue_given_back(&mut self, task: TaskId, from: Bucket) -> Disposition {
        // Invariant: callers pass a task that has a record.
        let record = self
            .tasks
            .get_mut(&task)
            .expect("given-back task has a record");
        record.attempts = record.attempts.saturating_sub(1);
        record.phase = Phase::Queued;
        let job_id = record.job;
        let job = &mut self.jobs[slot(job_id)];
        job.shift(&mut self.counts, &mut self.work, from, Bucket::Queued, 1);
        self.requeue(ReturnedTask { task, job: job_id });
        Disposition::Returned { task }
    }

    /// Ends the reservation and puts its set-aside nodes back in the rotation.
    pub(super) fn release_reservation(&mut self) {
        if let Some(held) = self.gangs.reservation.take() {
            for node in held.aside {
                self.nodes.restore(node);
            }
        }
    }

    /// Puts the reservation's set-aside nodes back in the rotation (new work may be
    /// admitted there), keeping the reservation.
    pub(super) fn restore_aside(&mut self) {
        if let Some(held) = &mut self.gangs.reservation {
            for node in held.aside.drain(..) {
                self.nodes.restore(node);
            }
        }
    }

    /// What a reserved `node` may take of `job` now: its resources if the job is
    /// single-node work of a higher priority than the reservation's, or has a time
    /// limit that ends by the expected start.
    pub(super) fn admitted(
        held: &Reservation,
        now: Time,
        priority: i32,
        limit: Option<u64>,
    ) -> bool {
        priority > held.priority
            || held
                .start
                .zip(limit)
                .is_some_and(|(start, limit)| now.saturating_add_micros(limit) <= start)
    }

    /// Ends a live gang attempt's hold on its members (the attempt is out of the live
    /// map); returns the members.
    pub(super) fn end_gang_attempt(
        &mut self,
        attempt: AttemptId,
        need: Resources,
    ) -> Option<Box<[NodeId]>> {
        if self.gangs.members.is_empty() {
            return None; // no hashing on the single-task path
        }
        let members = self.gangs.members.remove(&attempt)?;
        for &node in &members {
            self.nodes.detach(node, attempt, need);
        }
        Some(members)
    }
}
