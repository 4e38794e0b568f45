//! The root's registry of placed actors: where each runs, which life of it, and the
//! calls in flight to it.
//!
//! Actor frames bypass the scheduling core: a spawn picks a node here and goes
//! straight to it, and a call is routed by the actor's node, answered by the node,
//! and handed back to its caller. What the root adds is supervision. When a node is
//! lost, every call in flight to its actors fails with `actor_lost` (the call may or
//! may not have run: at most once, never twice), and each actor whose restart policy
//! allows it starts a new life on another node from its spawn arguments; one whose
//! handler panicked starts again on the same node, which is healthy. A life is
//! numbered, and frames of an older life (a late reply, a stale copy's event) are
//! ignored, so nothing of the old life is taken for the new one. An actor with no
//! restart left has ended for good: later calls fail with `unknown_actor`, whose
//! message says how it ended (a stopped actor's with `actor_stopped`).

use std::collections::{BTreeSet, HashMap, HashSet};

use saker_core::NodeId;
use saker_wire::messages::{
    ActorAnswer, ActorCall, ActorEvent, ActorFault, ActorReply, ActorSpawn, ActorStatus,
    ArchivedFromAgent, MAX_FUNCTION_BYTES, ToAgent,
};

use super::ctx::Ctx;
use super::journal::AfterJournal;
use super::nodes::Nodes;
use crate::client::Reply;
use crate::records::Record;
use saker_client::actors::{
    ActorCallReply, ActorPlacement, ActorSpawnReply, ActorSpawnRequest, ActorStopReply,
};
use saker_client::{ErrorKind, RequestError};

mod journaled;
mod restore;

pub(super) use journaled::Journaled;

/// Every actor the pilot started, and the calls in flight to them.
#[derive(Debug, Default)]
pub(crate) struct PlacedActors {
    next_actor: u64,
    next_call: u64,
    actors: HashMap<u64, Placed>,
    calls: HashMap<u64, PendingCall>,
    /// Actors waiting for a node that can host them, oldest first.
    waiting: BTreeSet<u64>,
    /// Live actors per node, for placing `Any` on the least loaded.
    per_node: HashMap<NodeId, u32>,
    /// Actors restored from the journal that an agent may still host (a root of a
    /// later term adopts them): started again, or ended, once the wait for the
    /// previous root's nodes is over ([`PlacedActors::release_restored`]).
    restored: BTreeSet<u64>,
}

#[derive(Debug)]
struct Placed {
    spawn: ActorSpawnRequest,
    node: Option<NodeId>,
    /// Where its next life should start: the node of a life that panicked, which is
    /// healthy. `None` after a node loss (any hosting node then).
    home: Option<NodeId>,
    life: u32,
    restarts: u32,
    phase: Phase,
    /// Who waits for the first life to start.
    spawn_waiters: Vec<Reply<ActorSpawnReply>>,
    stop_waiters: Vec<Reply<ActorStopReply>>,
}

impl Placed {
    /// An actor of a previous root's that had ended: only its id is known.
    fn ended(ended: RequestError) -> Placed {
        Placed {
            spawn: ActorSpawnRequest {
                name: String::new(),
                fingerprint: 0,
                args: Vec::new(),
                placement: ActorPlacement::Any,
                restart: Default::default(),
            },
            node: None,
            home: None,
            life: 0,
            restarts: 0,
            phase: Phase::Ended(ended),
            spawn_waiters: Vec::new(),
            stop_waiters: Vec::new(),
        }
    }
}

#[derive(Debug)]
enum Phase {
    /// No node runs it: none can host it yet, or it is between lives.
    Waiting,
    Starting,
    Running,
    Stopping,
    /// For good: calls fail with this error (`unknown_actor`, or `actor_stopped`).
    Ended(RequestError),
}

#[derive(Debug)]
struct PendingCall {
    actor: u64,
    node: NodeId,
    caller: Caller,
}

/// Who waits for a call's answer.
#[derive(Debug)]
pub(super) enum Caller {
    /// A client (the driver, a task's worker): a reply channel.
    Client(Reply<ActorCallReply>),
    /// Code on a node, which called through its own link: the node's number for it.
    Node { node: NodeId, call: u64 },
}

fn fault_of(kind: ErrorKind) -> ActorFault {
    match kind {
        ErrorKind::UnknownActor => ActorFault::Unknown,
        ErrorKind::ActorPanicked => ActorFault::Panicked,
        ErrorKind::ActorTypeMismatch => ActorFault::TypeMismatch,
        ErrorKind::ActorInvalidData => ActorFault::InvalidData,
        ErrorKind::NoActorHost => ActorFault::NoHost,
        ErrorKind::ActorStopped => ActorFault::Stopped,
        _ => ActorFault::Lost,
    }
}

/// The owned form of a validated frame's part; `None` (logged) if it cannot be read.
fn owned<T>(archived: &T::Archived, what: &str, from: NodeId) -> Option<T>
where
    T: rkyv::Archive,
    T::Archived: rkyv::Deserialize<T, rkyv::rancor::Strategy<rkyv::de::Pool, rkyv::rancor::Error>>,
{
    rkyv::deserialize::<T, rkyv::rancor::Error>(archived)
        .inspect_err(|error| tracing::error!(%error, %from, "unreadable actor {what}"))
        .ok()
}

fn error(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError::new(kind, message)
}

/// What a user can do about agents that host no actors.
const NO_HOST_HINT: &str = "its agents are not the application's binary: start the pilot \
                            with `--app <your binary>` (`saker run --app`, `saker pilot \
                            --app`), or run the application alone so that `App::run` \
                            starts a pilot of its own";

fn fault_kind(fault: ActorFault) -> ErrorKind {
    match fault {
        ActorFault::Unknown => ErrorKind::UnknownActor,
        ActorFault::Lost => ErrorKind::ActorLost,
        ActorFault::Panicked => ErrorKind::ActorPanicked,
        ActorFault::TypeMismatch => ErrorKind::ActorTypeMismatch,
        ActorFault::InvalidData => ErrorKind::ActorInvalidData,
        ActorFault::NoHost => ErrorKind::NoActorHost,
        ActorFault::Stopped => ErrorKind::ActorStopped,
    }
}

impl PlacedActors {
    /// Calls waiting for an answer.
    #[cfg(test)]
    pub(crate) fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Actors with a node now (starting, running or stopping).
    pub(crate) fn live(&self) -> u64 {
        self.per_node.values().map(|n| u64::from(*n)).sum()
    }
}

impl PlacedActors {
    pub(super) fn on_actor_spawn(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        spawn: ActorSpawnRequest,
        reply: Reply<ActorSpawnReply>,
    ) {
        if ctx.pilot.shutting_down {
            let _ = reply.send(Err(error(
                ErrorKind::ShuttingDown,
                "the pilot is shutting down",
            )));
            return;
        }
        if let Err(invalid) = spawn.validate() {
            let _ = reply.send(Err(error(ErrorKind::InvalidSpec, invalid.to_string())));
            return;
        }
        match spawn.placement {
            ActorPlacement::Node(node) if ctx.pilot.max_nodes.is_some_and(|max| node >= max) => {
                let message = format!(
                    "node {node} does not exist: this pilot has at most {} nodes",
                    ctx.pilot.max_nodes.unwrap_or(0)
                );
                let _ = reply.send(Err(error(ErrorKind::InvalidSpec, message)));
                return;
            }
            ActorPlacement::With(other) => match self.actors.get(&other.0).map(|a| &a.phase) {
                None | Some(Phase::Ended(_)) => {
                    let message = format!("cannot place beside {other}: it does not run");
                    let _ = reply.send(Err(error(ErrorKind::UnknownActor, message)));
                    return;
                }
                Some(_) => {}
            },
            _ => {}
        }
        self.next_actor += 1;
        let id = self.next_actor;
        tracing::debug!(actor = id, name = %spawn.name, placement = ?spawn.placement, "spawning an actor");
        self.actors.insert(
            id,
            Placed {
                spawn,
                node: None,
                home: None,
                life: 0,
                restarts: 0,
                phase: Phase::Waiting,
                spawn_waiters: vec![reply],
                stop_waiters: Vec::new(),
            },
        );
        self.waiting.insert(id);
        if let Some(placed) = self.actors.get(&id) {
            let record = Record::ActorSpawned {
                actor: id,
                spawn: Box::new(placed.spawn.clone()),
                unix_us: ctx.timestamp().unix_micros(),
            };
            ctx.append(vec![record], AfterJournal::Nothing);
        }
        self.place_waiting(ctx, nodes);
    }

    /// A message for `actor` from `caller`; a cast (`cast`) is answered once routed.
    pub(super) fn on_actor_call(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        actor: u64,
        data: Vec<u8>,
        cast: bool,
        caller: Caller,
    ) {
        if data.len() > MAX_FUNCTION_BYTES {
            let message = format!(
                "a message of {} bytes exceeds the limit of {MAX_FUNCTION_BYTES}",
                data.len()
            );
            return self.answer(
                ctx,
                nodes,
                caller,
                Err(error(ErrorKind::ActorInvalidData, message)),
            );
        }
        let Some(placed) = self.actors.get(&actor) else {
            let ended = error(ErrorKind::UnknownActor, format!("no actor {actor}"));
            return self.answer(ctx, nodes, caller, Err(ended));
        };
        let node = match (&placed.phase, placed.node) {
            (Phase::Ended(ended), _) => {
                let ended = ended.clone();
                return self.answer(ctx, nodes, caller, Err(ended));
            }
            (Phase::Stopping, _) => {
                let message = format!("actor {actor} is stopping");
                return self.answer(
                    ctx,
                    nodes,
                    caller,
                    Err(error(ErrorKind::ActorStopped, message)),
                );
            }
            (Phase::Starting | Phase::Running, Some(node)) => node,
            (Phase::Waiting | Phase::Starting | Phase::Running, _) => {
                let message = format!("actor {actor} runs on no node now (it waits to restart)");
                return self.answer(
                    ctx,
                    nodes,
                    caller,
                    Err(error(ErrorKind::ActorLost, message)),
                );
            }
        };
        let life = placed.life;
        let call = if cast {
            0
        } else {
            self.next_call += 1;
            self.next_call
        };
        let message = ToAgent::ActorCall(ActorCall {
            actor,
            life,
            call,
            data,
        });
        if !nodes.send(ctx, node, &message) {
            return self.answer(
                ctx,
                nodes,
                caller,
                Err(error(ErrorKind::ActorLost, "its node is gone")),
            );
        }
        if cast {
            // A node's cast needs no answer: its uplink is in order already.
            if let Caller::Client(reply) = caller {
                let _ = reply.send(Ok(ActorCallReply::default()));
            }
        } else {
            self.calls.insert(
                call,
                PendingCall {
                    actor,
                    node,
                    caller,
                },
            );
        }
    }

    /// Hands a call's outcome to its caller: a client's channel, or a node's link.
    fn answer(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        caller: Caller,
        outcome: Result<Vec<u8>, RequestError>,
    ) {
        match caller {
            Caller::Client(reply) => {
                let _ = reply.send(outcome.map(|reply| ActorCallReply { reply }));
            }
            // A node's cast (call 0) waits for nothing.
            Caller::Node { call: 0, .. } => {}
            Caller::Node { node, call } => {
                let answer = match outcome {
                    Ok(bytes) => ActorAnswer::Reply(bytes),
                    Err(failed) => ActorAnswer::Failed {
                        fault: fault_of(failed.kind),
                        message: failed.message,
                    },
                };
                nodes.send(
                    ctx,
                    node,
                    &ToAgent::ActorAnswer(ActorReply { call, answer }),
                );
            }
        }
    }

    pub(super) fn on_actor_stop(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        actor: u64,
        reply: Reply<ActorStopReply>,
    ) {
        let Some(placed) = self.actors.get_mut(&actor) else {
            let _ = reply.send(Err(error(
                ErrorKind::UnknownActor,
                format!("no actor {actor}"),
            )));
            return;
        };
        match (&placed.phase, placed.node) {
            (Phase::Ended(_), _) => {
                let _ = reply.send(Ok(ActorStopReply {}));
            }
            (Phase::Stopping, _) => placed.stop_waiters.push(reply),
            (Phase::Starting | Phase::Running, Some(node)) => {
                placed.phase = Phase::Stopping;
                placed.stop_waiters.push(reply);
                let life = placed.life;
                nodes.send(ctx, node, &ToAgent::ActorStop { actor, life });
            }
            (Phase::Waiting | Phase::Starting | Phase::Running, _) => {
                let _ = reply.send(Ok(ActorStopReply {}));
                self.end_actor(
                    ctx,
                    actor,
                    error(
                        ErrorKind::ActorStopped,
                        format!("actor {actor} was stopped"),
                    ),
                );
            }
        }
    }

    /// An actor frame from `from` (its reply, event, or a call its code makes).
    pub(super) fn on_actor_frame(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        message: &ArchivedFromAgent,
    ) {
        match message {
            ArchivedFromAgent::ActorReply(reply) => {
                if let Some(reply) = owned::<ActorReply>(reply, "reply", from) {
                    self.on_actor_reply(ctx, nodes, from, reply);
                }
            }
            ArchivedFromAgent::ActorEvent(event) => {
                if let Some(event) = owned::<ActorEvent>(event, "event", from) {
                    self.on_actor_event(ctx, nodes, from, event);
                }
            }
            ArchivedFromAgent::ActorCall(call) => {
                if let Some(call) = owned::<ActorCall>(call, "call", from) {
                    let caller = Caller::Node {
                        node: from,
                        call: call.call,
                    };
                    self.on_actor_call(ctx, nodes, call.actor, call.data, call.call == 0, caller);
                }
            }
            _ => {}
        }
    }

    /// A node answered a call: hand the answer to its caller.
    pub(super) fn on_actor_reply(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        reply: ActorReply,
    ) {
        let Some(pending) = self.calls.remove(&reply.call) else {
            // Already failed (its node was declared lost meanwhile): at most once.
            return;
        };
        if pending.node != from {
            tracing::warn!(call = reply.call, %from, "an actor reply from another node; ignored");
            self.calls.insert(reply.call, pending);
            return;
        }
        let outcome = match reply.answer {
            ActorAnswer::Reply(bytes) => Ok(bytes),
            ActorAnswer::Failed { fault, message } => Err(error(fault_kind(fault), message)),
        };
        self.answer(ctx, nodes, pending.caller, outcome);
    }

    /// A node tells what became of a life of an actor.
    pub(super) fn on_actor_event(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        event: ActorEvent,
    ) {
        let id = event.actor;
        let Some(placed) = self.actors.get_mut(&id) else {
            return;
        };
        if placed.life != event.life || placed.node != Some(from) {
            return;
        }
        match event.status {
            ActorStatus::Started => {
                if matches!(placed.phase, Phase::Starting) {
                    placed.phase = Phase::Running;
                }
                tracing::debug!(actor = id, node = %from, life = event.life, "actor started");
                for waiter in placed.spawn_waiters.drain(..) {
                    let _ = waiter.send(Ok(ActorSpawnReply {
                        actor: id,
                        node: from.0,
                    }));
                }
            }
            ActorStatus::Stopped => {
                self.end_actor(
                    ctx,
                    id,
                    error(ErrorKind::ActorStopped, format!("actor {id} was stopped")),
                );
            }
            ActorStatus::Failed { fault, message } => {
                let never_started = !placed.spawn_waiters.is_empty();
                let stopping = matches!(placed.phase, Phase::Stopping);
                tracing::warn!(actor = id, node = %from, ?fault, %message, "an actor's life ended");
                // A spawn that cannot start (unknown type, panicking on_start) fails
                // its caller; restarting it would fail the same way.
                let restart = !never_started
                    && !stopping
                    && placed.restarts < placed.spawn.restart.allows(fault == ActorFault::Panicked);
                // The call that panicked was answered by the node; the others in
                // flight were lost with the life.
                let lost = format!("actor {id}'s life ended before it answered: {message}");
                self.fail_calls(
                    ctx,
                    nodes,
                    &HashSet::from([id]),
                    ErrorKind::ActorLost,
                    &lost,
                );
                self.unplace(id);
                if restart {
                    // The node is healthy (it reported the end): the new life stays.
                    self.restart(ctx, nodes, id, Some(from));
                } else {
                    self.end_actor(ctx, id, error(fault_kind(fault), message));
                }
            }
        }
    }

    /// `node` is lost: calls in flight to its actors fail, and the actors restart
    /// elsewhere where their policy allows it.
    pub(super) fn actors_lost_with(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        node: NodeId,
        reason: &str,
    ) {
        // Calls the lost node made: nobody is left to answer (it failed them itself).
        self.calls.retain(
            |_, call| !matches!(call.caller, Caller::Node { node: from, .. } if from == node),
        );
        let on_node: Vec<u64> = self
            .actors
            .iter()
            .filter(|(_, placed)| placed.node == Some(node))
            .map(|(id, _)| *id)
            .collect();
        if on_node.is_empty() {
            return;
        }
        let message = format!("its node {node} was lost: {reason}");
        self.fail_calls(
            ctx,
            nodes,
            &on_node.iter().copied().collect(),
            ErrorKind::ActorLost,
            &message,
        );
        for id in on_node {
            self.unplace(id);
            let Some(placed) = self.actors.get(&id) else {
                continue;
            };
            if matches!(placed.phase, Phase::Stopping) {
                self.end_actor(
                    ctx,
                    id,
                    error(ErrorKind::ActorStopped, format!("actor {id} was stopped")),
                );
            } else if placed.restarts < placed.spawn.restart.allows(false) {
                self.restart(ctx, nodes, id, None);
            } else {
                let message = format!("{message}; its restart policy allows no more restarts");
                self.end_actor(ctx, id, error(ErrorKind::ActorLost, message));
            }
        }
    }

    /// Places every waiting actor that a live node can take now.
    pub(super) fn place_waiting(&mut self, ctx: &mut Ctx, nodes: &Nodes) {
        let waiting: Vec<u64> = self.waiting.iter().copied().collect();
        for id in waiting {
            let Some(placed) = self.actors.get(&id) else {
                self.waiting.remove(&id);
                continue;
            };
            let (placement, first_life) = (placed.spawn.placement, placed.life == 0);
            let home = placed
                .home
                .filter(|home| nodes.get(*home).is_some_and(|entry| entry.hosts_actors()));
            let chosen = match (placement, first_life) {
                (_, false) if home.is_some() => home,
                (ActorPlacement::Node(node), true) => {
                    match nodes.get(NodeId(node)).map(|entry| entry.hosts_actors()) {
                        Some(true) => Some(NodeId(node)),
                        Some(false) => {
                            let message =
                                format!("node {node}'s agent hosts no actors: {NO_HOST_HINT}");
                            self.waiting.remove(&id);
                            self.end_actor(ctx, id, error(ErrorKind::NoActorHost, message));
                            continue;
                        }
                        None => None,
                    }
                }
                (ActorPlacement::With(other), true) => {
                    match self.actors.get(&other.0).map(|o| (&o.phase, o.node)) {
                        Some((Phase::Starting | Phase::Running, Some(node))) => Some(node),
                        Some((Phase::Ended(_), _)) | None => {
                            let message = format!("cannot place beside {other}: it ended");
                            self.waiting.remove(&id);
                            self.end_actor(ctx, id, error(ErrorKind::UnknownActor, message));
                            continue;
                        }
                        Some(_) => None,
                    }
                }
                _ => self.least_loaded_host(nodes),
            };
            match chosen {
                Some(node) => {
                    self.waiting.remove(&id);
                    self.start_life(ctx, nodes, id, node);
                }
                None if nodes.len() > 0 && !nodes.iter().any(|(_, n)| n.hosts_actors()) => {
                    self.waiting.remove(&id);
                    let message = format!("no agent of this pilot hosts actors: {NO_HOST_HINT}");
                    self.end_actor(ctx, id, error(ErrorKind::NoActorHost, message));
                }
                None => {}
            }
        }
    }

    fn least_loaded_host(&self, nodes: &Nodes) -> Option<NodeId> {
        nodes
            .iter()
            .filter(|(_, entry)| entry.hosts_actors())
            .map(|(node, _)| (self.per_node.get(&node).copied().unwrap_or(0), node))
            .min()
            .map(|(_, node)| node)
    }

    fn start_life(&mut self, ctx: &mut Ctx, nodes: &Nodes, id: u64, node: NodeId) {
        if !nodes.contains(node) {
            return;
        }
        let Some(placed) = self.actors.get_mut(&id) else {
            return;
        };
        placed.node = Some(node);
        placed.phase = Phase::Starting;
        *self.per_node.entry(node).or_default() += 1;
        let message = ToAgent::ActorSpawn(ActorSpawn {
            actor: id,
            life: placed.life,
            name: placed.spawn.name.clone(),
            fingerprint: placed.spawn.fingerprint,
            args: placed.spawn.args.clone(),
        });
        nodes.send(ctx, node, &message);
    }

    /// A new life of `id`: on `home` if it can still take it, else on whichever
    /// node can.
    fn restart(&mut self, ctx: &mut Ctx, nodes: &Nodes, id: u64, home: Option<NodeId>) {
        let Some(placed) = self.actors.get_mut(&id) else {
            return;
        };
        placed.home = home;
        placed.restarts += 1;
        placed.life += 1;
        placed.phase = Phase::Waiting;
        tracing::info!(actor = id, life = placed.life, "restarting an actor");
        self.waiting.insert(id);
        self.place_waiting(ctx, nodes);
    }

    /// Takes `id` off its node (its life there is over).
    fn unplace(&mut self, id: u64) {
        let Some(placed) = self.actors.get_mut(&id) else {
            return;
        };
        if let Some(node) = placed.node.take()
            && let Some(count) = self.per_node.get_mut(&node)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_node.remove(&node);
            }
        }
    }

    /// Ends `id` for good: its waiters are answered (a spawn's with `ended`, the
    /// first life's own failure) and its arguments dropped. Later calls fail with
    /// `unknown_actor`, saying how it ended; those to a stopped actor with
    /// `actor_stopped`. (Not with `ended`'s own kind: `actor_panicked` would say the
    /// later call panicked, `actor_lost` that it may have run.)
    fn end_actor(&mut self, ctx: &mut Ctx, id: u64, ended: RequestError) {
        self.unplace(id);
        self.waiting.remove(&id);
        let record = Record::ActorEnded {
            actor: id,
            unix_us: ctx.timestamp().unix_micros(),
        };
        ctx.append(vec![record], AfterJournal::Nothing);
        let Some(placed) = self.actors.get_mut(&id) else {
            return;
        };
        for waiter in placed.spawn_waiters.drain(..) {
            let _ = waiter.send(Err(ended.clone()));
        }
        for waiter in placed.stop_waiters.drain(..) {
            let _ = waiter.send(Ok(ActorStopReply {}));
        }
        placed.spawn.args = Vec::new();
        placed.home = None;
        let later = match ended.kind {
            ErrorKind::ActorStopped | ErrorKind::UnknownActor => ended,
            ErrorKind::ActorPanicked => error(
                ErrorKind::UnknownActor,
                format!(
                    "actor {id} has ended after a panic ({}), with no restart left",
                    ended.message
                ),
            ),
            _ => error(
                ErrorKind::UnknownActor,
                format!("actor {id} has ended: {}", ended.message),
            ),
        };
        placed.phase = Phase::Ended(later);
    }

    /// Fails every call in flight to `actors`.
    fn fail_calls(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        actors: &HashSet<u64>,
        kind: ErrorKind,
        message: &str,
    ) {
        let failed: Vec<u64> = self
            .calls
            .iter()
            .filter(|(_, call)| actors.contains(&call.actor))
            .map(|(id, _)| *id)
            .collect();
        for call in failed {
            if let Some(pending) = self.calls.remove(&call) {
                self.answer(ctx, nodes, pending.caller, Err(error(kind, message)));
            }
        }
    }
}

#[cfg(test)]
mod tests;
