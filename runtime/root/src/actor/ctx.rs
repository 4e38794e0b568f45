//! What every owner of the root's state works through: the scheduling core, the port
//! (frames, journal, timers), the clock, the node registry and the pilot's facts. It is
//! HyperQueue's `(core, comm)` with the root's few shared tables beside them: an owner's
//! method takes `&mut Ctx` and its own state, never another owner's, so a feature's
//! reach is what its signature says.

use std::collections::{HashMap, HashSet};

use saker_actors::link::LinkId;
use saker_actors::resources::NodeResources;
use saker_core::{Core, JobId, NodeId, Time};
use saker_wire::messages::ToAgent;

use super::RootMsg;
use super::journal::{AfterJournal, Journal};
use super::port::{Clock, Port};
use crate::records::Record;
use crate::results::Timestamp;

/// The root's shared context (see the module doc).
#[derive(Debug)]
pub(crate) struct Ctx {
    pub core: Core,
    pub port: Box<dyn Port>,
    pub journal: Box<dyn Journal>,
    pub clock: Box<dyn Clock>,
    /// Every live node, by id.
    pub nodes: HashMap<NodeId, NodeEntry>,
    /// The node that dialed each agent link (its direct child), as it said.
    pub links: HashMap<LinkId, NodeId>,
    pub pilot: PilotFacts,
    /// When the core's next timeout is armed for, if it is.
    pub timer_at: Option<Time>,
    /// What the journal finished at once during this turn, handled before it ends.
    pub written_now: Option<RootMsg>,
    /// A [`Wake::Space`](super::port::Wake::Space) is on its way.
    pub space_check_armed: bool,
}

/// What the pilot is, as every owner may need to know it.
#[derive(Debug)]
pub(crate) struct PilotFacts {
    pub id: String,
    /// The batch allocation the pilot runs in, if any (for `status`).
    pub allocation: Option<crate::client::AllocationStatus>,
    /// The most nodes this pilot can have (its allocation's, or its local agents'),
    /// when known: an HPC job asking for more is refused at submission.
    pub max_nodes: Option<u32>,
    /// The widest node the pilot will have (its local agents', or what the batch host
    /// finds), when known before nodes join.
    pub expected_node: Option<NodeResources>,
    pub shutting_down: bool,
    /// This root's process (for `status`); `None` in unit tests.
    pub process: Option<crate::client::RootStatus>,
}

/// A live node, as the root knows it.
#[derive(Debug)]
pub(crate) struct NodeEntry {
    pub link: LinkId,
    pub hostname: String,
    pub cores: u32,
    /// What it offers, in the root's kinds.
    pub capacity: saker_core::Resources,
    /// Jobs whose definition this node already has.
    pub known_jobs: HashSet<JobId>,
    /// Finished jobs this node may drop, sent with the next dispatch.
    pub forget: Vec<JobId>,
    pub running: u32,
    /// Its agent is the application's binary and runs actors.
    pub hosts_actors: bool,
}

impl Ctx {
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

    /// Whether `node` is registered through `link`: what a link carries for a node
    /// registered elsewhere comes from a stale copy or an old path of it.
    pub(super) fn registered_via(&self, node: NodeId, link: LinkId) -> bool {
        self.nodes
            .get(&node)
            .is_some_and(|entry| entry.link == link)
    }

    pub(super) fn hostname_of(&self, node: NodeId) -> String {
        self.nodes
            .get(&node)
            .map_or_else(|| format!("node-{node}"), |n| n.hostname.clone())
    }
}
