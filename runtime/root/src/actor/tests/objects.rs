//! Objects a client puts in a node's store: the stores listed, a put answered once
//! journaled (as a data item held by that node), refused on a node that is not live.

use saker_client::ErrorKind;
use saker_client::protocol::{NodeStore, PutObjectRequest};
use saker_core::{NodeId, ObjectId};
use tokio::sync::oneshot;

use super::Harness;
use crate::actor::RootMsg;
use crate::client::ClientRequest;
use crate::records::Record;

type Answer = oneshot::Receiver<Result<(), saker_client::RequestError>>;

fn put(h: &mut Harness, object: u128, node: u32, bytes: u64) -> Answer {
    let (reply, answer) = oneshot::channel();
    let put = PutObjectRequest {
        object: ObjectId(object),
        node: NodeId(node),
        bytes,
    };
    h.handle(RootMsg::Client(ClientRequest::PutObject { put, reply }));
    answer
}

#[tokio::test]
async fn stores_list_each_live_node_with_its_scratch_directory() {
    let mut h = Harness::new();
    h.join(2, 1);
    h.join(1, 1);
    let (reply, mut answer) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::Stores { reply }));
    let stores = answer.try_recv().expect("answered at once").expect("ok");
    let store = |node: u32| NodeStore {
        node: NodeId(node),
        host: format!("host{node}"),
        scratch: format!("/scratch/node-{node}"),
        data: format!("10.0.0.{node}:5000"),
    };
    assert_eq!(stores.stores, [store(1), store(2)]);
}

fn holders(h: &mut Harness, object: u128) -> Vec<u32> {
    let (reply, mut answer) = oneshot::channel();
    let object = ObjectId(object);
    h.handle(RootMsg::Client(ClientRequest::ObjectHolders {
        object,
        reply,
    }));
    let report = answer.try_recv().expect("answered at once").expect("ok");
    report.holders.iter().map(|holder| holder.node.0).collect()
}

#[tokio::test]
async fn a_clients_ask_for_an_objects_holders_names_each_live_one_in_turn() {
    let mut h = Harness::new();
    h.join(1, 1);
    h.join(2, 1);
    h.join(3, 1);
    for node in [1, 2] {
        drop(put(&mut h, 0xcd, node, 64));
        h.journal_durable();
    }
    let first = holders(&mut h, 0xcd);
    let second = holders(&mut h, 0xcd);
    let mut sorted = first.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2], "both holders, not node 3");
    assert_ne!(first[0], second[0], "each ask starts at another holder");
    assert!(holders(&mut h, 0xee).is_empty(), "an unknown object: none");
    h.handle(RootMsg::LinkDown {
        link: saker_actors::link::LinkId(1),
        reason: "gone".into(),
    });
    assert_eq!(holders(&mut h, 0xcd), [2], "a lost node holds nothing");
}

#[tokio::test]
async fn a_put_is_answered_once_journaled_as_an_item_its_node_holds() {
    let mut h = Harness::new();
    h.join(1, 1);
    let mut answer = put(&mut h, 0xab, 1, 4096);
    assert!(
        answer.try_recv().is_err(),
        "not answered before it is durable"
    );
    let records = h.journal_durable();
    let item = Record::Item {
        item: format!("obj-{}", ObjectId(0xab)),
        node: NodeId(1),
        bytes: 4096,
    };
    assert!(records.contains(&item), "{records:?}");
    assert_eq!(answer.try_recv().expect("answered"), Ok(()));
    assert_eq!(h.status().items, 1);
    // The same put again changes nothing: answered at once, nothing journaled.
    let mut again = put(&mut h, 0xab, 1, 4096);
    assert_eq!(again.try_recv().expect("answered at once"), Ok(()));
    assert!(h.journal_durable().is_empty());
}

#[tokio::test]
async fn a_put_on_a_node_that_is_not_live_is_refused_by_name() {
    let mut h = Harness::new();
    h.join(1, 1);
    h.journal_durable();
    let mut answer = put(&mut h, 1, 7, 10);
    let error = answer.try_recv().expect("answered at once").unwrap_err();
    assert_eq!(error.kind, ErrorKind::UnknownNode);
    assert!(error.message.contains("node 7"), "{}", error.message);
    assert!(h.journal_durable().is_empty());
}

fn free(h: &mut Harness, objects: &[u128]) -> Answer {
    let (reply, answer) = oneshot::channel();
    let objects = objects.iter().map(|&object| ObjectId(object)).collect();
    h.handle(RootMsg::Client(ClientRequest::FreeObjects {
        objects,
        reply,
    }));
    answer
}

/// The items-freed messages sent, by node.
fn freed_sent(h: &Harness) -> Vec<(u32, Vec<String>)> {
    h.sent()
        .into_iter()
        .filter_map(|(to, message)| match message {
            saker_wire::messages::ToAgent::ItemsFreed { items } => Some((to, items)),
            _ => None,
        })
        .collect()
}

/// A freed object no job reads goes at once from its holder; one a job reads goes when
/// that job ends. The free is answered once journaled; unknown ids are ignored; a root
/// resumed from the journal has forgotten the freed object.
#[tokio::test]
async fn a_freed_object_goes_from_its_holders_once_no_job_reads_it() {
    let mut h = Harness::new();
    h.join(1, 1);
    let name = |object: u128| format!("obj-{}", ObjectId(object));
    put(&mut h, 0xa, 1, 10);
    put(&mut h, 0xb, 1, 10);
    h.journal_durable();
    let mut reader = crate::actor::testing::single(&["use"]);
    reader.spec.reads = vec![name(0xb)];
    h.submit(vec![reader]);
    h.journal_durable();
    h.sent();

    let mut answer = free(&mut h, &[0xa, 0xb, 0xdead]);
    assert!(answer.try_recv().is_err(), "answered once durable");
    assert_eq!(freed_sent(&h), [(1, vec![name(0xa)])], "b is read still");
    let records = h.journal_durable();
    assert!(records.contains(&Record::ItemsFreed {
        items: vec![name(0xa), name(0xb)],
        unix_us: crate::actor::testing::UNIX_ORIGIN_US,
    }));
    assert_eq!(answer.try_recv().expect("answered"), Ok(()));
    assert_eq!(h.status().items, 1);

    h.report(1, 1, &[], Vec::new());
    let done = h.succeed_sent(1);
    assert_eq!(done.len(), 1);
    assert_eq!(freed_sent(&h), [(1, vec![name(0xb)])], "its reader ended");
    assert_eq!(h.status().items, 0);
    let mut again = free(&mut h, &[0xb]);
    assert_eq!(again.try_recv().expect("at once"), Ok(()), "freed already");
    h.journal_durable();

    let journal: Vec<Record> = h
        .port
        .with(|r| r.durable.0.lock().unwrap().values().cloned().collect());
    let mut resumed = Harness::new();
    resumed.restore(journal).expect("restores");
    assert_eq!(resumed.status().items, 0);
}
