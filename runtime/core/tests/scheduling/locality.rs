//! Data-aware placement (`Core::handle_prefer`): queued work waits a bounded time for
//! the nodes it prefers, which take it first; other nodes pass over it meanwhile and
//! take it once the wait is over.

use saker_core::{AttemptOutcome, Dependency, DependencyKind, JobSpec, NodeId, Time, UpdateError};

use crate::harness::Harness;

/// The harness waits 1 ms (`test_config`).
const WAIT: u64 = 1_000;

#[test]
fn other_nodes_pass_over_preferring_work_and_its_node_takes_it_first() {
    let mut harness = Harness::new();
    let reader = harness.submit(JobSpec::array(1).with_priority(5));
    let other = harness.submit(JobSpec::array(2));
    harness.prefer(reader.job, &[2]);
    harness.join_with_credit(1, 1);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, other.job.0)],
        "node 1 takes what is behind the reader"
    );
    harness.join_with_credit(2, 1);
    assert_eq!(
        harness.take_assigned(),
        vec![(2, 0, reader.job.0)],
        "node 2 takes the reader before the rest"
    );
}

#[test]
fn after_the_wait_any_node_takes_the_work() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join(2, 1);
    let reader = harness.submit(JobSpec::array(1));
    assert_eq!(harness.take_assigned(), vec![(1, 0, reader.job.0)]);
    // Again, now with a preference for node 2, which has no credit.
    let reader = harness.submit(JobSpec::array(1));
    harness.prefer(reader.job, &[2]);
    harness.credit(1, 1);
    assert!(harness.take_assigned().is_empty(), "node 1 passes over it");
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time::from_micros(WAIT)),
        "the wait's end is a timer"
    );
    harness.advance_to(Time::from_micros(WAIT - 1));
    harness.timeout();
    assert!(harness.take_assigned().is_empty(), "not yet");
    harness.advance_to(Time::from_micros(WAIT));
    harness.timeout();
    assert_eq!(harness.take_assigned(), vec![(1, 0, reader.job.0)]);
}

/// A reader preferring the node its writer ran on: the wait starts when the reader's
/// dependencies release it, not when the preference is set.
#[test]
fn the_wait_starts_when_the_work_is_queued() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    let writer = harness.submit(JobSpec::array(1));
    let running = harness.take_one();
    let reader = harness.submit_after(
        JobSpec::array(1),
        &[Dependency {
            job: writer.job,
            kind: DependencyKind::Success,
        }],
    );
    harness.prefer(reader.job, &[2]);
    harness.advance_to(Time::from_micros(5 * WAIT));
    harness.started(running.attempt);
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    assert!(
        harness.take_assigned().is_empty(),
        "released at 5 ms: it waits for node 2 until 6 ms"
    );
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time::from_micros(6 * WAIT))
    );
    harness.advance_to(Time::from_micros(6 * WAIT));
    harness.timeout();
    assert_eq!(harness.take_assigned(), vec![(1, 0, reader.job.0)]);
}

/// A parked node is woken by work that prefers it (searches by capacity do not see
/// such work); a cleared preference makes the work anyone's at once.
#[test]
fn preferring_work_wakes_its_parked_node_and_a_cleared_preference_frees_it() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    assert!(harness.take_assigned().is_empty(), "both parked");
    let first = harness.submit(JobSpec::array(1).with_priority(1));
    // Set before anything could dispatch it: as the root does on submission.
    let second = harness.submit(JobSpec::array(1));
    let assigned = harness.take_assigned();
    assert_eq!(assigned.len(), 2, "{assigned:?}");
    let reader = {
        let job = harness
            .core
            .handle_submit(JobSpec::array(1), harness.now)
            .unwrap();
        harness
            .core
            .handle_prefer(job.job, &[NodeId(2)], harness.now)
            .unwrap();
        harness.drain();
        job
    };
    let _ = (first, second);
    harness.credit(1, 1);
    assert!(harness.take_assigned().is_empty());
    harness.credit(2, 1);
    assert_eq!(harness.take_assigned(), vec![(2, 0, reader.job.0)]);

    let loose = harness
        .core
        .handle_submit(JobSpec::array(1), harness.now)
        .unwrap();
    harness
        .core
        .handle_prefer(loose.job, &[NodeId(2)], harness.now)
        .unwrap();
    harness.drain();
    assert!(harness.take_assigned().is_empty(), "node 1 passes over it");
    harness.prefer(loose.job, &[]);
    assert_eq!(harness.take_assigned(), vec![(1, 0, loose.job.0)]);
}

#[test]
fn a_preference_for_an_unknown_or_ended_job_is_refused_and_changes_nothing() {
    let mut harness = Harness::new();
    assert_eq!(
        harness
            .core
            .handle_prefer(saker_core::JobId(9), &[NodeId(1)], harness.now),
        Err(UpdateError::UnknownJob {
            job: saker_core::JobId(9)
        })
    );
    harness.join_with_credit(1, 1);
    let done = harness.submit(JobSpec::array(1));
    let attempt = harness.take_one().attempt;
    harness.started(attempt);
    harness.result(attempt, AttemptOutcome::Succeeded);
    assert_eq!(
        harness
            .core
            .handle_prefer(done.job, &[NodeId(1)], harness.now),
        Err(UpdateError::Ended { job: done.job })
    );
    assert_eq!(harness.core.poll_timeout(), None);
}
