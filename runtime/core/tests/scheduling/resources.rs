//! Resource vectors: tasks that need GPUs, memory or custom kinds go only where they
//! fit, credit is never exceeded in any kind, and a gang of no nodes is refused.

use saker_core::{
    AttemptOutcome, JobSpec, NodeError, NodeId, NodeLoss, Placement, ResourceKind, Resources,
    RestoreError, SubmitError, Time,
};

use crate::harness::Harness;

fn gpus(cores: u32, gpus: u32) -> Resources {
    Resources::cores(cores).with(ResourceKind::GPUS, gpus)
}

fn memory(cores: u32, mib: u32) -> Resources {
    Resources::cores(cores).with(ResourceKind::MEMORY_MIB, mib)
}

#[test]
fn gpu_tasks_go_only_to_nodes_with_gpus_and_wait_for_gpu_credit() {
    let mut harness = Harness::new();
    let gpu_job = harness.submit(JobSpec::array(3).with_resources(gpus(1, 1)));
    let cpu_job = harness.submit(JobSpec::array(2));
    harness.join_with_credit(1, 8);
    harness.join_resources_with_credit(2, gpus(8, 2));
    assert_eq!(
        harness.take_assigned(),
        vec![
            (1, 0, cpu_job.job.0),
            (1, 1, cpu_job.job.0),
            (2, 0, gpu_job.job.0),
            (2, 1, gpu_job.job.0),
        ],
        "node 1 has no GPU; node 2 has GPU credit for two"
    );
    assert_eq!(
        harness.core.node_credit(NodeId(2)),
        Some((gpus(8, 2), Resources::cores(6)))
    );
    // Cores come back to the node without GPUs: still nothing for it.
    harness.credit(1, 2);
    assert!(harness.take_dispatches().is_empty());
    // Cores alone do not let node 2 take the third GPU task either.
    harness.credit(2, 2);
    assert!(harness.take_dispatches().is_empty());
    harness.credit_resources(2, Resources::ZERO.with(ResourceKind::GPUS, 1));
    assert_eq!(harness.take_assigned(), vec![(2, 2, gpu_job.job.0)]);
    assert_eq!(
        harness.core.counts().credit,
        Resources::cores(8 + 7),
        "node 1: 6 left + 2 back; node 2: 6 + 2 - 1"
    );
}

#[test]
fn memory_bounds_a_bundle_like_cores_do() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(4).with_resources(memory(1, 4096)));
    harness.join_resources_with_credit(1, memory(16, 10_000));
    let sent = harness.take_assigned();
    assert_eq!(sent, vec![(1, 0, job.job.0), (1, 1, job.job.0)]);
    assert_eq!(
        harness.core.node_credit(NodeId(1)),
        Some((memory(16, 10_000), memory(14, 10_000 - 2 * 4096)))
    );
    let counts = harness.core.counts();
    assert_eq!((counts.assigned, counts.queued), (2, 2));
}

#[test]
fn custom_kinds_are_matched_by_number() {
    let licence = ResourceKind::custom(0).expect("custom kind 0 exists");
    let scratch = ResourceKind::custom(1).expect("custom kind 1 exists");
    let mut harness = Harness::new();
    let job =
        harness.submit(JobSpec::single().with_resources(Resources::cores(1).with(licence, 1)));
    // A node with another custom kind, however much, does not fit.
    harness.join_resources_with_credit(1, Resources::cores(4).with(scratch, 100));
    assert!(harness.take_dispatches().is_empty());
    harness.join_resources_with_credit(2, Resources::cores(4).with(licence, 1));
    assert_eq!(harness.take_assigned(), vec![(2, 0, job.job.0)]);
}

/// The node with the most credit (most cores) lacks the GPU the head task needs;
/// another parked node of the same capacity has it and must be found, not left
/// waiting for credit that will not come.
#[test]
fn a_parked_node_with_gpu_credit_is_found_behind_one_with_more_cores() {
    let mut harness = Harness::new();
    let wide = harness.submit(JobSpec::single().with_resources(gpus(4, 2)));
    harness.join_resources(1, gpus(8, 2));
    harness.join_resources(2, gpus(8, 2));
    harness.credit(1, 8);
    harness.credit_resources(2, gpus(2, 2));
    assert!(
        harness.take_dispatches().is_empty(),
        "node 1 lacks GPU credit, node 2 core credit: both parked"
    );
    let narrow = harness.submit(
        JobSpec::single()
            .with_resources(gpus(1, 1))
            .with_priority(9),
    );
    assert_eq!(harness.take_assigned(), vec![(2, 0, narrow.job.0)]);
    assert_eq!(
        harness.core.node_credit(NodeId(2)),
        Some((gpus(8, 2), gpus(1, 1)))
    );
    // The wide task gets node 1 once it has GPU credit.
    harness.credit_resources(1, Resources::ZERO.with(ResourceKind::GPUS, 2));
    assert_eq!(harness.take_assigned(), vec![(1, 0, wide.job.0)]);
}

/// As above, for a speculative copy: the node with the most credit cannot take a copy
/// of a GPU task, the one with GPU credit can.
#[test]
fn a_copy_goes_to_a_node_whose_credit_covers_every_kind() {
    let mut harness = Harness::new();
    harness.join_resources(1, gpus(4, 1));
    // Warm up the class-0 estimate: five 1 ms runs.
    harness.submit(JobSpec::array(5));
    for _ in 0..5 {
        harness.credit(1, 1);
        let assignment = harness.take_one();
        harness.started(assignment.attempt);
        harness.advance_to(Time(harness.now.as_micros() + 1_000));
        harness.result(assignment.attempt, AttemptOutcome::Succeeded);
    }
    let job = harness.submit(
        JobSpec::single()
            .with_resources(gpus(1, 1))
            .with_speculation(true),
    );
    harness.credit_resources(1, gpus(1, 1));
    let original = harness.take_one();
    harness.started(original.attempt);
    harness.join_resources(2, gpus(8, 1));
    harness.join_resources(3, gpus(8, 1));
    harness.credit(2, 8);
    harness.credit_resources(3, gpus(1, 1));
    harness.advance_to(Time(harness.now.as_micros() + 1_501));
    harness.timeout();
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "{dispatches:?}");
    assert_eq!(dispatches[0].node, NodeId(3));
    assert_eq!(dispatches[0].assignments[0].task, job.first_task);
    assert_eq!(harness.core.counts().speculated, 1);
    assert_eq!(
        harness.core.node_credit(NodeId(3)),
        Some((gpus(8, 1), Resources::ZERO))
    );
}

#[test]
fn credit_without_cores_takes_nothing_and_is_kept() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single().with_resources(gpus(1, 1)));
    harness.join_resources(1, gpus(4, 1));
    harness.credit_resources(1, Resources::ZERO.with(ResourceKind::GPUS, 1));
    assert!(
        harness.take_dispatches().is_empty(),
        "every task needs a core"
    );
    harness.credit(1, 1);
    assert_eq!(harness.take_assigned().len(), 1);
    assert_eq!(harness.core.counts().credit, Resources::ZERO);
}

#[test]
fn a_lost_node_drops_credit_of_every_kind() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single().with_resources(memory(2, 1024)));
    harness.join_resources_with_credit(1, memory(8, 4096).with(ResourceKind::GPUS, 1));
    harness.take_dispatches();
    assert_eq!(
        harness.lose(1),
        NodeLoss {
            attempts: 1,
            replayed: 1,
            credit_dropped: memory(6, 3072).with(ResourceKind::GPUS, 1),
            ..NodeLoss::default()
        }
    );
    assert_eq!(harness.core.counts().credit, Resources::ZERO);
}

#[test]
fn a_task_needs_a_core_and_a_node_offers_one() {
    let mut harness = Harness::new();
    let now = Time::ZERO;
    let gpu_only = JobSpec::single().with_resources(Resources::ZERO.with(ResourceKind::GPUS, 1));
    assert_eq!(
        harness.core.handle_submit(gpu_only, now),
        Err(SubmitError::ZeroCores)
    );
    assert_eq!(
        SubmitError::ZeroCores.to_string(),
        "a task must need at least one core"
    );
    assert_eq!(
        harness.core.handle_node_joined(NodeId(1), gpus(0, 4), now),
        Err(NodeError::ZeroCapacity { node: NodeId(1) })
    );
    assert_eq!(harness.core.counts().submitted, 0);
    assert_eq!(harness.core.counts().nodes, 0);
}

#[test]
fn gangs_of_no_nodes_are_refused() {
    let mut harness = Harness::new();
    let gang = JobSpec::single().with_placement(Placement::Gang { nodes: 0 });
    let refused = Err(SubmitError::EmptyGang);
    assert_eq!(harness.core.handle_submit(gang, Time::ZERO), refused);
    assert_eq!(
        SubmitError::EmptyGang.to_string(),
        "a gang job must ask for at least one node"
    );
    assert_eq!(
        harness.core.handle_restore_job(gang, &[], &[], Time::ZERO),
        Err(RestoreError::Submit(SubmitError::EmptyGang))
    );
    assert_eq!(harness.core.counts().submitted, 0, "nothing changed");
    assert_eq!(JobSpec::default().placement, Placement::Single);
    // The ids a refused job did not take go to the next one.
    let job = harness.submit(JobSpec::single());
    assert_eq!((job.job.0, job.first_task.0), (1, 1));
}

#[test]
fn a_batch_is_checked_whole_before_anything_is_submitted() {
    let mut harness = Harness::new();
    let gang = JobSpec::single().with_placement(Placement::Gang { nodes: 0 });
    let batch = [JobSpec::array(3), JobSpec::single(), gang];
    assert_eq!(
        harness.core.check_submissions(&batch),
        Err((2, SubmitError::EmptyGang))
    );
    assert_eq!(
        harness
            .core
            .check_submissions(&[JobSpec::single(), JobSpec::array(0)]),
        Err((1, SubmitError::EmptyJob))
    );
    assert_eq!(
        harness.core.counts().submitted,
        0,
        "checking changes nothing"
    );
    assert_eq!(harness.core.check_submissions(&batch[..2]), Ok(()));
    assert_eq!(harness.core.check_submissions(&[]), Ok(()));
    let job = harness.submit(JobSpec::single());
    assert_eq!((job.job.0, job.first_task.0), (1, 1));
}
