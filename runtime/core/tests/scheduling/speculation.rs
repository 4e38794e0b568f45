//! Speculative copies of stragglers: when a copy starts, where, and how the two
//! attempts end.

use saker_core::{
    Assignment, AttemptOutcome, CancelSummary, CoreConfig, Disposition, Event, JobSpec, NodeId,
    NodeLoss, SubmittedJob, TaskStatus, TerminalState, Time,
};

use crate::harness::{Harness, test_config};

/// Run time of every warm-up task: with the default policy (150 %, 5 samples) the
/// threshold is 1.5 ms, so an attempt is a straggler once it has run 1,501 us.
const SAMPLE: u64 = 1_000;
const STRAGGLER_AFTER: u64 = 1_501;

fn later(harness: &mut Harness, micros: u64) {
    let now = harness.now.as_micros() + micros;
    harness.advance_to(Time(now));
}

/// Node 1 runs `samples` tasks of class `class`, one at a time, `SAMPLE` us each.
fn warm_up(harness: &mut Harness, class: u32, samples: u32) {
    harness.submit(JobSpec::array(samples).with_class(class));
    for _ in 0..samples {
        harness.credit(1, 1);
        let assignment = harness.take_one();
        harness.started(assignment.attempt);
        later(harness, SAMPLE);
        harness.result(assignment.attempt, AttemptOutcome::Succeeded);
    }
    harness.take_events();
}

/// Node 1 (4 cores) with a class-0 estimate runs one task of `spec`, started now.
fn running(harness: &mut Harness, spec: JobSpec) -> (SubmittedJob, Assignment) {
    harness.join(1, 4);
    warm_up(harness, 0, 5);
    let job = harness.submit(spec);
    harness.credit(1, 1);
    let original = harness.take_one();
    harness.started(original.attempt);
    (job, original)
}

fn speculative() -> JobSpec {
    JobSpec::single().with_speculation(true)
}

/// `running` a speculative task, then node 2 joins with one core of credit and the
/// straggler's time comes: returns the job, the original and the copy (on node 2).
fn copied(harness: &mut Harness, spec: JobSpec) -> (SubmittedJob, Assignment, Assignment) {
    let (job, original) = running(harness, spec);
    harness.join_with_credit(2, 1);
    later(harness, STRAGGLER_AFTER);
    harness.timeout();
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "one copy: {dispatches:?}");
    assert_eq!(dispatches[0].node, NodeId(2));
    let copy = dispatches[0].assignments[0];
    (job, original, copy)
}

#[test]
fn a_straggler_gets_one_copy_on_another_node() {
    let mut harness = Harness::new();
    let (job, original) = running(&mut harness, speculative());
    let started = harness.now;
    harness.join_with_credit(2, 1);
    assert!(harness.take_dispatches().is_empty(), "not a straggler yet");
    later(&mut harness, STRAGGLER_AFTER - 1);
    harness.timeout();
    assert!(
        harness.take_dispatches().is_empty(),
        "1,500 us is the threshold"
    );
    later(&mut harness, 1);
    harness.timeout();
    let copy = harness.take_one();
    assert_eq!(
        (copy.task, copy.job, copy.index),
        (job.first_task, job.job, 0)
    );
    assert!(copy.attempt > original.attempt, "a fresh attempt id");
    assert_eq!(harness.cores_credit(2), Some((1, 0)));
    let counts = harness.core.counts();
    assert_eq!(
        (counts.speculated, counts.running, counts.assigned),
        (1, 1, 0)
    );
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Running {
            node: NodeId(1),
            attempt: original.attempt
        }),
        "the status names the original"
    );
    assert_eq!(
        started.as_micros() + STRAGGLER_AFTER,
        harness.now.as_micros()
    );

    // At most one copy: more idle credit and time change nothing.
    harness.join_with_credit(3, 4);
    later(&mut harness, 100_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(harness.core.counts().speculated, 1);
}

#[test]
fn no_copy_before_the_class_has_min_samples() {
    let mut harness = Harness::new();
    harness.join(1, 4);
    warm_up(&mut harness, 0, 4);
    // Another class's estimate does not count.
    warm_up(&mut harness, 1, 5);
    harness.submit(speculative());
    harness.credit(1, 1);
    let original = harness.take_one();
    harness.started(original.attempt);
    assert_eq!(harness.core.poll_timeout(), None, "no estimate, no timer");
    harness.join_with_credit(2, 4);
    later(&mut harness, 1_000_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(harness.core.counts().speculated, 0);
}

#[test]
fn an_attempt_never_reported_started_is_no_straggler() {
    let mut harness = Harness::new();
    harness.join(1, 4);
    warm_up(&mut harness, 0, 5);
    harness.submit(speculative());
    harness.credit(1, 1);
    harness.take_one();
    harness.join_with_credit(2, 1);
    later(&mut harness, 1_000_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(harness.core.poll_timeout(), None);
}

#[test]
fn a_copy_waits_until_a_node_other_than_the_original_has_idle_credit() {
    let mut harness = Harness::new();
    let (job, _) = running(&mut harness, speculative());
    // Node 1 has 3 cores of credit left, but it runs the original.
    harness.credit(1, 3);
    harness.join(2, 4);
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    assert!(
        harness.take_dispatches().is_empty(),
        "never on the same node"
    );
    assert_eq!(
        harness.core.poll_timeout(),
        None,
        "a straggler needs no timer"
    );

    // Queued work goes first: a node with credit takes it, not the copy.
    let other = harness.submit(JobSpec::single());
    let work = harness.take_one();
    assert_eq!(work.job, other.job, "node 1 takes the queued task");
    harness.credit(2, 1);
    let copy = harness.take_dispatches();
    assert_eq!(copy.len(), 1);
    assert_eq!(copy[0].node, NodeId(2));
    assert_eq!(copy[0].assignments[0].task, job.first_task);
}

#[test]
fn credit_waiting_for_a_wide_head_task_is_not_spent_on_copies() {
    let mut harness = Harness::new();
    running(&mut harness, speculative());
    harness.submit(JobSpec::single().with_cores(4));
    harness.join(2, 4);
    harness.credit(2, 2);
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    assert!(
        harness.take_dispatches().is_empty(),
        "node 2 waits for 4 cores of credit for the head task"
    );
    harness.credit(2, 2);
    let wide = harness.take_one();
    assert_eq!(wide.index, 0);
    harness.credit(2, 1);
    assert_eq!(harness.take_dispatches().len(), 1, "now the copy");
}

#[test]
fn stragglers_are_copied_oldest_first() {
    let mut harness = Harness::new();
    harness.join(1, 4);
    warm_up(&mut harness, 0, 5);
    let job = harness.submit(JobSpec::array(2).with_speculation(true));
    harness.credit(1, 2);
    let assignments = harness.take_dispatches().remove(0).assignments;
    harness.started(assignments[1].attempt);
    later(&mut harness, 10);
    harness.started(assignments[0].attempt);
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(harness.now.as_micros() - 10 + STRAGGLER_AFTER))
    );
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    harness.join_with_credit(2, 1);
    assert_eq!(
        harness.take_one().task,
        job.task(1),
        "index 1 started first"
    );
    harness.credit(2, 1);
    assert_eq!(harness.take_one().task, job.task(0));
}

#[test]
fn not_for_jobs_that_do_not_allow_it_or_with_speculation_off() {
    let mut harness = Harness::new();
    running(&mut harness, JobSpec::single());
    harness.join_with_credit(2, 1);
    assert_eq!(harness.core.poll_timeout(), None);
    later(&mut harness, 1_000_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty(), "not speculative");

    let mut harness = Harness::with_config(CoreConfig {
        speculation: None,
        ..test_config()
    });
    running(&mut harness, speculative());
    harness.join_with_credit(2, 1);
    assert_eq!(harness.core.poll_timeout(), None);
    later(&mut harness, 1_000_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty(), "speculation off");
    assert_eq!(harness.core.counts().speculated, 0);
}

#[test]
fn the_first_success_wins_and_the_other_attempt_is_stopped() {
    // The copy wins.
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative());
    harness.take_events();
    harness.started(copy.attempt);
    assert_eq!(
        harness.result(copy.attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            task: job.first_task,
            job: job.job,
            index: 0,
            state: TerminalState::Succeeded,
            attempts: 2
        }
    );
    assert_eq!(
        harness.take_events(),
        vec![
            Event::CancelAttempt {
                node: NodeId(1),
                attempt: original.attempt
            },
            Event::TaskFinished {
                task: job.first_task,
                job: job.job,
                index: 0,
                state: TerminalState::Succeeded,
                attempts: 2
            },
            Event::JobFinished { job: job.job }
        ]
    );
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Cancelled),
        Disposition::Duplicate
    );
    let counts = harness.core.counts();
    assert_eq!(
        (counts.succeeded, counts.duplicates),
        (6, 1),
        "5 warm-up tasks"
    );
    assert_eq!((counts.running, counts.replays), (0, 0));
    assert!(harness.core.is_quiescent());

    // The original wins.
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative());
    harness.take_events();
    assert!(matches!(
        harness.result(original.attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            state: TerminalState::Succeeded,
            attempts: 2,
            ..
        }
    ));
    assert_eq!(
        harness.take_events()[0],
        Event::CancelAttempt {
            node: NodeId(2),
            attempt: copy.attempt
        }
    );
    assert_eq!(
        harness.result(copy.attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate,
        "a second success is not accepted"
    );
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Finished)
    );
}

#[test]
fn losing_the_copy_s_node_leaves_the_original_running() {
    let mut harness = Harness::new();
    let (job, original, _) = copied(&mut harness, speculative());
    assert_eq!(
        harness.lose(2),
        NodeLoss {
            attempts: 1,
            continued: 1,
            ..NodeLoss::default()
        }
    );
    let counts = harness.core.counts();
    assert_eq!((counts.replays, counts.queued, counts.running), (0, 0, 1));
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Running {
            node: NodeId(1),
            attempt: original.attempt
        })
    );
    // No second copy for this dispatch of the task.
    harness.join_with_credit(3, 4);
    later(&mut harness, 100_000);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());
    assert!(matches!(
        harness.result(original.attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            state: TerminalState::Succeeded,
            attempts: 2,
            ..
        }
    ));
}

#[test]
fn losing_the_original_s_node_hands_the_task_to_the_copy() {
    let mut harness = Harness::new();
    let (job, _, copy) = copied(&mut harness, speculative());
    let loss = harness.lose(1);
    assert_eq!((loss.attempts, loss.continued, loss.replayed), (1, 1, 0));
    let counts = harness.core.counts();
    assert_eq!(
        (counts.assigned, counts.running, counts.replays),
        (1, 0, 0),
        "the copy has not started"
    );
    assert_eq!(
        harness.core.task_status(job.first_task),
        Some(TaskStatus::Assigned {
            node: NodeId(2),
            attempt: copy.attempt
        })
    );
    harness.started(copy.attempt);
    assert_eq!(harness.core.counts().running, 1);
    assert!(matches!(
        harness.result(copy.attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted { .. }
    ));
}

#[test]
fn one_attempt_failing_leaves_the_other_and_counts_no_retry() {
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative().with_max_retries(3));
    harness.started(copy.attempt);
    assert_eq!(
        harness.result(copy.attempt, AttemptOutcome::Failed),
        Disposition::Continues {
            task: job.first_task
        }
    );
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Failed),
        Disposition::WillRetry {
            task: job.first_task,
            not_before: Time(harness.now.as_micros() + 100)
        },
        "the last live attempt's failure is the first retry"
    );
    let counts = harness.core.counts();
    assert_eq!((counts.retries, counts.delayed), (1, 1));

    // A loss of one of two is not replayed either; the other's success counts.
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative());
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Lost),
        Disposition::Continues {
            task: job.first_task
        }
    );
    assert_eq!(harness.core.counts().replays, 0);
    assert!(matches!(
        harness.result(copy.attempt, AttemptOutcome::Succeeded),
        Disposition::Accepted {
            state: TerminalState::Succeeded,
            ..
        }
    ));
}

#[test]
fn both_attempts_failing_take_the_retry_path_once() {
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative().with_max_retries(1));
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Failed),
        Disposition::Continues {
            task: job.first_task
        }
    );
    assert!(
        matches!(
            harness.result(copy.attempt, AttemptOutcome::Failed),
            Disposition::WillRetry { .. }
        ),
        "two failed attempts are one failure of the task"
    );
    assert_eq!(harness.core.counts().retries, 1);
    later(&mut harness, 100);
    harness.timeout();
    harness.credit(2, 1);
    let retry = harness.take_one();
    assert!(matches!(
        harness.result(retry.attempt, AttemptOutcome::Failed),
        Disposition::Accepted {
            state: TerminalState::Failed,
            attempts: 3,
            ..
        }
    ));
}

#[test]
fn cancelling_a_job_stops_both_attempts() {
    let mut harness = Harness::new();
    let (job, original, copy) = copied(&mut harness, speculative());
    harness.take_events();
    assert_eq!(
        harness.cancel(job.job),
        CancelSummary {
            attempts_signalled: 2,
            ..CancelSummary::default()
        }
    );
    assert_eq!(
        harness.take_events(),
        vec![
            Event::CancelAttempt {
                node: NodeId(1),
                attempt: original.attempt
            },
            Event::CancelAttempt {
                node: NodeId(2),
                attempt: copy.attempt
            }
        ]
    );
    assert!(matches!(
        harness.result(copy.attempt, AttemptOutcome::Cancelled),
        Disposition::Accepted {
            state: TerminalState::Cancelled,
            attempts: 2,
            ..
        }
    ));
    assert!(
        !harness
            .take_events()
            .iter()
            .any(|event| matches!(event, Event::CancelAttempt { .. })),
        "no second stop"
    );
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Succeeded),
        Disposition::Duplicate
    );
    let counts = harness.core.counts();
    assert_eq!((counts.cancelled, counts.duplicates), (1, 1));

    // The same when the first news is a node loss.
    let mut harness = Harness::new();
    let (job, original, _) = copied(&mut harness, speculative());
    harness.cancel(job.job);
    let loss = harness.lose(2);
    assert_eq!((loss.cancelled, loss.continued), (1, 0));
    assert_eq!(
        harness.result(original.attempt, AttemptOutcome::Cancelled),
        Disposition::Duplicate
    );
    assert_eq!(harness.core.counts().cancelled, 1);
}

#[test]
fn poll_timeout_names_the_instant_an_attempt_becomes_a_straggler() {
    let mut harness = Harness::new();
    let (_, original) = running(&mut harness, speculative());
    let started = harness.now.as_micros();
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(started + STRAGGLER_AFTER))
    );
    // A faster class estimate moves it earlier: 45 more samples of 100 us, at once
    // (mean 190 us, sigma 270 us: threshold 1,095 us).
    harness.join(3, 64);
    harness.submit(JobSpec::array(45));
    harness.credit(3, 45);
    let samples = harness.take_dispatches().remove(0).assignments;
    for sample in &samples {
        harness.started(sample.attempt);
    }
    later(&mut harness, 100);
    for sample in &samples {
        harness.result(sample.attempt, AttemptOutcome::Succeeded);
    }
    assert_eq!(harness.core.poll_timeout(), Some(Time(started + 1_096)));
    harness.join_with_credit(2, 1);
    harness.advance_to(Time(started + 1_096));
    harness.timeout();
    assert_eq!(harness.take_one().task, original.task);
    assert_eq!(harness.core.poll_timeout(), None);

    // Draining: no copy, and no timer for one.
    let mut harness = Harness::new();
    running(&mut harness, speculative());
    harness.stop_dispatch();
    assert_eq!(harness.core.poll_timeout(), None);
    harness.join_with_credit(2, 1);
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());
}

#[test]
fn a_copy_must_fit_the_deadline() {
    let limited = speculative().with_time_limit_micros(10_000);
    let mut harness = Harness::new();
    running(&mut harness, limited);
    let now = harness.now.as_micros();
    // The copy would start at now + 1,501 and needs 10,000 us.
    harness.set_deadline(Some(Time(now + STRAGGLER_AFTER + 10_000 - 1)));
    harness.join_with_credit(2, 1);
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    assert!(harness.take_dispatches().is_empty());

    let mut harness = Harness::new();
    running(&mut harness, limited);
    let now = harness.now.as_micros();
    harness.set_deadline(Some(Time(now + STRAGGLER_AFTER + 10_000)));
    harness.join_with_credit(2, 1);
    later(&mut harness, STRAGGLER_AFTER);
    harness.timeout();
    assert_eq!(harness.take_dispatches().len(), 1, "fits exactly");
}

#[test]
fn the_same_inputs_give_the_same_copies() {
    fn run() -> (Vec<String>, u64) {
        let mut harness = Harness::new();
        let mut log = Vec::new();
        harness.join(1, 8);
        warm_up(&mut harness, 0, 5);
        harness.submit(JobSpec::array(12).with_speculation(true));
        harness.credit(1, 8);
        for node in 2..=4 {
            harness.join(node, 2);
        }
        let mut attempts = Vec::new();
        for dispatch in harness.take_dispatches() {
            log.push(format!("{dispatch:?}"));
            attempts.extend(dispatch.assignments);
        }
        for (step, assignment) in attempts.iter().enumerate() {
            later(&mut harness, 37 * step as u64);
            harness.started(assignment.attempt);
        }
        for node in 2..=4 {
            harness.credit(node, 4);
        }
        for round in 0..6 {
            later(&mut harness, 700);
            harness.timeout();
            for dispatch in harness.take_dispatches() {
                log.push(format!("{round}: {dispatch:?}"));
            }
            for event in harness.take_events() {
                log.push(format!("{round}: {event:?}"));
            }
        }
        log.push(format!("{:?}", harness.core.counts()));
        (log, harness.core.counts().speculated)
    }
    let (first, speculated) = run();
    assert_eq!(speculated, 8, "every started task got a copy: {first:#?}");
    assert_eq!(first, run().0);
}
