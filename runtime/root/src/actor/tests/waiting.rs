//! Submissions that carry their own wait: answered once, when their last result is
//! durable, with the results; refused whole when the answer could not hold them; and,
//! with a journal that writes at once, answered in the turn that accepted the result.

use super::{Harness, array, exited, single};
use saker_client::results::TerminalState;
use saker_client::{ErrorKind, SubmitWait, WaitReport};

#[tokio::test]
async fn a_waiting_submission_is_answered_once_its_results_are_durable() {
    let mut h = Harness::new();
    h.join(1, 4);
    h.report(1, 4, &[], Vec::new());
    let mut answer = h.submit_waiting(vec![array(&["/bin/true"], "1-3")], SubmitWait::Results);
    // Durable and dispatched, but not answered: the tasks have not ended.
    h.journal_durable();
    assert!(
        answer.try_recv().is_err(),
        "answered before its tasks ended"
    );
    let sent = super::assignments(&h.sent(), 1);
    assert_eq!(sent.len(), 3);
    let (first, rest) = sent.split_at(1);
    h.report(1, 0, first, vec![exited(first[0].0, first[0].1, 0)]);
    let failed = rest
        .iter()
        .map(|&(task, attempt)| exited(task, attempt, 3))
        .collect();
    h.report(1, 0, rest, failed);
    assert!(
        answer.try_recv().is_err(),
        "answered before its results were durable"
    );
    h.journal_durable();
    let reply = answer.try_recv().expect("answered").expect("ok");
    assert_eq!(reply.jobs.len(), 1);
    assert_eq!(
        reply.ended,
        Some(WaitReport {
            succeeded: 1,
            failed: 2,
            cancelled: 0
        })
    );
    let results = reply.results.expect("results were asked for");
    let mut tasks: Vec<u64> = results.iter().map(|r| r.task.0).collect();
    tasks.sort_unstable();
    assert_eq!(tasks, [1, 2, 3]);
    assert!(results.iter().all(|r| r.job == reply.jobs[0].job));
    assert_eq!(h.root.results.submissions_waiting(), 0);
}

#[tokio::test]
async fn counts_are_enough_for_any_size_and_results_are_refused_past_the_bound() {
    let mut h = Harness::new();
    let mut refused = h.submit_waiting(vec![array(&["true"], "1-1001")], SubmitWait::Results);
    let error = refused
        .try_recv()
        .expect("answered at once")
        .expect_err("refused");
    assert_eq!(error.kind, ErrorKind::InvalidSpec);
    assert!(error.message.contains("at most 1000"), "{}", error.message);
    assert_eq!(h.status().jobs, 0, "nothing was submitted");
    let mut counted = h.submit_waiting(vec![array(&["true"], "1-1001")], SubmitWait::Counts);
    h.journal_durable();
    assert!(counted.try_recv().is_err());
    assert_eq!(h.status().jobs, 1);
}

#[tokio::test]
async fn a_cancelled_waiting_submission_is_answered_with_its_cancellations() {
    let mut h = Harness::new();
    let mut answer = h.submit_waiting(vec![single(&["sleep", "9"])], SubmitWait::Counts);
    h.journal_durable();
    let (reply, mut cancelled) = tokio::sync::oneshot::channel();
    h.handle(super::RootMsg::Client(
        crate::client::ClientRequest::Cancel {
            jobs: vec![saker_client::results::JobId(1)],
            reply,
        },
    ));
    assert_eq!(
        cancelled
            .try_recv()
            .expect("answered")
            .expect("ok")
            .cancelled,
        1
    );
    h.journal_durable();
    let reply = answer.try_recv().expect("answered").expect("ok");
    assert_eq!(reply.ended.map(|ended| ended.cancelled), Some(1));
    assert!(reply.results.is_none(), "counts only");
}

#[tokio::test]
async fn with_a_journal_that_writes_at_once_the_answer_goes_in_the_accepting_turn() {
    let mut h = Harness::new();
    h.port.with(|r| r.inline_journal = true);
    h.join(1, 2);
    h.report(1, 2, &[], Vec::new());
    let mut answer = h.submit_waiting(vec![single(&["/bin/true"])], SubmitWait::Results);
    let sent = super::assignments(&h.sent(), 1);
    h.report(1, 0, &sent, vec![exited(sent[0].0, sent[0].1, 0)]);
    let reply = answer
        .try_recv()
        .expect("answered in the same turn")
        .expect("ok");
    let results = reply.results.expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].state, TerminalState::Succeeded);
    assert!(
        h.port.with(|r| r.appends.is_empty()),
        "nothing waits for the journal"
    );
}
