//! Updates at the root: checked whole, applied to the core and to the agents' copies of
//! job definitions, answered once journaled, and in force again after a resume.

use std::time::Duration;

use saker_core::{JobId, Time};
use saker_wire::messages::ToAgent;
use tokio::sync::oneshot;

use super::{Harness, RootMsg, array, assignments, single};
use crate::client::ClientRequest;
use crate::records::Record;
use saker_client::results::Timestamp;
use saker_client::{ErrorKind, JobUpdate, RequestError, UpdateReport};

type Answer = oneshot::Receiver<Result<UpdateReport, RequestError>>;

impl Harness {
    fn update(&mut self, jobs: &[u32], update: JobUpdate) -> Answer {
        let (reply, answer) = oneshot::channel();
        let jobs = jobs.iter().copied().map(JobId).collect();
        self.handle(RootMsg::Client(ClientRequest::Update {
            jobs,
            update,
            reply,
        }));
        answer
    }

    /// The wall-clock time `ahead` from now.
    fn in_(&self, ahead: Duration) -> Timestamp {
        Timestamp::from_unix_micros(
            self.root.ctx.timestamp().unix_micros() + ahead.as_micros() as u64,
        )
    }
}

fn refused(mut answer: Answer) -> ErrorKind {
    answer
        .try_recv()
        .expect("answered at once")
        .expect_err("refused")
        .kind
}

fn limit(limit: Option<Duration>) -> JobUpdate {
    JobUpdate {
        time_limit: Some(limit),
        ..JobUpdate::default()
    }
}

/// An unknown or ended job refuses the whole request, as an update that changes
/// nothing or sets a zero limit does; nothing is changed or journaled then. An update
/// is answered only once its record is durable.
#[test]
fn an_update_is_checked_whole_and_answered_once_durable() {
    let mut h = Harness::new();
    h.submit(vec![single(&["a"]), single(&["b"])]);
    h.journal_durable();
    let (reply, _) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::Cancel {
        jobs: vec![JobId(1)],
        reply,
    }));
    h.journal_durable();
    let priority = JobUpdate {
        priority: Some(5),
        ..JobUpdate::default()
    };
    assert_eq!(refused(h.update(&[2, 9], priority)), ErrorKind::UnknownJob);
    assert_eq!(refused(h.update(&[2, 1], priority)), ErrorKind::JobEnded);
    assert_eq!(
        refused(h.update(&[2], JobUpdate::default())),
        ErrorKind::InvalidSpec
    );
    assert_eq!(
        refused(h.update(&[2], limit(Some(Duration::ZERO)))),
        ErrorKind::InvalidSpec
    );
    assert!(h.journal_durable().is_empty(), "nothing journaled");
    assert_eq!(h.root.ctx.core.job_spec(JobId(2)).unwrap().priority, 0);

    let mut answer = h.update(&[2], priority);
    assert!(
        answer.try_recv().is_err(),
        "not answered before it is durable"
    );
    let records = h.journal_durable();
    assert!(
        matches!(&records[..], [Record::Update { job: JobId(2), update, .. }] if *update == priority),
        "{records:?}"
    );
    assert_eq!(answer.try_recv().unwrap().unwrap().updated, 1);
    assert_eq!(h.root.ctx.core.job_spec(JobId(2)).unwrap().priority, 5);
}

/// A new time limit replaces the definition each node holding the job has, at once
/// (their queued attempts start under it); later dispatches need not send it again.
#[test]
fn a_new_time_limit_reaches_the_nodes_that_hold_the_job() {
    let mut h = Harness::new();
    let mut job = array(&["sleep", "30"], "1-4");
    job.spec.time_limit = Some(Duration::from_secs(60));
    h.submit(vec![job]);
    h.journal_durable();
    h.join(1, 1);
    h.sent();
    h.report(1, 2, &[], Vec::new());
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(first))] = sent.as_slice() else {
        panic!("one dispatch to node 1: {sent:?}");
    };
    assert_eq!(first.jobs[0].time_limit_ms, 60_000);
    assert_eq!(first.tasks.len(), 2, "one runs, one waits on the node");
    h.update(&[1], limit(Some(Duration::from_secs(1))));
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(redefined))] = sent.as_slice() else {
        panic!("the new definition to node 1: {sent:?}");
    };
    assert!(redefined.tasks.is_empty());
    assert_eq!(redefined.jobs.len(), 1);
    assert_eq!(redefined.jobs[0].time_limit_ms, 1_000);
    assert_eq!(
        h.root.ctx.core.job_spec(JobId(1)).unwrap().time_limit,
        Some(1_000_000)
    );
    h.report(1, 1, &[], Vec::new());
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(next))] = sent.as_slice() else {
        panic!("more work for node 1: {sent:?}");
    };
    assert!(
        next.jobs.is_empty(),
        "the node has the new definition already"
    );
    h.update(&[1], limit(None));
    let sent = h.sent();
    assert!(
        matches!(&sent[..], [(1, ToAgent::Dispatch(d))] if d.jobs[0].time_limit_ms == 0),
        "no limit: {sent:?}"
    );
}

/// A job given a time ahead stops being dispatched; its attempt waiting on a node is
/// asked back, its running one runs on; at its time it goes on.
#[test]
fn a_later_time_holds_a_queued_job_and_asks_back_its_unstarted_attempt() {
    let mut h = Harness::new();
    h.submit(vec![array(&["true"], "1-3")]);
    h.journal_durable();
    h.join(1, 1);
    h.sent();
    h.report(1, 2, &[], Vec::new());
    let dispatched = assignments(&h.sent(), 1);
    assert_eq!(dispatched.len(), 2);
    h.report(1, 0, &[dispatched[0]], Vec::new());
    let later = JobUpdate {
        not_before: Some(Some(h.in_(Duration::from_secs(60)))),
        ..JobUpdate::default()
    };
    h.update(&[1], later);
    let sent = h.sent();
    assert!(
        matches!(&sent[..], [(1, ToAgent::Return { attempts })] if attempts[0].0 == dispatched[1].1),
        "the waiting attempt is asked back: {sent:?}"
    );
    assert_eq!(h.status().waiting, 1, "the third task waits for its time");
    h.report(1, 1, &[], Vec::new());
    assert!(
        assignments(&h.sent(), 1).is_empty(),
        "nothing before its time"
    );
    h.clock.advance(Duration::from_secs(60));
    h.handle(RootMsg::Timer);
    assert_eq!(assignments(&h.sent(), 1).len(), 1);
}

/// A resumed root applies the journaled updates again: the latest value of each field,
/// fields of separate updates folded, `null` clearing a time.
#[test]
fn updates_are_in_force_after_a_resume() {
    let mut h = Harness::new();
    let mut timed = single(&["later"]);
    timed.spec.not_before = Some(h.in_(Duration::from_secs(30)));
    h.submit(vec![single(&["a"]), timed]);
    let mut records = h.journal_durable();
    let ahead = h.in_(Duration::from_secs(3_600));
    h.update(
        &[1],
        JobUpdate {
            priority: Some(7),
            not_before: Some(Some(ahead)),
            time_limit: None,
        },
    );
    h.update(&[1], limit(Some(Duration::from_secs(5))));
    h.update(
        &[2],
        JobUpdate {
            not_before: Some(None),
            ..JobUpdate::default()
        },
    );
    records.extend(h.journal_durable());

    let mut resumed = Harness::new();
    resumed.restore(records).expect("the journal restores");
    let core = &resumed.root.ctx.core;
    let spec = core.job_spec(JobId(1)).unwrap();
    assert_eq!((spec.priority, spec.time_limit), (7, Some(5_000_000)));
    assert_eq!(
        core.not_before(JobId(1)),
        Some(Time::from_micros(3_600_000_000))
    );
    assert_eq!(core.not_before(JobId(2)), None, "its time was cleared");
    let def = &resumed.root.submissions.definition(JobId(1)).unwrap();
    assert_eq!(def.time_limit_ms, 5_000);
    resumed.join(1, 2);
    resumed.sent();
    resumed.report(1, 2, &[], Vec::new());
    let sent = resumed.sent();
    assert_eq!(assignments(&sent, 1), vec![(2, 1)], "only job 2 runs now");
}
