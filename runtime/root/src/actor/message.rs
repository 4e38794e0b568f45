//! What the root's loop receives: [`RootMsg`], the frame budget whose permits travel
//! with agents' frames, and what a turn tells its driver ([`Turn`]).

use std::sync::Arc;

use saker_actors::link::{LinkId, LinkTx};

use super::port::{BatchOutcome, Wake};
use crate::client::ClientRequest;
use crate::compact::{CompactionDone, CompactionError};
use saker_client::results::ResultRecord;

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
        /// Per node, the last report whose results are now durable.
        reports: Vec<(saker_core::NodeId, u64)>,
    },
    /// An append failed: nothing more can be acknowledged durably.
    JournalFailed {
        error: saker_journal::JournalError,
    },
    /// A journal compaction ended (`compaction.rs`).
    Compacted(Result<CompactionDone, CompactionError>),
    /// The core asked to be woken at or after some time.
    Timer,
    /// Time to look whether the journal has space again ([`Wake::Space`]).
    SpaceCheck,
    /// The walltime deadline has come.
    Walltime,
    /// An elastic pilot's provisioning round is due.
    Provision,
    /// The batch system's answers to a round's work.
    Batch(BatchOutcome),
}

impl From<Wake> for RootMsg {
    fn from(wake: Wake) -> RootMsg {
        match wake {
            Wake::Timer => RootMsg::Timer,
            Wake::Walltime => RootMsg::Walltime,
            Wake::Provision => RootMsg::Provision,
            Wake::Space => RootMsg::SpaceCheck,
        }
    }
}

/// What the actor does after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    Continue,
    /// The root cannot go on (its journal failed): stop the actor with this reason.
    Stop(String),
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
