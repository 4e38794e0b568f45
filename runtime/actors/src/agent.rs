//! The agent: one per node, a supervisor actor over the node's executors.
//!
//! It keeps a small local queue (the prefetch window) on its [board](crate::board),
//! starts attempts on idle executors, and reports starts and results upward together
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

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};
use saker_wire::messages::{FromAgent, Hello, ToAgent};

use crate::board::{Board, FlushPlan, SharedBoard, lock};
use crate::executor::{
    AfterAttempt, AttemptDone, DoneSink, Executor, ExecutorArgs, ExecutorMsg, SlotRuns,
};
use crate::link::{FrameBuf, LinkTx};

/// The least time between two reports of a busy node.
pub const REPORT_GAP: Duration = Duration::from_millis(20);

/// How long the prefetched work should last: a report gap plus a generous round trip
/// to the root, so that paced reports never leave a slot waiting.
pub const PREFETCH_COVER: Duration = Duration::from_millis(40);

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub node: u32,
    pub hostname: String,
    pub cores: u32,
    /// Cores of extra work to hold queued locally, at least, so executors never wait a
    /// round trip; more for short tasks (see [`Board::prefetch`]).
    pub prefetch: u32,
    pub pilot_id: String,
    /// Where task output that exceeds the inline limit is written.
    pub spill_dir: PathBuf,
    /// Executor restarts allowed within `restart_window` before the agent gives up.
    pub max_restarts: u32,
    pub restart_window: Duration,
}

#[derive(Debug)]
pub enum AgentMsg {
    /// A message from the root addressed to this node.
    Down(ToAgent),
    /// A slot's attempt ended (and the slot may have started its next one): report,
    /// and start work on slots that are idle now.
    SlotChanged,
    Flush,
    /// A child link closed: its whole subtree is reported lost upward.
    ChildLost {
        nodes: Vec<u32>,
        reason: String,
    },
    /// The link to the parent failed. The root replays this node's work elsewhere, so
    /// the agent drops its queue and stops what runs, while the link looks for a live
    /// ancestor.
    ParentLost {
        reason: String,
    },
    /// The link reattached to a live ancestor: register again as a new node.
    Reattached,
    /// The root asks this node to register again (it was declared lost while alive):
    /// drop the old work and say hello.
    Rejoin,
    /// No live ancestor answered: stop and exit.
    ParentGone {
        reason: String,
    },
}

/// How the agent's actor ended, for the process exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentExit {
    Shutdown,
    ParentLost(String),
    Failed(String),
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
    fn send(&self, board: &mut Board) -> Result<(), ActorProcessingErr> {
        let prefetch = board.prefetch(self.cores, self.prefetch, PREFETCH_COVER);
        board.resize_window(self.cores + prefetch);
        if board.closed || !board.has_news() {
            return Ok(());
        }
        let report = board.take_report();
        board.last_report = Instant::now();
        send_up(&self.parent, self.node, &FromAgent::Report(report))
    }
}

#[derive(Debug, Clone)]
struct AgentSink {
    agent: ActorRef<AgentMsg>,
    board: SharedBoard,
    reporter: Reporter,
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

impl DoneSink for AgentSink {
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
}

#[derive(Debug)]
pub struct AgentState {
    config: AgentConfig,
    parent: LinkTx,
    board: SharedBoard,
    reporter: Reporter,
    executors: Vec<ActorRef<ExecutorMsg>>,
    /// Each slot thread's queue, by slot.
    slot_runs: Vec<SlotRuns>,
    restarts: VecDeque<Instant>,
    exit: Option<AgentExit>,
    exit_tx: Option<tokio::sync::oneshot::Sender<AgentExit>>,
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
        let slots = config.cores.max(1);
        let board = Arc::new(Mutex::new(Board::new(
            config.node,
            config.cores,
            slots,
            config.spill_dir.clone(),
            config.cores + config.prefetch,
        )));
        let reporter = Reporter {
            parent: args.parent.clone(),
            node: config.node,
            cores: config.cores,
            prefetch: config.prefetch,
        };
        let mut executors = Vec::with_capacity(slots as usize);
        let mut slot_runs = Vec::with_capacity(slots as usize);
        for id in 0..slots {
            let (executor, runs) = spawn_executor(&myself, &board, &reporter, id).await?;
            executors.push(executor);
            slot_runs.push(runs);
        }
        send_up(&args.parent, config.node, &hello(&config))?;
        let state = AgentState {
            config,
            parent: args.parent,
            board,
            reporter,
            executors,
            slot_runs,
            restarts: VecDeque::new(),
            exit: None,
            exit_tx: args.exit,
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
        match message {
            AgentMsg::Down(message) => on_down(&myself, state, message)?,
            AgentMsg::SlotChanged => {}
            AgentMsg::Flush => {
                lock(&state.board).flush = FlushPlan::Idle;
                flush(state)?;
                return Ok(());
            }
            AgentMsg::ChildLost { nodes, reason } => {
                let lost = FromAgent::NodesLost { nodes, reason };
                send_up(&state.parent, state.config.node, &lost)?;
            }
            AgentMsg::ParentLost { reason } => {
                tracing::warn!(%reason, "parent lost; dropping this node's work");
                lock(&state.board).stop_all();
            }
            AgentMsg::Reattached => register_again(state)?,
            AgentMsg::Rejoin => {
                tracing::warn!("the root asks this node to register again");
                lock(&state.board).stop_all();
                register_again(state)?;
            }
            AgentMsg::ParentGone { reason } => {
                tracing::error!(%reason, "no parent; stopping");
                stop_all(state);
                state.exit = Some(AgentExit::ParentLost(reason));
                myself.stop(None);
                return Ok(());
            }
        }
        start_queued(state);
        schedule_flush(&myself, state)?;
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Whatever is queued upward (the goodbye) is written before the link ends.
        let _ = state.parent.send(crate::liveness::end_of_stream());
        if let Some(sender) = state.exit_tx.take() {
            let exit = state.exit.clone().unwrap_or(AgentExit::Shutdown);
            let _ = sender.send(exit);
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason) = match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                (cell, format!("executor crashed: {error}"))
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if state.exit.is_some() {
                    return Ok(()); // stopping on purpose
                }
                (
                    cell,
                    format!("executor stopped: {}", reason.unwrap_or_default()),
                )
            }
            _ => return Ok(()),
        };
        on_executor_died(&myself, state, &cell, reason).await?;
        start_queued(state);
        schedule_flush(&myself, state)?;
        Ok(())
    }
}

fn hello(config: &AgentConfig) -> FromAgent {
    FromAgent::Hello(Hello {
        node: config.node,
        hostname: config.hostname.clone(),
        cores: config.cores,
        executors: config.cores.max(1),
        pid: std::process::id(),
        pilot_id: config.pilot_id.clone(),
    })
}

/// Registers this node again as a new life of its id. What is pending goes first (the
/// root judges it against the old life: late results of replayed attempts are dropped
/// and counted there); then the hello, and credit for what is free now. Attempts still
/// being stopped give their cores back as they end, as always.
fn register_again(state: &mut AgentState) -> Result<(), ActorProcessingErr> {
    // One hold of the lock: no slot thread may report between these steps.
    let mut board = lock(&state.board);
    state.reporter.send(&mut board)?;
    send_up(&state.parent, state.config.node, &hello(&state.config))?;
    let prefetch = board.prefetch(state.config.cores, state.config.prefetch, PREFETCH_COVER);
    board.reset_credit(state.config.cores, prefetch);
    tracing::info!(credit = board.pending.credit, "registering again");
    Ok(())
}

async fn spawn_executor(
    agent: &ActorRef<AgentMsg>,
    board: &SharedBoard,
    reporter: &Reporter,
    id: u32,
) -> Result<(ActorRef<ExecutorMsg>, SlotRuns), ActorProcessingErr> {
    let (runs, queue) = std::sync::mpsc::channel();
    let (actor, _) = Actor::spawn_linked(
        None,
        Executor::<AgentSink>::default(),
        ExecutorArgs {
            id,
            sink: AgentSink {
                agent: agent.clone(),
                board: board.clone(),
                reporter: reporter.clone(),
            },
            runs: queue,
        },
        agent.get_cell(),
    )
    .await?;
    Ok((actor, runs))
}

/// Restart strategy: one-for-one, bounded intensity. The crashed executor's attempt is
/// reported lost (the root decides whether to replay it) and a fresh executor takes
/// the slot. More than `max_restarts` within `restart_window` means something is wrong
/// with the node itself, so the agent fails and its parent sees the node lost.
async fn on_executor_died(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    cell: &ActorCell,
    reason: String,
) -> Result<(), ActorProcessingErr> {
    let Some(index) = state
        .executors
        .iter()
        .position(|actor| actor.get_id() == cell.get_id())
    else {
        return Ok(());
    };
    tracing::warn!(executor = index, %reason, "restarting executor");
    let now = Instant::now();
    state.restarts.push_back(now);
    while state
        .restarts
        .front()
        .is_some_and(|t| now.duration_since(*t) > state.config.restart_window)
    {
        state.restarts.pop_front();
    }
    if state.restarts.len() as u32 > state.config.max_restarts {
        return Err(format!(
            "{} executor restarts within {:?}; giving up on this node",
            state.restarts.len(),
            state.config.restart_window
        )
        .into());
    }
    lock(&state.board).lose_slot(index, reason);
    // Replacing the old thread's queue ends that thread once its attempt is over.
    (state.executors[index], state.slot_runs[index]) =
        spawn_executor(myself, &state.board, &state.reporter, index as u32).await?;
    Ok(())
}

fn on_down(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
    message: ToAgent,
) -> Result<(), ActorProcessingErr> {
    match message {
        ToAgent::Welcome(welcome) => {
            tracing::debug!(node = welcome.node, "registered with the root");
        }
        ToAgent::Refused { reason } => {
            return Err(format!("the root refused this agent: {reason}").into());
        }
        ToAgent::Rejoin => {
            tracing::warn!("the root asks this node to register again");
            lock(&state.board).stop_all();
            register_again(state)?;
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
                board.jobs.insert(job.job, Arc::new(job));
            }
            board.queue.extend(dispatch.tasks);
        }
        ToAgent::Cancel { attempts } => {
            let mut board = lock(&state.board);
            for attempt in attempts {
                board.cancel(attempt);
            }
        }
        ToAgent::Shutdown {
            reason,
            kill_running,
        } => {
            tracing::info!(%reason, "shutdown requested");
            if kill_running {
                stop_all(state);
            }
            let goodbye = FromAgent::Goodbye {
                node: state.config.node,
                reason,
            };
            {
                // The last report, then the goodbye, and nothing after it.
                let mut board = lock(&state.board);
                board.accepting = false;
                state.reporter.send(&mut board)?;
                send_up(&state.parent, state.config.node, &goodbye)?;
                board.closed = true;
            }
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
    let mut board = lock(&state.board);
    let idle: Vec<usize> = board.idle_slots().collect();
    for index in idle {
        let Some(next) = board.start_on(index) else {
            // The queue is empty or its head does not fit the free cores.
            break;
        };
        let generation = board.slots[index].generation;
        if state.slot_runs[index].send((next, generation)).is_err() {
            // The slot's thread is gone (it never ends while its queue is open, short
            // of a bug): keep the task, and replace the executor through supervision.
            board.unstart(index);
            state.executors[index].stop(Some("its slot thread is gone".to_string()));
            break;
        }
    }
}

fn stop_all(state: &mut AgentState) {
    let mut board = lock(&state.board);
    board.stop_all();
    board.accepting = false;
}

fn schedule_flush(
    myself: &ActorRef<AgentMsg>,
    state: &mut AgentState,
) -> Result<(), ActorProcessingErr> {
    let mut board = lock(&state.board);
    if !board.has_news() {
        return Ok(());
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
            myself.send_message(AgentMsg::Flush)?;
        }
        (FlushPlan::Idle, FlushPlan::Later) => {
            board.flush = plan;
            // A timer outliving a sooner flush finds nothing to send, or sends a
            // little early: harmless either way.
            myself.send_after(due - now, || AgentMsg::Flush);
        }
        _ => {}
    }
    Ok(())
}

fn flush(state: &mut AgentState) -> Result<(), ActorProcessingErr> {
    state.reporter.send(&mut lock(&state.board))
}

fn send_up(parent: &LinkTx, node: u32, message: &FromAgent) -> Result<(), ActorProcessingErr> {
    let frame: FrameBuf = saker_wire::frame::encode(node, message)?;
    parent.send(frame)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::tests::task;
    use crate::link::{FrameBuf, channel};
    use saker_wire::messages::{Dispatch, EnvVar, JobDef, Outcome, Report};
    use tokio::sync::mpsc::UnboundedReceiver;

    fn decode(frame: &FrameBuf) -> FromAgent {
        let len = u32::from_le_bytes(frame[0..4].try_into().unwrap()) as usize;
        saker_wire::frame::decode_from_agent(&frame[8..8 + len]).unwrap()
    }

    /// Collects reports until `done` has seen what it waits for.
    async fn until(
        rx: &mut UnboundedReceiver<FrameBuf>,
        mut done: impl FnMut(&Report) -> bool,
    ) -> Vec<Report> {
        let mut seen = Vec::new();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("agent went silent")
                .expect("agent closed its link");
            if let FromAgent::Report(report) = decode(&frame) {
                let stop = done(&report);
                seen.push(report);
                if stop {
                    return seen;
                }
            }
        }
    }

    fn job(id: u32, argv: &[&str]) -> JobDef {
        JobDef {
            job: id,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![EnvVar {
                key: "X".into(),
                value: "1".into(),
            }],
            cwd: None,
            cores: 1,
            time_limit_ms: 0,
            inline_output_bytes: 1024,
            is_array: false,
        }
    }

    async fn start_agent(
        cores: u32,
    ) -> (
        ActorRef<AgentMsg>,
        UnboundedReceiver<FrameBuf>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (parent, mut rx) = channel();
        let config = AgentConfig {
            node: 3,
            hostname: "test-host".into(),
            cores,
            prefetch: cores,
            pilot_id: "p".into(),
            spill_dir: dir.path().to_path_buf(),
            max_restarts: 2,
            restart_window: Duration::from_secs(60),
        };
        let (agent, _) = Actor::spawn(
            None,
            Agent,
            AgentArgs {
                config,
                parent,
                exit: None,
            },
        )
        .await
        .unwrap();
        let hello = decode(&rx.recv().await.unwrap());
        assert!(
            matches!(hello, FromAgent::Hello(Hello { node: 3, cores: offered, .. }) if offered == cores)
        );
        let first = until(&mut rx, |r| r.credit > 0).await;
        assert_eq!(
            first.last().unwrap().credit,
            2 * cores,
            "initial credit = slots + prefetch"
        );
        (agent, rx, dir)
    }

    /// A rejoin (the root lost this node while it was alive) stops the old work, says
    /// hello again, and grants credit for what is free now plus the prefetch; the
    /// stopped attempt still reports (the root counts it a duplicate) and returns its
    /// core.
    #[tokio::test]
    async fn rejoin_stops_old_work_and_registers_again() {
        let (agent, mut rx, _dir) = start_agent(2).await;
        let dispatch = Dispatch {
            jobs: vec![job(1, &["sleep", "30"])],
            tasks: vec![task(1, 1), task(2, 1), task(3, 1)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        until(&mut rx, |r| r.started.len() == 2).await;
        agent.send_message(AgentMsg::Down(ToAgent::Rejoin)).unwrap();
        let mut hellos = 0;
        let mut credit_after_hello = 0;
        let mut results = Vec::new();
        while results.len() < 2 {
            let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .expect("agent went silent")
                .expect("agent closed its link");
            match decode(&frame) {
                FromAgent::Hello(hello) => {
                    assert_eq!(hello.node, 3);
                    hellos += 1;
                }
                FromAgent::Report(report) => {
                    if hellos > 0 {
                        credit_after_hello += report.credit;
                    }
                    results.extend(report.results);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(hellos, 1);
        assert!(results.iter().all(|r| r.outcome == Outcome::Cancelled));
        // The queued third task was dropped without a result: the root replays it.
        assert!(results.iter().all(|r| r.task != 3), "{results:?}");
        // prefetch (2) + both cores as the killed attempts end (0 were free).
        assert_eq!(credit_after_hello, 4);
        agent.stop(None);
    }

    #[tokio::test]
    async fn runs_tasks_and_returns_their_cores_as_credit() {
        let (agent, mut rx, _dir) = start_agent(2).await;
        let dispatch = Dispatch {
            jobs: vec![job(1, &["sh", "-c", "echo $X"])],
            tasks: vec![task(1, 1), task(2, 1), task(3, 1)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        let mut results = Vec::new();
        let mut credit = 0;
        until(&mut rx, |r| {
            results.extend(r.results.clone());
            credit += r.credit;
            results.len() == 3
        })
        .await;
        assert!(
            results
                .iter()
                .all(|r| r.outcome == Outcome::Exited { code: 0 })
        );
        assert!(results.iter().all(|r| r.stdout.inline == b"1\n"));
        // Each finished task hands back its core; these are short, so the agent may
        // also have grown its prefetch (from 1 round of 2 cores to the most rounds).
        let growth = 2 * crate::board::PREFETCH_ROUNDS - 2;
        assert!((3..=3 + growth).contains(&credit), "credit {credit}");
        agent.stop(None);
    }

    /// A result that is not urgent (work is still queued) waits out the report gap,
    /// but no longer: a long attempt on the only slot must not hold it back.
    #[tokio::test]
    async fn a_paced_result_goes_up_while_a_long_attempt_runs() {
        let (agent, mut rx, dir) = start_agent(1).await;
        let gate = dir.path().join("gate");
        // (Given up after about 30 s, so that a failing test leaves no process behind.)
        let wait = format!(
            "for i in $(seq 3000); do [ -e '{}' ] && exit 0; sleep 0.01; done; exit 1",
            gate.display()
        );
        let dispatch = Dispatch {
            jobs: vec![job(1, &["true"]), job(2, &["sh", "-c", &wait])],
            tasks: vec![task(1, 1), task(2, 2), task(3, 1)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        // Task 2 runs until the gate exists, and only this report can open it.
        until(&mut rx, |r| r.results.iter().any(|x| x.task == 1)).await;
        std::fs::write(&gate, b"").unwrap();
        let mut done = Vec::new();
        until(&mut rx, |r| {
            done.extend(r.results.iter().filter(|x| x.task != 1).cloned());
            done.len() == 2
        })
        .await;
        assert!(
            done.iter()
                .all(|r| r.outcome == Outcome::Exited { code: 0 })
        );
        agent.stop(None);
    }

    #[tokio::test]
    async fn a_forgotten_job_is_dropped_and_a_new_task_of_it_fails_unknown() {
        let (agent, mut rx, _dir) = start_agent(1).await;
        let dispatch = Dispatch {
            jobs: vec![job(1, &["true"]), job(2, &["true"])],
            tasks: vec![task(1, 1)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        until(&mut rx, |r| r.results.iter().any(|x| x.attempt == 10)).await;
        // Job 1 is forgotten; job 2 is not. (The root never sends a task of a
        // forgotten job; this shows the definition is gone.)
        let dispatch = Dispatch {
            jobs: Vec::new(),
            tasks: vec![task(2, 1), task(3, 2)],
            forget: vec![1],
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        let mut results = Vec::new();
        until(&mut rx, |r| {
            results.extend(r.results.clone());
            results.len() == 2
        })
        .await;
        let outcome = |attempt| {
            &results
                .iter()
                .find(|r| r.attempt == attempt)
                .unwrap()
                .outcome
        };
        assert!(
            matches!(outcome(20), Outcome::SpawnFailed { reason } if reason == "unknown job 1"),
            "{results:?}"
        );
        assert_eq!(outcome(30), &Outcome::Exited { code: 0 });
        agent.stop(None);
    }

    #[tokio::test]
    async fn a_panicking_executor_is_restarted_and_its_attempt_reported_lost() {
        let (agent, mut rx, _dir) = start_agent(1).await;
        let dispatch = Dispatch {
            jobs: vec![job(1, &["sleep", "30"])],
            tasks: vec![task(1, 1)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        until(&mut rx, |r| r.started.iter().any(|s| s.attempt == 10)).await;

        let executor = agent
            .get_children()
            .into_iter()
            .next()
            .expect("one executor");
        executor.send_message(ExecutorMsg::Panic).unwrap();
        let reports = until(&mut rx, |r| !r.results.is_empty()).await;
        let lost = &reports.last().unwrap().results[0];
        assert_eq!(lost.attempt, 10);
        assert!(
            matches!(&lost.outcome, Outcome::Lost { reason } if reason.contains("executor crashed")),
            "{:?}",
            lost.outcome
        );

        // The slot works again with a fresh executor.
        let dispatch = Dispatch {
            jobs: vec![job(2, &["true"])],
            tasks: vec![task(2, 2)],
            forget: Vec::new(),
        };
        agent
            .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
            .unwrap();
        let reports = until(&mut rx, |r| r.results.iter().any(|x| x.attempt == 20)).await;
        let done = reports
            .last()
            .unwrap()
            .results
            .iter()
            .find(|x| x.attempt == 20)
            .unwrap();
        assert_eq!(done.outcome, Outcome::Exited { code: 0 });
        assert_eq!(agent.get_children().len(), 1);
        agent.stop(None);
    }

    #[tokio::test]
    async fn too_many_restarts_fail_the_agent_instead_of_looping() {
        let (agent, mut rx, _dir) = start_agent(1).await;
        let mut previous = None;
        for round in 0..3 {
            // Wait for the replacement of the executor crashed last round (the agent
            // restarts it while its budget lasts), then crash that one.
            let executor = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let live = agent.get_children().into_iter().find(|child| {
                        Some(child.get_id()) != previous
                            && child.get_status() == ractor::ActorStatus::Running
                    });
                    if let Some(executor) = live {
                        return executor;
                    }
                    tokio::task::yield_now().await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("no executor to crash in round {round}"));
            previous = Some(executor.get_id());
            executor.send_message(ExecutorMsg::Panic).unwrap();
        }
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while rx.recv().await.is_some() {}
        })
        .await;
        assert!(closed.is_ok(), "the agent should stop, closing its link");
        assert_eq!(agent.get_status(), ractor::ActorStatus::Stopped);
    }
}
