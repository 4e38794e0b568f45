//! Submissions with dependencies at the root: planned, answered in their own order,
//! journaled with ids, and cancelled with the failed dependency as their reason.

use saker_wire::messages::ToAgent;

use super::{Harness, single};
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
