//! The root: the pilot's top supervisor. It owns the scheduling core, the journal and
//! the node table; every other part talks to it by message.
//!
//! Its loop is thin: a message comes in (a frame from an agent, a client request, a
//! journal acknowledgement, a timer), the matching `on_*` function feeds the core,
//! then [`RootState::drain`] turns the core's outputs into frames, journal records
//! and replies. Results become visible to clients only after the journal reports them
//! durable, so nothing a client has seen can be lost by a crash.

mod agents;
mod clients;
mod compaction;
mod ctx;
mod elastic;
mod gangs;
mod history;
mod items;
mod jobs;
mod journal;
mod placed;
mod port;
mod rates;
mod resources;
mod restore;
mod results;
mod schedules;
mod stages;
mod state;
mod status;
mod submissions;
#[cfg(test)]
mod tests;
mod updates;
mod upkeep;
mod waiters;
mod walltime;

use std::sync::Arc;

pub use compaction::{CompactionDone, CompactionPolicy, run_compaction};
pub use elastic::ElasticConfig;
pub use journal::{ActorJournal, AfterJournal, Journal};
pub use port::{ActorPort, BatchOutcome, BatchSubmit, BatchWork, Clock, Port, SystemClock, Wake};
use ractor::{Actor, ActorProcessingErr, ActorRef};
pub use resources::TooManyKinds;
pub use restore::{RestoreError, RestoreSummary};
use saker_journal::JournalWriter;
pub use state::{RootState, StateArgs};

use crate::client::ClientRequest;
use crate::records::Record;
use crate::results::ResultRecord;
use saker_actors::link::LinkId;
use saker_actors::link::LinkTx;

#[derive(Debug)]
pub enum RootMsg {
    LinkUp {
        link: LinkId,
        tx: LinkTx,
        /// The node that dialed the link, as it said (`Link::Child`).
        node: Option<u32>,
    },
    /// One frame from a direct child link (its route field names the origin node).
    /// The permit is released once the root has handled it (see [`FrameBudget`]).
    AgentFrame {
        link: LinkId,
        frame: saker_transport::stream::Frame,
        permit: FramePermit,
    },
    LinkDown {
        link: LinkId,
        reason: String,
    },
    /// A request from a client (over the socket, or in-process from `saker run`).
    Client(ClientRequest),
    /// The journal made these results durable, at these positions.
    Durable {
        results: Vec<Arc<ResultRecord>>,
        positions: Vec<saker_journal::Position>,
    },
    /// An append failed: nothing more can be acknowledged durably.
    JournalFailed {
        error: saker_journal::JournalError,
    },
    /// A journal compaction ended (`compaction.rs`).
    Compacted(Result<CompactionDone, String>),
    /// The core asked to be woken at or after some time.
    Timer,
    /// Time to look whether the journal has space again ([`port::Wake::Space`]).
    SpaceCheck,
    /// The walltime deadline has come.
    Walltime,
    /// An elastic pilot's provisioning round is due.
    Provision,
    /// The batch system's answers to a round's work.
    Batch(port::BatchOutcome),
}

#[derive(Debug)]
pub struct RootArgs {
    pub pilot_id: String,
    pub journal: JournalWriter<Record>,
    pub core: saker_core::CoreConfig,
    /// Signalled once a shutdown is requested, so the pilot process can wind down.
    pub shutdown: Arc<tokio::sync::Notify>,
    /// The batch allocation the pilot runs in, if any (for `status`).
    pub allocation: Option<crate::client::AllocationStatus>,
    /// The most nodes the pilot can have, when known.
    pub max_nodes: Option<u32>,
    /// The widest node it will have (cores, GPUs, memory, named resources), when
    /// known before nodes join: what no node could run is refused at submission.
    pub expected_node: Option<saker_actors::resources::NodeResources>,
    /// Journal records of a previous root to resume from (empty for a new pilot).
    pub restore: Vec<Record>,
    /// Where each of `restore` is in the journal (results are read back from there).
    pub restore_positions: Vec<saker_journal::Position>,
    /// Receives what the resume found, once the root has started.
    pub restored: Option<tokio::sync::oneshot::Sender<RestoreSummary>>,
    /// Start no attempt that cannot finish by this time (unix µs); stop at it.
    pub deadline_unix_us: Option<u64>,
    pub compaction: CompactionPolicy,
    /// Grow and shrink with the backlog through batch allocations (`elastic.rs`).
    pub elastic: Option<elastic::ElasticConfig>,
    /// This root's process, for `status`.
    pub process: Option<crate::client::RootStatus>,
}

/// Agents' frames the root may hold unhandled, across all links. A link whose frame
/// finds no room waits before it reads on, so a flood of reports from agents queues in
/// their sockets (and QUIC's flow control stops the senders), not in the root's
/// memory. A tuning constant, not a guarantee: enough for every link of a wide root
/// to have a few frames in flight.
pub const FRAME_BUDGET: usize = 1024;

/// The root's frame budget: a semaphore whose permits travel with frames.
#[derive(Debug, Clone)]
pub struct FrameBudget(Arc<tokio::sync::Semaphore>);

impl FrameBudget {
    pub fn new(frames: usize) -> FrameBudget {
        FrameBudget(Arc::new(tokio::sync::Semaphore::new(frames)))
    }

    /// Waits for room for one more frame. `None` once the budget is closed.
    pub async fn reserve(&self) -> Option<FramePermit> {
        let permit = Arc::clone(&self.0).acquire_owned().await.ok()?;
        Some(FramePermit {
            _held: Some(permit),
        })
    }

    /// Frames that may still be sent without waiting.
    pub fn available(&self) -> usize {
        self.0.available_permits()
    }
}

/// Room for one frame in the root; given back when dropped. The default holds no
/// room (for frames that did not come over a link).
#[derive(Debug, Default)]
pub struct FramePermit {
    _held: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What the actor does after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    Continue,
    /// The root cannot go on (its journal failed): stop the actor with this reason.
    Stop(String),
}

impl RootState {
    /// Handles one message, then drains the core's outputs: the whole of one turn of
    /// the root's loop, whoever drives it. What the journal finished at once during
    /// the turn (results it wrote without a sync) is handled in the same turn.
    pub fn handle(&mut self, message: RootMsg) -> Turn {
        let mut message = message;
        loop {
            if let Turn::Stop(reason) = self.handle_one(message) {
                return Turn::Stop(reason);
            }
            // Cheap when nothing waits: a vector's emptiness.
            self.upkeep.compaction.poll_retirement(&mut self.ctx);
            self.drain();
            self.check_exhausted();
            match self.ctx.written_now.take() {
                Some(next) => message = next,
                None => return Turn::Continue,
            }
        }
    }

    /// Drains the core's outputs, then handles what the journal finished at once:
    /// the end of a turn begun outside [`RootState::handle`] (starting, resuming).
    pub fn flush(&mut self) -> Turn {
        self.drain();
        match self.ctx.written_now.take() {
            Some(message) => self.handle(message),
            None => Turn::Continue,
        }
    }

    fn handle_one(&mut self, message: RootMsg) -> Turn {
        match message {
            RootMsg::LinkUp { link, tx, node } => self.on_link_up(link, tx, node),
            RootMsg::AgentFrame {
                link,
                frame,
                permit: _permit,
            } => self.on_agent_frame(link, frame.route(), frame.payload()),
            RootMsg::LinkDown { link, reason } => self.on_link_down(link, &reason),
            RootMsg::Client(request) => self.on_client(request),
            RootMsg::Durable { results, positions } => {
                self.results
                    .on_durable(&mut self.ctx, &mut self.submissions, results, positions);
                self.upkeep.compaction.maybe_compact(&mut self.ctx);
            }
            RootMsg::Compacted(outcome) => {
                self.upkeep
                    .compaction
                    .on_compacted(&mut self.ctx, &mut self.results, outcome)
            }
            RootMsg::JournalFailed { error } => {
                // Without a journal nothing more can be acknowledged durably: stop the
                // pilot rather than pretend. Running tasks are killed by the agents.
                tracing::error!(%error, "journal failed; stopping the pilot");
                self.on_shutdown();
                return Turn::Stop(format!("journal failed: {error}"));
            }
            RootMsg::Timer => self.on_timer(),
            // The turn's drain looks at the journal and dispatches if it has space.
            RootMsg::SpaceCheck => self.ctx.space_check_armed = false,
            RootMsg::Walltime => self.on_walltime(),
            RootMsg::Provision => self.on_provision(),
            RootMsg::Batch(outcome) => self.on_batch(outcome),
        }
        Turn::Continue
    }
}

#[derive(Debug, Default)]
pub struct Root;

impl Actor for Root {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut args = args;
        let records = std::mem::take(&mut args.restore);
        let restored = args.restored.take();
        let deadline = args.deadline_unix_us;
        let journal = ActorJournal::new(myself.clone(), args.journal);
        let port = ActorPort::new(myself, args.shutdown);
        let state_args = StateArgs {
            pilot_id: args.pilot_id,
            core: args.core,
            max_nodes: args.max_nodes,
            expected_node: args.expected_node,
            allocation: args.allocation,
            process: args.process.take(),
        };
        let mut state = RootState::new(
            state_args,
            Box::new(port),
            Box::new(journal),
            Box::new(SystemClock::new()),
        );
        if let Some(elastic) = args.elastic.take() {
            state.set_elastic(elastic);
        }
        let positions = std::mem::take(&mut args.restore_positions);
        let summary = state.restore(records, positions)?;
        if let Some(deadline) = deadline {
            state.set_deadline(deadline);
        }
        state.set_compaction(args.compaction);
        if let Some(sender) = restored {
            let _ = sender.send(summary);
        }
        if let Turn::Stop(reason) = state.flush() {
            return Err(reason.into());
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Turn::Stop(reason) = state.handle(message) {
            myself.stop(Some(reason));
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.close_journal();
        Ok(())
    }
}
