//! Which slot takes which attempt, and how attempts end: finished, cancelled queued or
//! running, given back, lost with their slot's thread, or all stopped at once.

use std::sync::Arc;

use saker_wire::ItemWritten;
use saker_wire::messages::{
    AttemptId, JobDef, Outcome, Output, Resources, ResultBody, Started, TaskResult,
};

use super::{Board, Effect, Moment, Next, Run, Running, SlotState, Start};
use crate::attempt::{Finished, Queued};

impl Board {
    /// What idle slot `index` is to do: a gang part's process waiting for a slot,
    /// else the queue's first attempt if it fits what is free. A queued task of a job
    /// this node does not know is lost at once: its definition went to another life
    /// of this node (an agent restarted under the same node id while a route still
    /// led to the old one). The root replays it, sending the definition again, and
    /// never counts it as the task's own failure.
    pub fn poll_start(&mut self, index: usize, now: Moment) -> Option<Next> {
        let slot = self.slots.get(index)?;
        if !self.accepting || slot.running.is_some() || slot.state != SlotState::Up {
            return None;
        }
        // Gang parts' processes first: their resources are held already.
        if let Some(start) = self.start_part_process(index, now) {
            return Some(Next::Start(start));
        }
        loop {
            let queued = *self.queue.front()?;
            let assignment = queued.assignment;
            let Some(job) = self.jobs.get(&assignment.job).cloned() else {
                self.queue.pop_front();
                let reason = format!("unknown job {} on this agent", assignment.job);
                self.fail_unstarted(&queued, Outcome::Lost { reason }, now);
                continue;
            };
            // Every task holds at least a core (the root never sends one needing none).
            let needs = Board::needs_of(&job);
            if !needs.fits_in(&self.capacity) {
                // The root never sends work a node cannot hold: a protocol error.
                self.queue.pop_front();
                let reason = format!("needs {needs}; this node offers {}", self.capacity);
                self.fail_unstarted(&queued, Outcome::SpawnFailed { reason }, now);
                continue;
            }
            // What its running attempts leave free: else it waits for one to end.
            let free = self.free.checked_sub(needs)?;
            if !job.reads.is_empty() {
                match self.checked.take() {
                    Some((checked, missing)) if checked == assignment.attempt => {
                        if let Some(item) = missing {
                            // Fetched first; it comes back to the queue's head when whole.
                            self.queue.pop_front();
                            self.fetches.stage(&item, queued, now.unix_us);
                            continue;
                        }
                    }
                    _ => {
                        let attempt = assignment.attempt;
                        return Some(Next::CheckItems { attempt, job });
                    }
                }
            }
            self.queue.pop_front();
            let binding = self.devices.take(
                index,
                needs.core_count(),
                needs.gpu_count(),
                needs.memory_mib(),
            );
            let slot = &mut self.slots[index];
            slot.running = Some(Running {
                assignment,
                received_us: queued.received_us,
                fetch_us: queued.fetch_us,
                needs,
                started_us: now.unix_us,
                part: None,
            });
            slot.binding = binding.clone();
            self.free = free;
            self.pending.started.push(Started {
                task: assignment.task,
                attempt: assignment.attempt,
                executor: index as u32,
                at_unix_us: now.unix_us,
            });
            return Some(Next::Start(Start {
                slot: index,
                attempt: assignment.attempt,
                binding,
                run: Run::Task {
                    assignment,
                    job,
                    cores: needs.core_count(),
                },
            }));
        }
    }

    /// The shell's answer to [`Next::CheckItems`]: the first item `attempt`'s job reads
    /// that this node must fetch before it starts, or `None` if all are here.
    pub fn handle_items_checked(&mut self, attempt: AttemptId, missing: Option<String>) {
        self.checked = Some((attempt, missing));
    }

    /// The slot's thread could not take the attempt just started on slot `index` (it
    /// has failed, and its fault is on its way): a task goes back to the head of the
    /// queue as if never started; a gang part's process ends lost, as it would have
    /// had it started on that thread.
    pub fn handle_unstart(&mut self, index: usize, now: Moment) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let Some(running) = slot.running.take() else {
            return;
        };
        let binding = std::mem::take(&mut slot.binding);
        if let Some(number) = running.part {
            let reason = format!("slot {index} failed before the process started");
            let lost = lost(running.started_us, now, reason);
            self.part_process_ended(number, running.assignment.attempt, lost, now);
            return;
        }
        self.devices.release(&binding);
        self.free = self.free.saturating_add(running.needs);
        self.pending
            .started
            .retain(|s| s.attempt != running.assignment.attempt);
        let mut again = Queued::new(running.assignment, running.received_us);
        again.fetch_us = running.fetch_us;
        self.queue.push_front(again);
    }

    /// If attempt `attempt` is what slot `index` (of executor `generation`) runs, as a
    /// task whose job writes data items: that job, for the shell to look for what it
    /// wrote before [`Board::handle_attempt_done`].
    pub fn job_writing(
        &self,
        index: usize,
        generation: u64,
        attempt: AttemptId,
    ) -> Option<&Arc<JobDef>> {
        let slot = self.slots.get(index)?;
        let running = slot.running.filter(|running| {
            slot.generation == generation
                && running.assignment.attempt == attempt
                && running.part.is_none()
        })?;
        self.jobs
            .get(&running.assignment.job)
            .filter(|job| !job.writes.is_empty())
    }

    /// Attempt `attempt` on slot `index` (of executor `generation`) ended, having
    /// written `written` if it was to write data items (see [`Board::job_writing`]).
    /// Records the result; returns whether the attempt was still this slot's business
    /// (then the slot is idle: poll it for its next start). A result from an attempt
    /// the slot no longer runs (its thread failed and the attempt was already reported
    /// lost) is dropped.
    pub fn handle_attempt_done(
        &mut self,
        index: usize,
        generation: u64,
        attempt: AttemptId,
        mut finished: Finished,
        written: Option<Result<Vec<ItemWritten>, super::ItemError>>,
        now: Moment,
    ) -> bool {
        let Some(slot) = self.slots.get_mut(index) else {
            return false;
        };
        if slot.generation != generation
            || slot.running.is_none_or(|r| r.assignment.attempt != attempt)
        {
            return false;
        }
        let Some(running) = slot.running.take() else {
            return false;
        };
        let binding = std::mem::take(&mut slot.binding);
        if let Some(number) = running.part {
            self.part_process_ended(number, attempt, finished, now);
            return true;
        }
        self.devices.release(&binding);
        self.free = self.free.saturating_add(running.needs);
        self.give_back(running.needs);
        self.note_run_time(&finished);
        if matches!(finished.outcome, Outcome::Exited { code: 0 })
            && let Some(written) = written
            && let Err(error) = self.fetches.note_written(attempt, written)
        {
            let reason = crate::error_chain(&error);
            finished.outcome = Outcome::SpawnFailed { reason };
        }
        self.pending.results.push(TaskResult {
            task: running.assignment.task,
            attempt,
            executor: index as u32,
            outcome: finished.outcome,
            received_unix_us: running.received_us,
            start_unix_us: finished.start_unix_us,
            end_unix_us: finished.end_unix_us,
            fetch_us: running.fetch_us,
            body: finished.body.unwrap_or(ResultBody::Command {
                stdout: finished.stdout,
                stderr: finished.stderr,
            }),
        });
        if self.away {
            self.held_while_away();
        }
        true
    }

    /// The root asks `attempt` back if it waits in the queue (answered `Cancelled` at
    /// once, its credit returned); a started one runs on. The root asks when it
    /// reserves this node for a gang.
    pub fn handle_return(&mut self, attempt: AttemptId, now: Moment) {
        if let Some(staged) = self.fetches.unstage(attempt) {
            self.queue.push_front(staged);
        }
        if self.queue.iter().any(|a| a.attempt == attempt) {
            self.handle_cancel(attempt, now);
        }
    }

    /// Cancels `attempt`: a queued one is answered at once; a running one is stopped
    /// (its runner reports it).
    pub fn handle_cancel(&mut self, attempt: AttemptId, now: Moment) {
        if self.cancel_part(attempt, now) {
            return;
        }
        if let Some(staged) = self.fetches.unstage(attempt) {
            self.queue.push_front(staged);
        }
        if let Some(position) = self.queue.iter().position(|a| a.attempt == attempt) {
            let Some(queued) = self.queue.remove(position) else {
                return;
            };
            self.fail_unstarted(&queued, Outcome::Cancelled, now);
            return;
        }
        for (slot, running) in self.slots.iter().enumerate() {
            if running
                .running
                .is_some_and(|r| r.assignment.attempt == attempt)
            {
                self.effects.push_back(Effect::Cancel { slot, attempt });
            }
        }
    }

    /// Drops the queue and stops everything running (the root replays this node's work).
    pub fn handle_stop_all(&mut self, now: Moment) {
        self.queue.clear();
        for item in self.fetches.stop_all() {
            self.effects.push_back(Effect::DiscardItem { item });
        }
        self.cancel_all_parts(now);
        for (slot, running) in self.slots.iter().enumerate() {
            // Parts' processes are stopped with their parts.
            if let Some(running) = running.running.filter(|r| r.part.is_none()) {
                let attempt = running.assignment.attempt;
                self.effects.push_back(Effect::Cancel { slot, attempt });
            }
        }
    }

    /// The thread of slot `index` failed: the slot is down, its attempt is reported
    /// lost (letting go of it kills it) and a later report of the old thread is
    /// ignored.
    pub fn handle_slot_lost(&mut self, index: usize, reason: String, now: Moment) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        slot.generation += 1;
        self.effects.push_back(Effect::Detach { slot: index });
        let binding = std::mem::take(&mut slot.binding);
        if slot.state == SlotState::Up {
            slot.state = SlotState::Down;
        }
        let running = slot.running.take();
        if self.report_clock == Some(index) {
            // The old thread no longer keeps it; the agent paces what is pending.
            self.report_clock = None;
        }
        let Some(running) = running else {
            return;
        };
        if let Some(number) = running.part {
            let lost = lost(running.started_us, now, reason);
            self.part_process_ended(number, running.assignment.attempt, lost, now);
            return;
        }
        self.devices.release(&binding);
        self.free = self.free.saturating_add(running.needs);
        self.give_back(running.needs);
        self.pending.results.push(TaskResult {
            task: running.assignment.task,
            attempt: running.assignment.attempt,
            executor: index as u32,
            outcome: Outcome::Lost { reason },
            received_unix_us: running.received_us,
            start_unix_us: running.started_us,
            end_unix_us: now.unix_us,
            fetch_us: running.fetch_us,
            body: ResultBody::Command {
                stdout: Output::default(),
                stderr: Output::default(),
            },
        });
    }

    /// A fresh thread runs slot `index` (down until now).
    pub fn handle_slot_up(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && slot.state == SlotState::Down
        {
            slot.state = SlotState::Up;
        }
    }

    /// Slot `index` (down) is given up; returns how many slots are not.
    pub fn handle_slot_given_up(&mut self, index: usize) -> usize {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.state = SlotState::GivenUp;
        }
        self.slots
            .iter()
            .filter(|slot| slot.state != SlotState::GivenUp)
            .count()
    }

    /// Answers a queued attempt that never started with `outcome`, and gives back its
    /// credit.
    pub(super) fn fail_unstarted(&mut self, assignment: &Queued, outcome: Outcome, now: Moment) {
        let needs = self
            .jobs
            .get(&assignment.job)
            .map_or(Resources::cores(1), |job| Board::needs_of(job));
        self.give_back(needs);
        self.pending.results.push(TaskResult {
            task: assignment.task,
            attempt: assignment.attempt,
            executor: u32::MAX,
            outcome,
            received_unix_us: assignment.received_us,
            start_unix_us: now.unix_us,
            end_unix_us: now.unix_us,
            fetch_us: assignment.fetch_us,
            body: ResultBody::Command {
                stdout: Output::default(),
                stderr: Output::default(),
            },
        });
    }
}

/// A process that was started at `started_us` and is lost at `now` for `reason`.
fn lost(started_us: u64, now: Moment, reason: String) -> Finished {
    Finished {
        outcome: Outcome::Lost { reason },
        start_unix_us: started_us,
        end_unix_us: now.unix_us,
        stdout: Output::default(),
        stderr: Output::default(),
        body: None,
    }
}
