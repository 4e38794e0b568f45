//! Retries, replays, their bounds, and results that must not change state.

use saker_core::{
    AttemptError, AttemptId, AttemptOutcome, Disposition, Event, JobSpec, TaskStatus,
    TerminalState, Time,
};

use crate::harness::Harness;

#[test]
fn a_failure_is_retried_after_exponential_backoff() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::single().with_max_retries(2));
    harness.join_with_credit(1, 4);
    let first = harness.take_one();
    assert_eq!(harness.core.poll_timeout(), None);

    harness.advance_to(Time(1_000));
    let disposition = harness.result(first.attempt, AttemptOutcome::Failed);
    assert_eq!(
        disposition,
        Disposition::WillRetry {
            task: job.first_task,
            not_before: Time(1_100)
        }
    );
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Delayed {
            not_before: Time(1_100)
        })
    );
    assert_eq!(harness.core.poll_timeout(), Some(Time(1_100)));
    assert_eq!(harness.core.counts().delayed, 1);

    harness.advance_to(Time(1_099));
    harness.timeout();
    assert!(harness.take_dispatches().is_empty(), "released too early");

    harness.advance_to(Time(1_100));
    harness.timeout();
    let second = harness.take_one();
    assert_eq!(second.task, job.first_task);
    assert!(second.attempt > first.attempt, "a retry is a new attempt");
    assert_eq!(harness.core.poll_timeout(), None);

    let disposition = harness.result(second.attempt, AttemptOutcome::Failed);
    assert_eq!(
        disposition,
        Disposition::WillRetry {
            task: job.first_task,
            not_before: Time(1_300)
        },
        "second retry waits twice as long"
    );
    harness.advance_to(Time(1_300));
    harness.timeout();
    let third = harness.take_one();
    let disposition = harness.result(third.attempt, AttemptOutcome::Failed);
    assert_eq!(
        disposition,
        Disposition::Accepted {
            task: job.first_task,
            job: job.job,
            index: 0,
            state: TerminalState::Failed,
            attempts: 3
        },
        "the third failure exceeds max_retries = 2"
    );
    let counts = harness.core.counts();
    assert_eq!((counts.failed, counts.retries), (1, 2));
    assert!(harness.core.is_quiescent());
    assert_eq!(
        harness.take_events(),
        vec![
            Event::TaskFinished {
                task: job.first_task,
                job: job.job,
                index: 0,
                state: TerminalState::Failed,
                attempts: 3
            },
            Event::JobFinished { job: job.job }
        ]
    );
}

#[test]
fn zero_retries_fail_on_the_first_failure() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single());
    harness.join_with_credit(1, 1);
    let attempt = harness.take_one().attempt;
    assert!(matches!(
        harness.result(attempt, AttemptOutcome::Failed),
        Disposition::Accepted {
            state: TerminalState::Failed,
            attempts: 1,
            ..
        }
    ));
}

#[test]
fn a_released_retry_runs_before_fresh_work_of_its_priority() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(3).with_max_retries(1));
    harness.join_with_credit(1, 1);
    let first = harness.take_one();
    harness.result(first.attempt, AttemptOutcome::Failed);
    harness.credit(1, 1);
    assert_eq!(harness.take_one().index, 1, "index 0 is delayed");
    harness.advance_to(Time(100));
    harness.timeout();
    assert!(harness.take_dispatches().is_empty(), "no credit left");
    harness.credit(1, 1);
    assert_eq!(
        harness.take_one().index,
        0,
        "the retry goes ahead of index 2"
    );
}

#[test]
fn a_lost_attempt_is_replayed_at_once_ahead_of_fresh_work() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(3));
    harness.join_with_credit(1, 1);
    let first = harness.take_one();
    assert_eq!(
        harness.result(first.attempt, AttemptOutcome::Lost),
        Disposition::WillReplay {
            task: job.first_task
        }
    );
    assert_eq!(harness.core.poll_timeout(), None, "replays do not wait");
    harness.credit(1, 1);
    let again = harness.take_one();
    assert_eq!((again.index, again.task), (0, job.first_task));
    let counts = harness.core.counts();
    assert_eq!((counts.replays, counts.retries), (1, 0));
}

#[test]
fn losses_beyond_max_replays_fail_the_task() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single().with_max_replays(1));
    harness.join_with_credit(1, 1);
    let first = harness.take_one();
    assert!(matches!(
        harness.result(first.attempt, AttemptOutcome::Lost),
        Disposition::WillReplay { .. }
    ));
    harness.credit(1, 1);
    let second = harness.take_one();
    assert!(matches!(
        harness.result(second.attempt, AttemptOutcome::Lost),
        Disposition::Accepted {
            state: TerminalState::Failed,
            attempts: 2,
            ..
        }
    ));
}

#[test]
fn an_unsolicited_cancel_is_replayed_like_a_loss() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single());
    harness.join_with_credit(1, 1);
    let attempt = harness.take_one().attempt;
    assert!(matches!(
        harness.result(attempt, AttemptOutcome::Cancelled),
        Disposition::WillReplay { .. }
    ));
}

#[test]
fn results_that_are_not_for_the_live_attempt_change_nothing() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(2));
    harness.join_with_credit(1, 2);
    let dispatched = harness.take_dispatches().remove(0).assignments;

    // Same attempt twice: the second is a duplicate.
    assert!(matches!(
        harness.result(dispatched[0].attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            state: TerminalState::Succeeded,
            ..
        }
    ));
    assert_eq!(
        harness.result(dispatched[0].attempt, AttemptOutcome::Failed),
        Disposition::Duplicate
    );

    // A late result of a replayed attempt: duplicate, and the replay stays live.
    harness.result(dispatched[1].attempt, AttemptOutcome::Lost);
    harness.credit(1, 1);
    let replay = harness.take_one();
    assert_eq!(
        harness.result(dispatched[1].attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
    assert!(matches!(
        harness.core.task_status(job.task(1)),
        Some(TaskStatus::Assigned { attempt, .. }) if attempt == replay.attempt
    ));

    // Never issued: unknown, for results and for started reports.
    assert_eq!(
        harness.result(AttemptId(10_000), AttemptOutcome::Succeeded),
        Disposition::UnknownAttempt
    );
    assert_eq!(
        harness.result(AttemptId(0), AttemptOutcome::Succeeded),
        Disposition::UnknownAttempt
    );
    assert_eq!(
        harness.core.handle_started(AttemptId(10_000), harness.now),
        Err(AttemptError::Unknown {
            attempt: AttemptId(10_000)
        })
    );
    assert_eq!(
        harness
            .core
            .handle_started(dispatched[1].attempt, harness.now),
        Err(AttemptError::Stale {
            attempt: dispatched[1].attempt
        })
    );

    let counts = harness.core.counts();
    assert_eq!((counts.duplicates, counts.unknown_attempts), (2, 2));
    assert_eq!((counts.succeeded, counts.assigned), (1, 1));
    let finished = harness
        .take_events()
        .into_iter()
        .filter(|event| matches!(event, Event::TaskFinished { .. }))
        .count();
    assert_eq!(finished, 1, "exactly one TaskFinished so far");
}

#[test]
fn started_moves_assigned_to_running_once() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::single());
    harness.join_with_credit(1, 1);
    let assignment = harness.take_one();
    assert_eq!(harness.core.counts().assigned, 1);
    harness.started(assignment.attempt);
    harness.started(assignment.attempt);
    let counts = harness.core.counts();
    assert_eq!((counts.assigned, counts.running), (0, 1));
    assert!(matches!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Running { .. })
    ));
    harness.result(assignment.attempt, AttemptOutcome::Succeeded);
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Finished)
    );
    assert_eq!(harness.core.task_status(saker_core::TaskId(2)), None);
}

#[test]
fn time_never_goes_backwards() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::single().with_max_retries(1));
    harness.join_with_credit(1, 1);
    let attempt = harness.take_one().attempt;
    harness.advance_to(Time(5_000));
    harness.result(attempt, AttemptOutcome::Failed);
    assert_eq!(harness.core.poll_timeout(), Some(Time(5_100)));
    harness.advance_to(Time(10));
    harness.timeout();
    assert_eq!(harness.core.now(), Time(5_000));
    assert_eq!(
        harness.core.counts().delayed,
        1,
        "an earlier time releases nothing"
    );
}
