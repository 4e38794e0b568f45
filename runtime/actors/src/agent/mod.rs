//! The agent: one per node, an actor that supervises the node's slots.
//!
//! It keeps a small local queue (the prefetch window) on its [board](crate::board),
//! starts attempts on idle slots, and reports starts and results upward together
//! with new credit: each finished attempt hands its cores back as credit, so the root
//! only ever sends work that this node asked for (pull-based dispatch). A slot whose
//! attempt ends takes the next queued one itself, through the board.
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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use saker_wire::messages::{
    FromAgent, Hello, NamedAmount, NodeId, ResourceKind, Resources, ToAgent,
};

use crate::actor_host::{self, HostUplink, Refused};
use crate::board::{Board, FlushPlan, SharedBoard, lock};
use crate::executor::{AfterAttempt, AttemptDone, SlotFault, SlotRuns, SlotSink};
use crate::gang::endpoint::{Endpoint, Uplink};
use crate::link::{FrameBuf, LinkClosed, LinkTx};
use crate::node::ParentLost;
use crate::queued::Queued;
use crate::resources::cgroup::{MemoryCgroups, SlotCgroup};
use crate::resources::{NodeResources, SystemProbe};
use crate::supervision::{RestartPolicy, Restarts};

mod slots;
#[cfg(test)]
mod supervision_tests;
#[cfg(test)]
mod tests;

/// The least time between two reports of a busy node.
pub const REPORT_GAP: Duration = Duration::from_millis(20);

/// How long the prefetched work should last: a report gap plus a generous round trip
/// to the root, so that paced reports never leave a slot waiting.
pub const PREFETCH_COVER: Duration = Duration::from_millis(40);

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
    /// How a slot whose thread failed is restarted, and when it is given up.
    pub restarts: RestartPolicy,
}

impl AgentConfig {
    /// Cores the node offers: one slot each.
    pub fn cores(&self) -> u32 {
        self.resources.cores
    }
}

#[derive(Debug)]
pub enum AgentMsg {
    /// A message from the root addressed to this node.
    Down(ToAgent),
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

/// Sends this node's reports upward. Every report is taken and sent under the board's
/// lock, by the agent or by a slot's thread, so reports and the agent's own frames
/// (hello, goodbye) leave in the order their contents were booked.
#[derive(Debug, Clone)]
struct Reporter {
    parent: LinkTx,
    node: u32,
    cores: u32,
    /// The prefetch's floor (see [`Board::prefetch`]).
    prefetch: u32,
}

impl Reporter {
    /// Sends what is pending, with the credit window sized to the recent pace.
    fn send(&self, board: &mut Board) -> Result<(), AgentFailure> {
        if board.is_idle() {
            // The next work may be another job's, far longer: the pace of what ran
            // before would size the window for the wrong work. (A 4 ms task once had a
            // one-core agent then take 10 one-second tasks while other agents idled.)
            board.forget_pace();
        }
        let prefetch = board.prefetch(self.cores, self.prefetch, PREFETCH_COVER);
        board.resize_window(self.cores + prefetch);
        if board.closed || !board.has_news() {
            return Ok(());
        }
        board.last_report = Instant::now();
        // Ends of gang daemons first: a leader's launcher waits on them.
        for ended in std::mem::take(&mut board.parts.launch_ends) {
            send_up(&self.parent, self.node, &FromAgent::GangLaunchEnded(ended))?;
        }
        // Items written before the results that wrote them; then requests for items.
        for written in std::mem::take(&mut board.items.written) {
            send_up(&self.parent, self.node, &FromAgent::ItemsWritten(written))?;
        }
        for read in std::mem::take(&mut board.items.outbox) {
            send_up(&self.parent, self.node, &FromAgent::ItemRead(read))?;
        }
        // Large function outputs go up in several frames (see `Board::take_report`).
        loop {
            let report = board.take_report();
            send_up(&self.parent, self.node, &FromAgent::Report(report))?;
            if board.pending.results.is_empty() {
                return Ok(());
            }
        }
    }
}

/// What the slots' threads report to.
#[derive(Debug, Clone)]
struct AgentSink {
    agent: ActorRef<AgentMsg>,
    board: SharedBoard,
    reporter: Reporter,
    /// The slots' memory cgroups, when this agent limits memory.
    memory: Option<Arc<MemoryCgroups>>,
}

/// The agent's memory cgroups, if it is to limit memory and may.
fn memory_cgroups(config: &AgentConfig) -> Option<MemoryCgroups> {
    if !config.limit_memory {
        return None;
    }
    let name = format!("saker-{}-{}", config.node, std::process::id());
    match MemoryCgroups::create(&name, &SystemProbe) {
        Ok(groups) => {
            tracing::info!("memory limits: a cgroup per slot");
            Some(groups)
        }
        Err(error) => {
            tracing::warn!(
                error = %crate::error_chain(&error),
                "memory is accounted but not limited on this node"
            );
            None
        }
    }
}

impl AgentSink {
    /// Sends the report if it is due, and says when this slot should look again.
    fn report(&self, board: &mut Board, executor: u32, generation: u64) -> Option<Instant> {
        if board.report_from_slot(REPORT_GAP, Instant::now())
            && let Err(error) = self.reporter.send(board)
        {
            // The link is gone: the agent hears of that on its own.
            tracing::debug!(%error, "could not send a report");
        }
        board.keep_report_clock(executor as usize, generation, REPORT_GAP)
    }
}

impl SlotSink for AgentSink {
    fn attempt_done(&self, done: AttemptDone, generation: u64) -> AfterAttempt {
        let (after, wake) = {
            let mut board = lock(&self.board);
            let next = board.finish(
                done.executor as usize,
                generation,
                done.attempt,
                done.finished,
            );
            let report_at = self.report(&mut board, done.executor, generation);
            (AfterAttempt { next, report_at }, board.wants_agent())
        };
        if wake {
            // If the agent is gone the process is exiting; nothing is left to report to.
            let _ = self.agent.send_message(AgentMsg::SlotChanged);
        }
        after
    }

    fn report_clock(&self, executor: u32, generation: u64) -> Option<Instant> {
        self.report(&mut lock(&self.board), executor, generation)
    }

    fn slot_failed(&self, executor: u32, generation: u64, fault: SlotFault) {
        let failed = AgentMsg::SlotFailed {
            slot: executor,
            generation,
            fault,
        };
        // An agent that is gone has no slot to restart.
        let _ = self.agent.send_message(failed);
    }

    fn memory_cgroup(&self, executor: u32) -> Option<SlotCgroup> {
        let groups = self.memory.as_ref()?;
        groups
            .slot(executor)
            .inspect_err(|error| {
                tracing::warn!(
                    error = %crate::error_chain(error),
                    executor,
                    "memory of this slot's tasks is not limited"
                );
            })
            .ok()
    }
}

#[derive(Debug)]
pub struct AgentState {
    config: AgentConfig,
    parent: LinkTx,
    board: SharedBoard,
    reporter: Reporter,
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
}

#[derive(Debug, Default)]
pub struct Agent;

#[derive(Debug)]
pub struct AgentArgs {
    pub config: AgentConfig,
    pub parent: LinkTx,
    /// Receives how the agent ended, once it has stopped.
    pub exit: Option<tokio::sync::oneshot::Sender<AgentExit>>,
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
        let mut board = Board::new(
            config.node,
            &config.resources,
            slots,
            config.spill_dir.clone(),
            cores + config.prefetch,
        );
        if let Err(error) = crate::items::create_private_dir(&config.scratch) {
            // Tasks that read or write data items will fail to; the rest run.
            tracing::warn!(%error, dir = %config.scratch.display(), "no scratch directory");
        }
        board.items =
            crate::items::Items::new(config.node, config.scratch.clone(), config.shared_scratch);
        let board = Arc::new(Mutex::new(board));
        let reporter = Reporter {
            parent: args.parent.clone(),
            node: config.node,
            cores,
            prefetch: config.prefetch,
        };
        let sink = AgentSink {
            agent: myself.clone(),
            board: board.clone(),
            reporter: reporter.clone(),
            memory: memory_cgroups(&config).map(Arc::new),
        };
        let slot_runs = (0..slots)
            .map(|slot| crate::executor::start(slot, 0, sink.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let actor_uplink = HostUplink::new(&args.parent, config.node);
        actor_host::set_uplink(&actor_uplink);
        if let Some(host) = actor_host::installed() {
            host.attach(actor_uplink.clone());
        }
        send_up(&args.parent, config.node, &hello(&config))?;
        let state = AgentState {
            config,
            parent: args.parent,
            board,
            reporter,
            sink,
            slot_runs,
            restarts: (0..slots).map(|_| Restarts::default()).collect(),
            exit: None,
            exit_tx: args.exit,
            actor_uplink,
        };
        lock(&state.board).flush = FlushPlan::Now;
        myself.send_message(AgentMsg::Flush)?;
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
            lock(&state.board).flush = FlushPlan::Idle;
            return flush(state);
        }
        AgentMsg::SlotFailed {
            slot,
            generation,
            fault,
        } => slots::on_slot_failed(myself, state, slot, generation, fault)?,
        AgentMsg::RestartSlot { slot } => slots::on_restart_slot(myself, state, slot)?,
        AgentMsg::ChildLost { nodes, reason } => {
            let nodes = nodes.into_iter().map(NodeId).collect();
            let lost = FromAgent::NodesLost { nodes, reason };
            send_up(&state.parent, state.config.node, &lost)?;
        }
        AgentMsg::ParentLost => {
            tracing::warn!("parent lost; dropping this node's work");
            lock(&state.board).stop_all();
            stop_actors();
        }
        AgentMsg::Reattached => register_again(state, false)?,
        AgentMsg::Rejoin => {
            tracing::warn!("the root asks this node to register again");
            register_again(state, true)?;
        }
        AgentMsg::Superseded { node } => {
            return Err(AgentFailure::Refused {
                reason: format!("a newer agent linked as node {node}"),
            });
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
    let mut board = lock(&state.board);
    board.accepting = false;
    let sent = state.reporter.send(&mut board).and_then(|()| {
        let goodbye = FromAgent::Goodbye {
            node: NodeId(node),
            reason,
        };
        send_up(&state.parent, node, &goodbye)
    });
    board.closed = true;
    sent
}

fn hello(config: &AgentConfig) -> FromAgent {
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
    })
}

/// Registers this node again as a new life of its id. What is pending goes first (the
/// root judges it against the old life: late results of replayed attempts are dropped
/// and counted there); then the hello, and credit for what is free now. Attempts still
/// being stopped give their cores back as they end, as always.
/// Says hello again, after what was pending; with `stop_old_work`, first stops every
/// attempt (the root lost this node's old life), so that their ends are reported
/// only after the hello.
fn register_again(state: &mut AgentState, stop_old_work: bool) -> Result<(), AgentFailure> {
    // The root counts this node's old life lost and starts its actors elsewhere.
    stop_actors();
    // One hold of the lock: no slot thread may report between these steps.
    let mut board = lock(&state.board);
    if stop_old_work {
        board.stop_all();
    }
    state.reporter.send(&mut board)?;
    send_up(&state.parent, state.config.node, &hello(&state.config))?;
    let cores = state.config.cores();
    let prefetch = board.prefetch(cores, state.config.prefetch, PREFETCH_COVER);
    board.reset_credit(cores, prefetch);
    tracing::info!(credit = %board.credit, "registering again");
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
            lock(&state.board).welcomed(welcome.capacity);
        }
        ToAgent::Refused { reason } => return Err(AgentFailure::Refused { reason }),
        ToAgent::Rejoin => {
            tracing::warn!("the root asks this node to register again");
            register_again(state, true)?;
        }
        ToAgent::Dispatch(dispatch) => {
            let mut board = lock(&state.board);
            // The past first: a forgotten job is finished and is never among the new.
            if !dispatch.forget.is_empty() {
                tracing::debug!(jobs = dispatch.forget.len(), "forgetting finished jobs");
            }
            for job in dispatch.forget {
                board.jobs.remove(&job);
            }
            for job in dispatch.jobs {
                board.jobs.insert(job.job, job);
            }
            match dispatch.gang {
                None => {
                    let now = crate::process::unix_micros();
                    let tasks = dispatch.tasks.into_iter();
                    board.queue.extend(tasks.map(|task| Queued::new(task, now)));
                }
                Some(gang) => {
                    for assignment in dispatch.tasks {
                        if board.accept_part(assignment, &gang) {
                            open_endpoint(state, &mut board, assignment.attempt, &gang);
                        }
                    }
                }
            }
        }
        ToAgent::GangLaunch(launch) => lock(&state.board).part_launch(launch),
        ToAgent::ItemData(data) => lock(&state.board).item_received(data),
        ToAgent::ItemRead(read) => {
            let answer = lock(&state.board).items.serve(&read);
            send_up(
                &state.parent,
                state.config.node,
                &FromAgent::ItemData(answer),
            )?;
        }
        ToAgent::Return { attempts } => {
            let mut board = lock(&state.board);
            for attempt in attempts {
                board.give_back_queued(attempt);
            }
        }
        ToAgent::GangLaunchEnded(ended) => {
            let waiter = lock(&state.board)
                .parts
                .waiters
                .remove(&(ended.attempt, ended.launch));
            // A waiter gone (its part ended) needs no answer.
            if let Some(waiter) = waiter {
                let _ = waiter.send(ended.code);
            }
        }
        ToAgent::Cancel { attempts } => {
            let mut board = lock(&state.board);
            for attempt in attempts {
                board.cancel(attempt);
            }
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

/// Opens the remote-shell endpoint of an MPI gang this node leads; if it cannot, the
/// part fails (its launcher could start no daemon).
fn open_endpoint(
    state: &AgentState,
    board: &mut Board,
    attempt: saker_wire::messages::AttemptId,
    gang: &saker_wire::messages::GangPart,
) {
    let uplink = Uplink {
        parent: state.parent.clone(),
        node: state.config.node,
    };
    let opened = std::env::current_exe().and_then(|program| {
        Endpoint::open(
            Arc::clone(&state.board),
            uplink,
            attempt,
            gang.nodes.len() as u32,
            &state.config.spill_dir,
            &program,
        )
    });
    match opened {
        Ok(endpoint) => board.set_endpoint(attempt, endpoint),
        Err(error) => {
            tracing::error!(%attempt, %error, "cannot open the gang's remote-shell endpoint");
            board.fail_part(
                attempt,
                format!("cannot open the remote-shell endpoint: {error}"),
            );
        }
    }
}

/// Starts queued work on every idle slot it fits.
fn start_queued(state: &mut AgentState) {
    if state.exit.is_some() {
        return;
    }
    let mut board = lock(&state.board);
    let idle: Vec<usize> = board.idle_slots().collect();
    for index in idle {
        let Some(next) = board.start_on(index) else {
            // The queue is empty or its head does not fit the free cores.
            break;
        };
        if state.slot_runs[index].send(next).is_err() {
            // The slot's thread has failed, and its fault is on its way here: the
            // attempt goes back to the queue, for another slot.
            board.unstart(index);
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
    let mut board = lock(&state.board);
    board.stop_all();
    board.accepting = false;
}

fn schedule_flush(myself: &ActorRef<AgentMsg>, state: &mut AgentState) {
    let mut board = lock(&state.board);
    if !board.has_news() {
        return;
    }
    let now = Instant::now();
    let due = board.last_report + REPORT_GAP;
    let plan = if board.report_due(REPORT_GAP, now) {
        FlushPlan::Now
    } else {
        FlushPlan::Later
    };
    match (board.flush, plan) {
        (FlushPlan::Idle | FlushPlan::Later, FlushPlan::Now) => {
            board.flush = plan;
            // Fails only if this actor is stopping: then nothing is reported anyway.
            let _ = myself.send_message(AgentMsg::Flush);
        }
        (FlushPlan::Idle, FlushPlan::Later) => {
            board.flush = plan;
            // A timer outliving a sooner flush finds nothing to send, or sends a
            // little early: harmless either way.
            myself.send_after(due - now, || AgentMsg::Flush);
        }
        _ => {}
    }
}

fn flush(state: &mut AgentState) -> Result<(), AgentFailure> {
    state.reporter.send(&mut lock(&state.board))
}

fn send_up(parent: &LinkTx, node: u32, message: &FromAgent) -> Result<(), AgentFailure> {
    let frame: FrameBuf = saker_wire::frame::encode(node, message).map_err(AgentFailure::Encode)?;
    parent.send(frame).map_err(AgentFailure::ParentQueue)
}
