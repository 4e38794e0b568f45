//! Job cancellation: queued, delayed and running tasks.

use saker_core::{
    AttemptOutcome, CancelError, CancelSummary, Disposition, Event, JobId, JobSpec, NodeId,
    TerminalState, Time,
};

use crate::harness::Harness;

#[test]
fn cancelling_queued_tasks_finishes_them_lazily_in_order() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(100_000));
    // Not through the harness: it would drain the events.
    let summary = harness
        .core
        .handle_cancel_job(job.job, harness.now)
        .expect("job exists");
    assert_eq!(
        summary,
        CancelSummary {
            cancelled: 100_000,
            ..CancelSummary::default()
        }
    );
    assert!(harness.core.is_quiescent(), "counts are final at once");
    assert_eq!(
        harness.core.pending_events(),
        2,
        "a cancelled range is one pending entry, not one per task"
    );
    assert_eq!(harness.core.ready_queue_entries(), 0);
    let mut finished = 0u32;
    let mut last = None;
    while let Some(event) = harness.core.poll_event() {
        match event {
            Event::TaskFinished {
                task,
                index,
                state,
                attempts,
                ..
            } => {
                assert_eq!((task, index), (job.task(finished), finished));
                assert_eq!((state, attempts), (TerminalState::Cancelled, 0));
                finished += 1;
            }
            other => last = Some(other),
        }
    }
    assert_eq!(finished, 100_000);
    assert_eq!(last, Some(Event::JobFinished { job: job.job }));
    harness.join_with_credit(1, 8);
    assert!(harness.take_dispatches().is_empty());
}

#[test]
fn cancelling_running_tasks_waits_for_their_results() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(5));
    harness.join_with_credit(1, 2);
    let dispatched = harness.take_dispatches().remove(0).assignments;
    harness.started(dispatched[0].attempt);
    let summary = harness.cancel(job.job);
    assert_eq!(
        summary,
        CancelSummary {
            cancelled: 3,
            attempts_signalled: 2,
            ..CancelSummary::default()
        }
    );
    let events = harness.take_events();
    let cancels: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            Event::CancelAttempt { node, attempt } => Some((*node, *attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(
        cancels,
        vec![
            (NodeId(1), dispatched[0].attempt),
            (NodeId(1), dispatched[1].attempt)
        ]
    );
    assert!(!events.contains(&Event::JobFinished { job: job.job }));
    assert!(!harness.core.is_quiescent());

    // Whatever the outcome, a cancelled job's attempt ends its task as Cancelled.
    assert!(matches!(
        harness.result(dispatched[0].attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            state: TerminalState::Cancelled,
            attempts: 1,
            ..
        }
    ));
    assert!(matches!(
        harness.result(dispatched[1].attempt, AttemptOutcome::Failed),
        Disposition::Accepted {
            state: TerminalState::Cancelled,
            ..
        }
    ));
    assert_eq!(
        harness.take_events().last(),
        Some(&Event::JobFinished { job: job.job })
    );
    // A result after cancellation was accepted: duplicate.
    assert_eq!(
        harness.result(dispatched[1].attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
    let counts = harness.core.job_counts(job.job).expect("job exists");
    assert_eq!((counts.cancelled, counts.terminal()), (5, 5));
    assert!(counts.cancel_requested && counts.is_finished());
    assert_eq!(harness.core.counts().retries, 0, "no retry after cancel");
}

#[test]
fn cancelling_removes_waiting_retries_and_replays_and_spares_other_jobs() {
    let mut harness = Harness::new();
    let doomed = harness.submit(JobSpec::array(3).with_max_retries(5));
    let other = harness.submit(JobSpec::single());
    harness.join_with_credit(1, 2);
    let dispatched = harness.take_dispatches().remove(0).assignments;
    harness.result(dispatched[0].attempt, AttemptOutcome::Failed);
    harness.result(dispatched[1].attempt, AttemptOutcome::Lost);
    assert_eq!(harness.core.counts().delayed, 1);
    assert_eq!(harness.core.poll_timeout(), Some(Time(100)));
    let summary = harness.cancel(doomed.job);
    assert_eq!(summary.cancelled, 3);
    assert_eq!(harness.core.poll_timeout(), None, "the retry timer is gone");
    harness.credit(1, 1);
    let next = harness.take_one();
    assert_eq!(next.job, other.job);
    let attempts: Vec<u32> = harness
        .take_events()
        .iter()
        .filter_map(|event| match event {
            Event::TaskFinished { attempts, .. } => Some(*attempts),
            _ => None,
        })
        .collect();
    assert_eq!(
        attempts,
        vec![1, 1, 0],
        "delayed, replayed, never dispatched"
    );
}

#[test]
fn losing_the_node_of_a_cancelled_attempt_cancels_its_task() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::single());
    harness.join_with_credit(1, 1);
    let attempt = harness.take_one().attempt;
    harness.cancel(job.job);
    let loss = harness.lose(1);
    assert_eq!((loss.cancelled, loss.replayed), (1, 0));
    assert_eq!(
        harness.result(attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
    assert!(harness.core.is_quiescent());
}

#[test]
fn cancel_is_idempotent_and_rejects_unknown_jobs() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(4));
    harness.cancel(job.job);
    let again = harness.cancel(job.job);
    assert_eq!(
        again,
        CancelSummary {
            already_terminal: 4,
            already_cancelled: true,
            ..CancelSummary::default()
        }
    );
    for missing in [JobId(0), JobId(2)] {
        assert_eq!(
            harness.core.handle_cancel_job(missing, harness.now),
            Err(CancelError::UnknownJob { job: missing })
        );
    }
}
