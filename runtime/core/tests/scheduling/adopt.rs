//! Adoption: a new root (a later term) takes over the attempts an earlier root
//! dispatched that agents still hold ([`Core::handle_adopt`]), so their tasks run once.
//! The harness audits the core after every input.
//!
//! [`Core::handle_adopt`]: saker_core::Core::handle_adopt

use saker_core::{
    AdoptError, AttemptError, AttemptId, AttemptOutcome, Core, CoreConfig, Dependency,
    DependencyKind, Disposition, EarlierAttempts, Event, JobSpec, NodeId, NodeLoss, Placement,
    Speculation, SubmittedJob, TaskId, TaskStatus, TerminalState, Time,
};

use crate::harness::{Harness, test_config};

/// The root that took over from the pilot's first: term 2.
fn new_root() -> Harness {
    Harness::with_config(CoreConfig {
        term: 2,
        ..test_config()
    })
}

/// Attempt `n` of the first root (term 1).
fn old(n: u64) -> AttemptId {
    AttemptId(n)
}

/// Restores `spec` from a journal with the tasks at `finished` succeeded.
fn restore(harness: &mut Harness, spec: JobSpec, finished: &[u32]) -> SubmittedJob {
    let finished: Vec<(u32, TerminalState)> = finished
        .iter()
        .map(|&index| (index, TerminalState::Succeeded))
        .collect();
    let job = harness
        .core
        .handle_restore_job(spec, &finished, &[], harness.now)
        .expect("a restorable job");
    harness.drain();
    job
}

/// The task indexes dispatched since the last take, in order.
fn indexes(harness: &mut Harness) -> Vec<u32> {
    let assigned = harness.take_assigned();
    assigned.into_iter().map(|(_, index, _)| index).collect()
}

fn accepted(disposition: Disposition) -> (TerminalState, u32) {
    match disposition {
        Disposition::Accepted {
            state, attempts, ..
        } => (state, attempts),
        other => panic!("not accepted: {other:?}"),
    }
}

#[test]
fn a_task_adopted_from_the_middle_of_a_fresh_range_never_runs_again() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::array(10), &[]);
    assert_eq!(harness.core.ready_queue_entries(), 1);
    harness.join(1, 4);
    harness.advance_to(Time(500));
    harness
        .adopt(1, job.task(3), old(4), Some(Time(200)))
        .unwrap();
    assert_eq!(
        harness.core.ready_queue_entries(),
        2,
        "split around index 3"
    );
    harness.adopt(1, job.task(6), old(7), None).unwrap();
    assert_eq!(harness.core.ready_queue_entries(), 3);
    assert!(harness.take_dispatches().is_empty() && harness.take_events().is_empty());

    let counts = harness.core.counts();
    assert_eq!(
        (
            counts.queued,
            counts.assigned,
            counts.running,
            counts.adopted
        ),
        (8, 1, 1, 2)
    );
    let of_job = harness.core.job_counts(job.job).unwrap();
    assert_eq!((of_job.queued, of_job.assigned, of_job.running), (8, 1, 1));
    let node = NodeId(1);
    assert_eq!(
        harness.core.task_status(job.task(3)),
        Some(TaskStatus::Running {
            node,
            attempt: old(4)
        })
    );
    assert_eq!(
        harness.core.task_status(job.task(6)),
        Some(TaskStatus::Assigned {
            node,
            attempt: old(7)
        })
    );
    assert_eq!(
        harness.core.node_attempts(node),
        vec![(job.task(3), old(4)), (job.task(6), old(7))]
    );
    assert_eq!(
        harness.cores_credit(1),
        Some((4, 0)),
        "credit is the agent's"
    );

    // The rest runs in order, numbered in this term; the adopted tasks never do.
    harness.join_with_credit(2, 16);
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "{dispatches:?}");
    let assignments = &dispatches[0].assignments;
    assert_eq!(assignments[0].attempt, AttemptId::first_of_term(2));
    let ran: Vec<u32> = assignments.iter().map(|a| a.index).collect();
    assert_eq!(ran, vec![0, 1, 2, 4, 5, 7, 8, 9]);
    for assignment in assignments {
        harness.result(assignment.attempt, AttemptOutcome::Succeeded);
    }
    harness.started(old(7));
    for attempt in [old(4), old(7)] {
        let disposition = harness.result(attempt, AttemptOutcome::Succeeded);
        assert_eq!(accepted(disposition), (TerminalState::Succeeded, 1));
    }
    assert!(harness.core.is_quiescent());
    assert_eq!(harness.core.counts().succeeded, 10);
}

#[test]
fn a_task_adopted_from_the_return_lane_leaves_it() {
    let mut harness = new_root();
    // Index 5 finished: 0 to 4 are queued one by one, 6 and 7 as a range. Index 2
    // was replayed once before.
    let replayed = EarlierAttempts {
        failures: 0,
        replays: 1,
    };
    let job = harness
        .core
        .handle_restore_job(
            JobSpec::array(8),
            &[(5, TerminalState::Succeeded)],
            &[(2, replayed)],
            harness.now,
        )
        .unwrap();
    harness.drain();
    assert_eq!(harness.core.ready_queue_entries(), 6);
    harness.join(1, 2);
    harness.adopt(1, job.task(2), old(3), None).unwrap();
    assert_eq!(harness.core.ready_queue_entries(), 5);
    assert_eq!(harness.core.counts().queued, 6);
    harness.join_with_credit(2, 16);
    assert_eq!(indexes(&mut harness), vec![0, 1, 3, 4, 6, 7]);
    let disposition = harness.result(old(3), AttemptOutcome::Succeeded);
    assert_eq!(
        accepted(disposition),
        (TerminalState::Succeeded, 2),
        "its replay before, then this attempt"
    );
}

/// Taken from the return lane, failed, then back in it: it runs once more, behind the
/// tasks that were queued with it.
#[test]
fn an_adopted_task_that_fails_is_queued_again_once() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::array(4).with_max_retries(1), &[3]);
    harness.join(1, 1);
    harness.adopt(1, job.task(1), old(2), None).unwrap();
    let retry = harness.result(old(2), AttemptOutcome::Failed);
    assert!(matches!(retry, Disposition::WillRetry { .. }), "{retry:?}");
    harness.advance_to(Time::from_millis(1));
    harness.timeout();
    assert_eq!(harness.core.counts().queued, 3);
    harness.join_with_credit(2, 8);
    assert_eq!(indexes(&mut harness), vec![0, 2, 1]);
}

#[test]
fn a_task_waiting_for_its_retry_backoff_can_be_adopted() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::single().with_max_retries(2), &[]);
    harness.join_with_credit(2, 1);
    let mine = harness.take_one();
    let retry = harness.result(mine.attempt, AttemptOutcome::Failed);
    assert!(matches!(retry, Disposition::WillRetry { .. }), "{retry:?}");
    assert_eq!(harness.core.counts().delayed, 1);
    harness.join(1, 1);
    harness.adopt(1, job.task(0), old(1), None).unwrap();
    let counts = harness.core.counts();
    assert_eq!((counts.delayed, counts.assigned), (0, 1));
    assert_eq!(
        harness.core.poll_timeout(),
        None,
        "its backoff timer is gone"
    );
    harness.advance_to(Time::from_millis(10));
    harness.timeout();
    harness.credit(2, 1);
    assert!(harness.take_dispatches().is_empty(), "not dispatched again");
    let disposition = harness.result(old(1), AttemptOutcome::Succeeded);
    assert_eq!(accepted(disposition), (TerminalState::Succeeded, 2));
}

#[test]
fn a_task_held_past_the_deadline_can_be_adopted() {
    let mut harness = new_root();
    let job = restore(
        &mut harness,
        JobSpec::array(4).with_time_limit_micros(10_000),
        &[],
    );
    harness.set_deadline(Some(Time(5_000)));
    assert_eq!(harness.core.counts().beyond_deadline, 4);
    harness.join(1, 4);
    harness
        .adopt(1, job.task(1), old(2), Some(harness.now))
        .unwrap();
    assert_eq!(harness.core.counts().beyond_deadline, 3);
    harness.join_with_credit(2, 8);
    assert!(harness.take_dispatches().is_empty(), "the rest stays held");
    harness.set_deadline(None);
    assert_eq!(indexes(&mut harness), vec![0, 2, 3]);
}

#[test]
fn a_task_waiting_for_its_jobs_time_can_be_adopted() {
    let mut harness = new_root();
    let job = harness
        .core
        .handle_restore_job_at(
            JobSpec::array(3),
            &[],
            Some(Time(1_000)),
            &[],
            &[],
            harness.now,
        )
        .unwrap();
    harness.drain();
    assert_eq!(harness.core.counts().waiting, 3);
    harness.join(1, 1);
    harness.adopt(1, job.task(2), old(9), None).unwrap();
    assert_eq!(harness.core.counts().waiting, 2);
    harness.join_with_credit(2, 4);
    assert!(harness.take_dispatches().is_empty(), "not before its time");
    harness.advance_to(Time(1_000));
    harness.timeout();
    assert_eq!(indexes(&mut harness), vec![0, 1]);
}

#[test]
fn pinned_and_preferring_work_can_be_adopted() {
    let mut harness = new_root();
    let pinned = JobSpec::array(3).with_placement(Placement::Node { node: NodeId(1) });
    let pinned = restore(&mut harness, pinned, &[]);
    let preferring = restore(&mut harness, JobSpec::array(3), &[]);
    harness.prefer(preferring.job, &[1]);
    harness.join(1, 8);
    harness.join(2, 4);
    harness.adopt(1, pinned.task(0), old(1), None).unwrap();
    harness.adopt(2, preferring.task(1), old(2), None).unwrap();
    harness.credit(2, 4);
    assert!(
        harness.take_dispatches().is_empty(),
        "node 2 takes neither node 1's work nor work waiting for it"
    );
    harness.credit(1, 8);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 1, 1), (1, 2, 1), (1, 0, 2), (1, 2, 2)]
    );
}

/// Each refusal leaves the core as it was: the same counts and queue, and the audit
/// still passes (the harness runs it after every input).
#[test]
fn refusals_name_their_reason_and_change_nothing() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::array(4), &[0]);
    let gang = JobSpec::single().with_placement(Placement::Gang { nodes: 2 });
    let gang = restore(&mut harness, gang, &[]);
    let first = restore(&mut harness, JobSpec::single(), &[]);
    let after_first = Dependency {
        job: first.job,
        kind: DependencyKind::Success,
    };
    let waits = harness
        .core
        .handle_restore_job_after(JobSpec::single(), &[after_first], &[], &[], harness.now)
        .unwrap();
    harness.join(1, 4);
    harness.adopt(1, job.task(1), old(2), None).unwrap();
    let snapshot = |harness: &Harness| {
        (
            harness.core.counts(),
            harness.core.ready_queue_entries(),
            harness.core.node_attempts(NodeId(1)),
        )
    };
    let before = snapshot(&harness);
    let (mine, next) = (AttemptId::first_of_term(2), AttemptId::first_of_term(3));
    let refusals = [
        (
            9,
            job.task(2),
            old(3),
            AdoptError::UnknownNode { node: NodeId(9) },
        ),
        (
            1,
            job.task(2),
            AttemptId(0),
            AdoptError::InvalidAttempt {
                attempt: AttemptId(0),
            },
        ),
        (
            1,
            job.task(2),
            mine,
            AdoptError::NotEarlierTerm {
                attempt: mine,
                term: 2,
            },
        ),
        (
            1,
            job.task(2),
            next,
            AdoptError::NotEarlierTerm {
                attempt: next,
                term: 2,
            },
        ),
        (
            1,
            job.task(2),
            old(2),
            AdoptError::AttemptLive {
                attempt: old(2),
                task: job.task(1),
            },
        ),
        (
            1,
            TaskId(999),
            old(3),
            AdoptError::UnknownTask { task: TaskId(999) },
        ),
        (
            1,
            job.task(0),
            old(3),
            AdoptError::Finished { task: job.task(0) },
        ),
        (
            1,
            job.task(1),
            old(3),
            AdoptError::InFlight {
                task: job.task(1),
                attempt: old(2),
            },
        ),
        (
            1,
            gang.task(0),
            old(3),
            AdoptError::Gang {
                task: gang.task(0),
                job: gang.job,
            },
        ),
        (
            1,
            waits.task(0),
            old(3),
            AdoptError::WaitingForJobs {
                task: waits.task(0),
                job: waits.job,
            },
        ),
    ];
    for (node, task, attempt, error) in refusals {
        assert_eq!(harness.adopt(node, task, attempt, None), Err(error.clone()));
        assert_eq!(snapshot(&harness), before, "after: {error}");
    }
    assert_eq!(harness.core.counts().adopted, 1);
}

#[test]
fn an_adopted_attempt_of_a_cancelled_job_is_told_to_stop() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::array(3), &[]);
    harness.join(1, 4);
    harness
        .adopt(1, job.task(1), old(1), Some(harness.now))
        .unwrap();
    let summary = harness.cancel(job.job);
    assert_eq!((summary.cancelled, summary.attempts_signalled), (2, 1));
    let events = harness.take_events();
    let stop = Event::CancelAttempt {
        node: NodeId(1),
        attempt: old(1),
    };
    assert!(events.contains(&stop), "{events:?}");
    let cancelled: Vec<u32> = events
        .iter()
        .filter_map(|event| match *event {
            Event::TaskFinished { index, state, .. } => {
                assert_eq!(state, TerminalState::Cancelled);
                Some(index)
            }
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, vec![0, 2], "both parts of the split range");
    let before = harness.core.counts();
    assert_eq!(
        harness.adopt(1, job.task(0), old(2), None),
        Err(AdoptError::Cancelled {
            task: job.task(0),
            job: job.job
        })
    );
    assert_eq!(harness.core.counts(), before);
    let disposition = harness.result(old(1), AttemptOutcome::Cancelled);
    assert_eq!(accepted(disposition), (TerminalState::Cancelled, 1));
    assert!(harness.core.is_quiescent());
}

#[test]
fn an_adopted_attempt_ends_once() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::single(), &[]);
    harness.join(1, 1);
    harness.adopt(1, job.task(0), old(5), None).unwrap();
    harness.started(old(5));
    assert_eq!(harness.core.counts().running, 1);
    let disposition = harness.result(old(5), AttemptOutcome::Succeeded);
    assert_eq!(accepted(disposition), (TerminalState::Succeeded, 1));
    let events = harness.take_events();
    assert_eq!(events.len(), 2, "TaskFinished, JobFinished: {events:?}");
    let again = harness.result(old(5), AttemptOutcome::Succeeded);
    assert_eq!(again, Disposition::Duplicate);
    assert_eq!(
        harness.core.handle_started(old(5), harness.now),
        Err(AttemptError::Stale { attempt: old(5) })
    );
    let counts = harness.core.counts();
    assert_eq!((counts.succeeded, counts.duplicates), (1, 1));
}

#[test]
fn losing_the_node_of_an_adopted_attempt_replays_its_task() {
    let mut harness = new_root();
    let job = restore(&mut harness, JobSpec::array(2), &[]);
    harness.join(1, 2);
    harness
        .adopt(1, job.task(0), old(1), Some(harness.now))
        .unwrap();
    let loss = harness.lose(1);
    assert_eq!(
        loss,
        NodeLoss {
            attempts: 1,
            replayed: 1,
            ..NodeLoss::default()
        }
    );
    harness.join_with_credit(2, 4);
    let dispatches = harness.take_dispatches();
    let assignments = &dispatches[0].assignments;
    let ran: Vec<(u32, u32)> = assignments
        .iter()
        .map(|a| (a.index, a.attempt.term()))
        .collect();
    assert_eq!(ran, vec![(0, 2), (1, 2)], "the replay first, in this term");
    let late = harness.result(old(1), AttemptOutcome::Succeeded);
    assert_eq!(late, Disposition::Duplicate, "the lost node's late result");
    let replay = harness.result(assignments[0].attempt, AttemptOutcome::Succeeded);
    assert_eq!(accepted(replay), (TerminalState::Succeeded, 2));
}

/// An adopted attempt's run counts from when it started, not from its adoption: a
/// straggler estimate of 1 ms (150 %) makes it a straggler 1.5 ms after its start.
#[test]
fn an_adopted_attempt_runs_from_when_it_started() {
    let speculation = Speculation {
        factor_percent: 150,
        min_samples: 1,
    };
    let mut harness = Harness::with_config(CoreConfig {
        term: 2,
        speculation: Some(speculation),
        ..test_config()
    });
    let job = restore(&mut harness, JobSpec::array(2).with_speculation(true), &[]);
    harness.join(1, 1);
    harness.advance_to(Time(1_000));
    harness
        .adopt(1, job.task(0), old(1), Some(Time(0)))
        .unwrap();
    harness.join_with_credit(2, 1);
    let sample = harness.take_one();
    harness.started(sample.attempt);
    harness.advance_to(Time(2_000));
    harness.result(sample.attempt, AttemptOutcome::Succeeded);
    // Started at 0, it has run 2 ms; adopted at 1 ms it would have run 1.
    harness.credit(2, 1);
    let copy = harness.take_one();
    assert_eq!((copy.task, copy.attempt.term()), (job.task(0), 2));
}

#[test]
fn a_core_numbers_its_attempts_in_its_term() {
    let mut harness = Harness::with_config(CoreConfig {
        term: 3,
        ..test_config()
    });
    assert_eq!(harness.core.term(), 3);
    harness.submit(JobSpec::array(2));
    harness.join_with_credit(1, 2);
    let first = AttemptId::first_of_term(3);
    let issued: Vec<AttemptId> = harness.take_dispatches()[0]
        .assignments
        .iter()
        .map(|a| a.attempt)
        .collect();
    assert_eq!(issued, vec![first, AttemptId(first.0 + 1)]);
    assert!(issued.iter().all(|attempt| attempt.term() == 3));
    // Earlier roots' attempts that were not adopted were superseded; ids no root
    // issued yet, or none ever does, are unknown.
    for (attempt, disposition) in [
        (old(7), Disposition::Duplicate),
        (AttemptId::first_of_term(2), Disposition::Duplicate),
        (AttemptId(first.0 + 2), Disposition::UnknownAttempt),
        (AttemptId::first_of_term(4), Disposition::UnknownAttempt),
        (AttemptId(0), Disposition::UnknownAttempt),
        (AttemptId(first.0 - 1), Disposition::UnknownAttempt),
    ] {
        let got = harness.result(attempt, AttemptOutcome::Succeeded);
        assert_eq!(got, disposition, "{attempt}");
    }
    assert_eq!(
        harness.core.handle_started(old(7), harness.now),
        Err(AttemptError::Stale { attempt: old(7) })
    );
    let counts = harness.core.counts();
    assert_eq!((counts.duplicates, counts.unknown_attempts), (2, 4));
    let default_term = Core::new(CoreConfig {
        term: 0,
        ..CoreConfig::default()
    });
    assert_eq!(default_term.term(), 1, "term 0 is term 1");
}

/// A gang attempt is adopted whole on its members: it holds each of them, ends with
/// its one result, and its task is not placed again; refusals change nothing.
#[test]
fn a_gang_is_adopted_on_all_its_members_and_ends_once() {
    let mut harness = new_root();
    let gang = JobSpec::array(2).with_placement(Placement::Gang { nodes: 2 });
    let gang = restore(&mut harness, gang, &[]);
    let single = restore(&mut harness, JobSpec::single(), &[]);
    for node in 1..=3 {
        harness.join(node, 1);
    }
    let refusals = [
        (
            vec![1, 2, 3],
            gang.task(0),
            AdoptError::Members {
                task: gang.task(0),
                expected: 2,
            },
        ),
        (
            vec![1, 1],
            gang.task(0),
            AdoptError::Members {
                task: gang.task(0),
                expected: 2,
            },
        ),
        (
            vec![1, 2],
            single.task(0),
            AdoptError::NotGang {
                task: single.task(0),
                job: single.job,
            },
        ),
        (
            vec![1, 4],
            gang.task(0),
            AdoptError::UnknownNode { node: NodeId(4) },
        ),
    ];
    for (members, task, error) in refusals {
        assert_eq!(harness.adopt_gang(&members, task, old(5), None), Err(error));
    }
    assert_eq!(harness.core.counts().adopted, 0);

    harness
        .adopt_gang(&[2, 3], gang.task(0), old(5), Some(harness.now))
        .unwrap();
    assert_eq!(
        harness.core.gang_members(old(5)),
        Some(&[NodeId(2), NodeId(3)][..])
    );
    // Credit everywhere: the other gang task needs two free nodes and finds one
    // (nodes 2 and 3 are held), so it reserves node 1 and one of the adopted gang's;
    // the single task (no time limit) goes where no reservation is, behind the gang.
    for node in 1..=3 {
        harness.credit(node, 1);
    }
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "{dispatches:?}");
    assert_eq!(dispatches[0].assignments[0].task, single.task(0));
    assert_eq!(dispatches[0].node, NodeId(3), "{dispatches:?}");
    let counts = harness.core.counts();
    assert_eq!((counts.running, counts.assigned, counts.adopted), (1, 1, 1));

    let disposition = harness.result(old(5), AttemptOutcome::Succeeded);
    assert_eq!(accepted(disposition), (TerminalState::Succeeded, 1));
    // Node 2 is free again: the other gang task starts on its reservation.
    harness.credit(2, 1);
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "{dispatches:?}");
    assert_eq!(dispatches[0].assignments[0].task, gang.task(1));
    assert_eq!(dispatches[0].members, vec![NodeId(1), NodeId(2)]);
}

/// A member of an adopted gang is lost: the survivor is told to stop and the task
/// runs again, as for a gang this root placed.
#[test]
fn an_adopted_gang_that_loses_a_member_is_stopped_and_replayed() {
    let mut harness = new_root();
    let gang = JobSpec::single().with_placement(Placement::Gang { nodes: 2 });
    let gang = restore(&mut harness, gang, &[]);
    for node in 1..=3 {
        harness.join(node, 1);
    }
    harness
        .adopt_gang(&[1, 2], gang.task(0), old(9), Some(harness.now))
        .unwrap();
    harness.lose(2);
    let events = harness.take_events();
    let stop = Event::CancelAttempt {
        node: NodeId(1),
        attempt: old(9),
    };
    assert!(events.contains(&stop), "{events:?}");
    harness.result(old(9), AttemptOutcome::Cancelled);
    for node in [1, 3] {
        harness.credit(node, 1);
    }
    let dispatches = harness.take_dispatches();
    assert_eq!(dispatches.len(), 1, "{dispatches:?}");
    assert_eq!(dispatches[0].assignments[0].task, gang.task(0));
    assert_eq!(dispatches[0].members, vec![NodeId(1), NodeId(3)]);
}
