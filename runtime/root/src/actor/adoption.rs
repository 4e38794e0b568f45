//! Adoption: the work a previous root left running is taken over, not run again.
//!
//! A root of a later term (a standby that took over, a resumed root) rebuilt its queue
//! from the journal, which has no dispatch records: every unfinished task is queued.
//! The agents that outlived the old root still run some of them, and say so in their
//! hello ([`Held`]). Each held attempt is adopted when the core can ([`Core::handle_adopt`]:
//! an earlier term's attempt of a task that is known, unfinished and not running
//! elsewhere); the rest are cancelled on their node. So that no task is handed to
//! another node before its runner is heard, dispatch waits while nodes the journal
//! counts as live at the old root's end have not said hello, at most [`ADOPTION_WAIT`].
//!
//! [`Core::handle_adopt`]: saker_core::Core::handle_adopt

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use saker_client::AdoptionStatus;
use saker_core::{AdoptError, AttemptId, NodeId, TaskId, Time};
use saker_wire::messages::Held;

use super::ctx::Ctx;
use super::port::Wake;
use crate::records::Record;

/// The longest dispatch waits for the nodes of the previous root to come back. A
/// tuning constant: agents that outlived the root reattach within about a second;
/// one that does not come back in this time has its work run elsewhere.
pub(super) const ADOPTION_WAIT: Duration = Duration::from_secs(5);

/// What the journal says of the nodes: those live when the previous root stopped.
#[derive(Debug, Default)]
pub(super) struct Journaled {
    live: BTreeSet<NodeId>,
}

impl Journaled {
    pub(super) fn gather(&mut self, record: &Record) {
        match record {
            Record::NodeJoined { node, .. } => {
                self.live.insert(*node);
            }
            Record::NodeLeft { node, .. } => {
                self.live.remove(node);
            }
            _ => {}
        }
    }
}

/// One held attempt adopted: its task, attempt and start (unix µs, 0: not started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Adopted {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub started_unix_us: u64,
}

/// The owner of adoption. See the module doc.
#[derive(Debug, Default)]
pub(super) struct Adoption {
    /// Nodes of the previous root not heard from yet.
    expected: BTreeSet<NodeId>,
    /// Dispatch waits until then, or until `expected` is empty.
    hold: Option<(Time, Time)>,
    /// Set once a root of a later term resumed.
    tally: Option<AdoptionStatus>,
    /// Ended attempts whose tasks the journal finished already: the previous root
    /// accepted their results before its acknowledgement reached the agent, which
    /// sends them again after its hello. Dropped when they come, not counted as
    /// duplicates (no attempt ran twice).
    delivered: HashSet<AttemptId>,
}

impl Adoption {
    /// After the journal was read: a root of a later term waits for the nodes that
    /// were live at the previous one's end.
    pub(super) fn resume(&mut self, ctx: &mut Ctx, journaled: Journaled) {
        if ctx.core.config().term <= 1 {
            return;
        }
        self.tally = Some(AdoptionStatus::default());
        if journaled.live.is_empty() {
            return;
        }
        let now = ctx.now();
        tracing::info!(
            nodes = journaled.live.len(),
            "waiting for the previous root's nodes"
        );
        self.expected = journaled.live;
        self.hold = Some((now, now.saturating_add(ADOPTION_WAIT)));
        ctx.port.wake_after(ADOPTION_WAIT, Wake::Timer);
    }

    /// Whether dispatch waits now. Ends the wait once every expected node said
    /// hello, or its time is up.
    pub(super) fn holds_dispatch(&mut self, ctx: &Ctx) -> bool {
        // Asked every turn: the clock is read only while dispatch waits.
        let Some((began, until)) = self.hold else {
            return false;
        };
        let now = ctx.now();
        if !self.expected.is_empty() && now < until {
            return true;
        }
        self.hold = None;
        let tally = self.tally.get_or_insert_default();
        tally.missing_nodes = self.expected.len() as u64;
        tally.waited_ms = now.as_micros().saturating_sub(began.as_micros()) / 1000;
        tracing::info!(?tally, "reconciled with the previous root's nodes");
        self.expected.clear();
        false
    }

    /// `node` said hello holding `held`: adopts what the core can. Returns what was
    /// adopted, and the attempts to cancel on the node.
    pub(super) fn adopt(
        &mut self,
        ctx: &mut Ctx,
        node: NodeId,
        held: &[Held],
    ) -> (Vec<Adopted>, Vec<AttemptId>) {
        self.expected.remove(&node);
        let now = ctx.now();
        let wall = ctx.timestamp().unix_micros();
        let mut adopted = Vec::new();
        let mut refused = Vec::new();
        // Counted only by a root of a later term (a first root's own attempts held
        // again after a reattach are refused, and not news for `status`).
        let mut tally = self.tally.unwrap_or_default();
        for held in held {
            // The core's clock for when it started: as long ago as the wall clock says.
            let started = (held.started_unix_us != 0).then(|| {
                let ago = wall.saturating_sub(held.started_unix_us);
                Time(now.as_micros().saturating_sub(ago))
            });
            match ctx
                .core
                .handle_adopt(node, held.task, held.attempt, started, now)
            {
                Ok(()) => {
                    if held.ended {
                        tally.ended_away += 1;
                    } else {
                        tally.adopted += 1;
                    }
                    adopted.push(Adopted {
                        task: held.task,
                        attempt: held.attempt,
                        started_unix_us: held.started_unix_us,
                    });
                }
                Err(AdoptError::Finished { .. }) if held.ended => {
                    tally.delivered += 1;
                    self.delivered.insert(held.attempt);
                }
                Err(error) => {
                    tracing::info!(%node, %error, "not adopting an attempt; it is stopped");
                    tally.refused += 1;
                    refused.push(held.attempt);
                }
            }
        }
        if self.tally.is_some() {
            self.tally = Some(tally);
        }
        (adopted, refused)
    }

    /// Whether a result of `attempt` is one the previous root had accepted (see
    /// `delivered`); forgets it.
    pub(super) fn was_delivered(&mut self, attempt: AttemptId) -> bool {
        !self.delivered.is_empty() && self.delivered.remove(&attempt)
    }

    /// What this root adopted, if it is of a later term than the pilot's first.
    pub(super) fn status(&self) -> Option<AdoptionStatus> {
        self.tally
    }
}
