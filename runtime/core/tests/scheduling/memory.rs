//! Queued work costs almost nothing per task.

use saker_core::{AttemptOutcome, JobSpec};

use crate::harness::Harness;

#[test]
fn a_million_queued_array_tasks_cost_well_under_150_bytes_each() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(1_000_000));
    for job in 0..1_000 {
        harness.submit(JobSpec::array(100).with_priority(job % 5));
    }
    let tasks = harness.core.counts().submitted;
    assert_eq!(tasks, 1_100_000);
    assert_eq!(
        harness.core.ready_queue_entries(),
        1_001,
        "one queue entry per job"
    );
    let per_task = harness.core.heap_estimate() as f64 / tasks as f64;
    println!("queued: {per_task:.3} bytes per task");
    assert!(per_task < 2.0, "{per_task:.2} bytes per queued task");

    // Work in flight pays per task; finished work pays a bit, then nothing.
    harness.join_with_credit(1, 10_000);
    let assignments: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .collect();
    assert_eq!(assignments.len(), 10_000);
    assert!(
        harness.core.ready_queue_entries() <= 1_001,
        "ranges shrink in place"
    );
    let in_flight = harness.core.heap_estimate();
    println!(
        "10,000 in flight: {} bytes over the queued baseline, {:.0} per in-flight task",
        in_flight as f64 - per_task * tasks as f64,
        (in_flight as f64 - per_task * tasks as f64) / 10_000.0
    );
    assert!(
        in_flight < 4_000_000,
        "{in_flight} bytes with 10,000 tasks in flight"
    );
    for assignment in assignments {
        harness
            .core
            .handle_result(assignment.attempt, AttemptOutcome::Succeeded, harness.now);
    }
    while harness.core.poll_event().is_some() {}
    let done = harness.core.heap_estimate() as f64 / tasks as f64;
    println!("after finishing: {done:.3} bytes per task");
    assert!(
        done < 2.0,
        "{done:.2} bytes per task after finishing 10,000"
    );
}

/// Finished single-task jobs (a task file's lines) keep about a byte each: their
/// records are compacted a page at a time, and the core still answers for them —
/// counts, task status, a cancel, an update, a dependency, a late duplicate result.
#[test]
fn finished_single_jobs_cost_about_a_byte_each_and_are_still_answered_for() {
    use saker_core::{Dependency, DependencyKind, Disposition, JobId, TaskStatus, UpdateError};
    let mut harness = Harness::new();
    harness.join_with_credit(1, 64);
    let jobs = 3_072u32;
    let mut late = None;
    let mut round = |harness: &mut Harness| {
        for _ in 0..jobs {
            harness.submit(JobSpec::single());
        }
        loop {
            let dispatches = harness.take_dispatches();
            if dispatches.is_empty() {
                break;
            }
            for dispatch in dispatches {
                for assignment in dispatch.assignments {
                    harness.started(assignment.attempt);
                    // Every seventh job fails (no retries), the others succeed.
                    let outcome = if assignment.job.0 % 7 == 0 {
                        AttemptOutcome::Failed
                    } else {
                        AttemptOutcome::Succeeded
                    };
                    harness.result(assignment.attempt, outcome);
                    if assignment.job.0 == 5 {
                        late = Some(assignment.attempt);
                    }
                    harness.credit(1, 1);
                }
            }
        }
        while harness.core.poll_event().is_some() {}
        assert!(harness.core.is_quiescent());
        harness.core.heap_estimate()
    };
    // The first round leaves the collections at their working size; the second
    // shows what each finished job adds.
    let first = round(&mut harness);
    let second = round(&mut harness);
    let per_job = (second as f64 - first as f64) / f64::from(jobs);
    println!("after one round: {first} bytes; after two: {second} bytes, {per_job:.2} per job");
    assert!(per_job < 1.5, "{per_job:.2} bytes per finished job");
    // An array keeps its final counts too.
    let array = harness.submit(JobSpec::array(100));
    round(&mut harness);

    let counts = harness.core.job_counts(JobId(7)).unwrap();
    assert_eq!((counts.count, counts.failed, counts.succeeded), (1, 1, 0));
    let counts = harness.core.job_counts(JobId(8)).unwrap();
    assert_eq!((counts.count, counts.succeeded), (1, 1));
    let counts = harness.core.job_counts(array.job).unwrap();
    assert_eq!((counts.count, counts.terminal()), (100, 100));
    assert_eq!(
        harness.core.task_status(saker_core::TaskId(3)),
        Some(TaskStatus::Finished)
    );
    assert_eq!(
        harness.core.task_status(saker_core::TaskId(1_000_000)),
        None
    );
    // A result arriving again for a compacted job's task is a duplicate.
    let again = harness.result(late.unwrap(), AttemptOutcome::Succeeded);
    assert!(!matches!(again, Disposition::Accepted { .. }), "{again:?}");
    // Updates refuse an ended job; a cancel of one is remembered and idempotent.
    assert_eq!(
        harness.core.check_update(JobId(9)),
        Err(UpdateError::Ended { job: JobId(9) })
    );
    let first = harness.cancel(JobId(10));
    assert_eq!(
        (first.already_terminal, first.already_cancelled),
        (1, false)
    );
    let second = harness.cancel(JobId(10));
    assert!(second.already_cancelled);
    assert_eq!(
        harness
            .core
            .job_counts(JobId(10))
            .map(|c| (c.succeeded, c.cancelled)),
        Some((1, 0))
    );
    // A job after a compacted one that succeeded runs; after one that failed, not.
    let runs = harness
        .core
        .handle_submit_after(
            JobSpec::single(),
            &[Dependency {
                job: JobId(8),
                kind: DependencyKind::Success,
            }],
            harness.now,
        )
        .unwrap();
    let never = harness
        .core
        .handle_submit_after(
            JobSpec::single(),
            &[Dependency {
                job: JobId(7),
                kind: DependencyKind::Success,
            }],
            harness.now,
        )
        .unwrap();
    harness.drain();
    let cancelled = harness.core.job_counts(never.job).unwrap();
    assert_eq!(cancelled.cancelled, 1);
    let assigned = harness.take_one();
    assert_eq!(assigned.job, runs.job);
    harness.core.check_consistency().unwrap();
}
