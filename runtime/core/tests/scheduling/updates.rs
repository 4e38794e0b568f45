//! Updates of jobs that have not ended: a new not-before time and a new time limit
//! apply to the tasks that have not started; started ones run on. (Priority updates
//! are in `dispatch.rs`.)

use saker_core::{
    AttemptOutcome, Dependency, DependencyKind, Disposition, Event, JobId, JobSpec, Placement,
    Time, UpdateError,
};

use crate::harness::Harness;

fn at(micros: u64) -> Option<Time> {
    Some(Time::from_micros(micros))
}

fn submit_at(
    harness: &mut Harness,
    spec: JobSpec,
    after: &[Dependency],
    time: Option<Time>,
) -> JobId {
    let job = harness
        .core
        .handle_submit_at(spec, after, time, harness.now)
        .expect("valid spec")
        .job;
    harness.drain();
    job
}

fn retime(harness: &mut Harness, job: JobId, time: Option<Time>) {
    harness
        .core
        .handle_update_not_before(job, time, harness.now)
        .expect("a job that has not ended");
    harness.drain();
}

fn relimit(harness: &mut Harness, job: JobId, limit: Option<u64>) {
    harness
        .core
        .handle_update_time_limit(job, limit, harness.now)
        .expect("a job that has not ended");
    harness.drain();
}

/// The attempts a node was asked to give back.
fn asked_back(events: &[Event]) -> Vec<saker_core::AttemptId> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::ReturnUnstarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

/// A job waiting for its time waits for the new one: later, then earlier, then none
/// (a time already past, or none, releases it at once).
#[test]
fn a_waiting_job_takes_its_new_time_later_earlier_or_none() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 4);
    let moved = submit_at(&mut harness, JobSpec::single(), &[], at(1_000));
    let cleared = submit_at(&mut harness, JobSpec::single(), &[], at(1_000));
    retime(&mut harness, moved, at(3_000));
    assert_eq!(harness.core.not_before(moved), at(3_000));
    assert_eq!(
        harness.core.poll_timeout(),
        at(1_000),
        "the other job's time"
    );
    harness.advance_to(Time::from_micros(1_000));
    harness.timeout();
    assert_eq!(harness.take_one().job, cleared, "only the job left at 1000");
    harness.advance_to(Time::from_micros(1_500));
    harness.timeout();
    assert!(harness.take_assigned().is_empty(), "moved to 3000");
    retime(&mut harness, moved, at(2_000));
    assert_eq!(harness.core.poll_timeout(), at(2_000), "moved earlier");
    retime(&mut harness, moved, at(1_200));
    assert_eq!(
        harness.take_one().job,
        moved,
        "a time already past releases it at once"
    );
    assert_eq!(harness.core.not_before(moved), None);
    assert_eq!(harness.core.poll_timeout(), None, "no timer left behind");
    let third = submit_at(&mut harness, JobSpec::single(), &[], at(9_000));
    retime(&mut harness, third, None);
    assert_eq!(harness.take_one().job, third, "no time: released at once");
    assert_eq!(harness.core.counts().waiting, 0);
}

/// A queued job given a time ahead waits again: its queued tasks are no longer
/// dispatched, its attempt not yet started on a node is asked back and waits too,
/// its started attempt runs on; at its time everything left runs.
#[test]
fn a_queued_job_given_a_later_time_holds_back_what_has_not_started() {
    let mut harness = Harness::new();
    harness.join(1, 1);
    let job = harness.submit(JobSpec::array(4)).job;
    // One core, two of credit: one task runs, one waits in the node's own queue.
    harness.credit(1, 2);
    let dispatched = harness.take_dispatches().remove(0).assignments;
    assert_eq!(dispatched.len(), 2);
    let (running, prefetched) = (dispatched[0], dispatched[1]);
    harness.started(running.attempt);
    retime(&mut harness, job, at(5_000));
    assert!(harness.core.is_waiting(job));
    assert_eq!(
        asked_back(&harness.take_events()),
        vec![prefetched.attempt],
        "the unstarted attempt is asked back"
    );
    let counts = harness.core.counts();
    assert_eq!((counts.queued, counts.waiting), (2, 2));
    // The node gives it back; it waits with the rest.
    let disposition = harness.result(prefetched.attempt, AttemptOutcome::Cancelled);
    assert!(matches!(disposition, Disposition::Returned { .. }));
    harness.advance_to(Time::from_micros(100));
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 3);
    assert!(harness.take_assigned().is_empty(), "nothing before 5000");
    assert_eq!(harness.core.counts().waiting, 3);
    harness.advance_to(Time::from_micros(5_000));
    harness.timeout();
    let indexes: Vec<u32> = harness
        .take_assigned()
        .into_iter()
        .map(|(_, index, _)| index)
        .collect();
    assert_eq!(
        indexes,
        vec![1, 2, 3],
        "the returned task first, then the rest"
    );
}

/// A retry of a job moved later while its attempt ran waits for the new time too.
#[test]
fn a_retry_of_a_job_moved_later_waits_for_its_time() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    let job = harness.submit(JobSpec::single().with_max_retries(1)).job;
    let first = harness.take_one();
    harness.started(first.attempt);
    retime(&mut harness, job, at(10_000));
    assert!(asked_back(&harness.take_events()).is_empty(), "it started");
    let disposition = harness.result(first.attempt, AttemptOutcome::Failed);
    assert!(matches!(disposition, Disposition::WillRetry { .. }));
    harness.credit(1, 1);
    harness.advance_to(Time::from_micros(1_000));
    harness.timeout();
    assert!(harness.take_assigned().is_empty(), "backoff over, time not");
    assert_eq!(harness.core.counts().waiting, 1);
    harness.advance_to(Time::from_micros(10_000));
    harness.timeout();
    assert_eq!(harness.take_one().job, job);
}

/// Dependencies still apply: clearing a dependent's time leaves it waiting for its
/// dependency, and a time given to a waiting dependent is one more thing it waits for.
#[test]
fn a_new_time_leaves_dependencies_in_force() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    let first = harness.submit(JobSpec::single()).job;
    let after = [Dependency {
        job: first,
        kind: DependencyKind::Success,
    }];
    let cleared = submit_at(&mut harness, JobSpec::single(), &after, at(100));
    let timed = submit_at(&mut harness, JobSpec::single(), &after, None);
    retime(&mut harness, cleared, None);
    retime(&mut harness, timed, at(5_000));
    let attempt = harness.take_one();
    assert_eq!(attempt.job, first);
    assert!(harness.core.is_waiting(cleared), "still waits for job 1");
    harness.result(attempt.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    assert_eq!(harness.take_one().job, cleared);
    assert!(
        harness.core.is_waiting(timed),
        "job 1 ended, its time has not come"
    );
    harness.advance_to(Time::from_micros(5_000));
    harness.credit(1, 1);
    harness.timeout();
    assert_eq!(harness.take_one().job, timed);
}

/// Under a deadline a shorter limit makes a held job fit (it is queued at once), a
/// longer one makes a queued job unfit: held, and its unstarted attempt asked back.
#[test]
fn a_new_limit_moves_a_job_across_the_deadline() {
    let mut harness = Harness::new();
    harness.set_deadline(Some(Time::from_micros(1_000)));
    let long = harness
        .submit(JobSpec::single().with_time_limit_micros(2_000))
        .job;
    harness.join_with_credit(1, 1);
    assert!(harness.take_assigned().is_empty());
    assert_eq!(harness.core.counts().beyond_deadline, 1);
    relimit(&mut harness, long, Some(500));
    assert_eq!(harness.take_one().job, long, "fits with the shorter limit");
    assert_eq!(harness.core.counts().beyond_deadline, 0);
    assert_eq!(harness.core.job_spec(long).unwrap().time_limit, Some(500));

    let short = harness
        .submit(JobSpec::array(3).with_time_limit_micros(100))
        .job;
    harness.credit(1, 1);
    let prefetched = harness.take_one();
    assert_eq!(prefetched.job, short);
    relimit(&mut harness, short, Some(1_500));
    assert_eq!(harness.core.counts().beyond_deadline, 2);
    assert_eq!(asked_back(&harness.take_events()), vec![prefetched.attempt]);
    harness.result(prefetched.attempt, AttemptOutcome::Cancelled);
    assert_eq!(
        harness.core.counts().beyond_deadline,
        3,
        "held with the rest"
    );
    // Without a limit a task starts while now < deadline.
    relimit(&mut harness, short, None);
    harness.credit(1, 3);
    assert_eq!(harness.take_assigned().len(), 3);
}

/// A gang's reservation counts a started attempt to the limit it started under, not
/// its job's later one.
#[test]
fn a_reservation_counts_a_started_attempt_under_its_own_limit() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    let small = harness
        .submit(JobSpec::single().with_time_limit_micros(100))
        .job;
    let running = harness.take_one();
    harness.started(running.attempt);
    relimit(&mut harness, small, Some(50_000));
    harness.submit(JobSpec::single().with_placement(Placement::Gang { nodes: 2 }));
    let reservation = harness
        .core
        .reservation()
        .expect("the gang waits and reserves");
    assert_eq!(
        reservation.start,
        at(100),
        "100 us from its start, not 50,000"
    );
}

/// An attempt dispatched before the update and not started yet runs under the new
/// limit; the core counts it so (the audit checks every such attempt).
#[test]
fn an_unstarted_attempt_takes_the_new_limit() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    let job = harness
        .submit(JobSpec::array(2).with_time_limit_micros(100))
        .job;
    let dispatched: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .collect();
    assert_eq!(dispatched.len(), 2);
    relimit(&mut harness, job, Some(300));
    assert!(asked_back(&harness.take_events()).is_empty(), "no deadline");
    // Both start under the new limit: a gang then waits until 300, not 100.
    for assignment in dispatched {
        harness.started(assignment.attempt);
    }
    harness.submit(JobSpec::single().with_placement(Placement::Gang { nodes: 2 }));
    assert_eq!(harness.core.reservation().unwrap().start, at(300));
}

/// Bad input changes nothing: an unknown job, a finished one, a cancelled one.
#[test]
fn updating_an_unknown_or_ended_job_is_refused() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    let done = harness.submit(JobSpec::single()).job;
    let attempt = harness.take_one().attempt;
    harness.result(attempt, AttemptOutcome::Succeeded);
    let cancelled = submit_at(&mut harness, JobSpec::single(), &[], at(1_000));
    harness.cancel(cancelled);
    let unknown = JobId(9);
    let now = harness.now;
    for job in [unknown, done, cancelled] {
        let expected = if job == unknown {
            UpdateError::UnknownJob { job }
        } else {
            UpdateError::Ended { job }
        };
        assert_eq!(harness.core.check_update(job), Err(expected.clone()));
        assert_eq!(
            harness.core.handle_update_not_before(job, at(5), now),
            Err(expected.clone())
        );
        assert_eq!(
            harness.core.handle_update_time_limit(job, Some(5), now),
            Err(expected)
        );
    }
    harness.drain();
    assert_eq!(harness.core.poll_timeout(), None, "no timer was set");
    assert_eq!(harness.core.job_spec(done).unwrap().time_limit, None);
    assert_eq!(harness.core.counts().waiting, 0);
}

/// A gang job moved later leaves the gang pass (and its reservation) until its time.
#[test]
fn a_gang_moved_later_waits_and_gives_up_its_reservation() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1);
    harness.join_with_credit(2, 1);
    harness.submit(JobSpec::single().with_time_limit_micros(100));
    let running = harness.take_one();
    harness.started(running.attempt);
    let gang = harness
        .submit(JobSpec::single().with_placement(Placement::Gang { nodes: 2 }))
        .job;
    assert!(harness.core.reservation().is_some());
    retime(&mut harness, gang, at(1_000));
    assert_eq!(
        harness.core.reservation(),
        None,
        "a waiting gang reserves nothing"
    );
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    assert!(harness.take_dispatches().is_empty(), "not before its time");
    harness.advance_to(Time::from_micros(1_000));
    harness.timeout();
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1);
    assert_eq!(dispatches[0].members.len(), 2);
    assert_eq!(dispatches[0].assignments[0].job, gang);
}

/// A job given a later time while it runs may end before that time: nothing of it is
/// left waiting, so the time passing after its page of jobs was compacted (1,024
/// finished jobs) touches nothing (it used to reach for the compacted record).
#[test]
fn a_job_moved_later_that_ends_first_leaves_nothing_waiting() {
    let mut harness = Harness::new();
    harness.join_with_credit(1, 1_024);
    let job = harness.submit(JobSpec::single()).job;
    let running = harness.take_one();
    harness.started(running.attempt);
    retime(&mut harness, job, at(10_000));
    assert_eq!(harness.core.poll_timeout(), at(10_000));
    harness.result(running.attempt, AttemptOutcome::Succeeded);
    assert!(!harness.core.is_waiting(job));
    assert_eq!(
        harness.core.poll_timeout(),
        None,
        "no time left to wait for"
    );
    for _ in 1..1_024 {
        harness.submit(JobSpec::single());
    }
    for dispatch in harness.take_dispatches() {
        for assignment in dispatch.assignments {
            harness.result(assignment.attempt, AttemptOutcome::Succeeded);
        }
    }
    assert!(harness.core.is_quiescent());
    assert_eq!(harness.core.job_spec(job), None, "compacted");
    harness.advance_to(Time::from_micros(10_000));
    harness.timeout();
}
