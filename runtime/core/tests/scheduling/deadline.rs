//! The allocation's end: only attempts that can finish by the deadline start; the rest
//! stays queued, out of the way of work that fits; drain stops everything.

use saker_core::{
    AttemptOutcome, Disposition, Event, JobId, JobSpec, TaskStatus, Time, UnstartedSummary,
};

use crate::harness::Harness;

fn limited(count: u32, micros: u64) -> JobSpec {
    JobSpec::array(count).with_time_limit_micros(micros)
}

#[test]
fn only_jobs_that_can_finish_by_the_deadline_are_dispatched() {
    let mut harness = Harness::new();
    harness.set_deadline(Some(Time(1_000)));
    let exact = harness.submit(limited(2, 1_000));
    let too_long = harness.submit(limited(3, 1_001));
    let unlimited = harness.submit(JobSpec::array(2));
    harness.join_with_credit(1, 16);
    assert_eq!(
        harness.take_assigned(),
        vec![
            (1, 0, exact.job.0),
            (1, 1, exact.job.0),
            (1, 0, unlimited.job.0),
            (1, 1, unlimited.job.0),
        ],
        "0 + 1000 <= 1000 fits, 0 + 1001 does not, no limit fits before the deadline"
    );
    let counts = harness.core.counts();
    assert_eq!((counts.queued, counts.beyond_deadline), (3, 3));
    assert_eq!(
        harness.core.task_status(too_long.first_task),
        Some(TaskStatus::Queued),
        "held, not failed"
    );
    assert_eq!(harness.cores_credit(1), Some((16, 12)));
    assert_eq!(harness.core.deadline(), Some(Time(1_000)));
}

#[test]
fn a_limited_job_fits_up_to_deadline_minus_limit_inclusive() {
    let mut harness = Harness::new();
    let job = harness.submit(limited(3, 400));
    harness.set_deadline(Some(Time(1_000)));
    harness.join_with_credit(1, 1);
    let first = harness.take_one();
    harness.advance_to(Time(600));
    harness.result(first.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    let second = harness.take_one();
    assert_eq!(second.index, 1, "600 + 400 == 1000 still fits");
    harness.advance_to(Time(601));
    harness.result(second.attempt, AttemptOutcome::Succeeded);
    harness.credit(1, 1);
    assert!(harness.take_dispatches().is_empty(), "601 + 400 > 1000");
    assert_eq!(harness.core.counts().beyond_deadline, 1);
    assert_eq!(
        harness
            .core
            .job_counts(job.job)
            .map(|c| (c.succeeded, c.queued)),
        Some((2, 1))
    );
}

#[test]
fn a_job_without_a_limit_starts_only_before_the_deadline() {
    let mut harness = Harness::new();
    harness.submit(JobSpec::array(2));
    harness.set_deadline(Some(Time(1_000)));
    harness.join(1, 4);
    harness.advance_to(Time(999));
    harness.credit(1, 1);
    assert_eq!(harness.take_assigned().len(), 1, "999 < 1000");
    harness.advance_to(Time(1_000));
    harness.credit(1, 1);
    assert!(
        harness.take_dispatches().is_empty(),
        "not at the deadline itself"
    );
    // A job submitted after the deadline is held at once.
    harness.submit(limited(1, 0));
    harness.submit(JobSpec::single());
    assert_eq!(
        harness.take_assigned().len(),
        1,
        "a zero limit still fits at 1000"
    );
    assert_eq!(harness.core.counts().beyond_deadline, 2);
}

#[test]
fn a_high_priority_job_that_does_not_fit_does_not_block_fitting_work() {
    let mut harness = Harness::new();
    let long = harness.submit(limited(10, 10_000).with_priority(9).with_cores(4));
    let short = harness.submit(limited(6, 100));
    harness.set_deadline(Some(Time(5_000)));
    harness.join_with_credit(1, 4);
    let assigned = harness.take_assigned();
    assert_eq!(assigned.len(), 4);
    assert!(assigned.iter().all(|a| a.2 == short.job.0), "{assigned:?}");
    // While it fits, the high-priority job goes first as usual.
    harness.set_deadline(Some(Time(20_000)));
    harness.credit(1, 4);
    assert_eq!(harness.take_assigned(), vec![(1, 0, long.job.0)]);
}

#[test]
fn when_the_head_job_stops_fitting_a_waiting_node_gets_the_work_behind_it() {
    let mut harness = Harness::new();
    harness.submit(limited(1, 800).with_cores(4).with_priority(1));
    let narrow = harness.submit(limited(3, 100));
    harness.set_deadline(Some(Time(1_000)));
    harness.join(1, 4);
    harness.credit(1, 2);
    assert!(
        harness.take_dispatches().is_empty(),
        "no backfill past the wide head task while it fits"
    );
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(201)),
        "the first instant the wide job no longer fits"
    );
    harness.advance_to(Time(201));
    harness.timeout();
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, narrow.job.0), (1, 1, narrow.job.0)]
    );
    assert_eq!(harness.core.counts().beyond_deadline, 1);
    assert_eq!(harness.core.poll_timeout(), Some(Time(901)));
    harness.advance_to(Time(901));
    harness.timeout();
    assert_eq!(harness.core.counts().beyond_deadline, 2);
    assert_eq!(
        harness.core.poll_timeout(),
        None,
        "nothing changes any more"
    );
}

#[test]
fn poll_timeout_names_each_fit_boundary_and_the_earliest_retry() {
    let mut harness = Harness::new();
    harness.submit(limited(1, 100));
    harness.submit(limited(1, 300));
    let retried = harness.submit(JobSpec::single().with_max_retries(1));
    harness.join_with_credit(1, 1);
    let attempt = harness.take_one();
    assert_eq!(attempt.job, JobId(1));
    harness.set_deadline(Some(Time(1_000)));
    assert_eq!(harness.core.poll_timeout(), Some(Time(701)));
    harness.advance_to(Time(650));
    let disposition = harness.result(attempt.attempt, AttemptOutcome::Succeeded);
    assert!(matches!(disposition, Disposition::Accepted { .. }));
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(701)),
        "job 2 stops fitting at 701; finished job 1 no longer wakes anyone"
    );
    harness.credit(1, 1);
    let second = harness.take_one();
    assert_eq!(second.job, JobId(2));
    harness.credit(1, 1);
    let third = harness.take_one();
    assert_eq!(third.job, retried.job);
    harness.result(third.attempt, AttemptOutcome::Failed);
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(701)),
        "job 2 (in flight, may be replayed) stops fitting before the retry is due"
    );
    harness.advance_to(Time(701));
    harness.timeout();
    assert_eq!(
        harness.core.poll_timeout(),
        Some(Time(750)),
        "then the retry backoff (100 us from 650) ends"
    );
    harness.advance_to(Time(750));
    harness.timeout();
    harness.credit(1, 1);
    assert_eq!(harness.take_one().task, retried.first_task);
    assert_eq!(harness.core.poll_timeout(), Some(Time(1_000)));
}

#[test]
fn clearing_or_moving_the_deadline_restores_normal_dispatch_in_order() {
    let mut harness = Harness::new();
    let first = harness.submit(limited(2, 5_000));
    let second = harness.submit(JobSpec::array(2));
    let third = harness.submit(limited(2, 50_000));
    harness.set_deadline(Some(Time(10_000)));
    harness.advance_to(Time(6_000));
    harness.join_with_credit(1, 2);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, second.job.0), (1, 1, second.job.0)]
    );
    assert_eq!(harness.core.counts().beyond_deadline, 4);
    harness.set_deadline(Some(Time(11_000)));
    harness.credit(1, 2);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, first.job.0), (1, 1, first.job.0)],
        "a later deadline lets the first job fit again"
    );
    harness.set_deadline(None);
    assert_eq!(harness.core.counts().beyond_deadline, 0);
    assert_eq!(harness.core.deadline(), None);
    harness.credit(1, 2);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, third.job.0), (1, 1, third.job.0)]
    );
    assert_eq!(harness.core.poll_timeout(), None);
}

#[test]
fn replays_and_retries_of_a_job_that_no_longer_fits_stay_queued() {
    let mut harness = Harness::new();
    let job = harness.submit(limited(2, 500).with_max_retries(1));
    harness.join_with_credit(1, 2);
    let assigned: Vec<_> = harness
        .take_dispatches()
        .into_iter()
        .flat_map(|dispatch| dispatch.assignments)
        .collect();
    assert_eq!(assigned.len(), 2);
    harness.set_deadline(Some(Time(1_000)));
    harness.advance_to(Time(600));
    harness.credit(1, 2);
    assert!(matches!(
        harness.result(assigned[0].attempt, AttemptOutcome::Lost),
        Disposition::WillReplay { .. }
    ));
    assert!(matches!(
        harness.result(assigned[1].attempt, AttemptOutcome::Failed),
        Disposition::WillRetry { .. }
    ));
    assert!(harness.take_dispatches().is_empty());
    assert_eq!(harness.core.counts().beyond_deadline, 1);
    harness.advance_to(Time(800));
    harness.timeout();
    assert!(
        harness.take_dispatches().is_empty(),
        "released retry is held"
    );
    let counts = harness.core.counts();
    assert_eq!((counts.queued, counts.beyond_deadline), (2, 2));
    assert_eq!(
        harness.core.unstarted(),
        UnstartedSummary {
            tasks: 2,
            jobs: vec![(job.job, 2)]
        }
    );
    let summary = harness.cancel(job.job);
    assert_eq!(
        summary.cancelled, 2,
        "held tasks are cancelled like queued ones"
    );
    assert_eq!(harness.core.counts().beyond_deadline, 0);
    assert!(harness.core.is_quiescent());
    assert!(
        harness
            .take_events()
            .contains(&Event::JobFinished { job: job.job })
    );
}

#[test]
fn drain_stops_all_dispatch_but_not_the_bookkeeping() {
    let mut harness = Harness::new();
    let job = harness.submit(JobSpec::array(4));
    harness.join_with_credit(1, 1);
    let running = harness.take_one();
    harness.stop_dispatch();
    assert!(harness.core.is_draining());
    harness.credit(1, 8);
    harness.submit(JobSpec::single());
    assert!(harness.take_dispatches().is_empty());
    assert!(matches!(
        harness.result(running.attempt, AttemptOutcome::Lost),
        Disposition::WillReplay { .. }
    ));
    harness.set_deadline(None);
    assert!(harness.take_dispatches().is_empty(), "drain is for good");
    let counts = harness.core.counts();
    assert_eq!((counts.queued, counts.in_flight()), (5, 0));
    assert_eq!(counts.beyond_deadline, 0, "drained, not beyond a deadline");
    assert_eq!(
        harness.core.unstarted(),
        UnstartedSummary {
            tasks: 5,
            jobs: vec![(job.job, 4), (JobId(2), 1)]
        }
    );
}

#[test]
fn unstarted_counts_held_arrays_without_expanding_them() {
    let mut harness = Harness::new();
    let huge = harness.submit(JobSpec::array(1_000_000).with_time_limit_micros(1_000));
    let done = harness.submit(JobSpec::single().with_priority(5));
    let partial = harness.submit(JobSpec::array(10).with_max_retries(3));
    harness.join_with_credit(1, 3);
    let assigned = harness.take_assigned();
    assert_eq!(
        assigned,
        vec![(1, 0, done.job.0), (1, 0, huge.job.0), (1, 1, huge.job.0)]
    );
    let before = harness.core.heap_estimate();
    harness.set_deadline(Some(Time(500)));
    assert_eq!(harness.core.counts().beyond_deadline, 999_998);
    assert!(
        harness.core.heap_estimate() < before + 1_000,
        "holding an array keeps it one range"
    );
    harness.credit(1, 2);
    assert_eq!(
        harness.take_assigned(),
        vec![(1, 0, partial.job.0), (1, 1, partial.job.0)]
    );
    let summary = harness.core.unstarted();
    assert_eq!(summary.tasks, 999_998 + 8);
    assert_eq!(summary.jobs, vec![(huge.job, 999_998), (partial.job, 8)]);
    let counts = harness.core.counts();
    assert_eq!(
        summary.tasks + counts.terminal() + counts.in_flight(),
        counts.submitted
    );
}
