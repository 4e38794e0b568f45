//! Submissions with dependencies at the root: planned, answered in their own order,
//! journaled with ids, and cancelled with the failed dependency as their reason.

use saker_wire::messages::ToAgent;

use super::{Harness, RootMsg, UNIX_ORIGIN_US, assignments, exited, single};
use crate::records::Record;
use saker_client::spec::JobRef;

fn named(argv: &[&str], name: &str, after: &[&str]) -> saker_client::spec::JobRequest {
    let mut request = single(argv);
    request.spec.name = Some(name.to_owned());
    request.spec.after = after
        .iter()
        .map(|n| JobRef::Name((*n).to_owned()))
        .collect();
    request
}

#[test]
fn a_job_named_later_in_the_submission_is_queued_first_and_the_answer_keeps_its_order() {
    let mut h = Harness::new();
    let mut answer = h.submit(vec![
        named(&["second"], "b", &["a"]),
        named(&["first"], "a", &[]),
    ]);
    let records = h.journal_durable();
    let reply = answer.try_recv().expect("answered").expect("accepted");
    assert_eq!(reply.jobs.len(), 2);
    let (b, a) = (reply.jobs[0].job, reply.jobs[1].job);
    assert!(a < b, "a is queued first: {reply:?}");
    let submits: Vec<(saker_client::results::JobId, Vec<JobRef>)> = records
        .iter()
        .filter_map(|record| match record {
            Record::Submit { job, request, .. } => Some((*job, request.spec.after.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        submits,
        vec![(a, Vec::new()), (b, vec![JobRef::Id(a.0)])],
        "journaled in id order, with ids"
    );
    assert_eq!(h.status().waiting, 1);
    // Only a is dispatched to a node.
    h.join(0, 2);
    h.report(0, 2, &[], Vec::new());
    let dispatched: Vec<ToAgent> = h
        .sent()
        .into_iter()
        .map(|(_, message)| message)
        .filter(|message| matches!(message, ToAgent::Dispatch(_)))
        .collect();
    let jobs: Vec<u32> = dispatched
        .iter()
        .flat_map(|message| match message {
            ToAgent::Dispatch(dispatch) => dispatch.tasks.iter().map(|t| t.job.0).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(jobs, vec![a.0]);
}

#[test]
fn a_cycle_is_refused_whole_with_its_path() {
    let mut h = Harness::new();
    let mut answer = h.submit(vec![named(&["x"], "a", &["b"]), named(&["y"], "b", &["a"])]);
    let refused = answer.try_recv().expect("answered").unwrap_err();
    assert!(refused.message.contains("cycle"), "{}", refused.message);
    assert!(h.journal_durable().is_empty(), "nothing journaled");
    assert_eq!(h.status().queued, 0);
}

/// A periodic job: each occurrence is a job of its own, submitted one period ahead
/// when the one before is due, journaled, up to its count; then the schedule ends.
/// The occurrences journaled in `records`, by number.
fn occurrences(records: &[Record]) -> Vec<u32> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Occurrence { occurrence, .. } => Some(*occurrence),
            _ => None,
        })
        .collect()
}

/// Starts and ends the work node 1 was sent, as its agent would report: each
/// dispatched (task, attempt) started, then exited 0 with its slot's credit back.
fn run_dispatched(h: &mut Harness) {
    let dispatched = assignments(&h.sent(), 1);
    h.report(1, 0, &dispatched, Vec::new());
    let results = dispatched
        .iter()
        .map(|&(task, attempt)| exited(task, attempt, 0))
        .collect();
    h.report(1, dispatched.len() as u32, &[], results);
}

#[test]
fn a_periodic_job_submits_one_occurrence_per_period_up_to_its_count() {
    use std::time::Duration;
    let mut h = Harness::new();
    h.join(1, 1);
    h.sent();
    h.report(1, 1, &[], Vec::new());
    let mut periodic = single(&["tick"]);
    periodic.spec.every = Some(Duration::from_secs(10));
    periodic.spec.count = Some(3);
    let mut answer = h.submit(vec![periodic]);
    let records = h.journal_durable();
    let reply = answer.try_recv().expect("answered").expect("accepted");
    assert_eq!(reply.jobs.len(), 1, "the first occurrence");
    assert!(
        occurrences(&records).is_empty(),
        "not before the first starts"
    );
    assert_eq!(h.status().periodic, 1);
    run_dispatched(&mut h);
    assert_eq!(
        occurrences(&h.journal_durable()),
        vec![1],
        "the next is queued for its time once the first started"
    );
    assert_eq!(h.status().waiting, 1, "occurrence 1 waits for its time");
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Timer);
    run_dispatched(&mut h);
    assert_eq!(occurrences(&h.journal_durable()), vec![2]);
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Timer);
    run_dispatched(&mut h);
    assert!(occurrences(&h.journal_durable()).is_empty(), "three in all");
    assert_eq!(h.status().periodic, 0);
    assert_eq!(h.status().jobs, 3);
}

/// Slots busy past several periods: the pending occurrence runs once, late, when the
/// slot frees; the occurrences whose times passed meanwhile are skipped (never stacked
/// up behind it); the next is the first time still ahead on the schedule's grid, and
/// the count still ends it.
#[test]
fn a_periodic_job_skips_the_occurrences_missed_while_its_slot_was_busy() {
    use std::time::Duration;
    let mut h = Harness::new();
    h.join(1, 1);
    h.sent();
    h.report(1, 1, &[], Vec::new());
    let mut blocker = single(&["block"]);
    blocker.spec.priority = 10;
    h.submit(vec![blocker]);
    h.journal_durable();
    let blocking = assignments(&h.sent(), 1);
    h.report(1, 0, &blocking, Vec::new());
    let mut periodic = single(&["tick"]);
    periodic.spec.every = Some(Duration::from_secs(10));
    periodic.spec.count = Some(6);
    h.submit(vec![periodic]);
    h.journal_durable();
    for _ in 0..7 {
        h.clock.advance(Duration::from_secs(5));
        h.handle(RootMsg::Timer);
    }
    assert!(
        occurrences(&h.journal_durable()).is_empty(),
        "none stacked up"
    );
    assert_eq!(h.status().jobs, 2);
    // The slot frees at 35 s: occurrence 0 starts, 1 to 3 are skipped, 4 is at 40 s.
    let (task, attempt) = blocking[0];
    h.report(1, 1, &[], vec![exited(task, attempt, 0)]);
    run_dispatched(&mut h);
    let records = h.journal_durable();
    assert_eq!(occurrences(&records), vec![4]);
    let at = records.iter().find_map(|r| match r {
        Record::Submit { request, job, .. } if job.0 == 3 => request.spec.not_before,
        _ => None,
    });
    let first = UNIX_ORIGIN_US;
    assert_eq!(at.map(|t| t.unix_micros()), Some(first + 40_000_000));
    h.clock.advance(Duration::from_secs(5));
    h.handle(RootMsg::Timer);
    run_dispatched(&mut h);
    assert_eq!(occurrences(&h.journal_durable()), vec![5]);
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Timer);
    run_dispatched(&mut h);
    assert!(
        occurrences(&h.journal_durable()).is_empty(),
        "the count ends it"
    );
    assert_eq!(h.status().periodic, 0);
    assert_eq!(h.status().jobs, 4, "blocker, occurrences 0, 4 and 5");
}
