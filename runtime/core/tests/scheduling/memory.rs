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
