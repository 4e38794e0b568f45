//! The agent's desk: its pure core (the [`Board`]) and the handles of what the core
//! decided, behind the one lock that the agent and every slot's thread take. It reads
//! the clock once per input, hands the input to the board, and carries out what the
//! board decided: it turns a [`Start`] into the work a slot's thread runs and keeps
//! that attempt's stop handle, signals and lets go of attempts, writes and reads item
//! files, opens gang endpoints and answers their remote shells, and sends reports up.
//!
//! It must never decide: which attempt runs where, what is reported and when, what a
//! result says are the board's. Start reading at [`Desk::apply`] and
//! [`Desk::apply_effects`]; the actor that drives it is [`crate::agent`], the slots'
//! side is `sink.rs`.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use saker_wire::messages::{AttemptId, FromAgent, GangLaunch, GangLaunchEnded, MpiKind, NodeId};
use saker_wire::{ItemCopied, ItemData, ItemHolders, ItemRead};

use super::AgentFailure;
use crate::board::{Board, Effect, Moment, Next, ProcessKind, Run, Start};
use crate::executor::{AttemptDone, NextAttempt, Work};
use crate::gang::endpoint::{Endpoint, Relay, RelayError};
use crate::items::ItemFiles;
use crate::launch::{Places, task_work};
use crate::link::{FrameBuf, LinkTx};
use crate::process::{StopHandle, unix_micros};
use crate::transfer::{self, Fetched, Fetcher, Routes};
use saker_wire::messages::Outcome;

mod own;
mod pmi;

/// The desk, shared by the agent and the slots' threads.
pub(crate) type SharedDesk = Arc<Mutex<Desk>>;

/// Takes the desk's lock. A panic under it (a slot's thread, say) leaves books that
/// are still whole between inputs, so a poisoned lock is taken as it is.
pub(crate) fn lock(desk: &Mutex<Desk>) -> MutexGuard<'_, Desk> {
    desk.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The agent's clocks, read once per input into a [`Moment`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Moment {
        Moment {
            since_start: self.origin.elapsed(),
            unix_us: unix_micros(),
        }
    }

    /// The instant a board's time (since the origin) stands for.
    pub(crate) fn instant(&self, since_start: Duration) -> Instant {
        self.origin + since_start
    }
}

/// This node's link to its parent, and its number there.
#[derive(Debug, Clone)]
pub(crate) struct Uplink {
    pub parent: LinkTx,
    pub node: u32,
}

impl Uplink {
    pub(crate) fn send(&self, message: &FromAgent) -> Result<(), AgentFailure> {
        let frame: FrameBuf =
            saker_wire::frame::encode(self.node, message).map_err(AgentFailure::Encode)?;
        self.parent.send(frame).map_err(AgentFailure::ParentQueue)
    }
}

/// See the module doc.
#[derive(Debug)]
pub(crate) struct Desk {
    pub(crate) board: Board,
    clock: Clock,
    places: Places,
    pub(crate) files: ItemFiles,
    /// The stop handle of the attempt last started on each slot, with its attempt.
    /// Dropping one stops its attempt if it still runs.
    stops: Vec<Option<(AttemptId, StopHandle)>>,
    /// The remote-shell endpoints of the gangs this node leads; dropping one closes it.
    endpoints: HashMap<AttemptId, Endpoint>,
    /// The stop handles of the parts' processes that run on threads of their own.
    own: HashMap<AttemptId, StopHandle>,
    /// The PMI services of this node's parts whose ranks it serves; dropping one
    /// closes its ranks' sockets.
    pmi: HashMap<AttemptId, crate::pmi::server::Server>,
    /// Where each of those parts' fences go, and those gathered here.
    fences: HashMap<AttemptId, pmi::Fences>,
    /// The remote shells waiting for a daemon's end, by (attempt, launch).
    waiters: HashMap<(AttemptId, u32), mpsc::Sender<GangLaunchEnded>>,
    pub(crate) uplink: Uplink,
    /// Where each item's reads go, and the fetcher of those sent to holders directly;
    /// none: every read goes through the root.
    direct: Option<(Routes, Fetcher)>,
    /// This desk, for the relays of the endpoints it opens.
    me: Weak<Mutex<Desk>>,
    /// The node's object memory, if it has one.
    pub(crate) store: Option<super::store::ObjectStore>,
    /// What the root last heard it holds.
    store_said: saker_wire::StoreUsage,
}

impl Desk {
    /// A desk around `board` (made at `clock`'s start), for `slots` slots.
    pub(crate) fn shared(
        board: Board,
        clock: Clock,
        places: Places,
        files: ItemFiles,
        uplink: Uplink,
        slots: usize,
    ) -> SharedDesk {
        Arc::new_cyclic(|me| {
            Mutex::new(Desk {
                board,
                clock,
                places,
                files,
                stops: (0..slots).map(|_| None).collect(),
                endpoints: HashMap::new(),
                own: HashMap::new(),
                pmi: HashMap::new(),
                fences: HashMap::new(),
                waiters: HashMap::new(),
                uplink,
                direct: None,
                me: me.clone(),
                store: None,
                store_said: saker_wire::StoreUsage::default(),
            })
        })
    }

    pub(crate) fn now(&self) -> Moment {
        self.clock.now()
    }

    /// Hands an input to the board and carries out what it decided.
    pub(crate) fn apply<R>(&mut self, now: Moment, input: impl FnOnce(&mut Board) -> R) -> R {
        let result = input(&mut self.board);
        self.apply_effects(now);
        result
    }

    /// Carries out the board's effects in order, and those they lead to.
    pub(crate) fn apply_effects(&mut self, now: Moment) {
        while let Some(effect) = self.board.poll_effect() {
            match effect {
                Effect::Cancel { slot, attempt } => {
                    let held = self.stops.get_mut(slot);
                    if let Some(held) = held
                        && held
                            .as_ref()
                            .is_some_and(|(running, _)| *running == attempt)
                        && let Some((_, stop)) = held.take()
                    {
                        stop.cancel();
                    }
                }
                Effect::Detach { slot } => {
                    if let Some(held) = self.stops.get_mut(slot) {
                        *held = None;
                    }
                }
                Effect::WriteHostfile { plan } => crate::gang::write_hostfile(&plan, &self.places),
                Effect::OpenEndpoint { attempt, members } => {
                    self.open_endpoint(attempt, members, now);
                }
                Effect::OpenPmi { plan, launch } => self.open_pmi(&plan, launch.as_deref()),
                Effect::RunOwn {
                    plan,
                    process,
                    binding,
                } => self.run_own(&plan, process, &binding),
                Effect::StopOwn { attempt } => self.stop_own(attempt),
                Effect::PartEnded { attempt } => {
                    self.endpoints.remove(&attempt);
                    self.close_pmi(attempt);
                    self.waiters.retain(|(waiting, _), _| *waiting != attempt);
                }
                Effect::KeepItem { item } => {
                    let kept = self.files.keep(&item);
                    if kept.is_ok() {
                        if let Some(store) = &mut self.store {
                            store.fetched(&item);
                        }
                        self.say_copied(&item);
                        self.say_store();
                    }
                    self.board.handle_item_kept(&item, kept, now);
                }
                Effect::CheckPartItems { plan } => {
                    let missing = self.files.to_fetch(&plan.job);
                    if missing.is_none() {
                        crate::gang::link_leader_scratch(&plan, &self.places);
                    }
                    let attempt = plan.assignment.attempt;
                    self.board.handle_part_items_checked(attempt, missing);
                }
                Effect::DiscardItem { item } => {
                    self.files.discard(&item);
                    if let Some((routes, _)) = &mut self.direct {
                        routes.finish(&item);
                    }
                }
                Effect::SpillResults { results } => {
                    let file = super::held::path(&self.places.scratch);
                    if let Err(error) = super::held::write(&file, &results) {
                        tracing::warn!(error = %crate::error_chain(&error),
                            "cannot keep held results on disk; they stay in memory");
                        self.board.handle_spill_failed(results);
                    } else {
                        tracing::info!(results = results.len(), "held results kept on disk");
                    }
                }
                Effect::ReadSpilled { held } => {
                    let file = super::held::path(&self.places.scratch);
                    let read = super::held::read(&file)
                        .inspect_err(|error| {
                            tracing::error!(error = %crate::error_chain(error),
                                "cannot read back the results held on disk; their tasks run again");
                        })
                        .ok();
                    self.board.handle_spilled_read(&held, read);
                }
            }
        }
    }

    /// The next attempt for idle slot `index`, ready for its thread, if one starts.
    pub(crate) fn start_next(&mut self, index: usize, now: Moment) -> Option<NextAttempt> {
        let next = loop {
            match self.board.poll_start(index, now) {
                None => break None,
                Some(Next::CheckItems { attempt, job }) => {
                    let missing = self.files.to_fetch(&job);
                    self.board.handle_items_checked(attempt, missing);
                }
                Some(Next::Start(start)) => break Some(self.ready(start)),
            }
        };
        self.apply_effects(now);
        next
    }

    /// A start made ready for its slot's thread: its work, and the stop control whose
    /// handle this desk keeps.
    fn ready(&mut self, start: Start) -> NextAttempt {
        let Start {
            slot,
            attempt,
            binding,
            run,
        } = start;
        let work = match run {
            Run::Task {
                assignment,
                job,
                cores,
            } => {
                if let Some(store) = &mut self.store {
                    store.pin(attempt, &job.reads);
                }
                task_work(&self.places, &assignment, job, &binding, cores)
            }
            Run::Part { plan, process } => {
                let mut launch =
                    crate::gang::process_launch(&plan, &process, &binding, &self.places);
                let served = match process.kind {
                    ProcessKind::Rank { rank, .. } if plan.hpc.mpi == MpiKind::Pmi => Some(rank),
                    ProcessKind::LaunchRank { rank, .. } => Some(rank),
                    _ => None,
                };
                if let Some(rank) = served {
                    launch.pmi_socket = Some(self.pmi_socket(attempt, rank));
                }
                Work::Command(Box::new(launch))
            }
        };
        let (stop, control) = StopHandle::new();
        self.stops[slot] = Some((attempt, stop));
        NextAttempt {
            attempt,
            work,
            control,
            binding,
        }
    }

    /// The thread of slot `index` could not take the attempt just started there.
    pub(crate) fn unstart(&mut self, index: usize, now: Moment) {
        if let Some(held) = self.stops.get_mut(index) {
            if let (Some((attempt, _)), Some(store)) = (held.as_ref(), &mut self.store) {
                store.unpin(*attempt);
            }
            *held = None;
        }
        self.apply(now, |board| board.handle_unstart(index, now));
    }

    /// An attempt of the slot's thread of `generation` ended: books it, and returns
    /// the slot's next attempt if it is still the slot's business and one starts.
    pub(crate) fn attempt_done(
        &mut self,
        generation: u64,
        done: AttemptDone,
        now: Moment,
    ) -> Option<NextAttempt> {
        let index = done.executor as usize;
        if let Some(number) = self.board.part_process_on(index) {
            let (attempt, outcome) = (done.attempt, &done.finished.outcome);
            tracing::debug!(%attempt, number, ?outcome, "gang process ended");
        }
        let written = match done.finished.outcome {
            Outcome::Exited { code: 0 } => self
                .board
                .job_writing(index, generation, done.attempt)
                .map(|job| self.files.written(job)),
            _ => None,
        };
        if let Some(store) = &mut self.store {
            store.unpin(done.attempt);
            for item in written.iter().flatten().flatten() {
                store.arrived(&item.name);
            }
            self.say_store();
        }
        let current = self.board.handle_attempt_done(
            index,
            generation,
            done.attempt,
            done.finished,
            written,
            now,
        );
        if current {
            // Its attempt has ended: the handle has nothing left to stop.
            self.stops[index] = None;
            self.start_next(index, now)
        } else {
            self.apply_effects(now);
            None
        }
    }

    /// Sends the report at `now` if there is anything to send (see
    /// [`Board::start_report`]). Every report is taken and sent under the desk's
    /// lock, by the agent or by a slot's thread, so reports and the agent's own frames
    /// (hello, goodbye) leave in the order their contents were booked.
    pub(crate) fn send_report(&mut self, now: Moment) -> Result<(), AgentFailure> {
        if !self.board.start_report(now) {
            return Ok(());
        }
        while let Some(message) = self.board.poll_up() {
            if let FromAgent::ItemRead(read) = message {
                self.route_read(read)?;
                continue;
            }
            self.uplink.send(&message)?;
            if let FromAgent::Report(report) = message {
                self.board.handle_sent(report);
            }
        }
        Ok(())
    }

    /// On a slot's thread, after its attempt ended or its report clock rang: sends
    /// the report if it is due, and says when this slot should look again.
    pub(crate) fn report_clock(
        &mut self,
        executor: u32,
        generation: u64,
        now: Moment,
    ) -> Option<Instant> {
        if self.board.report_from_slot(now)
            && let Err(error) = self.send_report(now)
        {
            // The link is gone: the agent hears of that on its own.
            tracing::debug!(%error, "could not send a report");
        }
        let at = self
            .board
            .keep_report_clock(executor as usize, generation)?;
        Some(self.clock.instant(at))
    }

    /// An answer to one of this node's item requests.
    pub(crate) fn item_data(&mut self, data: &ItemData, now: Moment) {
        if self.board.handle_item_data(data, now) {
            let written = self.files.write(data);
            let len = data.data.len() as u64;
            self.board
                .handle_item_written(&data.item, len, written, now);
        }
        self.apply_effects(now);
    }

    /// Reads of items go to their holders directly, through `fetcher`, where they can.
    pub(crate) fn set_fetcher(&mut self, fetcher: Fetcher) {
        self.direct = Some((Routes::default(), fetcher));
    }

    /// A read the board wants sent: to a holder directly, or up.
    fn route_read(&mut self, read: ItemRead) -> Result<(), AgentFailure> {
        self.files.begin(&read.item);
        let Some((routes, _)) = &mut self.direct else {
            return self.uplink.send(&FromAgent::ItemRead(read));
        };
        let mut out = Vec::new();
        routes.read(read, &mut out);
        self.carry(out)
    }

    fn carry(&mut self, out: Vec<transfer::Send>) -> Result<(), AgentFailure> {
        for send in out {
            match send {
                transfer::Send::Up(message) => self.uplink.send(&message)?,
                transfer::Send::Fetch(fetch) => {
                    if let Some((_, fetcher)) = &self.direct {
                        let part = self.files.part_path(&fetch.read.item);
                        fetcher.send(fetch, part);
                    }
                }
            }
        }
        Ok(())
    }

    /// The root said where an item is.
    pub(crate) fn item_holders(&mut self, holders: ItemHolders) -> Result<(), AgentFailure> {
        let Some((routes, _)) = &mut self.direct else {
            return Ok(());
        };
        let item = holders.item.clone();
        let mut out = Vec::new();
        routes.holders(holders, &mut out);
        if out
            .iter()
            .any(|send| matches!(send, transfer::Send::Fetch(_)))
        {
            self.board.handle_item_direct(&item);
        }
        self.carry(out)
    }

    /// A read sent to a holder directly has ended: its bytes are written as the
    /// root's answers are; a failed one goes another way.
    pub(crate) fn fetched(&mut self, fetched: Fetched, now: Moment) -> Result<(), AgentFailure> {
        let Some((routes, _)) = &mut self.direct else {
            return Ok(());
        };
        let Fetched { fetch, answer } = fetched;
        match answer {
            Ok(landed) => {
                if routes.fetched(&fetch, landed.len) {
                    // Marked before the effects: a whole item is kept (and no longer
                    // relayed) by them.
                    let good = self.board.handle_item_landed(&landed, now);
                    if good {
                        self.files.landed(&landed);
                    }
                    self.apply_effects(now);
                }
                Ok(())
            }
            Err(error) => {
                tracing::info!(item = %fetch.read.item, holder = %fetch.holder.node,
                    error = %crate::error_chain(&error), "a direct read failed; trying another way");
                let mut out = Vec::new();
                routes.failed(fetch, &mut out);
                self.carry(out)
            }
        }
    }

    /// Tells the root what the object memory holds, if that changed since it last
    /// heard.
    pub(crate) fn say_store(&mut self) {
        let Some(store) = &mut self.store else {
            return;
        };
        let (asks, kept) = store.take_said();
        let (usage, bound) = (store.usage(), store.bound());
        let node = NodeId(self.uplink.node);
        for item in asks {
            let ask = FromAgent::DropCopy(saker_wire::DropCopy { node, item });
            if let Err(error) = self.uplink.send(&ask) {
                // The link is gone: the agent hears of that on its own.
                tracing::debug!(%error, "could not ask to drop a copy");
            }
        }
        for item in kept {
            self.say_copied(&item);
        }
        let said = saker_wire::StoreUsage {
            node,
            objects: usage.objects,
            memory_bytes: usage.memory_bytes,
            memory_bound: bound,
            disk_bytes: usage.disk_bytes,
            spills: usage.spills,
            spilled_bytes: usage.spilled_bytes,
            spill_failures: usage.spill_failures,
            drops: usage.evictions,
            dropped_bytes: usage.evicted_bytes,
        };
        if said == self.store_said {
            return;
        }
        match self.uplink.send(&FromAgent::StoreUsage(said)) {
            Ok(()) => self.store_said = said,
            // The link is gone: the agent hears of that on its own.
            Err(error) => tracing::debug!(%error, "could not say what the store holds"),
        }
    }

    /// The root has not heard what the object memory holds (a new one, say).
    pub(crate) fn store_unsaid(&mut self) {
        self.store_said = saker_wire::StoreUsage::default();
    }

    /// A fetched item is whole and in place: the root learns this node holds a copy.
    fn say_copied(&mut self, item: &str) {
        let (direct, relayed) = match &mut self.direct {
            Some((routes, _)) => routes.finish(item),
            None => (0, 0),
        };
        let Some(bytes) = self.files.size(item) else {
            return;
        };
        let copied = FromAgent::ItemCopied(ItemCopied {
            node: NodeId(self.uplink.node),
            item: item.to_owned(),
            bytes,
            direct,
            relayed,
        });
        if let Err(error) = self.uplink.send(&copied) {
            // The link is gone: the agent hears of that on its own.
            tracing::debug!(%error, "could not say an item was copied");
        }
    }

    /// Another node asks for bytes of an item this node holds.
    pub(crate) fn serve(&self, read: &ItemRead) -> ItemData {
        self.files.serve(read)
    }

    /// A daemon this node's gang launcher asked for ended on its member: its remote
    /// shell exits with the code.
    pub(crate) fn launch_ended(&mut self, ended: &GangLaunchEnded) {
        // A waiter gone (its part ended) needs no answer.
        if let Some(waiter) = self.waiters.remove(&(ended.attempt, ended.launch)) {
            let _ = waiter.send(ended.clone());
        }
    }

    /// Opens the remote-shell endpoint of an MPI gang this node leads; if it cannot,
    /// the part fails (its launcher could start no daemon).
    fn open_endpoint(&mut self, attempt: AttemptId, members: u32, now: Moment) {
        let relay = Arc::new(DeskRelay {
            desk: self.me.clone(),
            uplink: self.uplink.clone(),
        });
        let opened = std::env::current_exe().and_then(|program| {
            Endpoint::open(relay, attempt, members, &self.places.spill_dir, &program)
        });
        match opened {
            Ok(endpoint) => {
                // Kept for as long as the part lasts.
                if self.board.has_part(attempt) {
                    self.endpoints.insert(attempt, endpoint);
                }
            }
            Err(error) => {
                tracing::error!(%attempt, %error, "cannot open the gang's remote-shell endpoint");
                let reason = format!("cannot open the remote-shell endpoint: {error}");
                self.board.handle_part_failed(attempt, reason, now);
            }
        }
    }
}

/// A gang endpoint's way to the agent: see [`Relay`].
#[derive(Debug)]
struct DeskRelay {
    desk: Weak<Mutex<Desk>>,
    uplink: Uplink,
}

impl Relay for DeskRelay {
    fn open_world(&self, attempt: AttemptId, world: u32, members: u32) -> Result<(), RelayError> {
        let desk = self.desk.upgrade().ok_or(RelayError::PartEnded)?;
        let mut desk = lock(&desk);
        if !desk.board.has_part(attempt) {
            return Err(RelayError::PartEnded);
        }
        desk.open_world(attempt, world, members);
        Ok(())
    }

    fn relay(
        &self,
        launch: GangLaunch,
        waiter: mpsc::Sender<GangLaunchEnded>,
    ) -> Result<(), RelayError> {
        let desk = self.desk.upgrade().ok_or(RelayError::PartEnded)?;
        let mut desk = lock(&desk);
        if !desk.board.has_part(launch.attempt) {
            return Err(RelayError::PartEnded);
        }
        desk.waiters.insert((launch.attempt, launch.launch), waiter);
        if desk.board.is_away() {
            // No root to relay it: the next one does, after this node's hello.
            desk.board.hold_launch(launch);
            return Ok(());
        }
        let message = FromAgent::GangLaunch(launch);
        let frame =
            saker_wire::frame::encode(self.uplink.node, &message).map_err(RelayError::Encode)?;
        self.uplink.parent.send(frame).map_err(RelayError::Parent)
    }
}
