//! Jobs held by their driver (the root holds the readers of a data item it recomputes):
//! nothing new of a held job runs until it is released; what it waits for besides
//! (dependencies, a time) still applies.

use saker_core::{
    AttemptOutcome, Dependency, DependencyKind, Disposition, Event, JobSpec, UpdateError,
};

use crate::harness::Harness;

fn hold(harness: &mut Harness, job: saker_core::JobId) {
    harness
        .core
        .handle_hold(job, harness.now)
        .expect("a job that has not ended");
    harness.drain();
}

fn release(harness: &mut Harness, job: saker_core::JobId) {
    harness.core.handle_release(job, harness.now);
    harness.drain();
}

/// A held job's queued tasks stay queued, its attempt not started yet is asked back
/// and waits with them, its started attempt runs on; released, the rest runs, the
/// returned task first.
#[test]
fn a_held_job_runs_nothing_new_until_released() {
    let mut harness = Harness::new();
    harness.join(1, 1);
    let job = harness.submit(JobSpec::array(4)).job;
    harness.credit(1, 2);
    let dispatched = harness.take_dispatches().remove(0).assignments;
    let (running, prefetched) = (dispatched[0], dispatched[1]);
    harness.started(running.attempt);
    hold(&mut harness, job);
    assert!(harness.core.is_held(job));
    let asked: Vec<_> = harness
        .take_events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ReturnUnstarted { attempt, .. } => Some(attempt),
            _ => None,
        })
        .collect();
    assert_eq!(asked, vec![prefetched.attempt]);
    let disposition = harness.result(prefetched.attempt, AttemptOutcome::Cancelled);
    assert!(matches!(disposition, Disposition::Returned { .. }));
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 3);
    assert!(harness.take_assigned().is_empty(), "held");
    assert_eq!(harness.core.counts().waiting, 3);
    // Other work runs meanwhile.
    let other = harness.submit(JobSpec::single()).job;
    assert_eq!(harness.take_one().job, other);
    release(&mut harness, job);
    assert!(!harness.core.is_held(job));
    let indexes: Vec<u32> = harness
        .take_assigned()
        .into_iter()
        .map(|(_, index, _)| index)
        .collect();
    assert_eq!(
        indexes,
        vec![1, 2],
        "the returned task first, then what credit allows"
    );
}

/// Holding twice is one hold; releasing a job not held changes nothing; a released
/// job still waits for its dependency.
#[test]
fn a_hold_is_one_more_thing_a_job_waits_for() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    let first = harness.submit(JobSpec::single()).job;
    let gate = harness.take_one();
    assert_eq!(gate.job, first);
    let after = [Dependency {
        job: first,
        kind: DependencyKind::Success,
    }];
    let dependent = harness.submit_after(JobSpec::single(), &after).job;
    let free = harness.submit(JobSpec::single()).job;
    release(&mut harness, free);
    assert_eq!(
        harness.take_one().job,
        free,
        "a release of a job not held: nothing"
    );
    hold(&mut harness, dependent);
    hold(&mut harness, dependent);
    harness.result(gate.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 2);
    assert!(
        harness.take_assigned().is_empty(),
        "its dependency ended, it is held"
    );
    assert!(harness.core.is_waiting(dependent));
    release(&mut harness, dependent);
    assert_eq!(
        harness.take_one().job,
        dependent,
        "one release undoes both holds"
    );
}

/// A held job may end (its started attempt was its last task) or be cancelled: nothing
/// of it is left waiting or held, and an ended job cannot be held.
#[test]
fn a_held_job_that_ends_leaves_nothing_behind() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 2);
    let ends = harness.submit(JobSpec::single()).job;
    let running = harness.take_one();
    harness.started(running.attempt);
    hold(&mut harness, ends);
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    assert!(!harness.core.is_waiting(ends));
    assert!(!harness.core.is_held(ends));
    assert!(matches!(
        harness.core.handle_hold(ends, harness.now),
        Err(UpdateError::Ended { .. })
    ));
    release(&mut harness, ends);
    let cancelled = harness.submit(JobSpec::array(3)).job;
    for (_, _, _) in harness.take_assigned() {}
    hold(&mut harness, cancelled);
    harness.cancel(cancelled);
    assert!(!harness.core.is_held(cancelled));
    assert_eq!(harness.core.counts().waiting, 0);
}
