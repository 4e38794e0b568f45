//! The root: the pilot's top supervisor. It owns the scheduling core, the journal and
//! the node table; every other part talks to it by message.
//!
//! Its loop is thin: a message comes in (a frame from an agent, a client request, a
//! journal acknowledgement, a timer), the matching `on_*` function feeds the core,
//! then `RootState::drain` turns the core's outputs into frames, journal records
//! and replies. Results become visible to clients only after the journal reports them
//! durable, so nothing a client has seen can be lost by a crash.

mod adoption;
mod agents;
mod clients;
mod ctx;
mod gangs;
mod items;
mod journal;
mod message;
mod nodes;
mod outcomes;
mod placed;
mod port;
mod replies;
mod resources;
mod restore;
mod results;
mod schedules;
mod shell;
mod state;
mod status;
mod submissions;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
mod upkeep;

use std::sync::Arc;

pub use journal::{ActorJournal, AfterJournal, Journal};
pub use message::{FRAME_BUDGET, FrameBudget, FramePermit, RootMsg, Turn};
pub use port::{BatchOutcome, BatchSubmit, BatchWork, Clock, Port, SystemClock, Wake};
pub use restore::{RestoreError, RestoreSummary};
pub use shell::ActorPort;
pub use state::{RootState, StateArgs};
pub use submissions::TooManyKinds;
pub use upkeep::compaction::CompactionPolicy;
pub use upkeep::elastic::ElasticConfig;

pub use crate::compact::{CompactionDone, run_compaction};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use saker_journal::JournalWriter;

use crate::records::Record;

#[derive(Debug)]
pub struct RootArgs {
    pub pilot_id: String,
    pub journal: JournalWriter<Record>,
    pub core: saker_core::CoreConfig,
    /// Signalled once a shutdown is requested, so the pilot process can wind down.
    pub shutdown: Arc<tokio::sync::Notify>,
    /// Set once a shutdown is requested: agents that end are not started again.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The batch allocation the pilot runs in, if any (for `status`).
    pub allocation: Option<saker_client::AllocationStatus>,
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
    pub elastic: Option<ElasticConfig>,
    /// This root's process, for `status`.
    pub process: Option<saker_client::RootStatus>,
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
            match self.ctx.take_written() {
                Some(next) => message = next,
                None => return Turn::Continue,
            }
        }
    }

    /// Drains the core's outputs, then handles what the journal finished at once:
    /// the end of a turn begun outside [`RootState::handle`] (starting, resuming).
    pub fn flush(&mut self) -> Turn {
        self.drain();
        match self.ctx.take_written() {
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
            RootMsg::Durable {
                results,
                positions,
                reports,
            } => {
                self.results.on_durable(&mut self.ctx, &results, positions);
                // Their agents may forget these results: a root that dies now has them.
                for (node, through) in reports {
                    self.nodes.durable(&mut self.ctx, node, through);
                }
                if self.submissions.on_durable(&results) {
                    self.ctx.port.release_memory();
                }
                self.upkeep.compaction.maybe_compact(&mut self.ctx);
            }
            RootMsg::Compacted(outcome) => {
                if let Some(done) = self.upkeep.compaction.ended(&mut self.ctx, outcome) {
                    let superseded = self.results.compacted(&done);
                    self.upkeep
                        .compaction
                        .applied(&mut self.ctx, &done, superseded);
                }
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
            RootMsg::SpaceCheck => self.on_space_check(),
            RootMsg::Walltime => self.on_walltime(),
            RootMsg::Provision => self.on_provision(),
            RootMsg::Batch(outcome) => self.on_batch(outcome),
        }
        Turn::Continue
    }
}

impl RootState {
    /// Rebuilds the root from a previous root's journal `records` (`positions` says
    /// where each is: results are indexed, not kept). A router like
    /// [`RootState::handle`]: one pass in which each owner gathers what is its own,
    /// then each resumes from it, in this order: the submissions first (every job
    /// again, with the id it had; everything else refers to jobs), the results (served
    /// again with their `seq`), the data items (after the jobs, so that their readers
    /// prefer the holders), the placed actors, the schedules (then their next
    /// occurrences), the upkeep, and last the adoption of what the previous root's
    /// nodes still run (it waits for their hellos).
    pub(super) fn restore(
        &mut self,
        records: Vec<Record>,
        positions: Vec<saker_journal::Position>,
    ) -> Result<RestoreSummary, RestoreError> {
        let mut summary = RestoreSummary::default();
        let mut jobs = submissions::Journaled::default();
        let mut results = results::Journaled::default();
        let mut actors = placed::Journaled::default();
        let mut schedules = schedules::Journaled::default();
        let mut items = items::Journaled::default();
        let mut nodes = adoption::Journaled::default();
        let now = self.ctx.now();
        for (position, record) in records.into_iter().enumerate() {
            match record {
                // A submission is the submissions'; what its job reads is the data
                // items', and a period the schedules'.
                Record::Submit { .. } | Record::SubmitLines { .. } => {
                    items.look(&record);
                    schedules.look(&record);
                    jobs.gather(position, record);
                }
                Record::Update { .. } | Record::Cancel { .. } | Record::Finished { .. } => {
                    jobs.gather(position, record)
                }
                Record::Result(_) | Record::Attempt { .. } | Record::Compaction { .. } => {
                    let at = positions.get(position).copied();
                    results.gather(position, record, at)?;
                }
                Record::ActorSpawned { .. } | Record::ActorEnded { .. } => actors.gather(record),
                Record::Occurrence { .. } => schedules.gather(record),
                Record::Item { .. } | Record::Recompute { .. } | Record::ItemsFreed { .. } => {
                    items.gather(record)
                }
                Record::Allocation { .. } => self.upkeep.gather(&record, now),
                Record::PilotStarted { .. } => summary.previous_starts += 1,
                Record::Reconciled { .. } => {}
                // Which nodes were live at the end: their agents may hold work to adopt.
                Record::NodeJoined { .. } | Record::NodeLeft { .. } => nodes.gather(&record),
            }
        }
        let earlier = results.earlier();
        let resumed = self
            .submissions
            .resume(&mut self.ctx, jobs, results.ended(), &earlier)?;
        self.results.resume(results, &resumed.compacted);
        self.items.resume(&mut self.ctx, items);
        summary.actors = self.actors.resume(actors);
        self.schedules.resume(schedules);
        // A pending occurrence that ended before the old root stopped has its next
        // one now; one that had not is queued again and runs, late if its time passed.
        self.poll_schedules();
        self.upkeep.resumed();
        self.adoption.resume(&mut self.ctx, nodes);
        summary.jobs = resumed.jobs;
        summary.tasks = resumed.tasks;
        summary.finished = resumed.finished;
        Ok(summary)
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
        // This root's term: one more than the roots before it (each wrote a
        // `PilotStarted`, which compaction keeps). Attempts are numbered by term.
        let before = records
            .iter()
            .filter(|record| matches!(record, Record::PilotStarted { .. }))
            .count();
        args.core.term = u32::try_from(before + 1).unwrap_or(u32::MAX);
        let restored = args.restored.take();
        let deadline = args.deadline_unix_us;
        let journal = ActorJournal::new(myself.clone(), args.journal);
        let port = ActorPort::new(myself, args.shutdown, args.stopping);
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
