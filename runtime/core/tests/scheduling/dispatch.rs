//! Queue order, bundling, credit and node selection.

use saker_core::{AttemptOutcome, CoreConfig, JobId, JobSpec, Resources, TaskStatus, Time};

use crate::harness::{Harness, test_config};

#[test]
fn higher_priority_runs_first() {
    let mut harness = Harness::new();
    let low = harness.submit(JobSpec::array(2).with_priority(-1));
    let high = harness.submit(JobSpec::array(2).with_priority(7));
    let middle = harness.submit(JobSpec::single());
    harness.join_with_credit(1, 10);
    let jobs: Vec<u32> = harness.take_assigned().iter().map(|a| a.2).collect();
    assert_eq!(
        jobs,
        vec![high.job.0, high.job.0, middle.job.0, low.job.0, low.job.0]
    );
}

#[test]
fn equal_priority_runs_in_submission_order() {
    let mut harness = Harness::new();
    let first = harness.submit(JobSpec::array(3));
    let second = harness.submit(JobSpec::single());
    let third = harness.submit(JobSpec::array(2));
    harness.join_with_credit(1, 100);
    let order: Vec<(u32, u32)> = harness.take_assigned().iter().map(|a| (a.2, a.1)).collect();
    assert_eq!(
        order,
        vec![
            (first.job.0, 0),
            (first.job.0, 1),
            (first.job.0, 2),
            (second.job.0, 0),
            (third.job.0, 0),
            (third.job.0, 1),
        ]
    );
}

#[test]
fn a_dispatch_carries_at_most_max_bundle_assignments() {
    let mut harness = Harness::with_config(CoreConfig {
        max_bundle: 4,
        ..test_config()
    });
    harness.submit(JobSpec::array(10));
    harness.join_with_credit(1, 64);
    let sizes: Vec<usize> = harness
        .take_dispatches()
        .iter()
        .map(|dispatch| dispatch.assignments.len())
        .collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    assert_eq!(harness.cores_credit(1), Some((64, 54)));
}

#[test]
fn credit_is_never_exceeded_and_grants_are_incremental() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(10));
    harness.join(1, 64);
    assert!(harness.take_dispatches().is_empty(), "no credit, no work");
    harness.credit(1, 3);
    assert_eq!(harness.take_assigned().len(), 3);
    assert_eq!(harness.cores_credit(1), Some((64, 0)));
    harness.credit(1, 2);
    assert_eq!(harness.take_assigned().len(), 2);
    let counts = harness.core.counts();
    assert_eq!(
        (counts.assigned, counts.queued, counts.credit),
        (5, 5, Resources::ZERO)
    );
}

#[test]
fn nodes_are_served_round_robin_in_credit_order() {
    let mut harness = Harness::with_config(CoreConfig {
        max_bundle: 1,
        ..test_config()
    });
    for node in [3, 1, 2] {
        harness.join_with_credit(node, 2);
    }
    harness.submit(JobSpec::array(7));
    let nodes: Vec<u32> = harness.take_assigned().iter().map(|a| a.0).collect();
    assert_eq!(nodes, vec![3, 1, 2, 3, 1, 2]);
    assert_eq!(harness.core.counts().queued, 1);
}

#[test]
fn multi_core_tasks_consume_their_cores_of_credit() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(5).with_cores(3));
    harness.join_with_credit(1, 8);
    assert_eq!(
        harness.take_assigned().len(),
        2,
        "8 cores of credit fit two 3-core tasks"
    );
    assert_eq!(harness.cores_credit(1), Some((8, 2)));
    harness.credit(1, 1);
    assert_eq!(harness.take_assigned().len(), 1);
    assert_eq!(harness.cores_credit(1), Some((8, 0)));
    assert_eq!(
        harness.core.job_counts(job.job).map(|c| c.assigned),
        Some(3)
    );
}

#[test]
fn a_wide_head_task_waits_for_credit_without_backfill() {
    let mut harness = Harness::new();
    let wide = harness.submit(JobSpec::single().with_cores(4));
    harness.submit(JobSpec::array(4));
    harness.join(1, 8);
    harness.credit(1, 2);
    assert!(
        harness.take_dispatches().is_empty(),
        "narrow work must not jump ahead of the wide head task"
    );
    harness.credit(1, 2);
    let assigned = harness.take_assigned();
    assert_eq!(assigned, vec![(1, 0, wide.job.0)]);
}

#[test]
fn the_head_task_goes_to_another_node_with_enough_credit() {
    let mut harness = Harness::new();
    let wide = harness.submit(JobSpec::single().with_cores(4));
    harness.join_with_credit(1, 2);
    harness.join(2, 8);
    harness.credit(2, 4);
    assert_eq!(harness.take_assigned(), vec![(2, 0, wide.job.0)]);
}

#[test]
fn a_task_wider_than_every_node_stays_queued_and_does_not_block() {
    let mut harness = Harness::new();
    let too_wide = harness.submit(JobSpec::single().with_cores(32));
    let narrow = harness.submit(JobSpec::array(2).with_cores(2));
    harness.join_with_credit(1, 16);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, narrow.job.0), (1, 1, narrow.job.0)]
    );
    assert_eq!(
        harness.core.task_status(too_wide.first_task),
        Some(TaskStatus::Queued)
    );
    harness.join_with_credit(2, 32);
    assert_eq!(harness.take_assigned(), vec![(2, 0, too_wide.job.0)]);
}

#[test]
fn a_parked_node_is_offered_work_again_when_the_queue_changes() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single().with_cores(4));
    harness.join_with_credit(1, 4);
    assert_eq!(harness.take_assigned().len(), 1);
    harness.join(2, 8);
    harness.credit(2, 2);
    assert!(harness.take_dispatches().is_empty(), "queue empty");
    harness.submit(JobSpec::single().with_cores(4));
    assert!(harness.take_dispatches().is_empty(), "node 2 lacks credit");
    let narrow_first = harness.submit(JobSpec::single().with_cores(1).with_priority(9));
    assert_eq!(
        harness.take_assigned(),
        vec![(2, 0, narrow_first.job.0)],
        "a narrower task ahead of the wide one unparks node 2"
    );
}

#[test]
fn empty_queue_keeps_credit_for_later_submissions() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    harness.join_with_credit(2, 4);
    assert_eq!(harness.core.counts().credit, Resources::cores(8));
    harness.submit(JobSpec::array(6));
    let nodes: Vec<u32> = harness.take_assigned().iter().map(|a| a.0).collect();
    assert_eq!(nodes, vec![1, 1, 1, 1, 2, 2]);
}

/// A scripted scenario over many inputs, run twice: identical output streams.
#[test]
fn same_inputs_give_same_outputs() {
    fn run() -> Vec<String> {
        let mut harness = Harness::with_config(CoreConfig {
            max_bundle: 3,
            ..test_config()
        });
        let mut log = Vec::new();
        for node in 1..=5 {
            harness.join_with_credit(node, 4 + node);
        }
        for job in 0..6 {
            harness.submit(
                JobSpec::array(7 + job)
                    .with_priority((job % 3) as i32)
                    .with_cores(1 + job % 2)
                    .with_max_retries(2),
            );
        }
        harness
            .core
            .handle_cancel_job(JobId(4), harness.now)
            .expect("job 4 exists");
        let mut step = 0u64;
        loop {
            let dispatches = harness.take_dispatches();
            for event in harness.take_events() {
                log.push(format!("{event:?}"));
            }
            if dispatches.is_empty() && harness.core.poll_timeout().is_none() {
                break;
            }
            for dispatch in dispatches {
                log.push(format!("{dispatch:?}"));
                for assignment in dispatch.assignments {
                    step += 1;
                    harness.advance_to(Time(step * 10));
                    let outcome = match step % 7 {
                        0 => AttemptOutcome::Failed,
                        3 => AttemptOutcome::Lost,
                        _ => AttemptOutcome::Succeeded,
                    };
                    let disposition = harness.result(assignment.attempt, outcome);
                    log.push(format!("{disposition:?}"));
                    harness.credit(dispatch.node.0, 1 + assignment.index % 2);
                }
            }
            if let Some(deadline) = harness.core.poll_timeout() {
                harness.advance_to(deadline.max(harness.now));
                harness.timeout();
            }
        }
        log.push(format!("{:?}", harness.core.counts()));
        assert!(harness.core.is_quiescent(), "{:?}", harness.core.counts());
        log
    }
    let first = run();
    assert!(first.len() > 50, "scenario too small to mean anything");
    assert_eq!(first, run());
    assert!(first.iter().any(|line| line.contains("WillRetry")));
    assert!(first.iter().any(|line| line.contains("WillReplay")));
    assert!(
        first
            .iter()
            .any(|line| line.contains("JobFinished") && line.contains("JobId(4)"))
    );
}

/// A priority update moves a job's queued tasks to the new level at once; a job that
/// has ended cannot be updated.
#[test]
fn an_updated_priority_reorders_queued_work() {
    let mut harness = Harness::new();
    let first = harness.submit(JobSpec::array(3));
    let second = harness.submit(JobSpec::array(3));
    harness
        .core
        .handle_update_priority(second.job, 5, harness.now)
        .unwrap();
    harness.drain();
    harness.join_with_credit(1, 6);
    let order: Vec<u32> = harness
        .take_assigned()
        .iter()
        .map(|(_, _, job)| *job)
        .collect();
    assert_eq!(
        order,
        vec![
            second.job.0,
            second.job.0,
            second.job.0,
            first.job.0,
            first.job.0,
            first.job.0
        ]
    );
    assert_eq!(
        harness
            .core
            .handle_update_priority(saker_core::JobId(9), 1, harness.now),
        Err(saker_core::UpdateError::UnknownJob {
            job: saker_core::JobId(9)
        })
    );
    harness.cancel(first.job);
    assert_eq!(
        harness
            .core
            .handle_update_priority(first.job, 1, harness.now),
        Err(saker_core::UpdateError::Ended { job: first.job })
    );
}
