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
//! A gang attempt (an HPC job on several nodes) is adopted whole: each member lists
//! its part with the gang's members, and once every member has, the core adopts the
//! attempt on all of them ([`Core::handle_adopt_gang`]). Until then what the members
//! send of the gang (part results, an MPI launcher's requests and their ends) waits
//! here. If the wait for the previous root's nodes ends first, every part heard is
//! stopped and the job runs again from the queue, whole.
//!
//! [`Core::handle_adopt`]: saker_core::Core::handle_adopt
//! [`Core::handle_adopt_gang`]: saker_core::Core::handle_adopt_gang

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use saker_client::AdoptionStatus;
use saker_core::{AdoptError, AttemptId, NodeId, TaskId, Time};
use saker_wire::messages::{GangLaunch, GangLaunchEnded, GangPart, Held, PmiFence, TaskResult};

use super::ctx::Ctx;
use super::journal::AfterJournal;
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

/// A gang attempt adopted whole, with what its members sent of it before.
#[derive(Debug)]
pub(super) struct AdoptedGang {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub members: Vec<NodeId>,
    pub hosts: Vec<String>,
    /// When its first part started (unix µs).
    pub started_unix_us: u64,
    /// In arrival order.
    pub early: Vec<Early>,
}

/// What a member sent of a gang before the gang was adopted.
#[derive(Debug)]
pub(super) enum Early {
    Result(NodeId, Box<TaskResult>),
    Launch(NodeId, GangLaunch),
    LaunchEnded(GangLaunchEnded),
    Fence(NodeId, PmiFence),
}

/// What a hello's held attempts come to.
#[derive(Debug, Default)]
pub(super) struct Reconciled {
    pub adopted: Vec<Adopted>,
    pub gangs: Vec<AdoptedGang>,
    /// Attempts to stop, and where.
    pub stop: Vec<(NodeId, AttemptId)>,
}

/// A gang attempt of an earlier root some of whose members listed their parts.
#[derive(Debug)]
struct PendingGang {
    task: TaskId,
    gang: GangPart,
    /// Each member's part once listed: when it started (unix µs), whether it ended.
    heard: Vec<Option<(u64, bool)>>,
    early: Vec<Early>,
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
    /// Gang attempts not every member of which has listed its part yet.
    gangs: HashMap<AttemptId, PendingGang>,
    /// Gang attempts not adopted: what their members still send of them is dropped.
    dropped_gangs: HashSet<AttemptId>,
    /// Parts to stop, of gangs whose wait ended before every member was heard.
    stops: Vec<(NodeId, AttemptId)>,
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
    /// hello, or its time is up, and journals what it found (`Record::Reconciled`).
    pub(super) fn holds_dispatch(&mut self, ctx: &mut Ctx) -> bool {
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
        for (attempt, pending) in self.gangs.drain() {
            tracing::info!(%attempt, task = %pending.task,
                "a member of a gang did not come back; its parts are stopped");
            stop_heard(&mut self.stops, tally, attempt, &pending);
            self.dropped_gangs.insert(attempt);
        }
        tally.missing_nodes = self.expected.len() as u64;
        tally.waited_ms = now.as_micros().saturating_sub(began.as_micros()) / 1000;
        tracing::info!(?tally, "reconciled with the previous root's nodes");
        let record = Record::Reconciled {
            term: ctx.core.term(),
            adoption: *tally,
            unix_us: ctx.timestamp().unix_micros(),
        };
        ctx.append(vec![record], AfterJournal::Nothing);
        self.expected.clear();
        false
    }

    /// Whether the wait for the previous root's nodes lasts.
    pub(super) fn waits(&self) -> bool {
        self.hold.is_some()
    }

    /// `node` said hello holding `held`: adopts what the core can. Returns what was
    /// adopted, and the attempts to stop (on this node, or on a gang's members).
    pub(super) fn adopt(&mut self, ctx: &mut Ctx, node: NodeId, held: &[Held]) -> Reconciled {
        self.expected.remove(&node);
        let now = ctx.now();
        let mut reconciled = Reconciled::default();
        // Counted only by a root of a later term (a first root's own attempts held
        // again after a reattach are refused, and not news for `status`).
        let mut tally = self.tally.unwrap_or_default();
        for held in held {
            if let Some(gang) = &held.gang {
                self.hear_part(ctx, node, held, gang, &mut tally, &mut reconciled);
                continue;
            }
            let started = ctx.core_time_past(held.started_unix_us);
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
                    reconciled.adopted.push(Adopted {
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
                    reconciled.stop.push((node, held.attempt));
                }
            }
        }
        if self.tally.is_some() {
            self.tally = Some(tally);
        }
        reconciled
    }

    /// `node` listed its part of a gang attempt: the attempt is adopted once every
    /// member has listed its part, while the wait for the previous root's nodes lasts.
    fn hear_part(
        &mut self,
        ctx: &mut Ctx,
        node: NodeId,
        held: &Held,
        gang: &GangPart,
        tally: &mut AdoptionStatus,
        reconciled: &mut Reconciled,
    ) {
        let attempt = held.attempt;
        let member = gang.member as usize;
        let fits = gang.nodes.get(member) == Some(&node)
            && gang.hosts.len() == gang.nodes.len()
            && attempt.term() < ctx.core.term()
            && !self.dropped_gangs.contains(&attempt)
            && self.gangs.get(&attempt).is_none_or(|pending| {
                pending.task == held.task && pending.gang.nodes == gang.nodes
            });
        if !fits {
            tracing::info!(%node, %attempt, "not adopting a gang part; it is stopped");
            tally.refused += 1;
            reconciled.stop.push((node, attempt));
            return;
        }
        let pending = self.gangs.entry(attempt).or_insert_with(|| PendingGang {
            task: held.task,
            gang: gang.clone(),
            heard: vec![None; gang.nodes.len()],
            early: Vec::new(),
        });
        pending.heard[member] = Some((held.started_unix_us, held.ended));
        if pending.heard.iter().any(Option::is_none) {
            if self.hold.is_none() {
                // Nobody waits for the other members: this part cannot be adopted.
                if let Some(pending) = self.gangs.remove(&attempt) {
                    stop_heard(&mut reconciled.stop, tally, attempt, &pending);
                }
                self.dropped_gangs.insert(attempt);
            }
            return;
        }
        // Invariant: just found or inserted.
        let Some(pending) = self.gangs.remove(&attempt) else {
            return;
        };
        let heard = pending.heard.iter().flatten();
        let started_unix_us = heard.clone().map(|&(at, _)| at).filter(|&at| at != 0).min();
        let all_ended = heard.clone().all(|&(_, ended)| ended);
        let now = ctx.now();
        let started = started_unix_us.and_then(|at| ctx.core_time_past(at));
        let members = &pending.gang.nodes;
        match ctx
            .core
            .handle_adopt_gang(members, pending.task, attempt, started, now)
        {
            Ok(()) => {
                if all_ended {
                    tally.ended_away += 1;
                } else {
                    tally.adopted += 1;
                }
                tracing::info!(%attempt, task = %pending.task, members = members.len(),
                    "adopted a gang attempt on all its members");
                reconciled.gangs.push(AdoptedGang {
                    task: pending.task,
                    attempt,
                    members: pending.gang.nodes,
                    hosts: pending.gang.hosts,
                    started_unix_us: started_unix_us.unwrap_or(0),
                    early: pending.early,
                });
            }
            Err(AdoptError::Finished { .. }) if all_ended => {
                tally.delivered += 1;
                self.dropped_gangs.insert(attempt);
            }
            Err(error) => {
                tracing::info!(%attempt, %error, "not adopting a gang attempt; its parts are stopped");
                stop_heard(&mut reconciled.stop, tally, attempt, &pending);
                self.dropped_gangs.insert(attempt);
            }
        }
    }

    /// Whether frames of gang `attempt` wait here (its gang is not adopted yet, or
    /// was dropped): then [`Adoption::keep_early`] takes them.
    pub(super) fn awaits_gang(&self, attempt: AttemptId) -> bool {
        (!self.gangs.is_empty() && self.gangs.contains_key(&attempt))
            || (!self.dropped_gangs.is_empty() && self.dropped_gangs.contains(&attempt))
    }

    /// Keeps what a member sent of gang `attempt` for when the gang is adopted (or
    /// drops it, if it will not be).
    pub(super) fn keep_early(&mut self, attempt: AttemptId, early: Early) {
        if let Some(pending) = self.gangs.get_mut(&attempt) {
            pending.early.push(early);
        }
    }

    /// Parts to stop since the last call (a gang's wait ended without every member).
    pub(super) fn take_stops(&mut self) -> Vec<(NodeId, AttemptId)> {
        std::mem::take(&mut self.stops)
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

/// Every part heard of a gang that is not adopted is stopped on its node.
fn stop_heard(
    stops: &mut Vec<(NodeId, AttemptId)>,
    tally: &mut AdoptionStatus,
    attempt: AttemptId,
    pending: &PendingGang,
) {
    for (node, heard) in pending.gang.nodes.iter().zip(&pending.heard) {
        if heard.is_some() {
            tally.refused += 1;
            stops.push((*node, attempt));
        }
    }
}
