//! Gangs: placed whole on distinct nodes with free capacity, ended whole, and held
//! for by a reservation that small work may backfill only when it ends in time.

use saker_core::{
    AttemptOutcome, Disposition, Event, JobSpec, NodeId, Placement, TerminalState, Time,
};

use crate::harness::Harness;

fn gang(nodes: u32, cores: u32) -> JobSpec {
    JobSpec::single()
        .with_cores(cores)
        .with_placement(Placement::Gang { nodes })
}

fn node_ids(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

#[test]
fn a_gang_starts_whole_on_distinct_nodes_and_ends_whole() {
    let mut harness = Harness::new();
    for node in 1..=3 {
        harness.join_with_credit(node, 4);
    }
    let job = harness.submit(gang(2, 3));
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "one dispatch for the whole gang");
    let dispatch = &dispatches[0];
    assert_eq!(dispatch.members.len(), 2);
    assert_eq!(dispatch.members[0], dispatch.node, "the leader comes first");
    assert_ne!(dispatch.members[0], dispatch.members[1]);
    let attempt = dispatch.assignments[0].attempt;
    assert_eq!(
        harness.core.gang_members(attempt),
        Some(&dispatch.members[..])
    );
    for member in &dispatch.members {
        assert_eq!(
            harness.cores_credit(member.0),
            Some((4, 1)),
            "charged on every member"
        );
    }
    harness.started(attempt);
    let disposition = harness.result(attempt, AttemptOutcome::Succeeded);
    assert!(matches!(
        disposition,
        Disposition::Accepted { state: TerminalState::Succeeded, task, .. } if task == job.first_task
    ));
    assert_eq!(harness.core.gang_members(attempt), None);
    // Credit comes back from the agents, as for any work; the gang's hold is gone.
    for member in dispatch.members.clone() {
        harness.credit(member.0, 3);
    }
    harness.submit(gang(3, 4));
    assert_eq!(harness.take_dispatches()[0].members.len(), 3);
}

#[test]
fn a_gang_needs_free_capacity_not_just_credit() {
    let mut harness = Harness::new();
    // Credit 8 on a 4-core node: a prefetch margin of 4.
    harness.join(1, 4);
    harness.credit(1, 8);
    harness.submit(JobSpec::array(4));
    let small: Vec<_> = harness.take_dispatches()[0]
        .assignments
        .iter()
        .map(|assignment| assignment.attempt)
        .collect();
    assert_eq!(small.len(), 4);
    harness.submit(gang(1, 4));
    assert!(
        harness.take_dispatches().is_empty(),
        "credit 4 left, but nothing free"
    );
    for attempt in &small[..3] {
        harness.result(*attempt, AttemptOutcome::Succeeded);
    }
    assert!(harness.take_dispatches().is_empty(), "3 of 4 cores free");
    harness.result(small[3], AttemptOutcome::Succeeded);
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1);
    assert_eq!(dispatches[0].members, node_ids(&[1]));
}

#[test]
fn a_reserved_node_takes_only_work_that_ends_before_the_gang_starts() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    harness.join_with_credit(2, 4);
    // Two 1-core tasks of limit 100 on each node, started at 0.
    harness.submit(JobSpec::array(4).with_time_limit_micros(100));
    let mut running = Vec::new();
    for dispatch in harness.take_dispatches() {
        for assignment in dispatch.assignments {
            running.push(assignment.attempt);
        }
    }
    assert_eq!(running.len(), 4);
    for attempt in &running {
        harness.started(*attempt);
    }
    // Both nodes have 2 free (and 2 of credit): the 4-core gang waits and reserves.
    let head = harness.submit(gang(2, 4));
    let reservation = harness.core.reservation().expect("the head gang reserves");
    assert_eq!(reservation.job, head.job);
    assert_eq!(reservation.nodes, node_ids(&[1, 2]));
    assert_eq!(reservation.start, Some(Time(100)));
    // No limit, or a limit past the expected start: not on reserved nodes.
    let unlimited = harness.submit(JobSpec::single());
    harness.submit(JobSpec::single().with_time_limit_micros(150));
    assert!(harness.take_dispatches().is_empty());
    // A task that ends by then is backfilled; a higher priority is not held back.
    harness.advance_to(Time(10));
    harness.submit(JobSpec::single().with_time_limit_micros(90));
    harness.submit(JobSpec::single().with_priority(5));
    let backfilled: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .map(|assignment| assignment.attempt)
        .collect();
    assert_eq!(backfilled.len(), 2);
    assert_eq!(harness.core.counts().queued, 3, "gang, unlimited, too long");
    // When everything on the nodes has ended, the gang goes first.
    harness.advance_to(Time(100));
    for attempt in running.into_iter().chain(backfilled) {
        harness.result(attempt, AttemptOutcome::Succeeded);
    }
    assert!(
        harness.take_dispatches().is_empty(),
        "no credit came back yet"
    );
    harness.credit(1, 4);
    let dispatches = harness.take_dispatches();
    assert!(
        dispatches.is_empty(),
        "node 2 has no credit: {dispatches:?}"
    );
    harness.credit(2, 4);
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches[0].assignments[0].job, head.job, "{dispatches:?}");
    assert_eq!(dispatches[0].members.len(), 2);
    assert_eq!(harness.core.reservation(), None);
    let _ = unlimited;
}

#[test]
fn a_lost_member_stops_the_others_and_the_gang_is_replayed_whole() {
    let mut harness = Harness::new();
    for node in 1..=4 {
        harness.join_with_credit(node, 2);
    }
    let job = harness.submit(gang(3, 2).with_max_replays(1));
    let first = harness.take_dispatches().remove(0);
    let attempt = first.assignments[0].attempt;
    harness.started(attempt);
    let lost = first.members[1];
    let loss = harness.lose(lost.0);
    assert_eq!((loss.attempts, loss.replayed), (1, 1));
    let mut cancelled: Vec<NodeId> = harness
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            Event::CancelAttempt {
                node,
                attempt: stopped,
            } if stopped == attempt => Some(node),
            _ => None,
        })
        .collect();
    cancelled.sort();
    let mut survivors: Vec<NodeId> = first
        .members
        .iter()
        .copied()
        .filter(|node| *node != lost)
        .collect();
    survivors.sort();
    assert_eq!(
        cancelled, survivors,
        "every surviving member stops its part"
    );
    // The members' credit comes back as their parts stop; the replay needs 3 nodes of
    // the 3 left.
    for node in &survivors {
        harness.credit(node.0, 2);
    }
    let replay = harness.take_dispatches().remove(0);
    assert_eq!(replay.assignments[0].task, job.first_task);
    assert!(!replay.members.contains(&lost));
    assert_eq!(replay.members.len(), 3);
    // A late result of the old attempt is a duplicate.
    assert_eq!(
        harness.result(attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
    // A second loss is past the bound: the gang fails.
    let loss = harness.lose(replay.members[2].0);
    assert_eq!(loss.failed, 1);
    assert_eq!(harness.core.job_counts(job.job).map(|c| c.failed), Some(1));
}

#[test]
fn a_failed_gang_is_retried_whole_and_cancel_reaches_every_member() {
    let mut harness = Harness::new();
    for node in 1..=2 {
        harness.join_with_credit(node, 1);
    }
    let job = harness.submit(gang(2, 1).with_max_retries(1));
    let first = harness.take_dispatches().remove(0);
    let disposition = harness.result(first.assignments[0].attempt, AttemptOutcome::Failed);
    let Disposition::WillRetry { not_before, .. } = disposition else {
        panic!("{disposition:?}");
    };
    for node in 1..=2 {
        harness.credit(node, 1);
    }
    harness.advance_to(not_before);
    harness.timeout();
    let retry = harness.take_dispatches().remove(0);
    assert_eq!(retry.members.len(), 2);
    let summary = harness.cancel(job.job);
    assert_eq!(summary.attempts_signalled, 1);
    let mut told: Vec<NodeId> = harness
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            Event::CancelAttempt { node, .. } => Some(node),
            _ => None,
        })
        .collect();
    told.sort();
    assert_eq!(told, node_ids(&[1, 2]));
    let disposition = harness.result(retry.assignments[0].attempt, AttemptOutcome::Cancelled);
    assert!(matches!(
        disposition,
        Disposition::Accepted {
            state: TerminalState::Cancelled,
            ..
        }
    ));
}

#[test]
fn a_gang_wider_than_the_pilot_waits_without_blocking_small_work() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 2);
    harness.join_with_credit(2, 2);
    harness.submit(gang(3, 1));
    assert_eq!(harness.core.reservation(), None, "no 3 nodes to hold");
    harness.submit(JobSpec::array(4));
    assert_eq!(harness.take_assigned().len(), 4);
    harness.join_with_credit(3, 2);
    // Node 3 is free now, but nodes 1 and 2 are full: the gang reserves all three.
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(
        harness.core.reservation().map(|held| held.nodes),
        Some(node_ids(&[1, 2, 3]))
    );
}

#[test]
fn gangs_go_in_priority_order_and_a_later_gang_may_use_unreserved_nodes() {
    let mut harness = Harness::new();
    for node in 1..=3 {
        harness.join_with_credit(node, 1);
    }
    // Occupy node 1 (no limit): the 3-node head gang cannot start and reserves all.
    harness.submit(JobSpec::single());
    assert_eq!(harness.take_assigned(), vec![(1, 0, 1)]);
    harness.started(saker_core::AttemptId(1));
    let head = harness.submit(gang(3, 1).with_priority(1));
    assert_eq!(
        harness.core.reservation().map(|held| held.job),
        Some(head.job)
    );
    assert_eq!(harness.core.reservation().and_then(|held| held.start), None);
    // A 2-node gang behind it would need a reserved node: it waits too.
    harness.submit(gang(2, 1));
    assert!(harness.take_dispatches().is_empty());
    // A higher-priority gang becomes the head and takes the free nodes.
    let urgent = harness.submit(gang(2, 1).with_priority(2));
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1);
    assert_eq!(dispatches[0].assignments[0].job, urgent.job);
    assert_eq!(dispatches[0].members.len(), 2);
}

#[test]
fn a_gang_that_cannot_finish_by_the_deadline_is_held() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    harness.set_deadline(Some(Time(1_000)));
    harness.submit(gang(2, 1).with_time_limit_micros(2_000));
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(harness.core.counts().beyond_deadline, 1);
    assert_eq!(harness.core.reservation(), None);
    harness.set_deadline(None);
    assert_eq!(harness.take_dispatches().len(), 1);
}

#[test]
fn a_reserved_node_is_asked_back_what_it_has_not_started() {
    let mut harness = Harness::new();
    // 2 cores with a prefetch of 4: six 1-core tasks go there, two start.
    harness.join(1, 2);
    harness.credit(1, 6);
    harness.submit(JobSpec::array(6).with_time_limit_micros(100));
    let attempts: Vec<_> = harness.take_dispatches()[0]
        .assignments
        .iter()
        .map(|assignment| assignment.attempt)
        .collect();
    harness.started(attempts[0]);
    harness.started(attempts[1]);
    harness.take_events();
    let head = harness.submit(gang(1, 2));
    let asked: Vec<_> = harness
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ReturnUnstarted { node, attempt } => Some((node, attempt)),
            _ => None,
        })
        .collect();
    let expected: Vec<_> = attempts[2..].iter().map(|a| (NodeId(1), *a)).collect();
    assert_eq!(
        asked, expected,
        "the four queued attempts, none that started"
    );
    // Three are given back; one had started meanwhile and ends as usual.
    for attempt in &attempts[2..5] {
        assert!(matches!(
            harness.result(*attempt, AttemptOutcome::Cancelled),
            Disposition::Returned { .. }
        ));
    }
    assert_eq!(harness.core.counts().replays, 0, "not a replay");
    assert_eq!(
        harness.core.counts().queued,
        4,
        "three back in the queue, and the gang"
    );
    for attempt in [attempts[0], attempts[1], attempts[5]] {
        harness.result(attempt, AttemptOutcome::Succeeded);
    }
    harness.credit(1, 6);
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches[0].assignments[0].job, head.job, "the gang first");
    assert_eq!(harness.core.reservation(), None);
}

#[test]
fn a_replay_prefers_nodes_other_than_the_one_its_attempt_lost() {
    let mut harness = Harness::new();
    for node in 1..=4 {
        harness.join_with_credit(node, 2);
    }
    harness.submit(gang(3, 2));
    let first = harness.take_dispatches().remove(0);
    assert_eq!(first.members, node_ids(&[1, 2, 3]));
    harness.lose(2);
    for node in [1, 3] {
        harness.credit(node, 2);
    }
    // Node 2 comes back (a new life of the id) before the replay is placed.
    harness.join_with_credit(2, 2);
    let replay = harness.take_dispatches().remove(0);
    assert_eq!(replay.members.len(), 3);
    assert!(!replay.members.contains(&NodeId(2)), "{:?}", replay.members);
    // With no other choice, the lost node's id is used again.
    harness.lose(4);
    for node in [1, 3] {
        harness.credit(node, 2);
    }
    let again = harness.take_dispatches().remove(0);
    assert_eq!(again.members, node_ids(&[1, 2, 3]));
}
