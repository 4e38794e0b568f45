//! `PlacedActors` on its own; the router's view of placed actors (placement, calls,
//! supervision) is in `tests/placed.rs`.

use super::{Journaled, PlacedActors};
use crate::actor::testing::*;
use saker_client::actors::{ActorPlacement, ActorRestart, ActorSpawnRequest};

fn spawn(restart: ActorRestart) -> Box<ActorSpawnRequest> {
    Box::new(ActorSpawnRequest {
        name: "counter".into(),
        fingerprint: 7,
        args: vec![1],
        placement: ActorPlacement::Any,
        restart,
    })
}

#[test]
fn a_resumed_registry_starts_again_the_actors_whose_policy_allows_it() {
    let mut owned = Owned::new();
    let mut journaled = Journaled::default();
    let again = ActorRestart::OnNodeLoss { max_restarts: 1 };
    for (actor, restart) in [(1, again), (2, ActorRestart::Never), (3, again)] {
        journaled.gather(Record::ActorSpawned {
            actor,
            spawn: spawn(restart),
            unix_us: UNIX_ORIGIN_US,
        });
    }
    journaled.gather(Record::ActorEnded {
        actor: 3,
        unix_us: UNIX_ORIGIN_US,
    });
    let mut actors = PlacedActors::default();
    assert_eq!(actors.resume(journaled), 1, "actor 1 only");
    assert!(
        actors.waiting.is_empty(),
        "not before the previous nodes are heard"
    );
    actors.release_restored(&mut owned.ctx, &owned.nodes);
    assert_eq!(actors.waiting.iter().copied().collect::<Vec<_>>(), [1]);
    // Actor 2 may not restart: it ends, journaled so.
    let ended: Vec<u64> = owned
        .appended()
        .into_iter()
        .filter_map(|record| match record {
            Record::ActorEnded { actor, .. } => Some(actor),
            _ => None,
        })
        .collect();
    assert_eq!(ended, [2]);
    // It starts on the first node that can host it, in its next life.
    let mut joining = Joining {
        link: LinkId(1),
        hostname: "host1".into(),
        scratch: String::new(),
        data_addr: String::new(),
        capacity: Resources::cores(1),
        hosts_actors: true,
    };
    joining.hosts_actors = true;
    owned.nodes.join(NodeId(1), joining);
    actors.place_waiting(&mut owned.ctx, &owned.nodes);
    let sent = owned.sent();
    assert!(
        matches!(&sent[..], [(1, ToAgent::ActorSpawn(spawn))] if spawn.actor == 1 && spawn.life == 1),
        "{sent:?}"
    );
    // New actors get new ids.
    assert_eq!(actors.next_actor, 3);
}
