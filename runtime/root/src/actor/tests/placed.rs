//! Placed actors at the root: placement, routing of calls and replies by node, and
//! supervision (a lost node's calls fail, its actors restart elsewhere).

use saker_wire::messages::{
    ActorAnswer, ActorCall, ActorEvent, ActorFault, ActorReply, ActorStatus, FromAgent, ToAgent,
};
use tokio::sync::oneshot;

use super::{Harness, RootMsg};
use crate::client::ClientRequest;
use saker_client::actors::{
    ActorCallReply, ActorId, ActorPlacement, ActorRestart, ActorSpawnReply, ActorSpawnRequest,
};
use saker_client::{ErrorKind, RequestError};

type Answer<T> = oneshot::Receiver<Result<T, RequestError>>;

fn request(placement: ActorPlacement, restart: ActorRestart) -> ActorSpawnRequest {
    ActorSpawnRequest {
        name: "counter".into(),
        fingerprint: 7,
        args: vec![1, 2, 3],
        placement,
        restart,
    }
}

impl Harness {
    fn spawn_actor(&mut self, spawn: ActorSpawnRequest) -> Answer<ActorSpawnReply> {
        let (reply, answer) = oneshot::channel();
        self.handle(RootMsg::Client(ClientRequest::ActorSpawn { spawn, reply }));
        answer
    }

    fn call_actor(&mut self, actor: u64, data: &[u8]) -> Answer<ActorCallReply> {
        let (reply, answer) = oneshot::channel();
        self.handle(RootMsg::Client(ClientRequest::ActorCall {
            actor,
            data: data.to_vec(),
            cast: false,
            reply,
        }));
        answer
    }

    fn actor_event(&mut self, node: u32, actor: u64, life: u32, status: ActorStatus) {
        let event = FromAgent::ActorEvent(ActorEvent {
            actor,
            life,
            status,
        });
        self.agent_sends(u64::from(node), node, &event);
    }

    /// The actor frames sent so far: (node, message).
    fn actor_frames(&self) -> Vec<(u32, ToAgent)> {
        self.sent()
            .into_iter()
            .filter(|(_, message)| {
                matches!(
                    message,
                    ToAgent::ActorSpawn(_) | ToAgent::ActorCall(_) | ToAgent::ActorStop { .. }
                )
            })
            .collect()
    }

    fn lose(&mut self, node: u32) {
        self.handle(RootMsg::LinkDown {
            link: saker_actors::link::LinkId(u64::from(node)),
            reason: "killed".into(),
        });
    }
}

fn spawned_on(frames: &[(u32, ToAgent)]) -> Vec<(u32, u64, u32)> {
    frames
        .iter()
        .filter_map(|(node, message)| match message {
            ToAgent::ActorSpawn(spawn) => Some((*node, spawn.actor, spawn.life)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_spawn_waits_for_a_hosting_node_and_answers_once_started() {
    let mut h = Harness::new();
    let mut answer = h.spawn_actor(request(ActorPlacement::Any, ActorRestart::Never));
    assert!(h.actor_frames().is_empty(), "no node yet");
    h.join(2, 1);
    let frames = h.actor_frames();
    assert_eq!(spawned_on(&frames), vec![(2, 1, 0)]);
    assert!(answer.try_recv().is_err(), "not started yet");
    h.actor_event(2, 1, 0, ActorStatus::Started);
    let reply = answer.try_recv().expect("answered").expect("started");
    assert_eq!(reply, ActorSpawnReply { actor: 1, node: 2 });
    assert_eq!(h.status().actors, 1);
}

#[test]
fn any_placement_takes_the_least_loaded_node_and_with_follows_the_other_actor() {
    let mut h = Harness::new();
    h.join(0, 1);
    h.join(1, 1);
    for _ in 0..4 {
        drop(h.spawn_actor(request(ActorPlacement::Any, ActorRestart::Never)));
    }
    let mut per_node = [0, 0];
    for (node, _, _) in spawned_on(&h.actor_frames()) {
        per_node[node as usize] += 1;
    }
    assert_eq!(per_node, [2, 2]);
    // Beside actor 1, wherever that is, even where Any would not go.
    drop(h.spawn_actor(request(ActorPlacement::Node(1), ActorRestart::Never)));
    drop(h.spawn_actor(request(
        ActorPlacement::With(ActorId(5)),
        ActorRestart::Never,
    )));
    drop(h.spawn_actor(request(
        ActorPlacement::With(ActorId(5)),
        ActorRestart::Never,
    )));
    assert_eq!(
        spawned_on(&h.actor_frames()),
        vec![(1, 5, 0), (1, 6, 0), (1, 7, 0)]
    );
}

#[test]
fn calls_go_to_the_actors_node_and_replies_come_back_to_their_caller() {
    let mut h = Harness::new();
    h.join(0, 1);
    h.join(1, 1);
    drop(h.spawn_actor(request(ActorPlacement::Node(1), ActorRestart::Never)));
    h.actor_event(1, 1, 0, ActorStatus::Started);
    h.actor_frames();
    let mut first = h.call_actor(1, b"one");
    let mut second = h.call_actor(1, b"two");
    let calls: Vec<(u32, u64)> = h
        .actor_frames()
        .into_iter()
        .map(|(node, message)| match message {
            ToAgent::ActorCall(call) => (node, call.call),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|(node, _)| *node == 1));
    // Answered out of order: each reply finds its own caller.
    for (call, bytes) in [(calls[1].1, b"2".to_vec()), (calls[0].1, b"1".to_vec())] {
        let reply = FromAgent::ActorReply(ActorReply {
            call,
            answer: ActorAnswer::Reply(bytes),
        });
        h.agent_sends(1, 1, &reply);
    }
    assert_eq!(first.try_recv().unwrap().unwrap().reply, b"1");
    assert_eq!(second.try_recv().unwrap().unwrap().reply, b"2");
    // A reply from another node than the call's is not taken.
    let mut third = h.call_actor(1, b"three");
    let call = match h.actor_frames().pop() {
        Some((_, ToAgent::ActorCall(call))) => call.call,
        other => panic!("{other:?}"),
    };
    let forged = FromAgent::ActorReply(ActorReply {
        call,
        answer: ActorAnswer::Reply(b"forged".to_vec()),
    });
    h.agent_sends(0, 0, &forged);
    assert!(third.try_recv().is_err(), "still waiting");
    // An unknown actor is refused at once.
    let unknown = h.call_actor(99, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(unknown.kind, ErrorKind::UnknownActor);
}

#[test]
fn a_lost_node_fails_calls_in_flight_and_restarts_its_actors_elsewhere_within_the_policy() {
    let mut h = Harness::new();
    h.join(0, 1);
    h.join(1, 1);
    let restart = ActorRestart::OnNodeLoss { max_restarts: 1 };
    drop(h.spawn_actor(request(ActorPlacement::Node(1), restart)));
    drop(h.spawn_actor(request(ActorPlacement::Node(1), ActorRestart::Never)));
    h.actor_event(1, 1, 0, ActorStatus::Started);
    h.actor_event(1, 2, 0, ActorStatus::Started);
    h.actor_frames();
    let mut in_flight = h.call_actor(1, b"slow");
    h.lose(1);
    let lost = in_flight.try_recv().unwrap().unwrap_err();
    assert_eq!(lost.kind, ErrorKind::ActorLost);
    // Actor 1 starts its second life on node 0; actor 2 may not restart, and has
    // ended for good.
    assert_eq!(spawned_on(&h.actor_frames()), vec![(0, 1, 1)]);
    let ended = h.call_actor(2, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(ended.kind, ErrorKind::UnknownActor);
    assert!(
        ended.message.contains("node 1 was lost")
            && ended.message.contains("allows no more restarts"),
        "{}",
        ended.message
    );
    // The old life's late event changes nothing; the new life's start counts.
    h.actor_event(0, 1, 0, ActorStatus::Stopped);
    h.actor_event(0, 1, 1, ActorStatus::Started);
    drop(h.call_actor(1, b"again"));
    assert!(matches!(
        h.actor_frames().as_slice(),
        [(0, ToAgent::ActorCall(call))] if call.life == 1
    ));
    // Its one restart is spent: losing node 0 ends it.
    h.lose(0);
    assert!(h.actor_frames().is_empty());
    let gone = h.call_actor(1, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(gone.kind, ErrorKind::UnknownActor);
    assert_eq!(h.status().actors, 0);
}

#[test]
fn a_panic_restarts_only_under_always_and_a_failed_start_fails_the_spawn() {
    let mut h = Harness::new();
    h.join(0, 1);
    let mut bad = h.spawn_actor(request(
        ActorPlacement::Any,
        ActorRestart::Always { max_restarts: 3 },
    ));
    let failed = ActorStatus::Failed {
        fault: ActorFault::TypeMismatch,
        message: "no actor type named counter".into(),
    };
    h.actor_event(0, 1, 0, failed);
    let refused = bad.try_recv().unwrap().unwrap_err();
    assert_eq!(refused.kind, ErrorKind::ActorTypeMismatch);
    h.actor_frames();
    for (actor, restart, restarts) in [
        (2, ActorRestart::Always { max_restarts: 1 }, true),
        (3, ActorRestart::OnNodeLoss { max_restarts: 1 }, false),
    ] {
        drop(h.spawn_actor(request(ActorPlacement::Any, restart)));
        h.actor_event(0, actor, 0, ActorStatus::Started);
        h.actor_frames();
        let panicked = ActorStatus::Failed {
            fault: ActorFault::Panicked,
            message: "boom".into(),
        };
        h.actor_event(0, actor, 0, panicked);
        let again = spawned_on(&h.actor_frames());
        assert_eq!(again.is_empty(), !restarts, "actor {actor}: {again:?}");
    }
    let ended = h.call_actor(3, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(ended.kind, ErrorKind::UnknownActor);
    assert!(ended.message.contains("panic (boom)"), "{}", ended.message);
}

/// The error table of `docs/rust-api.md`: the call that panicked answers
/// `actor_panicked`, the calls in flight with it `actor_lost`, and once no restart is
/// left every later call `unknown_actor` (saying how the actor ended), not
/// `actor_panicked` again; a stopped actor's calls answer `actor_stopped`.
#[test]
fn calls_to_an_actor_with_no_restart_left_answer_unknown_saying_how_it_ended() {
    let mut h = Harness::new();
    h.join(0, 1);
    drop(h.spawn_actor(request(
        ActorPlacement::Any,
        ActorRestart::Always { max_restarts: 1 },
    )));
    for life in 0..2 {
        h.actor_event(0, 1, life, ActorStatus::Started);
        h.actor_frames();
        let mut panicking = h.call_actor(1, b"panic");
        let mut behind = h.call_actor(1, b"behind");
        let calls: Vec<u64> = h
            .actor_frames()
            .into_iter()
            .filter_map(|(_, message)| match message {
                ToAgent::ActorCall(call) => Some(call.call),
                _ => None,
            })
            .collect();
        let answer = FromAgent::ActorReply(ActorReply {
            call: calls[0],
            answer: ActorAnswer::Failed {
                fault: ActorFault::Panicked,
                message: format!("boom {life}"),
            },
        });
        h.agent_sends(0, 0, &answer);
        let panicked = ActorStatus::Failed {
            fault: ActorFault::Panicked,
            message: format!("boom {life}"),
        };
        h.actor_event(0, 1, life, panicked);
        let panicked = panicking.try_recv().unwrap().unwrap_err();
        assert_eq!(panicked.kind, ErrorKind::ActorPanicked, "life {life}");
        let lost = behind.try_recv().unwrap().unwrap_err();
        assert_eq!(lost.kind, ErrorKind::ActorLost, "life {life}");
    }
    // Its one restart was spent on the first panic: the second ended it.
    assert!(spawned_on(&h.actor_frames()).is_empty());
    for _ in 0..2 {
        let later = h.call_actor(1, b"x").try_recv().unwrap().unwrap_err();
        assert_eq!(later.kind, ErrorKind::UnknownActor);
        assert!(
            later
                .message
                .contains("actor 1 has ended after a panic (boom 1)"),
            "{}",
            later.message
        );
    }
    // A stopped actor says so.
    drop(h.spawn_actor(request(ActorPlacement::Any, ActorRestart::Never)));
    h.actor_event(0, 2, 0, ActorStatus::Started);
    let (reply, _stopped) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::ActorStop {
        actor: 2,
        reply,
    }));
    h.actor_event(0, 2, 0, ActorStatus::Stopped);
    let stopped = h.call_actor(2, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(stopped.kind, ErrorKind::ActorStopped);
}

/// A panic leaves its node healthy: the new life starts there, even where `Any`
/// would now choose another node; only the loss of the node moves the actor.
#[test]
fn a_restart_after_a_panic_keeps_a_pinned_node_and_only_a_lost_node_moves_it() {
    let mut h = Harness::new();
    h.join(0, 1);
    h.join(1, 1);
    drop(h.spawn_actor(request(
        ActorPlacement::Node(1),
        ActorRestart::Always { max_restarts: 4 },
    )));
    h.actor_event(1, 1, 0, ActorStatus::Started);
    // Beside it, on node 1 too.
    drop(h.spawn_actor(request(
        ActorPlacement::With(ActorId(1)),
        ActorRestart::Always { max_restarts: 3 },
    )));
    h.actor_event(1, 2, 0, ActorStatus::Started);
    assert_eq!(spawned_on(&h.actor_frames()), vec![(1, 1, 0), (1, 2, 0)]);
    for (actor, life) in [(1, 0), (2, 0), (1, 1)] {
        let panicked = ActorStatus::Failed {
            fault: ActorFault::Panicked,
            message: "boom".into(),
        };
        h.actor_event(1, actor, life, panicked);
        assert_eq!(
            spawned_on(&h.actor_frames()),
            vec![(1, actor, life + 1)],
            "actor {actor} after its life {life} panicked"
        );
        h.actor_event(1, actor, life + 1, ActorStatus::Started);
    }
    assert_eq!(h.status().actors, 2);
    // Node 1 is lost: both move to node 0.
    h.lose(1);
    let mut moved = spawned_on(&h.actor_frames());
    moved.sort_unstable();
    assert_eq!(moved, vec![(0, 1, 3), (0, 2, 2)]);
    h.actor_event(0, 1, 3, ActorStatus::Started);
    // And a panic there keeps it on node 0, though node 1 is back and empty.
    h.join(1, 1);
    let panicked = ActorStatus::Failed {
        fault: ActorFault::Panicked,
        message: "boom".into(),
    };
    h.actor_event(0, 1, 3, panicked);
    assert_eq!(spawned_on(&h.actor_frames()), vec![(0, 1, 4)]);
}

#[test]
fn agents_that_host_no_actors_refuse_spawns_and_bad_placements_are_refused() {
    let mut h = Harness::new();
    h.hosts_actors = false;
    h.join(0, 1);
    // Refused with what to do about it: the `--app` hint.
    for placement in [ActorPlacement::Any, ActorPlacement::Node(0)] {
        let mut none = h.spawn_actor(request(placement, ActorRestart::Never));
        let refused = none.try_recv().unwrap().unwrap_err();
        assert_eq!(refused.kind, ErrorKind::NoActorHost, "{placement:?}");
        assert!(
            refused
                .message
                .contains("start the pilot with `--app <your binary>`"),
            "{placement:?}: {}",
            refused.message
        );
    }
    let mut far = h.spawn_actor(request(ActorPlacement::Node(9), ActorRestart::Never));
    assert_eq!(
        far.try_recv().unwrap().unwrap_err().kind,
        ErrorKind::InvalidSpec
    );
    let mut beside = h.spawn_actor(request(
        ActorPlacement::With(ActorId(42)),
        ActorRestart::Never,
    ));
    assert_eq!(
        beside.try_recv().unwrap().unwrap_err().kind,
        ErrorKind::UnknownActor
    );
    let mut bad_name = h.spawn_actor(ActorSpawnRequest {
        name: "no spaces".into(),
        ..request(ActorPlacement::Any, ActorRestart::Never)
    });
    assert_eq!(
        bad_name.try_recv().unwrap().unwrap_err().kind,
        ErrorKind::InvalidSpec
    );
}

#[test]
fn a_call_from_a_node_is_answered_down_its_own_link_and_dropped_if_it_is_lost() {
    let mut h = Harness::new();
    h.join(0, 1);
    h.join(1, 1);
    drop(h.spawn_actor(request(ActorPlacement::Node(1), ActorRestart::Never)));
    h.actor_event(1, 1, 0, ActorStatus::Started);
    h.actor_frames();
    // Node 0 calls actor 1 (its own number for the call: 5), then casts to it.
    for (call, data) in [(5u64, b"ask".to_vec()), (0, b"tell".to_vec())] {
        let call = FromAgent::ActorCall(ActorCall {
            actor: 1,
            life: 0,
            call,
            data,
        });
        h.agent_sends(0, 0, &call);
    }
    let routed: Vec<(u32, u64, Vec<u8>)> = h
        .actor_frames()
        .into_iter()
        .map(|(node, message)| match message {
            ToAgent::ActorCall(call) => (node, call.call, call.data),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(routed.len(), 2, "both went to node 1, in order");
    assert_eq!((routed[0].0, &routed[0].2[..]), (1, &b"ask"[..]));
    assert_eq!(
        (routed[1].0, routed[1].1, &routed[1].2[..]),
        (1, 0, &b"tell"[..])
    );
    let reply = FromAgent::ActorReply(ActorReply {
        call: routed[0].1,
        answer: ActorAnswer::Reply(b"yes".to_vec()),
    });
    h.agent_sends(1, 1, &reply);
    let answers: Vec<(u32, ToAgent)> = h
        .sent()
        .into_iter()
        .filter(|(_, m)| matches!(m, ToAgent::ActorAnswer(_)))
        .collect();
    assert!(
        matches!(answers.as_slice(), [(0, ToAgent::ActorAnswer(ActorReply { call: 5, answer: ActorAnswer::Reply(bytes) }))] if bytes == b"yes"),
        "{answers:?}"
    );
    // An unknown actor is answered to the node at once, as a failure.
    let unknown = FromAgent::ActorCall(ActorCall {
        actor: 9,
        life: 0,
        call: 6,
        data: Vec::new(),
    });
    h.agent_sends(0, 0, &unknown);
    assert!(h.sent().iter().any(|(node, m)| *node == 0
        && matches!(
            m,
            ToAgent::ActorAnswer(ActorReply {
                call: 6,
                answer: ActorAnswer::Failed {
                    fault: ActorFault::Unknown,
                    ..
                }
            })
        )));
    // A caller lost before the answer: the answer goes nowhere, nothing is kept.
    let ask = FromAgent::ActorCall(ActorCall {
        actor: 1,
        life: 0,
        call: 7,
        data: Vec::new(),
    });
    h.agent_sends(0, 0, &ask);
    h.lose(0);
    assert!(h.root.actors.calls_in_flight() == 0);
}

#[test]
fn a_resumed_root_starts_journaled_actors_again_as_their_policies_allow() {
    let mut h = Harness::new();
    h.join(0, 1);
    let restart = ActorRestart::OnNodeLoss { max_restarts: 2 };
    for restart in [restart, ActorRestart::Never, restart] {
        drop(h.spawn_actor(request(ActorPlacement::Any, restart)));
    }
    for actor in 1..=3 {
        h.actor_event(0, actor, 0, ActorStatus::Started);
    }
    let (reply, _stopped) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::ActorStop {
        actor: 3,
        reply,
    }));
    h.actor_event(0, 3, 0, ActorStatus::Stopped);
    let records = h.journal_durable();

    let mut resumed = Harness::new();
    let summary = resumed.restore(records).expect("the journal restores");
    assert_eq!(summary.actors, 1, "only actor 1 may restart");
    resumed.join(1, 1);
    assert_eq!(spawned_on(&resumed.actor_frames()), vec![(1, 1, 1)]);
    let never = resumed.call_actor(2, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(never.kind, ErrorKind::UnknownActor);
    assert!(
        never.message.contains("root restarted"),
        "{}",
        never.message
    );
    let stopped = resumed.call_actor(3, b"x").try_recv().unwrap().unwrap_err();
    assert_eq!(stopped.kind, ErrorKind::UnknownActor);
    // New actors get new ids.
    drop(resumed.spawn_actor(request(ActorPlacement::Any, ActorRestart::Never)));
    assert_eq!(spawned_on(&resumed.actor_frames()), vec![(1, 4, 0)]);
}
