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
    });
    h.agent_sends(u64::from(node), node, &copied);
}

/// The holders `reader` is told of for `item`, by node.
fn holders(h: &mut Harness, reader: u32, item: &str) -> Vec<u32> {
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
            }),
        ),
    ] = &sent[..]
    else {
        panic!("{sent:?}");
    };
    assert_eq!((*to, named.as_str()), (reader, item));
    holders
        .iter()
        .map(|holder| {
            assert_eq!(holder.addr, format!("10.0.0.{}:5000", holder.node.0));
            holder.node.0
        })
        .collect()
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
