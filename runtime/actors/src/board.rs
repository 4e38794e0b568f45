//! The agent's local work board: its queue of assigned attempts, its slots and what it
//! has to report upward. Shared (behind one mutex) by the agent actor and the thread
//! of every slot, so that a slot whose attempt ends starts the next queued one at
//! once, and sends a report that is due, without waiting for the agent (that gap left
//! slots idle between short tasks).
//!
//! The agent still decides everything else: it starts work on idle slots, cancels,
//! stops and restarts; the board only keeps the books both sides must agree on.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use saker_wire::messages::{
    Assignment, AttemptId, FRAME_DATA_BUDGET, JobDef, JobId, NodeId, Outcome, Output, Payload,
    Report, ResourceKind, Resources, ResultBody, Started, TaskResult,
};

use crate::items::{Items, Received};
use crate::launch::build_launch;
use crate::process::{Control, Finished, Launch, StopHandle, unix_micros};
use crate::queued::Queued;
use crate::resources::{Binding, Devices, NodeResources};
use crate::worker::Call;

/// An attempt a slot is to start now: what to run and its side of the stop control.
#[derive(Debug)]
pub struct NextAttempt {
    pub attempt: AttemptId,
    pub work: Work,
    pub control: Arc<Control>,
    /// The CPUs, GPUs and memory limit it runs with.
    pub binding: Binding,
}

/// What an attempt runs on its slot.
#[derive(Debug)]
pub enum Work {
    /// A process of its own.
    Command(Box<Launch>),
    /// A call on the slot's persistent worker of its kind.
    Call(Box<Call>),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Running {
    pub assignment: Assignment,
    /// When the agent received it (see [`Queued`]).
    pub received_us: u64,
    pub needs: Resources,
    pub started_us: u64,
    /// Set for a process of a gang part (its number there); the part holds the
    /// resources, and reports one result for all its processes (see `crate::gang`).
    pub part: Option<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub running: Option<Running>,
    /// Stops the running attempt; dropping it stops it too.
    pub(crate) cancel: Option<StopHandle>,
    /// Bumped when the slot's thread failed: whatever that thread still reports is
    /// then ignored.
    pub generation: u64,
    pub state: SlotState,
    /// What the running attempt holds of the node's CPUs and GPUs.
    pub(crate) binding: Binding,
}

/// Whether a slot has a thread to run attempts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SlotState {
    #[default]
    Up,
    /// Its thread failed; the agent starts another after a backoff.
    Down,
    /// It failed too often (see [`crate::supervision`]): it runs nothing any more.
    GivenUp,
}

impl Slot {
    fn is_idle(&self) -> bool {
        self.running.is_none() && self.state == SlotState::Up
    }
}

#[derive(Debug)]
pub struct Board {
    pub(crate) node: u32,
    pub(crate) spill_dir: PathBuf,
    pub(crate) jobs: HashMap<JobId, Arc<JobDef>>,
    pub(crate) queue: VecDeque<Queued>,
    pub(crate) slots: Vec<Slot>,
    /// What the node offers (custom kinds numbered as the root's welcome says), and
    /// what of it no running attempt holds.
    capacity: Resources,
    pub(crate) free: Resources,
    /// Which CPUs and GPUs are free.
    pub(crate) devices: Devices,
    /// Data items: the scratch directory, fetches in progress and what was written.
    pub items: Items,
    /// Whether new attempts may start (false once the agent is stopping).
    pub(crate) accepting: bool,
    /// Starts and results not yet sent upward (its credit is unused: see `credit`).
    pub(crate) pending: Report,
    /// Credit not yet sent upward. Only cores are prefetched; the other kinds are
    /// granted as far as the node has them, so the queue's head never waits for
    /// anything but cores (see [`Board::reset_credit`]).
    pub(crate) credit: Resources,
    pub(crate) flush: FlushPlan,
    /// When the last report went up: the next waits out the report gap from there.
    pub(crate) last_report: std::time::Instant,
    /// The goodbye went up: nothing more is reported.
    pub(crate) closed: bool,
    /// The slot whose thread looks, at the end of the report gap, whether slots' news
    /// went up yet (see [`Board::keep_report_clock`]).
    report_clock: Option<usize>,
    /// Credit this node keeps granted in cores: its cores plus the prefetch.
    window: u32,
    /// Cores of credit to keep back from the next returns, after the window shrank.
    owed: u32,
    /// Recent attempts' mean run time in µs (exponentially weighted), which sizes the
    /// prefetch.
    mean_run_us: Option<f64>,
    /// This node's parts of gang attempts.
    pub(crate) parts: crate::gang::Parts,
}

/// Whether the agent has a report on its way out (a `Flush` message to itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPlan {
    /// None: the next news must wake the agent.
    Idle,
    /// At once.
    Now,
    /// Paced: at the end of the current report gap.
    Later,
}

pub type SharedBoard = Arc<Mutex<Board>>;

/// The most prefetch a node holds, in rounds of its cores.
pub const PREFETCH_ROUNDS: u32 = 32;

pub fn lock(board: &Mutex<Board>) -> MutexGuard<'_, Board> {
    board.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Board {
    /// A board for a node offering `resources` (custom kinds come with the root's
    /// welcome, [`Board::welcomed`]), with `slots` slots, granting `credit` cores of
    /// work at first.
    pub fn new(
        node: u32,
        resources: &NodeResources,
        slots: u32,
        spill_dir: PathBuf,
        credit: u32,
    ) -> Board {
        // The agent sets its node's own scratch directory.
        let items = Items::new(node, spill_dir.join(format!("scratch-{node}")), false);
        let capacity = Resources::cores(resources.cores)
            .with(ResourceKind::GPUS, resources.gpus.len() as u32)
            .with(ResourceKind::MEMORY_MIB, resources.memory_mib);
        Board {
            node,
            spill_dir,
            jobs: HashMap::new(),
            queue: VecDeque::new(),
            slots: (0..slots).map(|_| Slot::default()).collect(),
            capacity,
            free: capacity,
            devices: Devices::new(resources, slots as usize),
            items,
            accepting: true,
            pending: Report {
                node: NodeId(node),
                credit: Resources::ZERO,
                started: Vec::new(),
                results: Vec::new(),
            },
            credit: capacity.with(ResourceKind::CORES, credit),
            flush: FlushPlan::Idle,
            last_report: std::time::Instant::now(),
            closed: false,
            report_clock: None,
            window: credit,
            owed: 0,
            mean_run_us: None,
            parts: crate::gang::Parts::default(),
        }
    }

    /// Cores of queued work to hold so that slots never wait for the root: enough to
    /// cover `cover` (a report gap plus a round trip) at the recent attempts' pace,
    /// never less than `floor` and never more than [`PREFETCH_ROUNDS`] rounds of the
    /// node's cores (a bound on what a wrong estimate strands here while others run dry).
    pub fn prefetch(&self, cores: u32, floor: u32, cover: std::time::Duration) -> u32 {
        let ceiling = cores.saturating_mul(PREFETCH_ROUNDS).max(floor);
        let Some(mean) = self.mean_run_us else {
            return floor;
        };
        let wanted = (f64::from(cores) * cover.as_micros() as f64 / mean.max(1.0)).ceil();
        (wanted.min(f64::from(ceiling)) as u32).max(floor)
    }

    /// Forgets the pace of past attempts: the prefetch is the floor until one of the
    /// next ends.
    pub fn forget_pace(&mut self) {
        self.mean_run_us = None;
    }

    /// Whether nothing is queued or running here.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(|slot| slot.running.is_none())
    }

    /// Grows or shrinks the credit this node keeps granted. Growth is granted with the
    /// next report; a shrink is taken out of the next credit returns.
    pub fn resize_window(&mut self, window: u32) {
        if window > self.window {
            let grow = window - self.window;
            let forgiven = grow.min(self.owed);
            self.owed -= forgiven;
            self.add_credit_cores(grow - forgiven);
        } else {
            self.owed += self.window - window;
        }
        self.window = window;
    }

    /// A new life at the root: it holds no credit of ours any more. What is free now is
    /// granted, plus `prefetch` cores; running attempts give theirs back as they end.
    ///
    /// Only cores are prefetched: in every other kind the credit granted plus what
    /// queued and running attempts hold never exceeds the node's capacity, so whatever
    /// heads the local queue always has its GPUs, memory and named resources free, and
    /// waits for cores alone, as it would on a cores-only node.
    pub fn reset_credit(&mut self, cores: u32, prefetch: u32) {
        self.credit = self
            .free
            .with(ResourceKind::CORES, self.free.core_count() + prefetch);
        self.window = cores + prefetch;
        self.owed = 0;
    }

    /// The root numbered this node's named resources: `capacity` is what it offers in
    /// the root's kinds. What is new in it is free and granted now.
    pub fn welcomed(&mut self, capacity: Resources) {
        let held = self
            .capacity
            .checked_sub(self.free)
            .unwrap_or(Resources::ZERO);
        let added = capacity
            .checked_sub(self.capacity)
            .unwrap_or(Resources::ZERO);
        self.capacity = capacity;
        self.free = capacity.checked_sub(held).unwrap_or(Resources::ZERO);
        self.credit = self.credit.saturating_add(added);
    }

    /// What the node offers, in the root's kinds once welcomed.
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    fn add_credit_cores(&mut self, cores: u32) {
        let total = self.credit.core_count().saturating_add(cores);
        self.credit = self.credit.with(ResourceKind::CORES, total);
    }

    /// Credit for `needs` that came back (an attempt ended or a queued one was
    /// answered), less the cores owed after a shrink.
    pub(crate) fn give_back(&mut self, needs: Resources) {
        let kept = needs.core_count().min(self.owed);
        self.owed -= kept;
        let back = needs.with(ResourceKind::CORES, needs.core_count() - kept);
        self.credit = self.credit.saturating_add(back);
    }

    /// What each task of `job` holds while it runs: at least a core.
    fn needs_of(job: &JobDef) -> Resources {
        job.resources
            .with(ResourceKind::CORES, job.resources.core_count().max(1))
    }

    /// Only attempts that ended by themselves say how long this work takes.
    fn note_run_time(&mut self, finished: &Finished) {
        if !matches!(finished.outcome, Outcome::Exited { .. }) {
            return;
        }
        let run = finished.end_unix_us.saturating_sub(finished.start_unix_us) as f64;
        self.mean_run_us = Some(match self.mean_run_us {
            None => run,
            Some(mean) => mean + (run - mean) / 8.0,
        });
    }

    /// Whether the report should go now rather than wait out the gap: the local queue
    /// is empty, so free slots wait for the work this credit would bring, or whoever
    /// waits for these results may have nothing else coming. (Starts alone can wait.)
    pub fn is_urgent(&self) -> bool {
        !self.items.outbox.is_empty()
            || (self.queue.is_empty()
                && (!self.credit.is_zero() || !self.pending.results.is_empty()))
    }

    /// Whether a report should go now: the gap since the last one has passed, or it
    /// is urgent.
    pub fn report_due(&self, gap: std::time::Duration, now: std::time::Instant) -> bool {
        self.last_report + gap <= now || self.is_urgent()
    }

    /// After a slot's attempt ended, or its report clock rang: whether its thread
    /// sends the report now. Slots report by themselves, so a busy node's reports
    /// never wake the agent.
    pub fn report_from_slot(&self, gap: std::time::Duration, now: std::time::Instant) -> bool {
        !self.closed && self.has_news() && self.report_due(gap, now)
    }

    /// After slot `index` (of executor `generation`) reported what was due: when its
    /// thread should look again, if news from the slots still waits out the gap. One
    /// slot at a time keeps this clock, so a paced report costs at most one wake-up,
    /// however many slots the node has; the clock passes on when its keeper finds
    /// nothing left to send.
    pub fn keep_report_clock(
        &mut self,
        index: usize,
        generation: u64,
        gap: std::time::Duration,
    ) -> Option<std::time::Instant> {
        if self
            .slots
            .get(index)
            .is_none_or(|slot| slot.generation != generation)
        {
            return None;
        }
        if self.closed || !self.has_news() {
            if self.report_clock == Some(index) {
                self.report_clock = None;
            }
            return None;
        }
        match self.report_clock {
            Some(keeper) if keeper != index => None,
            _ => {
                self.report_clock = Some(index);
                Some(self.last_report + gap)
            }
        }
    }

    /// After a slot's attempt ended: whether the agent has to start work on other idle
    /// slots. Otherwise a slot thread leaves it asleep: a busy node's slots run, report
    /// and pace themselves without it.
    pub fn wants_agent(&self) -> bool {
        self.accepting
            && ((self.free.core_count() > 0 && !self.queue.is_empty())
                || !self.parts.queue.is_empty())
            && self.slots.iter().any(Slot::is_idle)
    }

    pub fn has_news(&self) -> bool {
        self.items.has_news()
            || !self.credit.is_zero()
            || !self.pending.started.is_empty()
            || !self.pending.results.is_empty()
            || !self.parts.launch_ends.is_empty()
    }

    /// Takes what is to be reported upward: everything, or, when results carry more
    /// than [`FRAME_DATA_BUDGET`] bytes of output, the results up to it (at least one);
    /// the rest stays pending for the next report ([`Board::has_news`]).
    pub fn take_report(&mut self) -> Report {
        let mut data = 0;
        let fits = self
            .pending
            .results
            .iter()
            .position(|result| {
                data += result.body.data_len();
                data > FRAME_DATA_BUDGET
            })
            .map_or(self.pending.results.len(), |over| over.max(1));
        let results = if fits == self.pending.results.len() {
            std::mem::take(&mut self.pending.results)
        } else {
            let rest = self.pending.results.split_off(fits);
            std::mem::replace(&mut self.pending.results, rest)
        };
        Report {
            node: NodeId(self.node),
            credit: std::mem::take(&mut self.credit),
            started: std::mem::take(&mut self.pending.started),
            results,
        }
    }

    /// Starts the queue's first attempt on idle slot `index` if it fits the free cores.
    /// A queued task of a job this node does not know is lost at once: its definition
    /// went to another life of this node (an agent restarted under the same node id
    /// while a route still led to the old one). The root replays it, sending the
    /// definition again, and never counts it as the task's own failure.
    pub fn start_on(&mut self, index: usize) -> Option<NextAttempt> {
        let slot = self.slots.get(index)?;
        if !self.accepting || slot.running.is_some() || slot.state != SlotState::Up {
            return None;
        }
        // Gang parts' processes first: their resources are held already.
        if let Some(next) = self.start_part_process(index) {
            return Some(next);
        }
        loop {
            let queued = *self.queue.front()?;
            let assignment = queued.assignment;
            let Some(job) = self.jobs.get(&assignment.job).cloned() else {
                self.queue.pop_front();
                let reason = format!("unknown job {} on this agent", assignment.job);
                self.fail_unstarted(&queued, Outcome::Lost { reason });
                continue;
            };
            // Every task holds at least a core (the root never sends one needing none).
            let needs = Board::needs_of(&job);
            if !needs.fits_in(&self.capacity) {
                // The root never sends work a node cannot hold: a protocol error.
                self.queue.pop_front();
                let reason = format!("needs {needs}; this node offers {}", self.capacity);
                self.fail_unstarted(&queued, Outcome::SpawnFailed { reason });
                continue;
            }
            // What its running attempts leave free: else it waits for one to end.
            let free = self.free.checked_sub(needs)?;
            self.queue.pop_front();
            if let Some(item) = self
                .items
                .missing(&job)
                .filter(|item| !self.items.link_shared(item))
            {
                // Fetched first; it comes back to the queue's head when whole.
                self.items.stage(item, queued);
                continue;
            }
            let binding = self.devices.take(
                index,
                needs.core_count(),
                needs.gpu_count(),
                needs.memory_mib(),
            );
            let work = match &job.payload {
                Payload::Command(_) => {
                    let mut launch = build_launch(&job, &assignment, &self.spill_dir);
                    // Which agent ran it: for the task's own logs, and for tests of
                    // where work went.
                    launch.set_var_number(b"SAKER_NODE", self.node.into());
                    bind_launch(&mut launch, &binding, needs.core_count());
                    if !job.reads.is_empty() || !job.writes.is_empty() {
                        let scratch = self.items.scratch().as_os_str().as_encoded_bytes();
                        launch.set_var(b"SAKER_SCRATCH", scratch);
                    }
                    Work::Command(Box::new(launch))
                }
                Payload::Function(_) => Work::Call(Box::new(Call {
                    time_limit: (job.time_limit_ms > 0)
                        .then(|| std::time::Duration::from_millis(job.time_limit_ms)),
                    job,
                    task: assignment.task,
                    attempt: assignment.attempt,
                    node: self.node,
                    log_dir: self.worker_log_dir(),
                    scratch: self.items.scratch().to_path_buf(),
                })),
            };
            let started_us = unix_micros();
            let (cancel_tx, control) = StopHandle::new();
            let slot = &mut self.slots[index];
            slot.running = Some(Running {
                assignment,
                received_us: queued.received_us,
                needs,
                started_us,
                part: None,
            });
            slot.cancel = Some(cancel_tx);
            slot.binding = binding.clone();
            self.free = free;
            self.pending.started.push(Started {
                task: assignment.task,
                attempt: assignment.attempt,
                executor: index as u32,
                at_unix_us: started_us,
            });
            return Some(NextAttempt {
                attempt: assignment.attempt,
                work,
                control,
                binding,
            });
        }
    }

    /// Where workers' logs go: `workers/` beside the spilled output.
    fn worker_log_dir(&self) -> PathBuf {
        self.spill_dir
            .parent()
            .unwrap_or(&self.spill_dir)
            .join("workers")
    }

    /// Idle slots in order, for the agent to start work on.
    pub fn idle_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_idle())
            .map(|(index, _)| index)
    }

    /// The executor of slot `index` could not take the attempt just started there: put
    /// it back at the head of the queue as if never started.
    pub fn unstart(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let (Some(running), _) = (slot.running.take(), slot.cancel.take()) else {
            return;
        };
        let binding = std::mem::take(&mut slot.binding);
        self.devices.release(&binding);
        self.free = self.free.saturating_add(running.needs);
        self.pending
            .started
            .retain(|s| s.attempt != running.assignment.attempt);
        self.queue
            .push_front(Queued::new(running.assignment, running.received_us));
    }

    /// Attempt `attempt` on slot `index` (of executor `generation`) ended. Records the
    /// result and, if it is still this slot's business, starts the next attempt there.
    pub fn finish(
        &mut self,
        index: usize,
        generation: u64,
        attempt: AttemptId,
        finished: Finished,
    ) -> Option<NextAttempt> {
        let slot = self.slots.get_mut(index)?;
        // A result from an attempt this slot no longer runs (its thread failed and
        // the attempt was already reported lost) is dropped here.
        if slot.generation != generation
            || slot.running.is_none_or(|r| r.assignment.attempt != attempt)
        {
            return None;
        }
        let running = slot.running.take()?;
        slot.cancel = None;
        let binding = std::mem::take(&mut slot.binding);
        if let Some(number) = running.part {
            self.part_process_ended(number, attempt, finished);
            return self.start_on(index);
        }
        self.devices.release(&binding);
        self.free = self.free.saturating_add(running.needs);
        self.give_back(running.needs);
        self.note_run_time(&finished);
        let mut finished = finished;
        if matches!(finished.outcome, Outcome::Exited { code: 0 })
            && let Some(job) = self.jobs.get(&running.assignment.job)
            && let Err(reason) = self.items.note_written(job, attempt)
        {
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
            body: finished.body.unwrap_or(ResultBody::Command {
                stdout: finished.stdout,
                stderr: finished.stderr,
            }),
        });
        self.start_on(index)
    }

    /// Gives back `attempt` if it waits in the queue (answered `Cancelled` at once, its
    /// credit returned); a started one runs on. The root asks when it reserves this
    /// node for a gang.
    pub fn give_back_queued(&mut self, attempt: AttemptId) {
        if let Some(staged) = self.items.unstage(attempt) {
            self.queue.push_front(staged);
        }
        if self.queue.iter().any(|a| a.attempt == attempt) {
            self.cancel(attempt);
        }
    }

    /// Cancels `attempt`: a queued one is answered at once; a running one is stopped
    /// (its runner reports it).
    pub fn cancel(&mut self, attempt: AttemptId) {
        if self.cancel_part(attempt) {
            return;
        }
        if let Some(staged) = self.items.unstage(attempt) {
            self.queue.push_front(staged);
        }
        if let Some(position) = self.queue.iter().position(|a| a.attempt == attempt) {
            let Some(Queued {
                assignment,
                received_us,
            }) = self.queue.remove(position)
            else {
                return;
            };
            let needs = self
                .jobs
                .get(&assignment.job)
                .map_or(Resources::cores(1), |job| Board::needs_of(job));
            self.give_back(needs);
            let now = unix_micros();
            self.pending.results.push(TaskResult {
                task: assignment.task,
                attempt,
                executor: u32::MAX,
                outcome: Outcome::Cancelled,
                received_unix_us: received_us,
                start_unix_us: now,
                end_unix_us: now,
                body: ResultBody::Command {
                    stdout: Output::default(),
                    stderr: Output::default(),
                },
            });
            return;
        }
        for slot in &mut self.slots {
            if slot
                .running
                .is_some_and(|r| r.assignment.attempt == attempt)
                && let Some(cancel) = slot.cancel.take()
            {
                cancel.cancel();
            }
        }
    }

    /// Drops the queue and stops everything running (the root replays this node's work).
    pub fn stop_all(&mut self) {
        self.queue.clear();
        self.items.stop_all();
        self.cancel_all_parts();
        for slot in &mut self.slots {
            if let Some(cancel) = slot.cancel.take() {
                cancel.cancel();
            }
        }
    }

    /// The thread of slot `index` failed: the slot is down, its attempt is reported
    /// lost (dropping the stop handle kills it) and a later report of the old thread
    /// is ignored.
    pub fn lose_slot(&mut self, index: usize, reason: String) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        slot.generation += 1;
        slot.cancel = None;
        let binding = std::mem::take(&mut slot.binding);
        if slot.state == SlotState::Up {
            slot.state = SlotState::Down;
        }
        if self.report_clock == Some(index) {
            // The old thread no longer keeps it; the agent paces what is pending.
            self.report_clock = None;
        }
        let Some(running) = slot.running.take() else {
            return;
        };
        if let Some(number) = running.part {
            let lost = Finished {
                outcome: Outcome::Lost { reason },
                start_unix_us: running.started_us,
                end_unix_us: unix_micros(),
                stdout: Output::default(),
                stderr: Output::default(),
                body: None,
            };
            self.part_process_ended(number, running.assignment.attempt, lost);
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
            end_unix_us: unix_micros(),
            body: ResultBody::Command {
                stdout: Output::default(),
                stderr: Output::default(),
            },
        });
    }

    /// A fresh thread runs slot `index` (down until now).
    pub fn slot_up(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && slot.state == SlotState::Down
        {
            slot.state = SlotState::Up;
        }
    }

    /// Slot `index` (down) is given up; returns how many slots are not.
    pub fn give_up_slot(&mut self, index: usize) -> usize {
        if let Some(slot) = self.slots.get_mut(index) {
            slot.state = SlotState::GivenUp;
        }
        self.slots
            .iter()
            .filter(|slot| slot.state != SlotState::GivenUp)
            .count()
    }

    /// An answer to one of this node's item requests: attempts waiting for an item now
    /// whole go back to the queue's head; those waiting for one that cannot be had fail
    /// (their own failure: the reader cannot run without it anywhere).
    pub fn item_received(&mut self, data: saker_wire::ItemData) {
        match self.items.receive(data) {
            Received::Pending => {}
            Received::Done(ready) => {
                for assignment in ready.into_iter().rev() {
                    self.queue.push_front(assignment);
                }
            }
            Received::Failed(waiting, reason) => {
                for assignment in waiting {
                    let outcome = Outcome::SpawnFailed {
                        reason: reason.clone(),
                    };
                    self.fail_unstarted(&assignment, outcome);
                }
            }
        }
    }

    fn fail_unstarted(&mut self, assignment: &Queued, outcome: Outcome) {
        let now = unix_micros();
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
            start_unix_us: now,
            end_unix_us: now,
            body: ResultBody::Command {
                stdout: Output::default(),
                stderr: Output::default(),
            },
        });
    }
}

/// Binds a command's launch to what its attempt holds: its GPUs and CPUs by
/// variables (the slot's thread pins it), and `OMP_NUM_THREADS` to its cores unless
/// the job or the agent's environment sets it (a 1-core task should not start a
/// thread per CPU of the node).
pub(crate) fn bind_launch(launch: &mut Launch, binding: &Binding, cores: u32) {
    for (name, value) in binding.variables() {
        launch.set_var(name.as_bytes(), value.as_bytes());
    }
    static INHERITED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let inherited = *INHERITED.get_or_init(|| crate::spawn::inherits(b"OMP_NUM_THREADS"));
    if !inherited && !launch.sets_var(b"OMP_NUM_THREADS") {
        launch.set_var_number(b"OMP_NUM_THREADS", cores.into());
    }
}

#[cfg(test)]
pub(crate) mod tests;
