//! Node membership, loss and input validation.

use saker_core::{
    AttemptOutcome, Disposition, JobSpec, NodeError, NodeId, NodeLoss, Resources, SubmitError, Time,
};

use crate::harness::Harness;

#[test]
fn a_lost_node_has_its_attempts_replayed_elsewhere() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(4));
    harness.join(1, 8);
    harness.credit(1, 3);
    harness.credit(1, 5);
    let lost: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .collect();
    assert_eq!(lost.len(), 4);
    harness.started(lost[0].attempt);
    let loss = harness.lose(1);
    assert_eq!(
        loss,
        NodeLoss {
            attempts: 4,
            replayed: 4,
            failed: 0,
            cancelled: 0,
            continued: 0,
            credit_dropped: Resources::cores(4)
        }
    );
    let counts = harness.core.counts();
    assert_eq!(
        (counts.queued, counts.credit, counts.nodes),
        (4, Resources::ZERO, 0)
    );

    harness.join_with_credit(2, 8);
    let replayed = harness.take_dispatches().remove(0).assignments;
    let tasks: Vec<_> = replayed.iter().map(|a| a.task).collect();
    assert_eq!(
        tasks,
        (0..4).map(|index| job.task(index)).collect::<Vec<_>>()
    );
    assert!(replayed.iter().all(|a| a.attempt > lost[3].attempt));
    for old in &lost {
        assert_eq!(
            harness.result(old.attempt, AttemptOutcome::Succeeded),
            Disposition::Duplicate,
            "results from the lost node are superseded"
        );
    }
    assert_eq!(harness.core.counts().replays, 4);
}

#[test]
fn node_loss_fails_tasks_past_their_replay_bound() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(2).with_max_replays(0));
    harness.join_with_credit(1, 2);
    harness.take_dispatches();
    let loss = harness.lose(1);
    assert_eq!((loss.failed, loss.replayed), (2, 0));
    assert!(harness.core.is_quiescent());
}

#[test]
fn a_lost_node_can_rejoin_as_a_fresh_node() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(3));
    harness.join_with_credit(1, 1);
    let old = harness.take_one();
    harness.lose(1);
    assert_eq!(
        harness
            .core
            .handle_credit(NodeId(1), Resources::cores(4), Time::ZERO),
        Err(NodeError::UnknownNode { node: NodeId(1) })
    );
    harness.join(1, 2);
    assert_eq!(harness.cores_credit(1), Some((2, 0)), "old credit is gone");
    harness.credit(1, 2);
    let fresh = harness.take_dispatches().remove(0).assignments;
    assert_eq!(fresh.len(), 2);
    assert_eq!(fresh[0].task, old.task, "the replay goes first");
    assert_eq!(
        harness.result(old.attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
}

#[test]
fn node_inputs_are_validated() {
    let mut harness = Harness::new();
    let now = Time::ZERO;
    assert_eq!(
        harness
            .core
            .handle_node_joined(NodeId(1), Resources::ZERO, now),
        Err(NodeError::ZeroCapacity { node: NodeId(1) })
    );
    harness.join(1, 4);
    assert_eq!(
        harness
            .core
            .handle_node_joined(NodeId(1), Resources::cores(4), now),
        Err(NodeError::AlreadyJoined { node: NodeId(1) })
    );
    assert_eq!(
        harness
            .core
            .handle_credit(NodeId(9), Resources::cores(1), now),
        Err(NodeError::UnknownNode { node: NodeId(9) })
    );
    assert_eq!(
        harness.core.handle_node_lost(NodeId(9), now),
        Err(NodeError::UnknownNode { node: NodeId(9) })
    );
    harness.credit(1, u32::MAX);
    harness.credit(1, 7);
    assert_eq!(harness.cores_credit(1), Some((4, u32::MAX)), "saturates");
    assert_eq!(
        NodeError::UnknownNode { node: NodeId(9) }.to_string(),
        "unknown node 9"
    );
}

#[test]
fn submissions_are_validated_and_ids_are_contiguous() {
    let mut harness = Harness::new();
    assert_eq!(
        harness.core.handle_submit(JobSpec::array(0), Time::ZERO),
        Err(SubmitError::EmptyJob)
    );
    assert_eq!(
        harness
            .core
            .handle_submit(JobSpec::single().with_cores(0), Time::ZERO),
        Err(SubmitError::ZeroCores)
    );
    let first = harness.submit(JobSpec::array(10));
    let second = harness.submit(JobSpec::single());
    assert_eq!((first.job.0, first.first_task.0, first.count), (1, 1, 10));
    assert_eq!((second.job.0, second.first_task.0), (2, 11));
    assert_eq!(harness.core.counts().submitted, 11);
}

#[test]
fn a_closed_node_takes_no_more_work_and_its_running_attempts_finish() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(6));
    harness.join(1, 2);
    harness.join(2, 2);
    // Node 1 holds two attempts and credit for two more (a prefetch margin).
    harness.credit(1, 4);
    let on_one: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .collect();
    assert_eq!(on_one.len(), 4);
    // Closing drops its unused credit; the credit it sends later is ignored.
    harness
        .core
        .handle_node_closed(NodeId(1), harness.now)
        .unwrap();
    harness.drain();
    assert_eq!(harness.cores_credit(1), Some((2, 0)));
    for attempt in on_one.iter().take(2) {
        harness.started(attempt.attempt);
        assert!(matches!(
            harness.result(attempt.attempt, AttemptOutcome::Succeeded),
            Disposition::Accepted { .. }
        ));
    }
    harness.credit(1, 2);
    assert!(
        harness.take_dispatches().is_empty(),
        "a closed node gets nothing"
    );
    assert_eq!(harness.cores_credit(1), Some((2, 0)));
    // The rest goes to an open node; closing twice is harmless, an unknown node an error.
    harness.credit(2, 2);
    let assigned = harness.take_assigned();
    assert_eq!(assigned.len(), 2);
    assert!(assigned.iter().all(|(node, _, _)| *node == 2));
    harness
        .core
        .handle_node_closed(NodeId(1), harness.now)
        .unwrap();
    assert_eq!(
        harness.core.handle_node_closed(NodeId(9), harness.now),
        Err(NodeError::UnknownNode { node: NodeId(9) })
    );
    // It may still leave in good order: a loss replays only what it had not finished.
    let loss = harness.lose(1);
    assert_eq!((loss.attempts, loss.replayed), (2, 2));
}
