use std::collections::VecDeque;

use super::*;

const SECOND: u64 = 1_000_000;

fn config(policy: Policy) -> ProvisionConfig {
    ProvisionConfig {
        policy,
        nodes_per_allocation: 1,
        cores_per_node: 4,
        max_nodes: 64,
        max_pending: 64,
        grow_after_us: 60 * SECOND,
        idle_release_us: 120 * SECOND,
        replace_ahead_us: 300 * SECOND,
    }
}

fn at(seconds: u64) -> Time {
    Time::from_micros(seconds * SECOND)
}

fn pending(id: u64, submitted: u64) -> AllocationView {
    AllocationView {
        id,
        nodes: 1,
        cores_per_node: None,
        submitted: at(submitted),
        state: AllocationState::Pending,
    }
}

fn running(id: u64, end: Option<u64>, idle_since: Option<u64>) -> AllocationView {
    AllocationView {
        id,
        nodes: 1,
        cores_per_node: Some(4),
        submitted: at(0),
        state: AllocationState::Running {
            end: end.map(at),
            idle_since: idle_since.map(at),
        },
    }
}

fn submits(decisions: &[Decision]) -> usize {
    decisions
        .iter()
        .filter(|d| matches!(d, Decision::Submit { .. }))
        .count()
}

/// A backlog far larger than 64 nodes drain in a minute.
const HUGE: Backlog = Backlog {
    queued: 1_000_000,
    core_seconds: 1e9,
    widest_gang: 0,
};

/// Each policy's submissions in four rounds while nothing the batch system grants
/// starts (every allocation stays pending).
#[test]
fn each_policy_submits_what_it_promises_round_by_round() {
    for (policy, promised) in [
        (Policy::One, [1, 0, 0, 0]),
        (Policy::Additive, [1, 1, 1, 1]),
        (Policy::Exponential, [1, 2, 4, 8]),
        (Policy::All, [64, 0, 0, 0]),
    ] {
        let mut provisioner = Provisioner::new(config(policy));
        let mut allocations = Vec::new();
        let mut seen = Vec::new();
        for round in 0..4u64 {
            let decisions = provisioner.decide(at(round * 5), &HUGE, &allocations);
            seen.push(submits(&decisions));
            for _ in 0..submits(&decisions) {
                allocations.push(pending(allocations.len() as u64, round * 5));
            }
        }
        assert_eq!(seen, promised, "{policy:?}");
    }
}

#[test]
fn exponential_starts_again_at_one_after_a_round_that_wants_nothing() {
    let mut provisioner = Provisioner::new(config(Policy::Exponential));
    assert_eq!(submits(&provisioner.decide(at(0), &HUGE, &[])), 1);
    assert_eq!(submits(&provisioner.decide(at(5), &HUGE, &[])), 2);
    assert!(
        provisioner
            .decide(at(10), &Backlog::default(), &[])
            .is_empty()
    );
    assert_eq!(submits(&provisioner.decide(at(15), &HUGE, &[])), 1);
}

#[test]
fn limits_hold_for_every_policy() {
    for policy in [Policy::Additive, Policy::Exponential, Policy::All] {
        let mut limited = config(policy);
        limited.max_nodes = 10;
        limited.max_pending = 3;
        limited.nodes_per_allocation = 4;
        let mut provisioner = Provisioner::new(limited);
        // 4 nodes running, 1 allocation of 4 pending: room for one more pending
        // allocation, of 2 nodes (10 - 8).
        let mut allocations = vec![running(0, None, None), pending(1, 0)];
        allocations[0].nodes = 4;
        allocations[1].nodes = 4;
        let decisions = provisioner.decide(at(1), &HUGE, &allocations);
        assert_eq!(
            decisions,
            vec![Decision::Submit {
                nodes: 2,
                reason: decisions[0].reason().to_owned()
            }],
            "{policy:?}"
        );
        let mut pending_cap = config(policy);
        pending_cap.max_pending = 2;
        let mut provisioner = Provisioner::new(pending_cap);
        let decisions = provisioner.decide(at(1), &HUGE, &[pending(0, 0)]);
        assert!(submits(&decisions) <= 1, "{policy:?}: {decisions:?}");
    }
}

#[test]
fn the_wanted_nodes_drain_the_backlog_within_grow_after() {
    let mut provisioner = Provisioner::new(config(Policy::All));
    // 960 core-seconds on 4-core nodes within 60 s: 4 nodes.
    let backlog = Backlog {
        queued: 960,
        core_seconds: 960.0,
        widest_gang: 0,
    };
    assert_eq!(submits(&provisioner.decide(at(0), &backlog, &[])), 4);
    // With one node running: three more.
    let mut provisioner = Provisioner::new(config(Policy::All));
    let decisions = provisioner.decide(at(0), &backlog, &[running(0, None, None)]);
    assert_eq!(submits(&decisions), 3);
    assert!(
        decisions[0].reason().contains("would take 4m00s on 1 node"),
        "{decisions:?}"
    );
    // Work that one node drains in time asks for nothing.
    let small = Backlog {
        queued: 10,
        core_seconds: 200.0,
        widest_gang: 0,
    };
    assert!(
        provisioner
            .decide(at(1), &small, &[running(0, None, None)])
            .is_empty()
    );
}

#[test]
fn an_hpc_job_wider_than_the_nodes_asks_for_enough_of_them() {
    let mut provisioner = Provisioner::new(config(Policy::All));
    let backlog = Backlog {
        queued: 1,
        core_seconds: 1.0,
        widest_gang: 3,
    };
    let decisions = provisioner.decide(at(0), &backlog, &[running(0, None, None)]);
    assert_eq!(submits(&decisions), 2);
    assert!(decisions[0].reason().contains("an HPC job needs 3 nodes"));
}

#[test]
fn pending_allocations_the_queue_no_longer_needs_are_cancelled_newest_first() {
    let mut provisioner = Provisioner::new(config(Policy::Additive));
    let small = Backlog {
        queued: 5,
        core_seconds: 5.0,
        widest_gang: 0,
    };
    let allocations = [running(0, None, None), pending(1, 10), pending(2, 20)];
    let decisions = provisioner.decide(at(30), &small, &allocations);
    let cancelled: Vec<u64> = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Cancel { allocation, .. } => Some(*allocation),
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, [2, 1]);
    // Without a running node, the oldest pending one is kept for the work.
    let decisions = provisioner.decide(at(30), &small, &allocations[1..]);
    assert_eq!(
        decisions,
        vec![Decision::Cancel {
            allocation: 2,
            reason: decisions[0].reason().to_owned()
        }]
    );
}

#[test]
fn idle_allocations_are_released_only_after_the_idle_time_with_nothing_queued() {
    let mut provisioner = Provisioner::new(config(Policy::Additive));
    let idle = [running(0, None, Some(100))];
    assert!(
        provisioner
            .decide(at(219), &Backlog::default(), &idle)
            .is_empty()
    );
    let decisions = provisioner.decide(at(220), &Backlog::default(), &idle);
    assert!(
        matches!(&decisions[..], [Decision::Release { allocation: 0, reason }] if reason.contains("idle for 2m00s")),
        "{decisions:?}"
    );
    let queued = Backlog {
        queued: 1,
        core_seconds: 1.0,
        widest_gang: 0,
    };
    assert!(provisioner.decide(at(500), &queued, &idle).is_empty());
}

#[test]
fn an_allocation_near_its_end_is_replaced_while_work_remains() {
    let mut provisioner = Provisioner::new(config(Policy::Additive));
    let backlog = Backlog {
        queued: 10,
        core_seconds: 10.0,
        widest_gang: 0,
    };
    // Ends in 10 minutes: lasting, nothing to do.
    assert!(
        provisioner
            .decide(at(0), &backlog, &[running(0, Some(600), None)])
            .is_empty()
    );
    // Ends in 4 minutes (< 5 of replace_ahead): a replacement.
    let decisions = provisioner.decide(at(360), &backlog, &[running(0, Some(600), None)]);
    assert_eq!(submits(&decisions), 1);
    assert!(
        decisions[0].reason().contains("replacing them"),
        "{decisions:?}"
    );
    // Nothing queued: no replacement.
    assert!(
        provisioner
            .decide(at(360), &Backlog::default(), &[running(0, Some(600), None)])
            .is_empty()
    );
}

#[test]
fn paused_it_submits_nothing_but_still_releases() {
    let mut provisioner = Provisioner::new(config(Policy::All));
    provisioner.pause(true);
    assert!(provisioner.decide(at(0), &HUGE, &[]).is_empty());
    let idle = [running(0, None, Some(0))];
    assert_eq!(
        provisioner
            .decide(at(1000), &Backlog::default(), &idle)
            .len(),
        1
    );
    provisioner.pause(false);
    assert_eq!(submits(&provisioner.decide(at(0), &HUGE, &[])), 64);
}

mod sim;
