//! The placed actors of a root of a later term: restored from the journal, adopted
//! where an agent still hosts them, started again or ended once the wait for the
//! previous root's nodes is over.

use saker_core::NodeId;
use saker_wire::messages::HeldActor;

use super::{Journaled, Phase, Placed, PlacedActors, error};
use crate::actor::ctx::Ctx;
use crate::actor::nodes::Nodes;
use saker_client::ErrorKind;

impl PlacedActors {
    /// Rebuilds the registry from a previous root's journal: every actor id spawned,
    /// with its request unless it ended. Agents that outlived that root may still host
    /// them: an actor one lists in its hello is adopted there ([`PlacedActors::adopt`]);
    /// the rest start again or end once the wait for those agents is over
    /// ([`PlacedActors::release_restored`]). Returns how many may start again.
    pub(in crate::actor) fn resume(&mut self, journaled: Journaled) -> u64 {
        let mut again = 0;
        for (id, spawn) in journaled.actors() {
            self.next_actor = self.next_actor.max(id);
            let Some(spawn) = spawn else {
                let ended = error(ErrorKind::UnknownActor, format!("actor {id} has ended"));
                self.actors.insert(id, Placed::ended(ended));
                continue;
            };
            again += u64::from(spawn.restart.allows(false) > 0);
            self.actors.insert(
                id,
                Placed {
                    spawn,
                    node: None,
                    home: None,
                    life: 1,
                    restarts: 1,
                    phase: Phase::Waiting,
                    spawn_waiters: Vec::new(),
                    stop_waiters: Vec::new(),
                },
            );
            self.restored.insert(id);
        }
        again
    }

    /// `node` said hello hosting `held` lives of actors: each one restored from the
    /// journal and not yet placed runs on there as this root's, in the life it has,
    /// keeping its state; its next calls go there. Returns the lives to stop (actors
    /// this root does not know or placed elsewhere already).
    pub(in crate::actor) fn adopt(
        &mut self,
        nodes: &Nodes,
        node: NodeId,
        held: &[HeldActor],
    ) -> Vec<HeldActor> {
        let hosts = nodes.get(node).is_some_and(|entry| entry.hosts_actors());
        let mut stop = Vec::new();
        for &HeldActor { actor, life } in held {
            let placed = self.actors.get_mut(&actor);
            let Some(placed) = placed.filter(|_| hosts && self.restored.remove(&actor)) else {
                tracing::info!(actor, life, %node, "not adopting an actor's life; it is stopped");
                stop.push(HeldActor { actor, life });
                continue;
            };
            placed.node = Some(node);
            placed.life = life;
            // Restored as restarted once after the loss of its node, which it was not.
            placed.restarts = placed.restarts.saturating_sub(1);
            placed.phase = Phase::Running;
            *self.per_node.entry(node).or_default() += 1;
            tracing::info!(actor, life, %node, "adopted an actor that runs on");
        }
        stop
    }

    /// The wait for the previous root's nodes is over: each restored actor no agent
    /// said it hosts starts a new life as its restart policy allows after a node
    /// loss, once a node can host it; the others end (their calls fail with
    /// `unknown_actor`, saying so).
    pub(in crate::actor) fn release_restored(&mut self, ctx: &mut Ctx, nodes: &Nodes) {
        if self.restored.is_empty() {
            return;
        }
        for id in std::mem::take(&mut self.restored) {
            let Some(placed) = self.actors.get(&id) else {
                continue;
            };
            if placed.spawn.restart.allows(false) > 0 {
                self.waiting.insert(id);
            } else {
                let message = "the pilot's root restarted, its node did not come back, and \
                               its restart policy allows no restart";
                self.end_actor(ctx, id, error(ErrorKind::ActorLost, message));
            }
        }
        self.place_waiting(ctx, nodes);
    }
}
