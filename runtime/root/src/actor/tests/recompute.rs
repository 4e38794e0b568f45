//! Lost items made again: an item whose last holder is lost is recomputed by its
//! writer when that may run twice, its readers held meanwhile and their requests
//! answered once it is back; otherwise, or when making it fails, readers are told why.

use saker_core::{JobId, NodeId};
use saker_wire::messages::{FromAgent, Outcome, TaskResult, ToAgent};
use saker_wire::{ItemData, ItemHolders, ItemRead, ItemWhere};

use super::transfers::written;
use super::*;

/// A job that writes `item` (idempotent or not), and one pinned to `node` reading it.
fn writer(item: &str, idempotent: bool) -> JobRequest {
    let mut request = single(&["make", item]);
    request.spec.writes = vec![item.into()];
    request.spec.idempotent = idempotent;
    request
}

fn reader(item: &str, node: u32) -> JobRequest {
    let mut request = single(&["use", item]);
    request.spec.reads = vec![item.into()];
    request.spec.node = Some(node);
    request
}

/// Runs the writer of `item` on node 1 (the only node with credit): it writes the
/// item and succeeds.
fn write_on_one(h: &mut Harness, item: &str, idempotent: bool) {
    h.submit(vec![writer(item, idempotent)]);
    h.journal_durable();
    h.report(1, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("the writer runs on node 1");
    };
    written(h, 1, item, 100);
    h.report(1, 0, &[(task, attempt)], vec![exited(task, attempt, 0)]);
    h.journal_durable();
}

/// Nodes 1 and 2; `part` written on node 1, a reader of it pinned to node 2; node 1
/// lost. The records journaled since the loss.
fn lost_with_a_reader(idempotent: bool) -> (Harness, Vec<Record>) {
    let mut h = Harness::new();
    h.join(1, 1);
    h.join(2, 1);
    write_on_one(&mut h, "part", idempotent);
    h.submit(vec![reader("part", 2)]);
    h.journal_durable();
    lose(&mut h, 1);
    let records = h.journal_durable();
    (h, records)
}

fn lose(h: &mut Harness, node: u32) {
    h.handle(RootMsg::LinkDown {
        link: LinkId(u64::from(node)),
        reason: "connection reset".into(),
    });
}

fn ask_where(h: &mut Harness, reader: u32, item: &str) {
    let asked = FromAgent::ItemWhere(ItemWhere {
        item: item.into(),
        reader: NodeId(reader),
    });
    h.agent_sends(u64::from(reader), reader, &asked);
}

fn ask_read(h: &mut Harness, reader: u32, item: &str, request: u64) {
    let read = FromAgent::ItemRead(ItemRead {
        item: item.into(),
        reader: NodeId(reader),
        request,
        offset: 0,
        len: saker_wire::ITEM_CHUNK,
    });
    h.agent_sends(u64::from(reader), reader, &read);
}

/// The error `reader` was answered for `item`, if any.
fn read_error(sent: &[(u32, ToAgent)], reader: u32) -> Option<String> {
    sent.iter().find_map(|(to, message)| match message {
        ToAgent::ItemData(ItemData { error, .. }) if *to == reader => error.clone(),
        _ => None,
    })
}

/// The writer's node is lost after it wrote the item a pinned reader waits for: the
/// writer's request is submitted again (journaled, marked as a recompute), the reader
/// is held and its attempt asked back, a reader's question waits; once the item is
/// written again the question is answered and the reader runs. A root resumed from
/// the journal in between holds the reader too.
#[tokio::test]
async fn a_lost_item_is_made_again_by_its_writer_and_its_readers_wait() {
    let mut h = Harness::new();
    h.join(1, 1);
    h.join(2, 1);
    write_on_one(&mut h, "part", true);
    h.submit(vec![reader("part", 2)]);
    h.journal_durable();
    h.report(2, 1, &[], Vec::new());
    let [(_, staged)] = assignments(&h.sent(), 2)[..] else {
        panic!("the reader is sent to node 2");
    };

    lose(&mut h, 1);
    let records = h.journal_durable();
    let remade = records.iter().find_map(|record| match record {
        Record::Submit { job, request, .. } => Some((*job, request.spec.argv.clone())),
        _ => None,
    });
    assert_eq!(remade, Some((JobId(3), vec!["make".into(), "part".into()])));
    assert!(records.contains(&Record::Recompute {
        job: JobId(3),
        of: JobId(1),
        items: vec!["part".into()],
        unix_us: UNIX_ORIGIN_US,
    }));
    assert!(h.root.ctx.core.is_held(JobId(2)), "the reader waits");
    assert_eq!(h.status().data_recomputes, 1);
    let asked_back = h.sent().into_iter().any(|(to, message)| {
        matches!(message, ToAgent::Return { ref attempts } if to == 2 && attempts[0].0 == staged)
    });
    assert!(asked_back, "its attempt not started is asked back");
    h.report(2, 0, &[], vec![cancelled(2, staged)]);
    ask_where(&mut h, 2, "part");
    assert!(h.sent().is_empty(), "the question waits for the item");

    // A root resumed now knows what it waits for.
    let journal: Vec<Record> = h
        .port
        .with(|r| r.durable.0.lock().unwrap().values().cloned().collect());
    let mut resumed = Harness::new();
    resumed.restore(journal).expect("restores");
    assert!(resumed.root.ctx.core.is_held(JobId(2)));

    h.report(2, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 2)[..] else {
        panic!("the recompute runs on node 2");
    };
    assert_eq!(task, 3, "job 3's task");
    written(&mut h, 2, "part", 100);
    let answered = h.sent().into_iter().any(|(to, message)| {
        matches!(message, ToAgent::ItemHolders(ItemHolders { ref holders, .. }) if to == 2 && holders.is_empty())
    });
    assert!(answered, "answered: node 2 holds it itself now");
    assert!(!h.root.ctx.core.is_held(JobId(2)), "released");
    h.report(2, 1, &[(task, attempt)], vec![exited(task, attempt, 0)]);
    assert_eq!(assignments(&h.sent(), 2).len(), 1, "the reader runs");
}

fn cancelled(task: u64, attempt: u64) -> TaskResult {
    TaskResult {
        outcome: Outcome::Cancelled,
        ..exited(task, attempt, 0)
    }
}

/// A writer that may not run twice makes nothing again: its readers fail at once
/// with a reason that says how to have it made again.
#[tokio::test]
async fn an_item_of_a_writer_that_may_not_run_twice_is_lost_with_the_reason() {
    let (mut h, records) = lost_with_a_reader(false);
    assert!(!h.root.ctx.core.is_held(JobId(2)));
    assert!(
        !records
            .iter()
            .any(|record| matches!(record, Record::Recompute { .. }))
    );
    ask_read(&mut h, 2, "part", 1);
    let error = read_error(&h.sent(), 2).expect("answered with an error");
    assert!(
        error.contains("job 1") && error.contains("not idempotent"),
        "{error}"
    );
}

/// A recompute that ends without the item (it failed) answers the waiting request
/// with the reason and releases the readers; the item is not made again after that.
#[tokio::test]
async fn a_recompute_that_fails_fails_its_readers_with_the_reason() {
    let (mut h, _) = lost_with_a_reader(true);
    ask_read(&mut h, 2, "part", 7);
    assert!(read_error(&h.sent(), 2).is_none(), "waits");
    h.report(2, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 2)[..] else {
        panic!("the recompute runs on node 2");
    };
    h.report(2, 0, &[(task, attempt)], vec![exited(task, attempt, 1)]);
    let error = read_error(&h.sent(), 2).expect("answered with the reason");
    assert!(
        error.contains("job 3") && error.contains("without it"),
        "{error}"
    );
    assert!(!h.root.ctx.core.is_held(JobId(2)));
    h.journal_durable();
    ask_read(&mut h, 2, "part", 8);
    assert!(read_error(&h.sent(), 2).is_some_and(|again| again == error));
    assert!(
        !h.journal_durable()
            .iter()
            .any(|record| matches!(record, Record::Submit { .. })),
        "not made again"
    );
}

/// A request passed to a holder that is lost before it answers goes to the next
/// holder (it used to wait for an answer that could not come).
#[tokio::test]
async fn a_request_to_a_lost_holder_goes_to_the_next_one() {
    let mut h = Harness::new();
    for node in 1..=3 {
        h.join(node, 1);
    }
    written(&mut h, 1, "part", 100);
    written(&mut h, 3, "part", 100);
    h.journal_durable();
    h.sent();
    ask_read(&mut h, 2, "part", 5);
    let passed_to = |sent: Vec<(u32, ToAgent)>| {
        sent.into_iter()
            .find_map(|(to, message)| matches!(message, ToAgent::ItemRead(_)).then_some(to))
    };
    assert_eq!(passed_to(h.sent()), Some(1));
    lose(&mut h, 1);
    assert_eq!(passed_to(h.sent()), Some(3), "asked again of node 3");
}
