//! The `poll_*` outputs of [`Core`].

use super::{Core, PendingEvent, needs, pinned_to, slot};
use crate::ids::{AttemptId, JobId, NodeId, TaskId, Time};
use crate::output::{Assignment, Dispatch, Event, TerminalState};
use crate::queue::Taken;
use crate::resources::{ResourceKind, Resources};
use crate::task::{AttemptRecord, Bucket, Phase, TaskRecord};

impl Core {
    /// The next event to act on, in the order the core produced them.
    pub fn poll_event(&mut self) -> Option<Event> {
        let Some(front) = self.events.front_mut() else {
            // Give back the memory of a burst (a mass cancellation, say).
            if self.events.capacity() > 4096 {
                self.events.shrink_to(256);
            }
            return None;
        };
        match front {
            PendingEvent::Ready(_) => match self.events.pop_front() {
                Some(PendingEvent::Ready(event)) => Some(event),
                _ => unreachable!("front was a ready event"),
            },
            PendingEvent::CancelledRange {
                job,
                first_task,
                next,
                end,
            } => {
                let index = *next;
                let event = Event::TaskFinished {
                    task: TaskId(first_task.0 + u64::from(index)),
                    job: *job,
                    index,
                    state: TerminalState::Cancelled,
                    attempts: 0,
                };
                *next += 1;
                if *next == *end {
                    self.events.pop_front();
                }
                Some(event)
            }
        }
    }

    /// When [`Core::handle_timeout`] next has work: the earliest of the retry backoff
    /// ends; with a deadline set, the next instant at which a job stops fitting it
    /// (so that its queued work is held and the work behind it reaches nodes waiting
    /// for it, and [`Counts::beyond_deadline`](crate::Counts::beyond_deadline) is
    /// current, without waiting for the next message); and, unless draining, the next
    /// instant a running attempt becomes a straggler (so that its copy can start).
    /// Always after [`Core::now`] unless a retry is due.
    pub fn poll_timeout(&self) -> Option<Time> {
        let retry = self.retry_timers.first().map(|&(not_before, _)| not_before);
        let straggler = if self.draining {
            None
        } else {
            self.stragglers.next_due()
        };
        [
            retry,
            self.horizon.next_change(),
            straggler,
            self.deps.next_timer(),
            self.locality.next_timer(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next bundle of work for one node, or `None` when no node with credit can take
    /// anything now (always `None` once draining). Call until `None` after every input.
    /// See [`Core`] for the policy; only work that fits the deadline is in the queue.
    /// When no node with credit has queued work it can run, a straggler may get a
    /// speculative copy: one assignment for a task already in flight elsewhere (see
    /// [`Speculation`](crate::Speculation)).
    pub fn poll_dispatch(&mut self) -> Option<Dispatch> {
        if self.draining {
            return None;
        }
        if let Some(dispatch) = self.dispatch_gang() {
            return Some(dispatch);
        }
        if !self.queue.is_empty()
            && let Some(dispatch) = self.dispatch_queued()
        {
            return Some(dispatch);
        }
        self.dispatch_copy()
    }

    /// The next bundle of queued work for one node, if any node can take some.
    fn dispatch_queued(&mut self) -> Option<Dispatch> {
        let limit = self.config.max_bundle.max(1) as usize;
        let mut taken = std::mem::take(&mut self.scratch);
        let mut dispatch = None;
        loop {
            let node = match self.nodes.next_in_rotation() {
                Some(node) => node,
                None => {
                    let (queue, needs) = (
                        &self.queue,
                        needs(&self.jobs, &self.shapes, &self.locality, None),
                    );
                    let Some(node) = self
                        .nodes
                        .unpark_one(|capacity| queue.need(capacity, needs))
                    else {
                        break;
                    };
                    node
                }
            };
            // Invariant: next_in_rotation returns live nodes.
            let record = self.nodes.get(node).expect("rotation node is live");
            taken.clear();
            let held = self
                .gangs
                .reservation
                .as_ref()
                .filter(|held| held.holds(node));
            let used = match held {
                None => {
                    // Work pinned here first: no other node can take it, and work
                    // ahead of it that this node cannot fit now must not park the
                    // node with it (nothing else would wake it).
                    let pinned = self
                        .pinned_waiting
                        .contains(&node)
                        .then(|| pinned_to(&self.jobs, &self.shapes, &self.locality, node));
                    let mut used = Resources::ZERO;
                    if let Some(pinned) = pinned {
                        if self.queue.need(&record.capacity, pinned).is_none() {
                            self.pinned_waiting.remove(&node);
                        } else {
                            used = self.queue.take(
                                &record.capacity,
                                record.credit,
                                limit,
                                pinned,
                                &mut taken,
                            );
                        }
                    }
                    let left = limit.saturating_sub(taken_tasks(&taken));
                    if left > 0
                        && let Some(credit) = record.credit.checked_sub(used)
                    {
                        // Spread before prefetching: beyond its free cores a node takes
                        // only what the free, credited cores of all nodes could not
                        // start now, or a burst smaller than the pilot would queue
                        // behind the first nodes' running work while the others idle
                        // (64 one-hour tasks on 8 × 8 slots once ran on half of them,
                        // in two rounds).
                        let spill = self
                            .queue
                            .tasks()
                            .saturating_sub(self.nodes.startable_cores());
                        let cap = u64::from(record.free().core_count()).saturating_add(spill);
                        let capped = u32::try_from(cap).is_ok_and(|cap| cap < credit.core_count());
                        let uncapped = credit;
                        let credit = if capped {
                            credit.with(ResourceKind::CORES, cap as u32)
                        } else {
                            credit
                        };
                        // Then what any node may take, seen as the search by capacity
                        // sees it (pinned work hidden), or a node it unparked could
                        // find nothing and be unparked again forever.
                        let more = self.queue.take(
                            &record.capacity,
                            credit,
                            left,
                            needs(&self.jobs, &self.shapes, &self.locality, None),
                            &mut taken,
                        );
                        used = used.saturating_add(more);
                        let refused = capped
                            && taken.is_empty()
                            && self
                                .queue
                                .need(
                                    &record.capacity,
                                    needs(&self.jobs, &self.shapes, &self.locality, None),
                                )
                                .is_some_and(|need| need.fits_in(&uncapped));
                        if refused {
                            // The cap alone kept the work off: it needs more than the
                            // node's free cores, so attempts of its own hold cores and
                            // will give credit back. Out of the rotation until then;
                            // parked, it would be unparked for the same work and
                            // refuse it again. Back when one of them ends,
                            // credit or not (its agent may have granted ahead).
                            self.nodes.set_aside_until_freed(node);
                            continue;
                        }
                    }
                    used
                }
                Some(held) => {
                    // Held for a gang: only what it has free (no prefetch), and only
                    // work that the reservation admits.
                    let (jobs, shapes, now) = (&self.jobs, &self.shapes, self.now);
                    let all = needs(jobs, shapes, &self.locality, Some(node));
                    let admitted = move |job: JobId| {
                        let spec = &jobs[slot(job)].spec;
                        all(job)
                            .filter(|_| Core::admitted(held, now, spec.priority, spec.time_limit))
                    };
                    self.queue.take(
                        &record.capacity,
                        record.credit.min_each(record.free()),
                        limit,
                        admitted,
                        &mut taken,
                    )
                }
            };
            if taken.is_empty() {
                match &mut self.gangs.reservation {
                    Some(held) if held.holds(node) => {
                        self.nodes.set_aside(node);
                        held.aside.push(node);
                    }
                    _ => self.nodes.park(node),
                }
                continue;
            }
            self.nodes.served(node, used);
            let assignments = self.assign(node, &taken);
            dispatch = Some(Dispatch {
                node,
                assignments,
                members: Vec::new(),
            });
            break;
        }
        taken.clear();
        self.scratch = taken;
        dispatch
    }

    /// Creates one attempt per taken task on `node`.
    fn assign(&mut self, node: NodeId, taken: &[Taken]) -> Vec<Assignment> {
        let mut assignments = Vec::with_capacity(taken_tasks(taken));
        for taken in taken {
            match *taken {
                Taken::Returned(returned) => {
                    let attempt = AttemptId(self.next_attempt);
                    self.next_attempt += 1;
                    // Invariant: a returned task has a queued record.
                    let record = self
                        .tasks
                        .get_mut(&returned.task)
                        .expect("returned task has a record");
                    record.attempts += 1;
                    record.phase = Phase::dispatched(attempt);
                    let index = record.index;
                    let job = &mut self.jobs[slot(returned.job)];
                    job.shift(
                        &mut self.counts,
                        &mut self.work,
                        Bucket::Queued,
                        Bucket::Assigned,
                        1,
                    );
                    let limit = job.spec.time_limit;
                    self.attempts
                        .insert(attempt, AttemptRecord::new(returned.task, node, limit));
                    let need = self.shapes.resources(job.spec.shape);
                    self.nodes.attach(node, attempt, need);
                    assignments.push(Assignment {
                        task: returned.task,
                        attempt,
                        job: returned.job,
                        index,
                    });
                }
                Taken::Fresh { job, start, end } => {
                    let record = &mut self.jobs[slot(job)];
                    let need = self.shapes.resources(record.spec.shape);
                    let limit = record.spec.time_limit;
                    record.shift(
                        &mut self.counts,
                        &mut self.work,
                        Bucket::Queued,
                        Bucket::Assigned,
                        end - start,
                    );
                    for index in start..end {
                        let task = record.task(index);
                        let attempt = AttemptId(self.next_attempt);
                        self.next_attempt += 1;
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
                        self.attempts
                            .insert(attempt, AttemptRecord::new(task, node, limit));
                        self.nodes.attach(node, attempt, need);
                        assignments.push(Assignment {
                            task,
                            attempt,
                            job,
                            index,
                        });
                    }
                }
            }
        }
        assignments
    }
}

/// Tasks in what a queue take returned.
fn taken_tasks(taken: &[Taken]) -> usize {
    taken
        .iter()
        .map(|taken| match *taken {
            Taken::Returned(_) => 1,
            Taken::Fresh { start, end, .. } => (end - start) as usize,
        })
        .sum()
}
