//! Submissions with dependencies at the root: planned, answered in their own order,
//! journaled with ids, and cancelled with the failed dependency as their reason.

use saker_wire::messages::ToAgent;

use super::{Harness, RootMsg, single};
use crate::records::Record;
use crate::spec::JobRef;

fn named(argv: &[&str], name: &str, after: &[&str]) -> crate::spec::JobRequest {
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
    let submits: Vec<(crate::results::JobId, Vec<JobRef>)> = records
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
#[test]
fn a_periodic_job_submits_one_occurrence_per_period_up_to_its_count() {
    use std::time::Duration;
    let mut h = Harness::new();
    let mut periodic = single(&["tick"]);
    periodic.spec.every = Some(Duration::from_secs(10));
    periodic.spec.count = Some(3);
    let mut answer = h.submit(vec![periodic]);
    let records = h.journal_durable();
    let reply = answer.try_recv().expect("answered").expect("accepted");
    assert_eq!(reply.jobs.len(), 1, "the first occurrence");
    let occurrences = |records: &[Record]| -> Vec<u32> {
        records
            .iter()
            .filter_map(|r| match r {
                Record::Occurrence { occurrence, .. } => Some(*occurrence),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        occurrences(&records),
        vec![1],
        "the next is queued for its time"
    );
    assert_eq!(h.status().periodic, 1);
    assert_eq!(h.status().waiting, 1, "occurrence 1 waits for its time");
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Timer);
    assert_eq!(occurrences(&h.journal_durable()), vec![2]);
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Timer);
    assert!(occurrences(&h.journal_durable()).is_empty(), "three in all");
    assert_eq!(h.status().periodic, 0);
    assert_eq!(h.status().jobs, 3);
}
