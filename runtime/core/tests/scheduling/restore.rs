//! Rebuilding a core from what a journal remembers.

use saker_core::{
    AttemptOutcome, Core, CoreConfig, EarlierAttempts, Event, JobSpec, NodeId, Resources,
    RestoreError, TaskStatus, TerminalState, Time,
};

fn drain_events(core: &mut Core) -> Vec<Event> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

/// Runs everything dispatchable on one big node to completion; returns finished tasks.
fn run_all(core: &mut Core) -> Vec<(u64, TerminalState)> {
    let node = NodeId(1);
    let big = Resources::cores(1_000_000);
    let _ = core.handle_node_joined(node, big, Time::ZERO);
    core.handle_credit(node, big, Time::ZERO).unwrap();
    let mut finished = Vec::new();
    while let Some(dispatch) = core.poll_dispatch() {
        for assignment in dispatch.assignments {
            core.handle_result(assignment.attempt, AttemptOutcome::Succeeded, Time::ZERO);
        }
    }
    for event in drain_events(core) {
        if let Event::TaskFinished { task, state, .. } = event {
            finished.push((task.0, state));
        }
    }
    finished
}

#[test]
fn restored_jobs_get_the_same_ids_and_only_unfinished_tasks_run() {
    let mut core = Core::new(CoreConfig::default());
    let first = core
        .handle_restore_job(
            JobSpec::array(10),
            &[
                (0, TerminalState::Succeeded),
                (1, TerminalState::Failed),
                (4, TerminalState::Succeeded),
            ],
            &[],
            Time::ZERO,
        )
        .unwrap();
    let second = core
        .handle_restore_job(JobSpec::single(), &[], &[], Time::ZERO)
        .unwrap();
    assert_eq!((first.job.0, first.first_task.0), (1, 1));
    assert_eq!((second.job.0, second.first_task.0), (2, 11));
    let counts = core.counts();
    assert_eq!(
        (
            counts.submitted,
            counts.succeeded,
            counts.failed,
            counts.queued
        ),
        (11, 2, 1, 8)
    );
    core.check_consistency().unwrap();
    assert!(
        drain_events(&mut core).is_empty(),
        "restored results are not reported again"
    );

    let mut ran: Vec<u64> = run_all(&mut core)
        .into_iter()
        .map(|(task, _)| task)
        .collect();
    ran.sort_unstable();
    assert_eq!(
        ran,
        vec![3, 4, 6, 7, 8, 9, 10, 11],
        "tasks 1, 2 and 5 had finished"
    );
    assert!(core.is_quiescent());
    core.check_consistency().unwrap();
}

#[test]
fn a_fully_finished_job_is_finished_at_once_and_the_gaps_come_first() {
    let mut core = Core::new(CoreConfig::default());
    let all: Vec<_> = (0..3).map(|i| (i, TerminalState::Succeeded)).collect();
    let job = core
        .handle_restore_job(JobSpec::array(3), &all, &[], Time::ZERO)
        .unwrap();
    assert_eq!(core.job_counts(job.job).unwrap().succeeded, 3);
    assert_eq!(
        drain_events(&mut core),
        vec![Event::JobFinished { job: job.job }]
    );

    let gappy = core
        .handle_restore_job(
            JobSpec::array(1000),
            &[(500, TerminalState::Succeeded)],
            &[],
            Time::ZERO,
        )
        .unwrap();
    // Below the highest finished index: one record each; above it: still one range.
    assert_eq!(core.task_status(gappy.task(10)), Some(TaskStatus::Queued));
    assert!(
        core.ready_queue_entries() <= 501,
        "{}",
        core.ready_queue_entries()
    );
    core.check_consistency().unwrap();
}

#[test]
fn bad_restores_are_refused_and_change_nothing() {
    let mut core = Core::new(CoreConfig::default());
    assert_eq!(
        core.handle_restore_job(
            JobSpec::array(3),
            &[(3, TerminalState::Succeeded)],
            &[],
            Time::ZERO
        ),
        Err(RestoreError::IndexOutOfRange { index: 3, count: 3 })
    );
    assert_eq!(
        core.handle_restore_job(
            JobSpec::array(3),
            &[(1, TerminalState::Succeeded), (1, TerminalState::Failed)],
            &[],
            Time::ZERO
        ),
        Err(RestoreError::DuplicateIndex { index: 1 })
    );
    assert_eq!(core.counts().submitted, 0);
    let job = core
        .handle_restore_job(JobSpec::single(), &[], &[], Time::ZERO)
        .unwrap();
    assert_eq!(job.job.0, 1, "refused restores used no ids");
}

#[test]
fn restored_tasks_keep_the_retries_and_replays_they_used_up() {
    let mut spec = JobSpec::array(4);
    spec.max_retries = 2;
    spec.max_replays = Some(1);
    let mut core = Core::new(CoreConfig {
        retry_backoff: saker_core::Backoff::NONE,
        ..CoreConfig::default()
    });
    let used = |failures, replays| EarlierAttempts { failures, replays };
    // Task 0 finished after one retry; task 1 used both retries; task 2 used its one
    // replay; task 3 (above every finished index) used one retry.
    let job = core
        .handle_restore_job(
            spec,
            &[(0, TerminalState::Succeeded)],
            &[
                (3, used(1, 0)),
                (0, used(1, 0)),
                (1, used(2, 0)),
                (2, used(0, 1)),
            ],
            Time::ZERO,
        )
        .unwrap();
    assert_eq!((core.counts().retries, core.counts().replays), (4, 1));
    core.check_consistency().unwrap();

    let node = NodeId(1);
    let _ = core.handle_node_joined(node, Resources::cores(16), Time::ZERO);
    core.handle_credit(node, Resources::cores(16), Time::ZERO)
        .unwrap();
    let dispatch = core.poll_dispatch().expect("three tasks to run");
    let mut attempts = std::collections::HashMap::new();
    for assignment in &dispatch.assignments {
        attempts.insert(assignment.task.0 - job.first_task.0, assignment.attempt);
    }
    assert_eq!(attempts.len(), 3);
    // One more failure of task 1 exceeds max_retries = 2: failed, no retry.
    core.handle_result(attempts[&1], AttemptOutcome::Failed, Time::ZERO);
    assert_eq!(core.task_status(job.task(1)), Some(TaskStatus::Finished));
    assert_eq!(core.job_counts(job.job).unwrap().failed, 1);
    // Task 3 had one retry left of two.
    core.handle_result(attempts[&3], AttemptOutcome::Failed, Time::ZERO);
    assert_eq!(core.task_status(job.task(3)), Some(TaskStatus::Queued));
    // Losing task 2 again exceeds its replay bound of one.
    let loss = core.handle_node_lost(node, Time::ZERO).unwrap();
    assert_eq!(
        core.task_status(job.task(2)),
        Some(TaskStatus::Finished),
        "{loss:?}"
    );
    assert_eq!(core.job_counts(job.job).unwrap().failed, 2);
    core.check_consistency().unwrap();
}

#[test]
fn earlier_attempts_outside_the_job_or_listed_twice_are_refused() {
    let mut core = Core::new(CoreConfig::default());
    let used = EarlierAttempts {
        failures: 1,
        replays: 0,
    };
    assert_eq!(
        core.handle_restore_job(JobSpec::array(3), &[], &[(3, used)], Time::ZERO),
        Err(RestoreError::IndexOutOfRange { index: 3, count: 3 })
    );
    assert_eq!(
        core.handle_restore_job(JobSpec::array(3), &[], &[(1, used), (1, used)], Time::ZERO),
        Err(RestoreError::DuplicateIndex { index: 1 })
    );
    assert_eq!(core.counts().submitted, 0);
}
