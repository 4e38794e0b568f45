//! Work pinned to one node ([`Placement::Node`]): it runs there only, wakes its node
//! when the node had parked for lack of work, waits while the node is away, and never
//! holds other nodes back.

use saker_core::{AttemptOutcome, JobSpec, NodeId, Placement, Time};

use crate::harness::Harness;

fn pinned(count: u32, node: u32) -> JobSpec {
    JobSpec::array(count).with_placement(Placement::Node { node: NodeId(node) })
}

#[test]
fn pinned_work_runs_only_on_its_node() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    harness.join_with_credit(2, 4);
    harness.submit(pinned(6, 2));
    let assigned = harness.take_assigned();
    assert_eq!(
        assigned.len(),
        4,
        "as many as node 2's credit: {assigned:?}"
    );
    assert!(
        assigned.iter().all(|(node, _, _)| *node == 2),
        "{assigned:?}"
    );
    assert_eq!(harness.core.counts().queued, 2);
    // Node 1 has credit and nothing it may take; node 2's next credit takes the rest.
    harness.credit(1, 4);
    assert!(harness.take_assigned().is_empty());
    harness.credit(2, 2);
    let rest = harness.take_assigned();
    assert_eq!(rest.len(), 2);
    assert!(rest.iter().all(|(node, _, _)| *node == 2));
}

/// A node that parked (credit, nothing to take) is woken by work pinned to it, though
/// no credit arrives: searches by capacity do not see pinned work.
#[test]
fn work_pinned_to_a_parked_node_wakes_it() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 2);
    harness.join_with_credit(2, 2);
    assert!(harness.take_assigned().is_empty(), "both parked");
    harness.submit(pinned(1, 2));
    assert_eq!(harness.take_assigned(), vec![(2, 0, 1)]);
}

/// Pinned work ahead in the queue (higher priority) does not block other nodes from
/// work they may run.
#[test]
fn pinned_work_does_not_hold_other_nodes_back() {
    let mut harness = Harness::new();
    harness.submit(pinned(10, 2).with_priority(5));
    let free = harness.submit(JobSpec::array(3));
    harness.join_with_credit(1, 3);
    let assigned = harness.take_assigned();
    assert_eq!(
        assigned,
        vec![(1, 0, free.job.0), (1, 1, free.job.0), (1, 2, free.job.0)]
    );
}

/// A task pinned to a lost node is replayed onto that node when it registers again,
/// not elsewhere; it never gets a speculative copy elsewhere either.
#[test]
fn a_pinned_task_waits_for_its_node_to_come_back() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 2);
    harness.join_with_credit(2, 2);
    let job = harness.submit(pinned(1, 2).with_speculation(true));
    let first = harness.take_one();
    harness.started(first.attempt);
    harness.lose(2);
    harness.credit(1, 2);
    assert!(harness.take_assigned().is_empty(), "not replayed on node 1");
    assert_eq!(harness.core.counts().queued, 1);
    harness.join_with_credit(2, 2);
    let replay = harness.take_one();
    assert_eq!(replay.task, job.task(0));
    harness.started(replay.attempt);
    harness.result(replay.attempt, AttemptOutcome::Succeeded);
    assert_eq!(harness.core.counts().succeeded, 1);
}

/// A retried pinned task goes back to its node, waking it if it had parked.
#[test]
fn a_retried_pinned_task_returns_to_its_node() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    harness.submit(pinned(1, 1).with_max_retries(1));
    let first = harness.take_one();
    harness.started(first.attempt);
    harness.result(first.attempt, AttemptOutcome::Failed);
    harness.credit(1, 1);
    harness.advance_to(Time::from_micros(1_000));
    harness.timeout();
    let assigned = harness.take_assigned();
    assert_eq!(assigned.len(), 1, "{assigned:?}");
    assert_eq!(assigned[0].0, 1);
}
