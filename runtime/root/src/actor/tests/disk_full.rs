//! The journal's disk full: what needs a record first is refused whole, no attempt
//! starts, the results of running ones wait for space, and all goes on once it is back.

use super::*;
use saker_client::{ErrorKind, JobUpdate};

fn disk_full(h: &Harness, full: bool) {
    h.port.with(|r| r.disk_full = full);
}

fn dispatched(sent: &[(u32, ToAgent)]) -> usize {
    sent.iter()
        .filter(|(_, m)| matches!(m, ToAgent::Dispatch(_)))
        .count()
}

#[tokio::test]
async fn submissions_and_updates_are_refused_whole_while_the_disk_is_full() {
    let mut h = Harness::new();
    h.join(1, 2);
    h.journal_durable();
    disk_full(&h, true);
    let mut answer = h.submit(vec![array(&["echo", "{index}"], "1-3")]);
    let refused = answer.try_recv().expect("answered at once").unwrap_err();
    assert_eq!(refused.kind, ErrorKind::DiskFull);
    assert!(
        refused.message.starts_with("disk full"),
        "{}",
        refused.message
    );
    let (reply, mut answer) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::Update {
        jobs: vec![saker_core::JobId(1)],
        update: JobUpdate {
            priority: Some(3),
            ..JobUpdate::default()
        },
        reply,
    }));
    let refused = answer.try_recv().expect("answered at once").unwrap_err();
    assert_eq!(refused.kind, ErrorKind::DiskFull);
    // Nothing of it was queued, journaled or sent: it can never run.
    let status = h.status();
    assert!(status.disk_full);
    assert_eq!((status.jobs, status.queued), (0, 0));
    assert!(h.port.with(|r| r.appends.is_empty()));
    assert_eq!(dispatched(&h.sent()), 0);

    disk_full(&h, false);
    let mut answer = h.submit(vec![array(&["echo", "{index}"], "1-3")]);
    h.journal_durable();
    let accepted = answer
        .try_recv()
        .unwrap()
        .expect("taken once there is space");
    assert_eq!(
        accepted.jobs[0].job,
        saker_core::JobId(1),
        "no id was used up"
    );
    assert!(!h.status().disk_full);
}

#[tokio::test]
async fn no_attempt_starts_while_the_disk_is_full_and_held_results_count_once_space_returns() {
    let mut h = Harness::new();
    h.submit(vec![array(&["echo", "{index}"], "1-4")]);
    h.journal_durable();
    h.join(1, 2);
    h.sent();
    h.journal_durable();
    h.report(1, 2, &[], Vec::new());
    let first = assignments(&h.sent(), 1);
    assert_eq!(first.len(), 2);

    // The disk fills while two tasks run; they end and give their slots back.
    disk_full(&h, true);
    let results = first
        .iter()
        .map(|&(task, attempt)| exited(task, attempt, 0))
        .collect();
    h.report(1, 0, &first, results);
    let finished: Vec<u64> = h
        .port
        .with(|r| {
            r.appends
                .iter()
                .flat_map(|(records, _)| records.clone())
                .collect::<Vec<_>>()
        })
        .iter()
        .filter_map(|record| match record {
            Record::Result(result) => Some(result.task.0),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 2, "their results wait for the journal");
    h.report(1, 2, &[], Vec::new());
    assert_eq!(dispatched(&h.sent()), 0, "no attempt starts");
    let wakes = h.port.with(|r| std::mem::take(&mut r.wakes));
    assert_eq!(
        wakes
            .iter()
            .filter(|(_, wake)| *wake == Wake::Space)
            .count(),
        1,
        "one look for space at a time: {wakes:?}"
    );
    h.handle(RootMsg::SpaceCheck);
    assert_eq!(dispatched(&h.sent()), 0, "still full");
    assert!(
        h.port
            .with(|r| r.wakes.contains(&(Duration::from_millis(500), Wake::Space)))
    );

    // Space returns: the held results become durable, the rest of the work starts.
    disk_full(&h, false);
    h.handle(RootMsg::SpaceCheck);
    let second = assignments(&h.sent(), 1);
    assert_eq!(second.len(), 2);
    let durable = h.journal_durable();
    assert_eq!(
        durable
            .iter()
            .filter(|r| matches!(r, Record::Result(_)))
            .count(),
        2,
        "the held results, once each"
    );
    let results = second
        .iter()
        .map(|&(task, attempt)| exited(task, attempt, 0))
        .collect();
    h.report(1, 0, &second, results);
    h.journal_durable();
    let status = h.status();
    assert_eq!((status.succeeded, status.queued, status.running), (4, 0, 0));
}
