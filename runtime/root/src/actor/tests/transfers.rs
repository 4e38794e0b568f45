//! Items fetched node to node: the root names the holders a reader may dial, spread
//! over readers; a reader's copy makes its node a holder, journaled; bytes moved are
//! counted apart from those the root passed on.

use saker_core::NodeId;
use saker_wire::messages::{FromAgent, ToAgent};
use saker_wire::{ItemCopied, ItemHolders, ItemWhere, ItemWritten, ItemsWritten};

use super::Harness;
use crate::records::Record;

pub(super) fn written(h: &mut Harness, node: u32, item: &str, bytes: u64) {
    let written = FromAgent::ItemsWritten(ItemsWritten {
        node: NodeId(node),
        attempt: saker_core::AttemptId(1),
        items: vec![ItemWritten {
            name: item.into(),
            bytes,
        }],
    });
    h.agent_sends(u64::from(node), node, &written);
}

fn copied(h: &mut Harness, node: u32, item: &str, bytes: u64, direct: u64) {
    let copied = FromAgent::ItemCopied(ItemCopied {
        node: NodeId(node),
        item: item.into(),
        bytes,
        direct,
        relayed: 0,
    });
    h.agent_sends(u64::from(node), node, &copied);
}

/// The holders `reader` is told of for `item`, by node.
fn holders(h: &mut Harness, reader: u32, item: &str) -> Vec<u32> {
    where_is(h, reader, item).0
}

/// The holders `reader` is told of for `item`, and its upstream, by node.
fn where_is(h: &mut Harness, reader: u32, item: &str) -> (Vec<u32>, Option<u32>) {
    h.sent();
    let asked = FromAgent::ItemWhere(ItemWhere {
        item: item.into(),
        reader: NodeId(reader),
    });
    h.agent_sends(u64::from(reader), reader, &asked);
    let sent = h.sent();
    let [
        (
            to,
            ToAgent::ItemHolders(ItemHolders {
                item: named,
                holders,
                upstream,
            }),
        ),
    ] = &sent[..]
    else {
        panic!("{sent:?}");
    };
    assert_eq!((*to, named.as_str()), (reader, item));
    let node = |holder: &saker_wire::ItemHolder| {
        assert_eq!(holder.addr, format!("10.0.0.{}:5000", holder.node.0));
        holder.node.0
    };
    (
        holders.iter().map(node).collect(),
        upstream.as_ref().map(node),
    )
}

/// Readers of one item that fetch at once form a chain: each is told to fetch from
/// the one that asked before it, which relays what it has; its holders stay named
/// for when that one fails. A reader whose copy is whole, or whose node is lost,
/// feeds nobody new.
#[tokio::test]
async fn readers_fetching_at_once_are_chained() {
    let mut h = Harness::new();
    for node in 1..=6 {
        h.join(node, 1);
    }
    written(&mut h, 1, "part", 1000);
    h.journal_durable();
    assert_eq!(where_is(&mut h, 2, "part"), (vec![1], None));
    assert_eq!(where_is(&mut h, 3, "part"), (vec![1], Some(2)));
    assert_eq!(where_is(&mut h, 4, "part"), (vec![1], Some(3)));
    let copied = FromAgent::ItemCopied(ItemCopied {
        node: NodeId(4),
        item: "part".into(),
        bytes: 1000,
        direct: 1000,
        relayed: 1000,
    });
    h.agent_sends(4, 4, &copied);
    let status = h.status();
    assert_eq!(
        (status.data_moved_bytes, status.data_relayed_bytes),
        (1000, 1000),
        "4 had it all from 3"
    );
    assert_eq!(
        where_is(&mut h, 5, "part"),
        (vec![4, 1], None),
        "2 and 3 feed already; 4 is whole"
    );
    h.handle(crate::actor::RootMsg::LinkDown {
        link: saker_actors::link::LinkId(5),
        reason: "connection reset".into(),
    });
    assert_eq!(where_is(&mut h, 6, "part"), (vec![1, 4], None), "5 is lost");
}

#[tokio::test]
async fn a_reader_is_told_the_live_holders_and_its_copy_makes_one_more() {
    let mut h = Harness::new();
    for node in 1..=4 {
        h.join(node, 1);
    }
    written(&mut h, 1, "part", 1000);
    h.journal_durable();
    assert_eq!(holders(&mut h, 2, "part"), [1]);
    assert!(
        holders(&mut h, 2, "unknown").is_empty(),
        "none: through the root"
    );

    copied(&mut h, 2, "part", 1000, 1000);
    let records = h.journal_durable();
    let record = Record::Item {
        item: "part".into(),
        node: NodeId(2),
        bytes: 1000,
    };
    assert_eq!(records, [record], "the copy is journaled");
    // Readers start at different holders; a reader is never told of itself.
    assert_eq!(holders(&mut h, 3, "part"), [2, 1]);
    assert_eq!(holders(&mut h, 4, "part"), [1, 2]);
    assert_eq!(holders(&mut h, 1, "part"), [2]);
    let status = h.status();
    assert_eq!((status.data_moved_bytes, status.data_root_bytes), (1000, 0));
    let fetched: Vec<u64> = status.nodes.iter().map(|node| node.fetched_bytes).collect();
    assert_eq!(fetched, [0, 1000, 0, 0], "node 2 fetched it");
    let held: Vec<u64> = status.nodes.iter().map(|node| node.held_bytes).collect();
    assert_eq!(held, [1000, 1000, 0, 0], "both hold it");
    assert_eq!(status.data_held_bytes, 2000);

    // A copy of another size, or of an item nobody wrote, is not counted on.
    copied(&mut h, 3, "part", 999, 999);
    copied(&mut h, 3, "other", 10, 10);
    assert!(h.journal_durable().is_empty());
    assert_eq!(holders(&mut h, 4, "part"), [1, 2]);
}

/// The answer a node gets when it asks to drop its copy of `item`.
fn drop_copy(h: &mut Harness, node: u32, item: &str) -> bool {
    h.sent();
    let ask = FromAgent::DropCopy(saker_wire::DropCopy {
        node: NodeId(node),
        item: item.into(),
    });
    h.agent_sends(u64::from(node), node, &ask);
    let sent = h.sent();
    let [(to, ToAgent::CopyDrop(answer))] = &sent[..] else {
        panic!("{sent:?}");
    };
    assert_eq!((*to, answer.item.as_str()), (node, item));
    answer.allowed
}

/// A copy is dropped only while another live node holds the item: of two nodes that
/// hold the last two copies and ask in turn, the second keeps its copy; a node that
/// kept a copy it was let drop says so and is a holder again, not a new fetch.
#[tokio::test]
async fn a_copy_may_be_dropped_only_while_another_live_node_holds_it() {
    let mut h = Harness::new();
    for node in 1..=3 {
        h.join(node, 1);
    }
    written(&mut h, 1, "obj-a", 1000);
    copied(&mut h, 2, "obj-a", 1000, 1000);
    h.journal_durable();
    assert!(drop_copy(&mut h, 2, "obj-a"), "node 1 holds it too");
    assert_eq!(holders(&mut h, 3, "obj-a"), [1], "readers go to node 1 now");
    assert!(!drop_copy(&mut h, 1, "obj-a"), "the last copy stays");
    assert!(!drop_copy(&mut h, 3, "obj-a"), "node 3 never held it");
    assert!(!drop_copy(&mut h, 3, "unknown"));

    // Node 2 kept it after all (read there meanwhile): a holder again.
    copied(&mut h, 2, "obj-a", 1000, 0);
    let mut told = holders(&mut h, 3, "obj-a");
    told.sort_unstable();
    assert_eq!(told, [1, 2]);
    let status = h.status();
    let fetched: Vec<u64> = status.nodes.iter().map(|node| node.fetched_bytes).collect();
    assert_eq!(fetched, [0, 1000, 0], "fetched once");
    assert_eq!(status.data_moved_bytes, 1000);

    // A holder that is lost does not count as the other copy.
    assert!(drop_copy(&mut h, 1, "obj-a"), "node 2 holds it");
    copied(&mut h, 1, "obj-a", 1000, 0);
    h.handle(crate::actor::RootMsg::LinkDown {
        link: saker_actors::link::LinkId(2),
        reason: "connection reset".into(),
    });
    assert!(!drop_copy(&mut h, 1, "obj-a"), "node 2 is gone");
}
