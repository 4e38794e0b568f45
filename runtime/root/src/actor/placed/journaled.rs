//! What the journal holds of the placed actors, gathered in the resume's one pass
//! over its records.

use std::collections::BTreeMap;

use crate::records::Record;
use saker_client::actors::ActorSpawnRequest;

/// What the journal holds of the placed actors: every id spawned, with its request
/// while it had not ended.
#[derive(Debug, Default)]
pub(crate) struct Journaled {
    actors: BTreeMap<u64, Option<ActorSpawnRequest>>,
}

impl Journaled {
    /// Keeps an actor's spawn or end (nothing else is the actors').
    pub(crate) fn gather(&mut self, record: Record) {
        match record {
            Record::ActorSpawned { actor, spawn, .. } => {
                self.actors.insert(actor, Some(*spawn));
            }
            Record::ActorEnded { actor, .. } => {
                self.actors.insert(actor, None);
            }
            _ => {}
        }
    }
}

impl Journaled {
    /// Every actor id spawned, in id order, with its request while it had not ended.
    pub(super) fn actors(self) -> impl Iterator<Item = (u64, Option<ActorSpawnRequest>)> {
        self.actors.into_iter()
    }
}
