//! Placed actors outlive their root: a root of a later term adopts each life an agent
//! still hosts (no new life, its state kept, its calls routed there), stops the lives
//! it does not know, and starts again or ends the actors no agent brought back.

use saker_client::actors::{ActorPlacement, ActorRestart, ActorSpawnRequest};
use saker_wire::messages::{ActorEvent, ActorStatus, HeldActor};
use tokio::sync::oneshot;

use super::super::*;
use super::harness_of_term;
use crate::client::ClientRequest;

fn spawn(h: &mut Harness, restart: ActorRestart) {
    let (reply, _answer) = oneshot::channel();
    let spawn = ActorSpawnRequest {
        name: "counter".into(),
        fingerprint: 7,
        args: vec![1],
        placement: ActorPlacement::Node(1),
        restart,
    };
    h.handle(RootMsg::Client(ClientRequest::ActorSpawn { spawn, reply }));
}

/// The previous root: nodes 1 and 2 host actors; actor 1 (restarts after a node
/// loss) and actor 2 (never restarts) run on node 1. Its journal.
fn previous_root() -> Vec<Record> {
    let mut old = Harness::new();
    old.hosts_actors = true;
    old.join(1, 1);
    old.join(2, 1);
    spawn(&mut old, ActorRestart::OnNodeLoss { max_restarts: 1 });
    spawn(&mut old, ActorRestart::Never);
    for actor in [1, 2] {
        let started = FromAgent::ActorEvent(ActorEvent {
            actor,
            life: 0,
            status: ActorStatus::Started,
        });
        old.agent_sends(1, 1, &started);
    }
    old.journal_durable()
}

fn spawns_and_stops(sent: &[(u32, ToAgent)]) -> Vec<(u32, &'static str, u64, u32)> {
    sent.iter()
        .filter_map(|(node, message)| match message {
            ToAgent::ActorSpawn(spawn) => Some((*node, "spawn", spawn.actor, spawn.life)),
            ToAgent::ActorStop { actor, life } => Some((*node, "stop", *actor, *life)),
            _ => None,
        })
        .collect()
}

/// A new root of `term` restored from `records`, its agents hosting actors.
fn new_root(records: Vec<Record>) -> Harness {
    let mut new = harness_of_term(2);
    new.hosts_actors = true;
    new.restore(records).expect("the journal restores");
    new
}

fn link(h: &mut Harness, node: u32) {
    let (tx, _rx) = saker_actors::link::channel();
    h.handle(RootMsg::LinkUp {
        link: LinkId(u64::from(node)),
        tx,
        node: Some(node),
    });
}

#[tokio::test]
async fn actors_an_agent_still_hosts_are_adopted_in_their_life_and_called_there() {
    let mut new = new_root(previous_root());
    link(&mut new, 1);
    let held = vec![
        HeldActor { actor: 1, life: 0 },
        HeldActor { actor: 2, life: 0 },
        // Not this pilot's (or ended): stopped.
        HeldActor { actor: 9, life: 3 },
    ];
    new.hello_hosting(1, 1, PILOT, Vec::new(), held);
    link(&mut new, 2);
    new.hello(2, 1, PILOT);
    let sent = new.sent();
    assert_eq!(
        spawns_and_stops(&sent),
        [(1, "stop", 9, 3)],
        "no new life of 1 or 2: {sent:?}"
    );
    // A call reaches actor 1 in the life it has, where it runs.
    let (reply, mut answer) = oneshot::channel();
    new.handle(RootMsg::Client(ClientRequest::ActorCall {
        actor: 1,
        data: b"get".to_vec(),
        cast: false,
        reply,
    }));
    let calls: Vec<(u32, u64, u32)> = new
        .sent()
        .into_iter()
        .filter_map(|(node, message)| match message {
            ToAgent::ActorCall(call) => Some((node, call.actor, call.life)),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [(1, 1, 0)]);
    assert!(answer.try_recv().is_err(), "not answered yet");
    assert_eq!(new.status().actors, 2);
}

#[tokio::test]
async fn actors_no_agent_brought_back_start_again_or_end_once_the_wait_is_over() {
    let mut new = new_root(previous_root());
    link(&mut new, 2);
    new.hello(2, 1, PILOT);
    assert!(
        spawns_and_stops(&new.sent()).is_empty(),
        "not while node 1 may still come back with them"
    );
    new.clock.advance(Duration::from_secs(5));
    new.handle(RootMsg::Timer);
    // Actor 1 may restart: a new life on node 2; actor 2 may not: it ended.
    assert_eq!(spawns_and_stops(&new.sent()), [(2, "spawn", 1, 1)]);
    assert_eq!(new.status().actors, 1);
}
