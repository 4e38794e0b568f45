//! The agent's pure core: the decisions about this node's work. Its queue of assigned
//! attempts, which slot takes which (cores, GPUs, memory, named resources), the credit
//! it grants the root and the prefetch that sizes it, what it reports upward and when,
//! slots lost and given up, its parts of gang attempts, and the bookkeeping of the data
//! items it fetches.
//!
//! **Must never**: lock, read a clock, do I/O, start threads or processes, or hold a
//! handle to anything it acts on. Time comes in as a [`Moment`]; what is to be done
//! leaves as values: a [`Start`] for an idle slot, an [`Effect`] for the shell to
//! carry out, messages for the parent ([`Board::poll_up`]), a flush to schedule
//! ([`Board::poll_flush`]). The same inputs give the same outputs: nothing here
//! iterates a hash map into an output.
//!
//! **Start reading** at [`Board`]'s "Driving it"; then `slots.rs` (which slot takes
//! what, and how attempts end, are cancelled and lost), `credit.rs` (the window, the
//! prefetch), `report.rs` (pacing and what goes up), `gang.rs` (parts of gang
//! attempts), `items.rs` (fetches of data items). The shell is
//! [`crate::agent`]: its desk keeps this core and the handles of what it decided.
//!
//! **Where the line is.** The core decides *what* runs *where*: the attempt, its slot,
//! its job and the CPUs, GPUs and memory it holds ([`Binding`]). The shell turns that
//! into a process: it builds the [`Launch`](crate::process::Launch) or the
//! [`Call`](crate::worker::Call), makes the attempt's stop control and keeps its
//! handle. A launch is a translation of a decision, not one: it reads the agent's
//! environment (whether `OMP_NUM_THREADS` is inherited), its user id and paths, writes
//! files (a gang's hostfile), and its C strings are a spawn's business. Stopping an
//! attempt is decided here ([`Effect::Cancel`], [`Effect::Detach`]); the signal goes
//! through the handle the shell keeps per slot. A gang leader's remote-shell endpoint
//! (a socket and a thread) and the remote shells waiting on it are the shell's; the
//! core says when to open it and when the part has ended. A data item's bytes are the
//! shell's files; which items are fetched, what is asked for and who waits for them
//! is the core's, and so is what the node's attempts wrote: the object store of the
//! next wing is bookkeeping of the same kind.
//!
//! **Where the next wings land.** Adopting running work at a root takeover is inputs
//! and a query here, not a new place: an input for a lost parent that keeps what runs
//! (today the shell answers a lost parent with [`Board::handle_stop_all`]), a bound on
//! the results kept while no root hears them (they wait in `pending`), and an
//! inventory for the new root built from the same books (`slots`' running attempts,
//! `pending`, `parts`). An object store on each agent is bookkeeping beside the items'
//! (`items.rs`): what is held, pinned, spilled and fetched is decided here, and the
//! bytes move through effects, as a fetch's do.
//!
//! **Key decision: one core, shared with the slots' threads behind one lock.** A slot
//! whose attempt ends starts the next queued one at once, and sends a report that is
//! due, on its own thread, without waiting for the agent (that gap left slots idle
//! between short tasks). So the shell keeps this core behind one mutex that the agent
//! and every slot thread take, and passes `now` in; what is pure is the core type
//! itself, which makes every decision testable with a manual clock and no threads.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use saker_wire::messages::{
    Assignment, AttemptId, FromAgent, JobDef, JobId, NodeId, Report, ResourceKind, Resources,
};

use crate::attempt::Queued;
use crate::resources::{Binding, Devices, NodeResources};

mod away;
mod credit;
mod gang;
mod items;
mod objects;
mod report;
mod slots;
#[cfg(test)]
pub(crate) mod tests;

pub use away::{AWAY_MEMORY_BYTES, MAX_UNACKED};
pub use gang::{LaunchPlan, PartPlan, PartProcess, ProcessKind, Wired, exit_code};
pub use items::{ItemError, ItemLanded};
pub use objects::{Role, Store, StoreEffect, StoreError, StoreUsage, Tier};
pub use report::Flush;

/// The most prefetch a node holds, in rounds of its cores.
pub const PREFETCH_ROUNDS: u32 = 32;

/// The least time between two reports of a busy node.
pub const REPORT_GAP: Duration = Duration::from_millis(20);

/// How long the prefetched work should last: a report gap plus a generous round trip
/// to the root, so that paced reports never leave a slot waiting.
pub const PREFETCH_COVER: Duration = Duration::from_millis(40);

/// A moment as the shell read its clocks, once per input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// Monotonic time since the shell's origin (its agent's start): paces reports.
    /// Never goes backwards.
    pub since_start: Duration,
    /// Wall-clock time, µs since the Unix epoch: stamps starts and results.
    pub unix_us: u64,
}

impl Moment {
    /// `elapsed` later on both clocks (a manual clock's step).
    pub fn after(self, elapsed: Duration) -> Moment {
        Moment {
            since_start: self.since_start + elapsed,
            unix_us: self.unix_us + elapsed.as_micros() as u64,
        }
    }
}

/// What a board is made for.
#[derive(Debug, Clone)]
pub struct BoardConfig {
    pub node: u32,
    /// Slots: one per core, at least one.
    pub slots: u32,
    /// Cores of extra work to hold queued at least (the prefetch's floor).
    pub prefetch: u32,
    /// Cores of credit granted at first (the agent grants its cores plus the prefetch).
    pub credit: u32,
}

/// This node's work and what is decided about it. See the module doc.
///
/// # Driving it
///
/// One owner at a time (the shell takes a lock), with `now` read once per input:
///
/// * **Inputs** are the `handle_*` methods: what the root sent ([`handle_dispatch`],
///   [`handle_cancel`], [`handle_return`], [`handle_welcome`], [`handle_gang_launch`],
///   [`handle_item_data`]), what a slot's thread said ([`handle_attempt_done`],
///   [`handle_slot_lost`], [`handle_slot_up`], [`handle_slot_given_up`]) and what the
///   agent did ([`handle_stop_all`], [`handle_stopping`], [`handle_goodbye_sent`],
///   [`handle_new_life`], [`handle_flush`]).
/// * **Starts**: for an idle slot, [`poll_start`] until it returns `None`. A
///   [`Next::CheckItems`] asks which item the queue's head must fetch first (the shell
///   looks in its scratch directory); answer with [`handle_items_checked`] and poll
///   again. A start the slot's thread cannot take goes back with [`handle_unstart`].
/// * **Effects**: after every input (starts included), drain [`poll_effect`] until
///   `None` and carry each out in order: some answer back ([`handle_item_kept`],
///   [`handle_part_failed`]), and the drain goes on with what those add.
/// * **Reports**: [`report_from_slot`] says whether a slot's thread sends now,
///   [`keep_report_clock`] when it looks again, [`poll_flush`] whether the agent
///   schedules a report of its own. To send, [`start_report`], then send every
///   [`poll_up`] in order.
///
/// [`handle_dispatch`]: Board::handle_dispatch
/// [`handle_cancel`]: Board::handle_cancel
/// [`handle_return`]: Board::handle_return
/// [`handle_welcome`]: Board::handle_welcome
/// [`handle_gang_launch`]: Board::handle_gang_launch
/// [`handle_item_data`]: Board::handle_item_data
/// [`handle_attempt_done`]: Board::handle_attempt_done
/// [`handle_slot_lost`]: Board::handle_slot_lost
/// [`handle_slot_up`]: Board::handle_slot_up
/// [`handle_slot_given_up`]: Board::handle_slot_given_up
/// [`handle_stop_all`]: Board::handle_stop_all
/// [`handle_stopping`]: Board::handle_stopping
/// [`handle_goodbye_sent`]: Board::handle_goodbye_sent
/// [`handle_new_life`]: Board::handle_new_life
/// [`handle_flush`]: Board::handle_flush
/// [`poll_start`]: Board::poll_start
/// [`handle_items_checked`]: Board::handle_items_checked
/// [`handle_unstart`]: Board::handle_unstart
/// [`poll_effect`]: Board::poll_effect
/// [`handle_item_kept`]: Board::handle_item_kept
/// [`handle_part_failed`]: Board::handle_part_failed
/// [`report_from_slot`]: Board::report_from_slot
/// [`keep_report_clock`]: Board::keep_report_clock
/// [`poll_flush`]: Board::poll_flush
/// [`start_report`]: Board::start_report
/// [`poll_up`]: Board::poll_up
#[derive(Debug)]
pub struct Board {
    node: u32,
    /// Cores the node offers, and the prefetch's floor: the credit window is their sum
    /// plus what the recent pace adds.
    cores: u32,
    prefetch_floor: u32,
    jobs: HashMap<JobId, Arc<JobDef>>,
    queue: VecDeque<Queued>,
    slots: Vec<Slot>,
    /// What the node offers (custom kinds numbered as the root's welcome says), and
    /// what of it no running attempt holds.
    capacity: Resources,
    free: Resources,
    /// Which CPUs and GPUs are free.
    devices: Devices,
    /// Data items being fetched, and what attempts wrote.
    fetches: items::Fetches,
    /// The shell's answer about the queue's head: the item it must fetch first, if any.
    checked: Option<(AttemptId, Option<String>)>,
    /// Whether new attempts may start (false once the agent is stopping).
    accepting: bool,
    /// Starts and results not yet sent upward (its credit is unused: see `credit`).
    pending: Report,
    /// Credit not yet sent upward. Only cores are prefetched; the other kinds are
    /// granted as far as the node has them, so the queue's head never waits for
    /// anything but cores (see [`Board::reset_credit`]).
    credit: Resources,
    flush: FlushPlan,
    /// When the last report went up: the next waits out the report gap from there.
    last_report: Duration,
    /// The goodbye went up: nothing more is reported.
    closed: bool,
    /// No root hears this node now: reports wait (see `away.rs`).
    away: bool,
    /// Results held while away that went to the node's disk (their desk writes and
    /// reads them): listed in the hello, loaded at the next life.
    spilled: Vec<saker_wire::messages::Held>,
    /// Bytes of the results held in memory while away (roughly: their output).
    away_bytes: usize,
    /// Writing held results to disk failed: they stay in memory until the next life.
    spill_failed: bool,
    /// Reports taken so far: the last one's [`Report::seq`].
    reports: u64,
    /// Results sent up that the root has not said are durable, by report (`away.rs`).
    unacked: VecDeque<(u64, Vec<saker_wire::messages::TaskResult>)>,
    /// How many results `unacked` holds.
    unacked_results: usize,
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
    parts: gang::Parts,
    /// What the shell is to do, in order.
    effects: VecDeque<Effect>,
    /// Messages of the report being sent, before its `Report`s (see `report.rs`).
    outgoing: VecDeque<FromAgent>,
    /// A report is being sent: [`Board::poll_up`] has more.
    reporting: bool,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    assignment: Assignment,
    /// When the agent received it (see [`Queued`]).
    received_us: u64,
    /// How long it waited for data items (see [`Queued`]).
    fetch_us: u64,
    needs: Resources,
    started_us: u64,
    /// Set for a process of a gang part (its number there); the part holds the
    /// resources, and reports one result for all its processes (see `gang.rs`).
    part: Option<u32>,
}

#[derive(Debug, Default)]
struct Slot {
    running: Option<Running>,
    /// Bumped when the slot's thread failed: whatever that thread still reports is
    /// then ignored.
    generation: u64,
    state: SlotState,
    /// What the running attempt holds of the node's CPUs and GPUs.
    binding: Binding,
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

/// Whether the agent has a report on its way out (a flush it scheduled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlushPlan {
    /// None: the next news must wake the agent.
    Idle,
    /// At once.
    Now,
    /// Paced: at the end of the current report gap.
    Later,
}

/// What an idle slot is to do next ([`Board::poll_start`]).
#[derive(Debug)]
pub enum Next {
    Start(Start),
    /// The queue's head reads data items: which of them must this node fetch before it
    /// can start? Answer with [`Board::handle_items_checked`].
    CheckItems {
        attempt: AttemptId,
        job: Arc<JobDef>,
    },
}

/// An attempt a slot is to start now.
#[derive(Debug)]
pub struct Start {
    pub slot: usize,
    pub attempt: AttemptId,
    /// The CPUs, GPUs and memory limit it runs with.
    pub binding: Binding,
    pub run: Run,
}

/// What a started attempt runs.
#[derive(Debug)]
pub enum Run {
    /// Task `assignment` of `job`, holding `cores` cores: a command of its own, or a
    /// call on the slot's worker of its kind.
    Task {
        assignment: Assignment,
        job: Arc<JobDef>,
        cores: u32,
    },
    /// A process of this node's part of a gang attempt.
    Part {
        plan: Arc<PartPlan>,
        process: PartProcess,
    },
}

/// What the shell is to do for the core ([`Board::poll_effect`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Stop `attempt`, running on `slot`: it still reports how it ended.
    Cancel { slot: usize, attempt: AttemptId },
    /// Let go of whatever runs on `slot`: its thread failed and its attempt was
    /// reported lost (letting go of its handle kills it).
    Detach { slot: usize },
    /// A gang part was taken whose ranks read a hostfile: write it before any of them
    /// starts.
    WriteHostfile { plan: Arc<PartPlan> },
    /// This node leads an MPI gang: open its launcher's remote-shell endpoint. If it
    /// cannot be opened, [`Board::handle_part_failed`].
    OpenEndpoint { attempt: AttemptId, members: u32 },
    /// A part whose ranks this node serves PMI was taken: open its service before any
    /// of them starts (each rank's socket is made as it starts).
    OpenPmi {
        plan: Arc<PartPlan>,
        /// A script's `saker mpiexec`: the service is that launch's (replacing the
        /// last one's).
        launch: Option<Arc<gang::LaunchPlan>>,
    },
    /// Run a part's `process` that waits on others (see
    /// [`ProcessKind::waits_on_others`]) on a thread of its own; when it ends,
    /// [`Board::handle_own_ended`].
    RunOwn {
        plan: Arc<PartPlan>,
        process: PartProcess,
        binding: Binding,
    },
    /// Stop `attempt`'s process that runs on a thread of its own.
    StopOwn { attempt: AttemptId },
    /// A gang part ended: close its endpoint (its remote shells get no more answers)
    /// and its PMI service.
    PartEnded { attempt: AttemptId },
    /// A fetched item is whole: keep it in place, then [`Board::handle_item_kept`].
    KeepItem { item: String },
    /// A gang part reads data items: which of them must this node fetch before any of
    /// its processes starts? Answer with [`Board::handle_part_items_checked`].
    CheckPartItems { plan: Arc<PartPlan> },
    /// A fetch ended without its item: drop what was written of it.
    DiscardItem { item: String },
    /// Results held while away are too many to keep in memory: write them to the
    /// node's disk. If that fails, [`Board::handle_spill_failed`].
    SpillResults {
        results: Vec<saker_wire::messages::TaskResult>,
    },
    /// A new life: read back the results written to disk (`held` lists them), then
    /// [`Board::handle_spilled_read`].
    ReadSpilled {
        held: Vec<saker_wire::messages::Held>,
    },
}

impl Board {
    /// A board for a node offering `resources` (custom kinds come with the root's
    /// welcome, [`Board::handle_welcome`]), made at `now`.
    pub fn new(config: &BoardConfig, resources: &NodeResources, now: Moment) -> Board {
        let capacity = Resources::cores(resources.cores)
            .with(ResourceKind::GPUS, resources.gpus.len() as u32)
            .with(ResourceKind::MEMORY_MIB, resources.memory_mib);
        Board {
            node: config.node,
            cores: resources.cores,
            prefetch_floor: config.prefetch,
            jobs: HashMap::new(),
            queue: VecDeque::new(),
            slots: (0..config.slots).map(|_| Slot::default()).collect(),
            capacity,
            free: capacity,
            devices: Devices::new(resources, config.slots as usize),
            fetches: items::Fetches::new(config.node),
            checked: None,
            accepting: true,
            pending: Report {
                node: NodeId(config.node),
                seq: 0,
                credit: Resources::ZERO,
                started: Vec::new(),
                results: Vec::new(),
            },
            credit: capacity.with(ResourceKind::CORES, config.credit),
            flush: FlushPlan::Idle,
            last_report: now.since_start,
            closed: false,
            away: false,
            spilled: Vec::new(),
            away_bytes: 0,
            spill_failed: false,
            reports: 0,
            unacked: VecDeque::new(),
            unacked_results: 0,
            report_clock: None,
            window: config.credit,
            owed: 0,
            mean_run_us: None,
            parts: gang::Parts::default(),
            effects: VecDeque::new(),
            outgoing: VecDeque::new(),
            reporting: false,
        }
    }

    /// The next thing for the shell to do, in the order decided.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Whether nothing is queued or running here.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(|slot| slot.running.is_none())
    }

    /// What the node offers, in the root's kinds once welcomed.
    pub fn capacity(&self) -> Resources {
        self.capacity
    }

    /// Credit not yet sent upward.
    pub fn credit(&self) -> Resources {
        self.credit
    }

    /// Idle slots in order, for the agent to start work on.
    pub fn idle_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.is_idle())
            .map(|(index, _)| index)
    }

    /// The generation and state of slot `index` (see [`SlotState`]).
    pub fn slot(&self, index: usize) -> Option<(u64, SlotState)> {
        self.slots
            .get(index)
            .map(|slot| (slot.generation, slot.state))
    }

    /// Whether gang `attempt` has a part here that has not ended.
    pub fn has_part(&self, attempt: AttemptId) -> bool {
        self.parts.contains(attempt)
    }

    /// The number of the gang part's process on slot `index`, if one runs there.
    pub fn part_process_on(&self, index: usize) -> Option<u32> {
        self.slots.get(index)?.running?.part
    }

    /// The root's dispatch: jobs forgotten and defined, then the attempts it assigns
    /// (queued here), or this node's part of a gang attempt (taken at once).
    pub fn handle_dispatch(&mut self, dispatch: saker_wire::messages::Dispatch, now: Moment) {
        if dispatch.durable > 0 {
            self.handle_durable(dispatch.durable);
        }
        // The past first: a forgotten job is finished and is never among the new.
        for job in dispatch.forget {
            self.jobs.remove(&job);
        }
        for job in dispatch.jobs {
            self.jobs.insert(job.job, job);
        }
        match dispatch.gang {
            None => {
                let tasks = dispatch.tasks.into_iter();
                self.queue
                    .extend(tasks.map(|task| Queued::new(task, now.unix_us)));
            }
            Some(gang) => {
                for assignment in dispatch.tasks {
                    self.take_part(assignment, &gang, now);
                }
            }
        }
    }

    /// The root numbered this node's named resources: `capacity` is what it offers in
    /// the root's kinds. What is new in it is free and granted now.
    pub fn handle_welcome(&mut self, capacity: Resources) {
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

    /// The agent is stopping: nothing new starts.
    pub fn handle_stopping(&mut self) {
        self.accepting = false;
    }

    /// The goodbye went up: nothing more is reported.
    pub fn handle_goodbye_sent(&mut self) {
        self.closed = true;
    }

    /// What each task of `job` holds while it runs: at least a core.
    fn needs_of(job: &JobDef) -> Resources {
        job.resources
            .with(ResourceKind::CORES, job.resources.core_count().max(1))
    }
}
