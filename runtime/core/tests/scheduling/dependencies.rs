//! Jobs that wait for other jobs ([`Dependency`]): released when those end, cancelled
//! when one they needed to succeed did not, in cascades of any depth, and never
//! dispatched early.

use saker_core::{
    AttemptOutcome, Dependency, DependencyKind, Event, JobId, JobSpec, SubmitError, TerminalState,
};

use crate::harness::Harness;

fn after_ok(job: JobId) -> Dependency {
    Dependency {
        job,
        kind: DependencyKind::Success,
    }
}

fn after_any(job: JobId) -> Dependency {
    Dependency {
        job,
        kind: DependencyKind::Any,
    }
}

/// Runs every assigned attempt to `outcome` and returns the (job, index) pairs run.
fn run_all(harness: &mut Harness, outcome: &dyn Fn(u32, u32) -> AttemptOutcome) -> Vec<(u32, u32)> {
    let mut ran = Vec::new();
    loop {
        let dispatches = harness.take_dispatches();
        if dispatches.is_empty() {
            return ran;
        }
        for dispatch in dispatches {
            let node = dispatch.node.0;
            for assignment in dispatch.assignments {
                harness.started(assignment.attempt);
                harness.result(
                    assignment.attempt,
                    outcome(assignment.job.0, assignment.index),
                );
                ran.push((assignment.job.0, assignment.index));
                harness.credit(node, 1);
            }
        }
    }
}

fn ok(_: u32, _: u32) -> AttemptOutcome {
    AttemptOutcome::Succeeded
}

fn states(events: &[Event], job: u32) -> Vec<TerminalState> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::TaskFinished { job: j, state, .. } if j.0 == job => Some(*state),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_runs_only_after_the_jobs_it_waits_for_have_ended() {
    let mut harness = Harness::new();
    let a = harness.submit(JobSpec::array(3));
    let b = harness.submit(JobSpec::array(2));
    let c = harness.submit_after(JobSpec::array(2), &[after_ok(a.job), after_any(b.job)]);
    assert_eq!(harness.core.counts().waiting, 2);
    assert!(harness.core.is_waiting(c.job));
    harness.join_with_credit(1, 2);
    let ran = run_all(&mut harness, &ok);
    // Every task of a and b before any of c.
    let first_c = ran
        .iter()
        .position(|(job, _)| *job == c.job.0)
        .expect("c ran");
    assert_eq!(first_c, 5, "{ran:?}");
    assert_eq!(ran.len(), 7);
    assert_eq!(harness.core.counts().waiting, 0);
    assert_eq!(harness.core.counts().succeeded, 7);
}

#[test]
fn a_failed_dependency_cancels_its_afterok_dependents_down_the_chain_but_not_afterany() {
    let mut harness = Harness::new();
    let a = harness.submit(JobSpec::single());
    let b = harness.submit_after(JobSpec::array(4), &[after_ok(a.job)]);
    let c = harness.submit_after(JobSpec::single(), &[after_ok(b.job)]);
    let cleanup = harness.submit_after(JobSpec::single(), &[after_any(b.job)]);
    harness.join_with_credit(1, 1);
    let failing = |job: u32, _| {
        if job == 1 {
            AttemptOutcome::Failed
        } else {
            AttemptOutcome::Succeeded
        }
    };
    let ran = run_all(&mut harness, &failing);
    // a failed: b and c are cancelled unstarted, the cleanup runs anyway.
    assert_eq!(ran, vec![(a.job.0, 0), (cleanup.job.0, 0)]);
    let events = harness.take_events();
    assert!(events.contains(&Event::DependencyFailed {
        job: b.job,
        dependency: a.job
    }));
    assert!(events.contains(&Event::DependencyFailed {
        job: c.job,
        dependency: b.job
    }));
    assert_eq!(states(&events, b.job.0), vec![TerminalState::Cancelled; 4]);
    assert_eq!(states(&events, c.job.0), vec![TerminalState::Cancelled]);
    assert_eq!(
        states(&events, cleanup.job.0),
        vec![TerminalState::Succeeded]
    );
    assert_eq!(harness.core.counts().waiting, 0);
}

#[test]
fn a_dependency_that_has_ended_already_is_decided_at_submission() {
    let mut harness = Harness::new();
    let a = harness.submit(JobSpec::single());
    let failed = harness.submit(JobSpec::single());
    harness.join_with_credit(1, 1);
    run_all(&mut harness, &|job, _| {
        if job == 2 {
            AttemptOutcome::Failed
        } else {
            AttemptOutcome::Succeeded
        }
    });
    harness.take_events();
    let ready = harness.submit_after(JobSpec::single(), &[after_ok(a.job)]);
    assert!(!harness.core.is_waiting(ready.job));
    let doomed = harness.submit_after(JobSpec::single(), &[after_ok(failed.job)]);
    let events = harness.take_events();
    assert!(events.contains(&Event::DependencyFailed {
        job: doomed.job,
        dependency: failed.job
    }));
    assert_eq!(
        states(&events, doomed.job.0),
        vec![TerminalState::Cancelled]
    );
    let ran = run_all(&mut harness, &ok);
    assert_eq!(ran, vec![(ready.job.0, 0)]);
}

#[test]
fn only_earlier_jobs_can_be_waited_for() {
    let mut harness = Harness::new();
    let a = harness.submit(JobSpec::single());
    for bad in [JobId(0), JobId(a.job.0 + 1), JobId(99)] {
        let refused =
            harness
                .core
                .handle_submit_after(JobSpec::single(), &[after_ok(bad)], harness.now);
        assert_eq!(refused, Err(SubmitError::UnknownDependency { job: bad }));
    }
    assert_eq!(harness.core.counts().submitted, 1, "nothing was submitted");
}

#[test]
fn a_waiting_job_can_be_cancelled_and_its_dependents_follow() {
    let mut harness = Harness::new();
    let a = harness.submit(JobSpec::single());
    let b = harness.submit_after(JobSpec::array(3), &[after_ok(a.job)]);
    let c = harness.submit_after(JobSpec::single(), &[after_ok(b.job)]);
    let summary = harness.cancel(b.job);
    assert_eq!(summary.cancelled, 3);
    let events = harness.take_events();
    assert!(events.contains(&Event::DependencyFailed {
        job: c.job,
        dependency: b.job
    }));
    harness.join_with_credit(1, 1);
    let ran = run_all(&mut harness, &ok);
    assert_eq!(ran, vec![(a.job.0, 0)], "only a runs");
    assert_eq!(harness.core.counts().cancelled, 4);
}

/// A chain of 100,000 jobs, each waiting for the one before: the failure of the first
/// cancels them all without recursion, and the memory per edge stays small.
#[test]
fn a_long_chain_cancels_without_deep_recursion() {
    let mut harness = Harness::new();
    let first = harness.submit(JobSpec::single());
    let mut previous = first.job;
    for _ in 0..100_000 {
        let next = harness
            .core
            .handle_submit_after(JobSpec::single(), &[after_ok(previous)], harness.now)
            .expect("valid");
        previous = next.job;
    }
    harness.drain();
    assert_eq!(harness.core.counts().waiting, 100_000);
    harness.join_with_credit(1, 1);
    let ran = run_all(&mut harness, &|_, _| AttemptOutcome::Failed);
    assert_eq!(ran.len(), 1);
    assert_eq!(harness.core.counts().cancelled, 100_000);
    assert_eq!(harness.core.counts().waiting, 0);
}

/// A fan-in: one job waits for a thousand; it is released by the last of them, in
/// time linear in the edges.
#[test]
fn a_fan_in_is_released_by_the_last_of_its_dependencies() {
    let mut harness = Harness::new();
    let parts: Vec<Dependency> = (0..1000)
        .map(|_| after_ok(harness.submit(JobSpec::single()).job))
        .collect();
    let join = harness.submit_after(JobSpec::single(), &parts);
    harness.join_with_credit(1, 4);
    let ran = run_all(&mut harness, &ok);
    assert_eq!(ran.len(), 1001);
    assert_eq!(ran.last(), Some(&(join.job.0, 0)));
}

/// A job that waits for a time: held until a timeout at or after it, which
/// `poll_timeout` asks for; a time already past waits for nothing; a cancel forgets it.
#[test]
fn a_job_waits_for_its_time_and_for_its_dependencies_both() {
    use saker_core::Time;
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    let at = |micros| Some(Time::from_micros(micros));
    let timed = harness
        .core
        .handle_submit_at(JobSpec::single(), &[], at(1_000), harness.now)
        .unwrap();
    harness.drain();
    assert!(harness.take_assigned().is_empty(), "not before its time");
    assert_eq!(harness.core.poll_timeout(), at(1_000));
    assert_eq!(harness.core.counts().waiting, 1);
    // Both: a time and a dependency on the timed job.
    let both = harness
        .core
        .handle_submit_at(
            JobSpec::single(),
            &[after_ok(timed.job)],
            at(500),
            harness.now,
        )
        .unwrap();
    let past = harness
        .core
        .handle_submit_at(JobSpec::single(), &[], Some(Time::ZERO), harness.now)
        .unwrap();
    harness.drain();
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, past.job.0)],
        "a past time waits for nothing"
    );
    harness.advance_to(Time::from_micros(999));
    harness.timeout();
    assert!(harness.take_assigned().is_empty());
    harness.advance_to(Time::from_micros(1_000));
    harness.timeout();
    let first = harness.take_one();
    assert_eq!(first.job, timed.job);
    assert!(
        harness.core.is_waiting(both.job),
        "its time came, its dependency has not ended"
    );
    harness.started(first.attempt);
    harness.result(first.attempt, AttemptOutcome::Succeeded);
    assert_eq!(harness.take_one().job, both.job);
    // A cancelled timed job leaves no timer behind.
    let later = harness
        .core
        .handle_submit_at(JobSpec::single(), &[], at(50_000), harness.now)
        .unwrap();
    harness.drain();
    harness.cancel(later.job);
    assert_eq!(harness.core.poll_timeout(), None);
    assert_eq!(harness.core.counts().waiting, 0);
}
