//! The object store's decisions: what stays in memory, what is spilled or evicted, and
//! that nothing pinned, and no last copy, is ever dropped.

use saker_wire::messages::ObjectId;

use crate::board::{Role, Store, StoreEffect, StoreError, Tier};

const MIB: u64 = 1 << 20;

fn id(n: u128) -> ObjectId {
    ObjectId(n)
}

fn admit(store: &mut Store, n: u128, mib: u64, role: Role) -> Vec<StoreEffect> {
    store
        .handle_admitted(id(n), mib * MIB, role, Tier::Memory)
        .unwrap()
}

fn spill(n: u128, mib: u64) -> StoreEffect {
    StoreEffect::Spill {
        id: id(n),
        size: mib * MIB,
    }
}

fn evicted(n: u128) -> StoreEffect {
    StoreEffect::Drop {
        id: id(n),
        memory: true,
        disk: false,
        evicted: true,
    }
}

fn ask(n: u128) -> StoreEffect {
    StoreEffect::AskDrop { id: id(n) }
}

#[test]
fn under_its_bound_nothing_moves() {
    let mut store = Store::new(10 * MIB);
    for n in 0..5 {
        assert_eq!(admit(&mut store, n, 2, Role::Primary), []);
    }
    let usage = store.usage();
    assert_eq!((usage.objects, usage.memory_bytes), (5, 10 * MIB));
    assert_eq!(store.tier_of(id(4)), Some(Tier::Memory));
}

#[test]
fn past_its_bound_the_least_recently_used_primary_is_spilled_not_dropped() {
    let mut store = Store::new(10 * MIB);
    for n in 0..5 {
        admit(&mut store, n, 2, Role::Primary);
    }
    // Using 0 makes 1 the oldest.
    assert_eq!(store.pin(id(0)), Ok(Tier::Memory));
    store.unpin(id(0)).unwrap();
    assert_eq!(
        admit(&mut store, 5, 3, Role::Primary),
        [spill(1, 2), spill(2, 2)]
    );
    // Until the spills are done the bytes are still in memory and readable there.
    assert_eq!(store.tier_of(id(1)), Some(Tier::Memory));
    assert_eq!(
        store.handle_spilled(id(1)),
        [StoreEffect::DropMemory { id: id(1) }]
    );
    assert_eq!(
        store.handle_spilled(id(2)),
        [StoreEffect::DropMemory { id: id(2) }]
    );
    assert_eq!(store.tier_of(id(1)), Some(Tier::Disk));
    let usage = store.usage();
    assert_eq!((usage.memory_bytes, usage.disk_bytes), (9 * MIB, 4 * MIB));
    assert_eq!((usage.spills, usage.spilled_bytes), (2, 4 * MIB));
    assert_eq!(usage.objects, 6);
}

#[test]
fn replicas_are_evicted_before_any_primary_is_spilled() {
    let mut store = Store::new(6 * MIB);
    admit(&mut store, 1, 2, Role::Primary);
    admit(&mut store, 2, 2, Role::Replica);
    admit(&mut store, 3, 2, Role::Replica);
    // 1 is the oldest, but a primary: the replicas go first, oldest first, each once
    // the root lets it.
    assert_eq!(admit(&mut store, 4, 3, Role::Primary), [ask(2), ask(3)]);
    assert_eq!(store.tier_of(id(2)), Some(Tier::Memory), "asked, not gone");
    assert_eq!(store.handle_drop_answer(id(2), true), [evicted(2)]);
    assert_eq!(store.handle_drop_answer(id(3), true), [evicted(3)]);
    assert_eq!(store.tier_of(id(2)), None);
    let usage = store.usage();
    assert_eq!((usage.evictions, usage.evicted_bytes), (2, 4 * MIB));
    assert_eq!(usage.memory_bytes, 5 * MIB);
    // An answer for what is no longer asked changes nothing.
    assert_eq!(store.handle_drop_answer(id(2), true), []);
}

/// The root refuses when no other live node holds the item: the replica is the copy
/// the pilot counts on from then, spilled, never dropped.
#[test]
fn a_replica_the_root_does_not_let_go_is_spilled() {
    let mut store = Store::new(4 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    admit(&mut store, 2, 2, Role::Primary);
    assert_eq!(admit(&mut store, 3, 1, Role::Primary), [ask(1)]);
    // Asked once: a second pass does not ask again, nor spill another meanwhile.
    assert_eq!(store.pin(id(3)), Ok(Tier::Memory));
    assert_eq!(store.unpin(id(3)), Ok(vec![]));
    assert_eq!(store.handle_drop_answer(id(1), false), [spill(1, 2)]);
    assert_eq!(
        store.handle_spilled(id(1)),
        [StoreEffect::DropMemory { id: id(1) }]
    );
    assert_eq!(store.tier_of(id(1)), Some(Tier::Disk));
    assert_eq!(store.usage().evictions, 0);
}

/// A replica an attempt starts reading while the root is asked stays when the root
/// lets it go (the root must hear it is here); one made here meanwhile too.
#[test]
fn a_replica_read_or_made_here_while_asked_stays() {
    let mut store = Store::new(2 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    assert_eq!(admit(&mut store, 2, 1, Role::Primary), [ask(1)]);
    store.pin(id(1)).unwrap();
    assert_eq!(
        store.handle_drop_answer(id(1), true),
        [StoreEffect::Kept { id: id(1) }]
    );
    assert_eq!(store.tier_of(id(1)), Some(Tier::Memory));
    // Unpinned: asked again.
    assert_eq!(store.unpin(id(1)), Ok(vec![ask(1)]));
    // Written here by an attempt before the answer: a primary now, kept.
    admit(&mut store, 1, 2, Role::Primary);
    assert_eq!(
        store.handle_drop_answer(id(1), true),
        [StoreEffect::Kept { id: id(1) }]
    );
}

/// Freed while the root is asked: gone once, its memory no longer leaving.
#[test]
fn a_replica_freed_while_asked_is_counted_out_once() {
    let mut store = Store::new(2 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    assert_eq!(admit(&mut store, 2, 1, Role::Primary), [ask(1)]);
    assert_eq!(store.free(id(1)).len(), 1);
    assert_eq!(store.handle_drop_answer(id(1), true), []);
    let usage = store.usage();
    assert_eq!((usage.objects, usage.memory_bytes), (1, MIB));
    // Nothing counted as leaving: a newcomer that fits moves nothing.
    assert_eq!(admit(&mut store, 3, 1, Role::Primary), []);
}

#[test]
fn a_pinned_object_never_moves_and_a_fetch_too_big_for_what_is_pinned_goes_to_disk() {
    let mut store = Store::new(4 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    admit(&mut store, 2, 2, Role::Primary);
    store.pin(id(1)).unwrap();
    store.pin(id(2)).unwrap();
    assert_eq!(store.tier_for(MIB), Tier::Disk);
    // Written to memory anyway (a put by a client on this node): nothing may move
    // but the newcomer itself.
    assert_eq!(admit(&mut store, 3, 1, Role::Primary), [spill(3, 1)]);
    assert_eq!(
        store.handle_spilled(id(3)),
        [StoreEffect::DropMemory { id: id(3) }]
    );
    // Back under the bound: unpinning moves nothing.
    assert_eq!(store.unpin(id(1)), Ok(vec![]));
    assert_eq!(store.tier_for(2 * MIB), Tier::Memory);
    assert_eq!(store.usage().pinned, 1);
}

#[test]
fn a_copy_pinned_while_it_spills_keeps_its_memory_until_unpinned() {
    let mut store = Store::new(2 * MIB);
    admit(&mut store, 1, 2, Role::Primary);
    assert_eq!(admit(&mut store, 2, 1, Role::Primary), [spill(1, 2)]);
    assert_eq!(store.pin(id(1)), Ok(Tier::Memory));
    assert_eq!(store.handle_spilled(id(1)), []);
    assert_eq!(store.tier_of(id(1)), Some(Tier::Memory));
    assert_eq!(
        store.unpin(id(1)),
        Ok(vec![StoreEffect::DropMemory { id: id(1) }])
    );
    assert_eq!(store.tier_of(id(1)), Some(Tier::Disk));
    let usage = store.usage();
    assert_eq!((usage.memory_bytes, usage.disk_bytes), (MIB, 2 * MIB));
}

#[test]
fn a_failed_spill_keeps_the_object_in_memory_and_spills_another() {
    let mut store = Store::new(4 * MIB);
    admit(&mut store, 1, 2, Role::Primary);
    admit(&mut store, 2, 2, Role::Primary);
    assert_eq!(admit(&mut store, 3, 2, Role::Primary), [spill(1, 2)]);
    assert_eq!(store.handle_spill_failed(id(1)), [spill(2, 2)]);
    assert_eq!(
        store.handle_spilled(id(2)),
        [StoreEffect::DropMemory { id: id(2) }]
    );
    // 1 is never tried again, even past the bound.
    assert_eq!(admit(&mut store, 4, 1, Role::Primary), [spill(3, 2)]);
    assert_eq!(store.tier_of(id(1)), Some(Tier::Memory));
    assert_eq!(store.usage().spill_failures, 1);
}

#[test]
fn an_object_freed_while_pinned_is_dropped_at_its_last_unpin() {
    let mut store = Store::new(10 * MIB);
    admit(&mut store, 1, 2, Role::Primary);
    store.pin(id(1)).unwrap();
    store.pin(id(1)).unwrap();
    assert_eq!(store.free(id(1)), []);
    assert_eq!(store.unpin(id(1)), Ok(vec![]));
    let dropped = StoreEffect::Drop {
        id: id(1),
        memory: true,
        disk: false,
        evicted: false,
    };
    assert_eq!(store.unpin(id(1)), Ok(vec![dropped]));
    assert_eq!(store.usage().objects, 0);
    assert_eq!(store.usage().pinned, 0);
    assert_eq!(store.free(id(1)), [], "freeing twice is no change");
}

#[test]
fn a_promoted_replica_is_spilled_not_evicted() {
    let mut store = Store::new(2 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    store.promote(id(1)).unwrap();
    assert_eq!(admit(&mut store, 2, 1, Role::Replica), [spill(1, 2)]);
}

#[test]
fn a_second_admission_of_an_object_is_no_change_unless_its_size_differs() {
    let mut store = Store::new(10 * MIB);
    admit(&mut store, 1, 2, Role::Replica);
    assert_eq!(admit(&mut store, 1, 2, Role::Primary), []);
    assert_eq!(store.usage().objects, 1);
    assert_eq!(
        store.handle_admitted(id(1), 3 * MIB, Role::Primary, Tier::Memory),
        Err(StoreError::SizeMismatch {
            id: id(1),
            held: 2 * MIB,
            size: 3 * MIB
        })
    );
    // It became primary with the second admission: spilled, not evicted.
    let mut small = Store::new(2 * MIB);
    admit(&mut small, 1, 2, Role::Replica);
    admit(&mut small, 1, 2, Role::Primary);
    assert_eq!(admit(&mut small, 2, 1, Role::Replica), [spill(1, 2)]);
}

#[test]
fn unknown_objects_are_refused_by_name() {
    let mut store = Store::new(MIB);
    assert_eq!(store.pin(id(7)), Err(StoreError::Unknown(id(7))));
    assert_eq!(store.unpin(id(7)), Err(StoreError::Unknown(id(7))));
    assert_eq!(store.promote(id(7)), Err(StoreError::Unknown(id(7))));
    assert!(StoreError::Unknown(id(7)).to_string().contains("not held"));
    assert_eq!(store.handle_spilled(id(7)), []);
}
