//! The agent: one per node, an actor that supervises the node's slots.
//!
//! It keeps a small local queue (the prefetch window), starts attempts on idle slots,
//! and reports starts and results upward together with new credit: each finished
//! attempt hands its cores back as credit, so the root only ever sends work that this
//! node asked for (pull-based dispatch). A slot whose attempt ends takes the next
//! queued one itself.
//!
//! Every decision about this node's work is made by its pure core, the
//! [board](crate::board): this actor and the slots' threads are its thin shell. The
//! board sits on the agent's desk (`desk.rs`) with the handles of what it decided (the
//! running attempts' stop handles, gang endpoints, item files), behind one lock the
//! agent and every slot thread take; `sink.rs` is the slots' side of it. This actor
//! receives a message, hands it to the board with the time, and carries out what the
//! board decided.
//!
//! Reports are coalesced and paced: at most one per [`REPORT_GAP`], unless the local
//! queue has run dry (then the credit is urgent), so under load many results share a
//! frame and the root, the link and this agent wake up once per frame, not per task.
//! An idle node reports at once. The slots send their own news: the slot whose
//! attempt ends sends the report if it is due, and otherwise one slot keeps the
//! clock for the end of the gap (see [`Board::keep_report_clock`]), so a busy node's
//! reports never wake this actor. What the agent itself adds (a cancelled queued
//! task, say) it paces with a `Flush` message to itself.
//!
//! Each slot runs on a thread of its own ([`crate::executor`]) that tells the agent
//! when it fails; the agent restarts it under its [`RestartPolicy`] (see `slots.rs`).
//! An agent that fails (every slot given up, say) says goodbye to its parent with the
//! reason, so that the root replays its work at once, and exits with an
//! [`AgentFailure`].

use std::path::PathBuf;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use saker_wire::messages::{
    FromAgent, Held, HeldActor, Hello, NamedAmount, NodeId, ResourceKind, Resources, ToAgent,
};

use crate::actor_host::{self, HostUplink, Refused};
use crate::board::{Board, BoardConfig, Flush};
pub use crate::board::{PREFETCH_COVER, REPORT_GAP};
use crate::executor::{SlotFault, SlotRuns};
use crate::items::{ItemDirs, ItemFiles};
use crate::launch::Places;
use crate::link::{LinkClosed, LinkTx};
use crate::resources::NodeResources;
use crate::supervision::{RestartPolicy, Restarts};
use crate::tree::ParentLost;
use desk::{Clock, Desk, SharedDesk, Uplink, lock};
use sink::AgentSink;

mod desk;
#[cfg(test)]
mod desk_tests;
mod held;
mod sink;
mod slots;
mod store;
#[cfg(test)]
mod supervision_tests;
#[cfg(test)]
mod tests;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: u32,
    pub hostname: String,
    /// What the node offers: cores (one slot each), CPUs to pin to, GPUs, memory and
    /// named resources.
    pub resources: NodeResources,
    /// Whether to limit each attempt's memory to what it asked for, in a cgroup per
    /// slot, where the agent may make them ([`crate::resources::cgroup`]).
    pub limit_memory: bool,
    /// Cores of extra work to hold queued locally, at least, so executors never wait a
    /// round trip; more for short tasks (see [`Board::prefetch`]).
    pub prefetch: u32,
    pub pilot_id: String,
    /// Where task output that exceeds the inline limit is written.
    pub spill_dir: PathBuf,
    /// This node's scratch directory for data items (`SAKER_SCRATCH`): node-local.
    pub scratch: PathBuf,
    /// Every node's scratch directory is on one filesystem all nodes see: items are
    /// linked from their writer's, not copied through the tree.
    pub shared_scratch: bool,
    /// Where and how much of its objects the node keeps in memory (`--object-memory`);
    /// none: objects are files in the scratch directory like any item.
    pub object_memory: Option<ObjectMemory>,
    /// How a slot whose thread failed is restarted, and when it is given up.
    pub restarts: RestartPolicy,
}

/// A node's object memory: a directory on a shared-memory filesystem, and the bytes
/// of objects kept there before the least recently used move to the scratch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMemory {
    pub dir: PathBuf,
    pub bound: u64,
}

impl AgentConfig {
    /// Cores the node offers: one slot each.
    pub fn cores(&self) -> u32 {
        self.resources.cores
    }

    /// Where this node's items are.
    pub fn item_dirs(&self) -> ItemDirs {
        ItemDirs {
            scratch: self.scratch.clone(),
            memory: self.object_memory.as_ref().map(|memory| memory.dir.clone()),
        }
    }
}

#[derive(Debug)]
pub enum AgentMsg {
    /// A message from the root addressed to this node.
    Down(ToAgent),
    /// A member's keys of a PMI fence of a job this node leads, from its data
    /// connection; answered with every member's once all are in.
    HubFence(
        saker_wire::messages::PmiFence,
        tokio::sync::oneshot::Sender<saker_wire::messages::PmiFence>,
    ),
    /// Every member's keys of a fence this node sent its job's hub, or the fence
    /// again with why the hub did not answer.
    HubFenced(Result<saker_wire::messages::PmiFence, (saker_wire::messages::PmiFence, String)>),
    /// Time to look for objects clients put in this node's memory.
    LookAtStore,
    /// A move of an object out of memory has ended.
    Spilled(store::Spilled),
    /// A slot's attempt ended (and the slot may have started its next one): report,
    /// and start work on slots that are idle now.
    SlotChanged,
    Flush,
    /// A slot's thread failed and has ended (sent by that thread).
    SlotFailed {
        slot: u32,
        generation: u64,
        fault: SlotFault,
    },
    /// The backoff after a slot's failure is over: give it a fresh thread.
    RestartSlot {
        slot: u32,
    },
    /// A child link closed: its whole subtree is reported lost upward.
    ChildLost {
        nodes: Vec<u32>,
        reason: String,
    },
    /// The link to the parent failed. The root replays this node's work elsewhere, so
    /// the agent drops its queue and stops what runs, while the link looks for a live
    /// ancestor.
    ParentLost,
    /// The link reattached to a live ancestor: register again as a new node.
    Reattached,
    /// The root asks this node to register again (it was declared lost while alive):
    /// drop the old work and say hello.
    Rejoin,
    /// No live ancestor answered: stop and exit.
    ParentGone(ParentLost),
    /// A newer agent linked as this node: this one is a stale copy; stop and exit
    /// without a goodbye (the goodbye would count against the newer one).
    Superseded {
        node: u32,
    },
    /// A read of an item sent to its holder directly has ended.
    Fetched(Box<crate::transfer::Fetched>),
}

/// How the agent's actor ended, for the process exit code.
#[derive(Debug)]
pub enum AgentExit {
    /// As the root asked.
    Shutdown,
    ParentLost(ParentLost),
    Failed(AgentFailure),
}

impl AgentExit {
    /// Why the agent ended, unless it was asked to.
    pub fn error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AgentExit::Shutdown => None,
            AgentExit::ParentLost(error) => Some(error),
            AgentExit::Failed(error) => Some(error),
        }
    }
}

/// Why an agent gave up.
#[derive(Debug, thiserror::Error)]
pub enum AgentFailure {
    /// The root's reason, as it gave it.
    #[error("the root refused this agent: {reason}")]
    Refused { reason: String },
    #[error("every slot of this node ({slots}) failed too often and was given up")]
    NoSlotLeft {
        slots: u32,
        #[source]
        last: SlotFault,
    },
    #[error("could not encode a frame for the parent")]
    Encode(#[source] saker_wire::WireError),
    #[error("the queue to the parent is closed")]
    ParentQueue(#[source] LinkClosed),
    /// The actor ended without saying why: it panicked, or could not start.
    #[error("the agent actor ended without an exit reason")]
    NoExitReason,
}

#[derive(Debug)]
pub struct AgentState {
    config: AgentConfig,
    uplink: Uplink,
    /// The board and the handles of what it decided, shared with the slots' threads.
    desk: SharedDesk,
    /// What every slot thread reports to.
    sink: AgentSink,
    /// Each slot thread's queue, by slot.
    slot_runs: Vec<SlotRuns>,
    /// Each slot's recent failures, by slot.
    restarts: Vec<Restarts>,
    exit: Option<AgentExit>,
    exit_tx: Option<tokio::sync::oneshot::Sender<AgentExit>>,
    /// Where actor frames are answered from (the host's, or this agent's refusals).
    actor_uplink: HostUplink,
    /// Where other agents fetch this node's items directly (its hello says so).
    data_addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Default)]
pub struct Agent;

#[derive(Debug)]
pub struct AgentArgs {
    pub config: AgentConfig,
    pub parent: LinkTx,
    /// Receives how the agent ended, once it has stopped.
    pub exit: Option<tokio::sync::oneshot::Sender<AgentExit>>,
    /// How to fetch items from other agents directly; none: through the root only.
    pub direct: Option<crate::transfer::Direct>,
}

impl Actor for Agent {
    type Msg = AgentMsg;
    type State = AgentState;
    type Arguments = AgentArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let config = args.config;
        let cores = config.cores();
        let slots = cores.max(1);
        let clock = Clock::start();
        let board_config = BoardConfig {
            node: config.node,
            slots,
            prefetch: config.prefetch,
            credit: cores + config.prefetch,
        };
        let board = Board::new(&board_config, &config.resources, clock.now());
        let mut config = config;
        if let Some(memory) = &config.object_memory
            && let Err(error) = crate::items::create_private_dir(&memory.dir)
        {
            // Objects live in the scratch directory, as without a memory.
            tracing::warn!(%error, dir = %memory.dir.display(), "no object memory");
            config.object_memory = None;
        }
        let dirs = config.item_dirs();
        if let Err(error) = crate::items::create_private_dir(&config.scratch) {
            // Tasks that read or write data items will fail to; the rest run.
            tracing::warn!(%error, dir = %config.scratch.display(), "no scratch directory");
        } else if let Err(error) =
            crate::items::write_node_mark(&dirs, &config.pilot_id, config.node)
        {
            tracing::warn!(%error, dir = %config.scratch.display(), "cannot mark the scratch directory");
        }
        let mut files = ItemFiles::new(config.node, config.scratch.clone(), config.shared_scratch);
        if let Some(memory) = &dirs.memory {
            files = files.with_memory(memory.clone());
        }
        let mut places = Places::new(
            config.node,
            config.spill_dir.clone(),
            config.scratch.clone(),
        );
        places.objects = dirs.memory.clone();
        let bound = config
            .object_memory
            .as_ref()
            .map_or(0, |memory| memory.bound);
        let store = store::ObjectStore::new(&dirs, bound, Some(myself.clone()));
        if store.is_some() {
            myself.send_interval(store::LOOK_EVERY, || AgentMsg::LookAtStore);
        }
        let uplink = Uplink {
            parent: args.parent.clone(),
            node: config.node,
        };
        if let Some(direct) = &args.direct {
            files = files.with_relays(direct.relays.clone());
        }
        let desk = Desk::shared(board, clock, places, files, uplink.clone(), slots as usize);
        lock(&desk).store = store;
        let data_addr = args.direct.as_ref().map(|direct| direct.addr);
        if let Some(direct) = args.direct {
            lock(&desk).set_fetcher(crate::transfer::Fetcher::start(direct, myself.clone()));
        }
        let sink = AgentSink {
            agent: myself.clone(),
            desk: desk.clone(),
            memory: sink::memory_cgroups(&config).map(Arc::new),
        };
        let slot_runs = (0..slots)
            .map(|slot| crate::executor::start(slot, 0, sink.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let actor_uplink = HostUplink::new(&args.parent, config.node);
        actor_host::set_uplink(&actor_uplink);
        if let Some(host) = actor_host::installed() {
            host.attach(actor_uplink.clone());
        }
        uplink.send(&hello(&config, data_addr, Vec::new(), Vec::new()))?;
        let state = AgentState {
            config,
            uplink,
            desk,
            sink,
            slot_runs,
            restarts: (0..slots).map(|_| Restarts::default()).collect(),
            exit: None,
            exit_tx: args.exit,
            actor_uplink,
            data_addr,
        };
        // The first credit goes up at once.
        schedule_flush(&myself, &state);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Err(failure) = on_message(&myself, state, message) {
            fail(&myself, state, failure);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // The node's tasks die with its agent; the slots' threads end with their queues.
        stop_all(state);
        // The process ends the stream upward (`node::run_agent`), after its children.
        if let Some(sender) = state.exit_tx.take() {
            let exit = state.exit.take().unwrap_or(AgentExit::Shutdown);
            let _ = sender.send(exit);
        }
        Ok(())
    }
}

fn on_message(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    message: AgentMsg,
) -> Result<(), AgentFailure> {
    match message {
        AgentMsg::Down(message) => on_down(myself, state, message)?,
        AgentMsg::SlotChanged => {}
        AgentMsg::Flush => {
            let mut desk = lock(&state.desk);
            desk.board.handle_flush();
            let now = desk.now();
            return desk.send_report(now);
        }
        AgentMsg::SlotFailed {
            slot,
            generation,
            fault,
        } => slots::on_slot_failed(myself, state, slot, generation, fault)?,
        AgentMsg::RestartSlot { slot } => slots::on_restart_slot(myself, state, slot)?,
        AgentMsg::ChildLost { nodes, reason } => {
            let nodes = nodes.into_iter().map(NodeId).collect();
            state.uplink.send(&FromAgent::NodesLost { nodes, reason })?;
        }
        AgentMsg::ParentLost => {
            tracing::warn!("parent lost; running work goes on while a root is looked for");
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.apply(now, |board| board.handle_parent_lost());
            drop(desk);
            // Actors run on for the next root to adopt; what they asked of other
            // actors cannot be answered by the root that is gone.
            actor_host::fail_outgoing("this node lost its place in the pilot's tree");
        }
        AgentMsg::Reattached => register_again(state, false)?,
        // An ancestor reattached: the root may be a new one, which adopts what runs here.
        AgentMsg::Rejoin => {
            tracing::warn!("an ancestor reattached; registering again");
            register_again(state, false)?;
        }
        AgentMsg::Superseded { node } => {
            return Err(AgentFailure::Refused {
                reason: format!("a newer agent linked as node {node}"),
            });
        }
        AgentMsg::LookAtStore => {
            let mut desk = lock(&state.desk);
            if let Some(store) = &mut desk.store {
                store.look();
            }
            desk.say_store();
        }
        AgentMsg::Spilled(spilled) => {
            let mut desk = lock(&state.desk);
            if let Some(store) = &mut desk.store {
                store.spilled(spilled);
            }
            desk.say_store();
        }
        AgentMsg::HubFence(fence, answer) => lock(&state.desk).gather_fence(fence, Some(answer)),
        AgentMsg::HubFenced(Ok(all)) => lock(&state.desk).pmi_fenced(all),
        AgentMsg::HubFenced(Err((fence, reason))) => {
            lock(&state.desk).fence_unanswered(fence, &reason);
        }
        AgentMsg::Fetched(fetched) => {
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.fetched(*fetched, now)?;
        }
        AgentMsg::ParentGone(gone) => {
            tracing::error!(
                lost = %crate::error_chain(&gone.lost),
                error = &gone as &dyn std::error::Error,
                "no parent; stopping"
            );
            stop_all(state);
            state.exit = Some(AgentExit::ParentLost(gone));
            myself.stop(None);
            return Ok(());
        }
    }
    start_queued(state);
    schedule_flush(myself, state);
    Ok(())
}

/// Ends the agent on `failure`: stops its work and, if the parent can still hear it,
/// says goodbye with the reason, so that the root replays this node's work at once
/// rather than after a heartbeat timeout.
fn fail(myself: &ActorRef<AgentMsg>, state: &mut AgentState, failure: AgentFailure) {
    tracing::error!(
        error = &failure as &dyn std::error::Error,
        "the agent fails"
    );
    stop_all(state);
    // A refused agent is no node of the root's: it has nobody to say goodbye to.
    if !matches!(failure, AgentFailure::Refused { .. })
        && let Err(error) = say_goodbye(state, crate::error_chain(&failure))
    {
        tracing::debug!(%error, "could not say goodbye");
    }
    state.exit = Some(AgentExit::Failed(failure));
    myself.stop(None);
}

/// The last report, then the goodbye, and nothing after it.
fn say_goodbye(state: &mut AgentState, reason: String) -> Result<(), AgentFailure> {
    let node = state.config.node;
    let mut desk = lock(&state.desk);
    desk.board.handle_stopping();
    let now = desk.now();
    let sent = desk.send_report(now).and_then(|()| {
        let goodbye = FromAgent::Goodbye {
            node: NodeId(node),
            reason,
        };
        desk.uplink.send(&goodbye)
    });
    desk.board.handle_goodbye_sent();
    sent
}

fn hello(
    config: &AgentConfig,
    data_addr: Option<std::net::SocketAddr>,
    held: Vec<Held>,
    actors: Vec<HeldActor>,
) -> FromAgent {
    FromAgent::Hello(Hello {
        node: NodeId(config.node),
        hostname: config.hostname.clone(),
        capacity: Resources::cores(config.cores())
            .with(ResourceKind::GPUS, config.resources.gpus.len() as u32)
            .with(ResourceKind::MEMORY_MIB, config.resources.memory_mib),
        custom: config
            .resources
            .custom
            .iter()
            .map(|(name, amount)| NamedAmount {
                name: name.clone(),
                amount: *amount,
            })
            .collect(),
        executors: config.cores().max(1),
        pid: std::process::id(),
        pilot_id: config.pilot_id.clone(),
        hosts_actors: actor_host::installed().is_some(),
        held,
        actors,
        scratch: std::path::absolute(&config.scratch)
            .unwrap_or_else(|_| config.scratch.clone())
            .display()
            .to_string(),
        data_addr: data_addr.map(|addr| addr.to_string()).unwrap_or_default(),
    })
}

/// Registers this node again as a new life of its id.
///
/// With `stop_old_work` (the root lost this node's old life and asks it back), every
/// attempt is stopped first; what was pending goes before the hello, so that the root
/// judges it against the old life (late results of replayed attempts are dropped and
/// counted there), and the ends of the stopped attempts come after it.
///
/// Otherwise (this node reattached, perhaps to a root that took over) what runs goes
/// on: the hello lists it with every result not reported yet ([`Board::held`]), for
/// the root to adopt, and those results follow the hello.
///
/// [`Board::held`]: crate::board::Board::held
fn register_again(state: &mut AgentState, stop_old_work: bool) -> Result<(), AgentFailure> {
    if stop_old_work {
        // The root counts this node's old life lost and starts its actors elsewhere.
        stop_actors();
    }
    // One hold of the lock: no slot thread may report between these steps.
    let mut desk = lock(&state.desk);
    let now = desk.now();
    // The root this hello goes to learns what the object memory holds at the next look.
    desk.store_unsaid();
    if stop_old_work {
        desk.apply(now, |board| board.handle_stop_all(now));
        desk.send_report(now)?;
        let hello = hello(&state.config, state.data_addr, Vec::new(), Vec::new());
        desk.uplink.send(&hello)?;
        desk.board.handle_new_life();
    } else {
        let held = desk.board.held();
        let actors: Vec<HeldActor> = actor_host::installed()
            .map(|host| host.lives())
            .unwrap_or_default()
            .into_iter()
            .map(|(actor, life)| HeldActor { actor, life })
            .collect();
        tracing::info!(
            held = held.len(),
            actors = actors.len(),
            "saying hello with the work this node holds"
        );
        desk.uplink
            .send(&hello(&state.config, state.data_addr, held, actors))?;
        // Results written to disk while away are read back before the report.
        desk.apply(now, |board| board.handle_new_life());
        desk.send_report(now)?;
        desk.resend_pmi_fences();
    }
    tracing::info!(credit = %desk.board.credit(), "registering again");
    Ok(())
}

fn on_down(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    message: ToAgent,
) -> Result<(), AgentFailure> {
    match message {
        ToAgent::Welcome(welcome) => {
            tracing::debug!(node = welcome.node.0, capacity = %welcome.capacity, "registered with the root");
            lock(&state.desk).board.handle_welcome(welcome.capacity);
        }
        ToAgent::Refused { reason } => return Err(AgentFailure::Refused { reason }),
        ToAgent::Rejoin => {
            tracing::warn!("the root asks this node to register again");
            register_again(state, true)?;
        }
        ToAgent::Dispatch(dispatch) => {
            if !dispatch.forget.is_empty() {
                tracing::debug!(jobs = dispatch.forget.len(), "forgetting finished jobs");
            }
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.apply(now, |board| board.handle_dispatch(dispatch, now));
        }
        ToAgent::GangLaunch(launch) => {
            let (attempt, number) = (launch.attempt, launch.launch);
            tracing::debug!(%attempt, launch = number, "running a launch for the gang's leader");
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.apply(now, |board| board.handle_gang_launch(launch));
        }
        ToAgent::ItemData(data) => {
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.item_data(&data, now);
        }
        ToAgent::ItemHolders(holders) => lock(&state.desk).item_holders(holders)?,
        // Answers a client reads on a data connection; a link never carries one.
        ToAgent::ObjectStored(stored) => {
            tracing::warn!(item = %stored.item, "an object's answer came on the link: ignored");
        }
        ToAgent::ItemsFreed { items } => {
            let mut desk = lock(&state.desk);
            desk.files.remove(&items);
            if let Some(store) = &mut desk.store {
                store.freed(&items);
            }
        }
        ToAgent::CopyDrop(answer) => {
            let mut desk = lock(&state.desk);
            if let Some(store) = &mut desk.store {
                store.drop_answered(&answer.item, answer.allowed);
            }
            desk.say_store();
        }
        ToAgent::ItemRead(read) => {
            let answer = lock(&state.desk).serve(&read);
            state.uplink.send(&FromAgent::ItemData(answer))?;
        }
        ToAgent::Return { attempts } => {
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.apply(now, |board| {
                for attempt in attempts {
                    board.handle_return(attempt, now);
                }
            });
        }
        ToAgent::GangLaunchEnded(ended) => lock(&state.desk).launch_ended(&ended),
        ToAgent::PmiFenced(fence) => lock(&state.desk).pmi_fenced(fence),
        ToAgent::Cancel { attempts } => {
            let mut desk = lock(&state.desk);
            let now = desk.now();
            desk.apply(now, |board| {
                for attempt in attempts {
                    board.handle_cancel(attempt, now);
                }
            });
        }
        // An agent with an actor host never sees these: the link's reader hands them
        // to the host (`actor_host::deliver`). Without one, spawns and calls are refused.
        ToAgent::ActorSpawn(spawn) => actor_host::refuse(
            &state.actor_uplink,
            Refused::Spawn {
                actor: spawn.actor,
                life: spawn.life,
            },
        ),
        ToAgent::ActorCall(call) => {
            actor_host::refuse(&state.actor_uplink, Refused::Call { call: call.call })
        }
        ToAgent::ActorStop { .. } | ToAgent::ActorAnswer(_) => {}
        ToAgent::Durable { through } => lock(&state.desk).board.handle_durable(through),
        ToAgent::Shutdown {
            reason,
            kill_running,
        } => {
            tracing::info!(%reason, "shutdown requested");
            if kill_running {
                stop_all(state);
            }
            say_goodbye(state, reason)?;
            state.exit = Some(AgentExit::Shutdown);
            myself.stop(None);
        }
    }
    Ok(())
}

/// Starts queued work on every idle slot it fits.
fn start_queued(state: &mut AgentState) {
    if state.exit.is_some() {
        return;
    }
    let mut desk = lock(&state.desk);
    let now = desk.now();
    let idle: Vec<usize> = desk.board.idle_slots().collect();
    for index in idle {
        let Some(next) = desk.start_next(index, now) else {
            // The queue is empty or its head does not fit the free cores.
            break;
        };
        if state.slot_runs[index].send(next).is_err() {
            // The slot's thread has failed, and its fault is on its way here: the
            // attempt goes back to the queue, for another slot.
            desk.unstart(index, now);
        }
    }
}

/// Ends this node's actors: the root starts them again elsewhere. Calls they made
/// that are still unanswered fail as lost.
fn stop_actors() {
    if let Some(host) = actor_host::installed() {
        host.stop_all();
    }
    actor_host::fail_outgoing("this node lost its place in the pilot's tree");
}

fn stop_all(state: &mut AgentState) {
    stop_actors();
    let mut desk = lock(&state.desk);
    let now = desk.now();
    desk.apply(now, |board| board.handle_stop_all(now));
    desk.board.handle_stopping();
}

/// Schedules the agent's own report, if the board wants one: now, or at the end of
/// the report gap.
fn schedule_flush(myself: &ActorRef<AgentMsg>, state: &AgentState) {
    let mut desk = lock(&state.desk);
    let now = desk.now();
    match desk.board.poll_flush(now) {
        // Fails only if this actor is stopping: then nothing is reported anyway.
        Some(Flush::Now) => {
            let _ = myself.send_message(AgentMsg::Flush);
        }
        Some(Flush::At(at)) => {
            let wait = at.saturating_sub(now.since_start);
            myself.send_after(wait, || AgentMsg::Flush);
        }
        None => {}
    }
}
