//! A compacted history resumes as the history it came from: the same jobs, the same
//! finished tasks (never run again), the same results for those kept, and a clear
//! "compacted away" for those dropped.

use super::*;
use crate::client::ResultsItem;
use crate::compact::{KeepResults, compact};
use saker_client::ErrorKind;
use saker_client::results::ResultRecord;

/// Job 1: three tasks, all finished; job 2: one task, finished; job 3: two tasks, one
/// finished. Returns the journal as written.
fn history() -> Vec<Record> {
    let mut h = Harness::new();
    h.submit(vec![array(&["echo", "{index}"], "1-3")]);
    h.submit(vec![single(&["true"])]);
    h.journal_durable();
    h.join(1, 4);
    h.report(1, 4, &[], Vec::new());
    assert_eq!(h.succeed_sent(1).len(), 4);
    h.journal_durable();
    h.submit(vec![array(&["sleep", "{index}"], "1-2")]);
    h.journal_durable();
    h.report(1, 2, &[], Vec::new());
    let dispatched = assignments(&h.sent(), 1);
    assert_eq!(dispatched.len(), 2);
    let (task, attempt) = dispatched[0];
    h.report(1, 0, &dispatched, vec![exited(task, attempt, 0)]);
    h.journal_durable();
    let journal = h.port.with(|r| r.durable.clone());
    let held = journal.0.lock().unwrap();
    held.values().cloned().collect()
}

async fn stream(h: &mut Harness) -> (Vec<Arc<ResultRecord>>, u64) {
    let (sink, mut items) = tokio::sync::mpsc::channel(64);
    h.handle(RootMsg::Client(ClientRequest::Results {
        from: 0,
        follow: false,
        sink,
    }));
    let mut records = Vec::new();
    loop {
        match items.recv().await.expect("the stream ends with `end`") {
            ResultsItem::Record(record) => records.push(record),
            ResultsItem::End(end) => return (records, end.compacted),
            ResultsItem::Error(error) => panic!("{error:?}"),
        }
    }
}

fn resumed(records: Vec<Record>) -> Harness {
    let mut h = Harness::new();
    h.restore(records).expect("the history restores");
    h
}

/// Joins a node and says which tasks the resumed root runs.
fn runs(h: &mut Harness) -> Vec<u64> {
    h.join(1, 4);
    h.report(1, 4, &[], Vec::new());
    let mut tasks: Vec<u64> = assignments(&h.sent(), 1).iter().map(|&(t, _)| t).collect();
    tasks.sort_unstable();
    tasks
}

fn stage_counts(status: &StatusReport) -> Vec<u64> {
    status.stages.iter().map(|stage| stage.count).collect()
}

fn without_stages(mut status: StatusReport) -> StatusReport {
    status.stages.clear();
    status
}

#[tokio::test]
async fn a_compacted_history_resumes_like_the_full_one() {
    let full = history();
    let mut whole = resumed(full.clone());
    let (all, compacted) = stream(&mut whole).await;
    assert_eq!(compacted, 0);
    assert_eq!(all.len(), 5);

    // Keeping every result: the same results, in the same order.
    let kept_all = compact(full.clone(), &KeepResults::All, UNIX_ORIGIN_US).records;
    let mut same = resumed(kept_all);
    assert_eq!(stream(&mut same).await, (all.clone(), 0));
    assert_eq!(stage_counts(&whole.status()), [5, 5, 5, 5, 5, 5]);
    // Stage percentiles are rebuilt from the results a resumed root replays; a
    // compacted base keeps finished jobs' results for reading, not for replay, so
    // after a compaction they cover the jobs still going (here one).
    assert_eq!(stage_counts(&same.status()), [1, 1, 1, 1, 1, 1]);
    assert_eq!(
        without_stages(same.status()),
        without_stages(whole.status())
    );
    assert_eq!(runs(&mut same), runs(&mut whole));

    // Keeping none: the unfinished job's result stays, the others are compacted.
    let kept_none = compact(full.clone(), &KeepResults::Last(0), UNIX_ORIGIN_US);
    assert_eq!(kept_none.dropped.len(), 4);
    let mut small = resumed(kept_none.records);
    let (kept, compacted) = stream(&mut small).await;
    assert_eq!(compacted, 4);
    let unfinished_job = all.last().unwrap().job;
    let expected: Vec<_> = all
        .iter()
        .filter(|record| record.job == unfinished_job)
        .cloned()
        .collect();
    assert_eq!(kept, expected);
    let mut whole = resumed(full);
    assert_eq!(
        without_stages(small.status()),
        without_stages(whole.status())
    );
    // Finished tasks are not run again, whether or not their results were kept.
    assert_eq!(runs(&mut small), runs(&mut whole));
    assert_eq!(runs_none_more(&mut small), 0);

    let dropped = kept_none.dropped[0].0;
    let (reply, answer) = oneshot::channel();
    small.handle(RootMsg::Client(ClientRequest::Result {
        task: dropped,
        reply,
    }));
    let error = answer.await.unwrap().expect_err("compacted away");
    assert_eq!(error.kind, ErrorKind::Compacted);
    assert!(
        error.message.contains("compacted away"),
        "{}",
        error.message
    );
    // A task that never existed is still just "no result".
    let (reply, answer) = oneshot::channel();
    small.handle(RootMsg::Client(ClientRequest::Result {
        task: saker_client::results::TaskId(99),
        reply,
    }));
    let error = answer.await.unwrap().expect_err("unknown");
    assert_eq!(error.kind, ErrorKind::NoResult);
}

fn runs_none_more(h: &mut Harness) -> usize {
    assignments(&h.sent(), 1).len()
}

/// Compacting a compacted history changes nothing but the time it was made.
#[test]
fn compaction_is_idempotent() {
    let full = history();
    for keep in [KeepResults::All, KeepResults::Last(2), KeepResults::Last(0)] {
        let once = compact(full.clone(), &keep, UNIX_ORIGIN_US);
        let twice = compact(once.records.clone(), &keep, UNIX_ORIGIN_US);
        assert_eq!(twice.records, once.records, "{keep}");
        assert!(twice.dropped.is_empty(), "{keep}");
        assert_eq!(twice.compacted_total, once.compacted_total, "{keep}");
    }
}
