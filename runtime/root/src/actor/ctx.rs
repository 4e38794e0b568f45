//! What every owner of the root's state works through: the scheduling core, the port
//! (frames, timers), the journal, the clock and the pilot's few facts. It is
//! HyperQueue's `(core, comm)` with the journal and the clock beside them.
//!
//! An owner's method takes `&mut Ctx` and its own state, never another owner's, so a
//! feature's reach is what its signature says. The one exception is the node
//! registry, [`Nodes`](super::nodes::Nodes), which an owner that sends frames to agents
//! takes by shared reference: it is how any owner addresses a node, and only the
//! router changes it.

use saker_actors::link::LinkId;
use saker_core::{Core, NodeId, Time};
use saker_wire::messages::ToAgent;

use super::journal::{AfterJournal, Journal};
use super::message::RootMsg;
use super::port::{Clock, Port};
use crate::records::Record;
use saker_client::results::Timestamp;

/// The root's shared context (see the module doc).
#[derive(Debug)]
pub(crate) struct Ctx {
    pub core: Core,
    pub port: Box<dyn Port>,
    pub journal: Box<dyn Journal>,
    pub clock: Box<dyn Clock>,
    pub pilot: PilotFacts,
    /// What the journal finished at once during this turn, handled before it ends.
    written_now: Option<RootMsg>,
}

/// What the pilot is, as every owner may need to know it.
#[derive(Debug)]
pub(crate) struct PilotFacts {
    pub id: String,
    /// The most nodes this pilot can have (its allocation's, or its local agents'),
    /// when known: work asking for more, or for a node beyond them, is refused.
    pub max_nodes: Option<u32>,
    /// The pilot is stopping: nothing new starts.
    pub shutting_down: bool,
}

impl Ctx {
    pub(super) fn new(
        core: Core,
        port: Box<dyn Port>,
        journal: Box<dyn Journal>,
        clock: Box<dyn Clock>,
        pilot: PilotFacts,
    ) -> Ctx {
        Ctx {
            core,
            port,
            journal,
            clock,
            pilot,
            written_now: None,
        }
    }

    pub(super) fn now(&self) -> Time {
        self.clock.now()
    }

    /// Wall-clock time for records people read.
    pub(super) fn timestamp(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.clock.unix_micros())
    }

    /// Sends a message to `node` over `link` (see [`Port::send`]).
    pub(super) fn send_to(&mut self, link: LinkId, node: NodeId, message: &ToAgent) {
        self.port.send(link, node, message);
    }

    /// Appends `records` to the journal (see [`Journal::append`]); what it finished at
    /// once is handled before this turn ends.
    pub(super) fn append(&mut self, records: Vec<Record>, after: AfterJournal) {
        if let Some(message) = self.journal.append(records, after) {
            debug_assert!(self.written_now.is_none(), "one inline append a turn");
            self.written_now = Some(message);
        }
    }

    /// What the journal finished at once during this turn, if anything.
    pub(super) fn take_written(&mut self) -> Option<RootMsg> {
        self.written_now.take()
    }

    /// The core's time for a wall-clock time (`None` for none, or one already past).
    pub(super) fn core_time(&self, at: Option<Timestamp>) -> Option<Time> {
        let wall = self.timestamp().unix_micros();
        let ahead = at?
            .unix_micros()
            .checked_sub(wall)
            .filter(|ahead| *ahead > 0)?;
        Some(self.now().saturating_add_micros(ahead))
    }

    /// The core's time for a past wall-clock time `unix_us` (0: never): as long
    /// before now as the wall clock says.
    pub(super) fn core_time_past(&self, unix_us: u64) -> Option<Time> {
        (unix_us != 0).then(|| {
            let ago = self.timestamp().unix_micros().saturating_sub(unix_us);
            Time(self.now().as_micros().saturating_sub(ago))
        })
    }
}
