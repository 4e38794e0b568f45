//! Spread before prefetch: a node takes work beyond its free cores (the prefetch its
//! agent grants credit for) only when the free cores of every node together could not
//! start it now.

use std::collections::BTreeMap;

use saker_core::{AttemptOutcome, JobSpec};

use crate::harness::Harness;

/// Assigned tasks per node since the last take.
fn per_node(harness: &mut Harness) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for (node, _, _) in harness.take_assigned() {
        *counts.entry(node).or_default() += 1;
    }
    counts
}

/// `nodes` nodes of 8 cores, each granting twice its cores (an agent's first credit).
fn pilot(harness: &mut Harness, nodes: std::ops::RangeInclusive<u32>) {
    for node in nodes {
        harness.join(node, 8);
        harness.credit(node, 16);
    }
}

#[test]
fn a_burst_no_larger_than_the_free_cores_starts_on_every_node() {
    let mut harness = Harness::new();
    pilot(&mut harness, 1..=8);
    harness.submit(JobSpec::array(64));
    let spread = per_node(&mut harness);
    assert_eq!(spread, (1..=8).map(|node| (node, 8)).collect(), "8 on each");

    // Once every core is busy, prefetch takes more, still spread.
    harness.submit(JobSpec::array(32));
    let prefetched = per_node(&mut harness);
    assert_eq!(prefetched.values().sum::<usize>(), 32);
    assert!(
        prefetched.values().all(|&tasks| tasks <= 8),
        "{prefetched:?}"
    );
}

#[test]
fn a_small_burst_fills_free_cores_and_prefetches_nothing() {
    let mut harness = Harness::new();
    pilot(&mut harness, 1..=8);
    harness.submit(JobSpec::array(12));
    let placed = per_node(&mut harness);
    assert_eq!(placed.values().sum::<usize>(), 12);
    assert!(placed.values().all(|&tasks| tasks <= 8), "{placed:?}");
}

#[test]
fn busy_nodes_prefetch_only_what_free_nodes_cannot_start() {
    let mut harness = Harness::new();
    pilot(&mut harness, 1..=4);
    harness.submit(JobSpec::array(32));
    assert_eq!(per_node(&mut harness).values().sum::<usize>(), 32);
    // Four more nodes, idle, and twice what they can start.
    pilot(&mut harness, 5..=8);
    harness.submit(JobSpec::array(64));
    let placed = per_node(&mut harness);
    for node in 5..=8 {
        assert_eq!(
            placed.get(&node),
            Some(&8),
            "node {node} is full: {placed:?}"
        );
    }
    assert_eq!(placed.values().sum::<usize>(), 64, "the rest as prefetch");
}

/// Node 1 (one core, `credit` granted) runs a task; node 2 (one core, credit 1) takes
/// the next; a third waits, node 1 set aside as full. Returns node 1's attempt.
fn node_one_set_aside(harness: &mut Harness, credit: u32) -> saker_core::AttemptId {
    harness.join(1, 1);
    harness.credit(1, credit);
    harness.submit(JobSpec::array(1));
    let running = harness.take_one();
    // A free node: the next task is for it, not for node 1's prefetch.
    harness.join(2, 1);
    harness.credit(2, 1);
    harness.submit(JobSpec::array(1));
    assert_eq!(per_node(harness), BTreeMap::from([(2, 1)]));
    // Node 1 was set aside; a task for nobody's free core waits.
    harness.submit(JobSpec::array(1));
    assert!(harness.take_assigned().is_empty());
    running.attempt
}

#[test]
fn a_full_node_set_aside_takes_work_again_when_its_own_attempt_ends() {
    let mut harness = Harness::new();
    let running = node_one_set_aside(&mut harness, 2);
    harness.started(running);
    harness.result(running, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    assert_eq!(per_node(&mut harness), BTreeMap::from([(1, 1)]));
}

/// An agent grants credit ahead (a prefetch margin), so the result of a node's last
/// attempt may come with no new credit: a node set aside while full takes work again
/// when its attempt ends, on the credit it still has, and so does work pinned to it.
/// (Once such a node stayed aside for good: a call pinned to it waited forever.)
#[test]
fn a_full_node_set_aside_with_credit_left_takes_work_when_its_attempt_ends() {
    let mut harness = Harness::new();
    let running = node_one_set_aside(&mut harness, 3);
    harness.started(running);
    harness.result(running, AttemptOutcome::Succeeded);
    assert_eq!(
        per_node(&mut harness),
        BTreeMap::from([(1, 1)]),
        "no credit came"
    );
    let pinned = JobSpec::array(1).with_placement(saker_core::Placement::Node {
        node: saker_core::NodeId(1),
    });
    harness.submit(pinned);
    assert_eq!(
        per_node(&mut harness),
        BTreeMap::from([(1, 1)]),
        "pinned work too"
    );
}
