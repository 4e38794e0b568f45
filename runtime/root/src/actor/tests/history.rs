//! Results served from the journal: the root keeps where each is, not the results.

use super::*;
use crate::client::ResultsItem;
use saker_client::ErrorKind;

/// Runs the three tasks of an array on one node and makes their results durable.
fn three_results(h: &mut Harness) {
    h.submit(vec![array(&["echo", "{index}"], "1-3")]);
    h.journal_durable();
    h.join(1, 3);
    h.report(1, 3, &[], Vec::new());
    assert_eq!(h.succeed_sent(1).len(), 3);
    h.journal_durable();
}

async fn collect(mut items: tokio::sync::mpsc::Receiver<ResultsItem>) -> (Vec<u64>, u64) {
    let mut seqs = Vec::new();
    loop {
        match items.recv().await.expect("the stream ends with `end`") {
            ResultsItem::Record(record) => seqs.push(record.seq),
            ResultsItem::End(end) => return (seqs, end.next),
            ResultsItem::Error(error) => panic!("{error:?}"),
        }
    }
}

#[tokio::test]
async fn results_are_read_back_from_the_journal_by_seq_and_by_task() {
    let mut h = Harness::new();
    three_results(&mut h);

    let (sink, items) = tokio::sync::mpsc::channel(8);
    h.handle(RootMsg::Client(ClientRequest::Results {
        from: 2,
        follow: false,
        sink,
    }));
    assert_eq!(collect(items).await, (vec![2, 3], 4), "from seq 2 on");

    let (sink, items) = tokio::sync::mpsc::channel(8);
    h.handle(RootMsg::Client(ClientRequest::Results {
        from: 0,
        follow: false,
        sink,
    }));
    assert_eq!(collect(items).await, (vec![1, 2, 3], 4), "everything");

    let (reply, answer) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::Result {
        task: saker_client::results::TaskId(2),
        reply,
    }));
    let record = answer.await.unwrap().expect("task 2 finished");
    assert_eq!((record.task.0, record.index), (2, Some(2)));

    for unknown in [0, 9] {
        let (reply, answer) = oneshot::channel();
        h.handle(RootMsg::Client(ClientRequest::Result {
            task: saker_client::results::TaskId(unknown),
            reply,
        }));
        let error = answer.await.unwrap().expect_err("no such result");
        assert_eq!(error.kind, ErrorKind::NoResult);
    }
}

/// A follower gets the history from the journal, then what becomes durable later,
/// each once and in order.
#[tokio::test]
async fn a_follower_gets_history_then_live_results_each_once() {
    let mut h = Harness::new();
    three_results(&mut h);
    let (sink, mut items) = tokio::sync::mpsc::channel(8);
    h.handle(RootMsg::Client(ClientRequest::Results {
        from: 3,
        follow: true,
        sink,
    }));
    let first = items.recv().await.unwrap();
    assert!(
        matches!(first, ResultsItem::Record(ref r) if r.seq == 3),
        "{first:?}"
    );
    h.submit(vec![single(&["true"])]);
    h.journal_durable();
    h.report(1, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("one more task dispatched");
    };
    h.report(1, 0, &[(task, attempt)], vec![exited(task, attempt, 0)]);
    h.journal_durable();
    let live = items.recv().await.unwrap();
    assert!(
        matches!(live, ResultsItem::Record(ref r) if r.seq == 4),
        "{live:?}"
    );
}

#[tokio::test]
async fn freed_memory_is_given_back_when_the_pilot_goes_idle_after_enough_results() {
    let mut h = Harness::new();
    h.root.submissions.release_memory_after(3);
    let releases = |h: &Harness| h.port.with(|r| r.memory_releases);

    // Three results, but a fourth task still queued: not idle, nothing released.
    h.submit(vec![array(&["true"], "1-3"), single(&["true"])]);
    h.journal_durable();
    h.join(1, 3);
    h.report(1, 3, &[], Vec::new());
    assert_eq!(h.succeed_sent(1).len(), 3);
    h.journal_durable();
    assert_eq!(releases(&h), 0, "a task is still queued");

    // The last one ends: idle after four results.
    h.report(1, 1, &[], Vec::new());
    assert_eq!(h.succeed_sent(1).len(), 1);
    h.journal_durable();
    assert_eq!(releases(&h), 1);

    // Idle again after one more result only: not worth it yet.
    h.submit(vec![single(&["true"])]);
    h.journal_durable();
    h.report(1, 1, &[], Vec::new());
    assert_eq!(h.succeed_sent(1).len(), 1);
    h.journal_durable();
    assert_eq!(releases(&h), 1, "one result since the last release");
}
