//! The desk carries out what the board decided: launches built from starts, stop
//! handles signalled or let go of, item files written and kept, reports sent in
//! order. No threads, no sockets: the parent is a channel.

use std::path::Path;
use std::sync::Arc;

use saker_wire::ItemData;
use saker_wire::messages::{
    AttemptId, Dispatch, FromAgent, JobDef, NodeId, ResourceKind, Resources,
};
use tokio::sync::mpsc::UnboundedReceiver;

use super::desk::{Clock, Desk, SharedDesk, Uplink, lock};
use super::tests::{decode, job};
use crate::board::tests::task;
use crate::board::{Board, BoardConfig};
use crate::executor::{NextAttempt, Work};
use crate::items::ItemFiles;
use crate::launch::Places;
use crate::link::{FrameBuf, channel};
use crate::process::Stop;
use crate::resources::NodeResources;

/// A desk of node 7 offering `resources`, its spilled output in `dir`, granting no
/// credit at first; and what it sends its parent.
fn desk(resources: &NodeResources, dir: &Path) -> (SharedDesk, UnboundedReceiver<FrameBuf>) {
    let (parent, rx) = channel();
    let clock = Clock::start();
    let slots = resources.cores.max(1);
    let config = BoardConfig {
        node: 7,
        slots,
        prefetch: 0,
        credit: 0,
    };
    let board = Board::new(&config, resources, clock.now());
    let scratch = dir.join("scratch");
    let places = Places::new(7, dir.to_path_buf(), scratch.clone());
    let files = ItemFiles::new(7, scratch, false);
    let uplink = Uplink { parent, node: 7 };
    let desk = Desk::shared(board, clock, places, files, uplink, slots as usize);
    (desk, rx)
}

fn dispatch(desk: &SharedDesk, jobs: Vec<Arc<JobDef>>, tasks: &[(u64, u32)]) {
    let mut desk = lock(desk);
    let now = desk.now();
    let dispatch = Dispatch {
        jobs,
        tasks: tasks.iter().map(|&(id, job)| task(id, job)).collect(),
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    desk.apply(now, |board| board.handle_dispatch(dispatch, now));
}

fn start_next(desk: &SharedDesk, slot: usize) -> Option<NextAttempt> {
    let mut desk = lock(desk);
    let now = desk.now();
    desk.start_next(slot, now)
}

fn env_of(next: &NextAttempt) -> Vec<String> {
    let Work::Command(launch) = &next.work else {
        panic!("a command");
    };
    launch.env_strs().into_iter().map(str::to_owned).collect()
}

/// A started command says which node ran it, sees its GPU, and starts as many
/// threads as it holds cores.
#[test]
fn a_started_command_carries_its_node_its_gpus_and_its_threads() {
    let dir = tempfile::tempdir().unwrap();
    let resources = NodeResources {
        cores: 4,
        cpus: Vec::new(),
        gpus: vec!["7".into(), "9".into()],
        memory_mib: 1000,
        custom: Vec::new(),
    };
    let (desk, _rx) = desk(&resources, dir.path());
    let mut gpu_job = JobDef::clone(&job(3, &["true"]));
    gpu_job.resources = Resources::cores(1)
        .with(ResourceKind::GPUS, 1)
        .with(ResourceKind::MEMORY_MIB, 300);
    dispatch(&desk, vec![Arc::new(gpu_job)], &[(1, 3)]);
    let started = start_next(&desk, 1).expect("it fits");
    let env = env_of(&started);
    for set in [
        "SAKER_NODE=7",
        "CUDA_VISIBLE_DEVICES=7",
        "OMP_NUM_THREADS=1",
        "X=1",
    ] {
        assert!(env.iter().any(|var| var == set), "{set} in {env:?}");
    }
    assert_eq!(started.binding.memory_mib, 300);
    assert!(
        !env.iter().any(|var| var.starts_with("SAKER_SCRATCH=")),
        "it reads and writes no items"
    );
}

/// Cancelling a running attempt stops it through the handle the desk kept; one whose
/// slot's thread failed is let go of (which kills it).
#[test]
fn a_cancel_stops_the_running_attempt_and_a_lost_slot_lets_go_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let (desk, _rx) = desk(&NodeResources::of_cores(2), dir.path());
    dispatch(&desk, vec![job(1, &["sleep", "30"])], &[(1, 1), (2, 1)]);
    let first = start_next(&desk, 0).unwrap();
    let second = start_next(&desk, 1).unwrap();
    {
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.apply(now, |board| board.handle_cancel(AttemptId(10), now));
        desk.apply(now, |board| {
            board.handle_slot_lost(1, "slot failed".into(), now);
        });
    }
    assert_eq!(first.control.stopped(), Some(Stop::Cancelled));
    assert_eq!(
        second.control.stopped(),
        Some(Stop::Detached),
        "the handle is gone: killed"
    );
}

/// A slot's thread that cannot take its start puts a task back at the queue's head,
/// for another slot.
#[test]
fn a_start_its_thread_could_not_take_goes_back_to_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (desk, _rx) = desk(&NodeResources::of_cores(2), dir.path());
    dispatch(&desk, vec![job(1, &["true"])], &[(1, 1)]);
    let first = start_next(&desk, 0).unwrap();
    {
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.unstart(0, now);
    }
    let again = start_next(&desk, 1).expect("another slot takes it");
    assert_eq!(
        (first.attempt, again.attempt),
        (AttemptId(10), AttemptId(10))
    );
}

/// A reader waits while its item is fetched: the desk writes the answer's bytes
/// beside the item, keeps it whole under its name, and the reader then starts with
/// the scratch directory in its environment.
#[test]
fn a_fetched_item_is_kept_whole_and_its_reader_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (desk, mut rx) = desk(&NodeResources::of_cores(1), dir.path());
    let mut reader = JobDef::clone(&job(3, &["cat", "in"]));
    reader.reads = vec!["in".into()];
    dispatch(&desk, vec![Arc::new(reader)], &[(1, 3)]);
    assert!(start_next(&desk, 0).is_none(), "staged while fetched");
    {
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.send_report(now).unwrap();
    }
    let FromAgent::ItemRead(read) = decode(&rx.try_recv().unwrap()) else {
        panic!("a request first");
    };
    assert_eq!((read.item.as_str(), read.reader), ("in", NodeId(7)));
    let answer = ItemData {
        item: "in".into(),
        reader: NodeId(7),
        request: read.request,
        offset: 0,
        total: 5,
        data: b"hello".to_vec(),
        error: None,
    };
    {
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.item_data(&answer, now);
    }
    let scratch = dir.path().join("scratch");
    assert_eq!(std::fs::read(scratch.join("in")).unwrap(), b"hello");
    let started = start_next(&desk, 0).expect("the item is here");
    let env = env_of(&started);
    let expected = format!("SAKER_SCRATCH={}", scratch.display());
    assert!(env.contains(&expected), "{env:?}");
    assert_eq!(started.attempt, AttemptId(10));
}
