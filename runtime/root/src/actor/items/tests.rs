//! The item table's own bookkeeping; a pilot's items end to end are in
//! `actor/tests/transfers.rs` and `pilot/tests/data.rs`.

use super::*;

#[test]
fn a_reader_prefers_the_nodes_holding_the_most_of_its_input() {
    let mut table = ItemTable::default();
    table.add_holder("a", NodeId(1), 100);
    table.add_holder("b", NodeId(2), 300);
    table.add_holder("c", NodeId(3), 300);
    table.add_holder("a", NodeId(3), 100);
    table.reads.insert(JobId(9), vec!["a".into(), "b".into()]);
    assert_eq!(table.preferred(JobId(9)), vec![NodeId(2)]);
    table.reads.insert(JobId(9), vec!["a".into(), "c".into()]);
    assert_eq!(table.preferred(JobId(9)), vec![NodeId(3)], "a and c: 400");
    table.reads.insert(JobId(9), vec!["b".into(), "c".into()]);
    assert_eq!(
        table.preferred(JobId(9)),
        vec![NodeId(2), NodeId(3)],
        "a tie"
    );
    table.reads.insert(JobId(9), vec!["unknown".into()]);
    assert!(table.preferred(JobId(9)).is_empty());
    assert!(!table.add_holder("a", NodeId(1), 100), "not news");
}

#[test]
fn a_resumed_table_knows_its_readers_and_their_holders_again() {
    use crate::actor::testing::{Owned, UNIX_ORIGIN_US, single};
    let mut owned = Owned::new();
    let mut reader = single(&["read"]);
    reader.spec.reads = vec!["a".into()];
    let now = owned.ctx.now();
    let spec = saker_core::JobSpec {
        count: 1,
        resources: saker_core::Resources::cores(1),
        placement: saker_core::Placement::Single,
        priority: 0,
        max_retries: 0,
        max_replays: None,
        time_limit: None,
        class: 0,
        speculative: false,
    };
    owned
        .ctx
        .core
        .handle_submit_at(spec, &[], None, now)
        .unwrap();
    let mut journaled = Journaled::default();
    journaled.look(&Record::Submit {
        job: JobId(1),
        first_task: saker_core::TaskId(1),
        count: 1,
        submitted_unix_us: UNIX_ORIGIN_US,
        request: Box::new(reader),
    });
    journaled.gather(Record::Item {
        item: "a".into(),
        node: NodeId(2),
        bytes: 10,
    });
    let mut table = ItemTable::default();
    table.resume(&mut owned.ctx, journaled);
    assert_eq!(table.len(), 1);
    assert_eq!(table.readers["a"], [JobId(1)]);
    assert_eq!(table.preferred(JobId(1)), [NodeId(2)]);
}
