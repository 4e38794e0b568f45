//! The credit granted to the root, and the prefetch that sizes its window.

use saker_wire::messages::{FromAgent, ResourceKind};

use super::*;

#[test]
fn the_prefetch_covers_the_pace_of_recent_attempts_within_bounds() {
    let cover = Duration::from_millis(10);
    let mut board = board(4);
    assert_eq!(
        board.prefetch(4, 4, cover),
        4,
        "nothing known yet: the floor"
    );
    board.note_run_time(&ran_for(100));
    assert_eq!(
        board.prefetch(4, 4, cover),
        4 * PREFETCH_ROUNDS,
        "0.1 ms tasks: capped"
    );
    board.mean_run_us = Some(5_000.0);
    assert_eq!(board.prefetch(4, 4, cover), 8, "4 cores × 10 ms / 5 ms");
    board.mean_run_us = Some(3_600_000_000.0);
    assert_eq!(board.prefetch(4, 4, cover), 4, "long tasks: the floor");
    // The mean follows new attempts by an eighth of the difference; failures to
    // start and stopped attempts say nothing about the work and are left out.
    board.mean_run_us = Some(8_000.0);
    board.note_run_time(&ran_for(16_000));
    assert_eq!(board.mean_run_us, Some(9_000.0));
    board.note_run_time(&Finished {
        outcome: Outcome::Cancelled,
        ..ran_for(1)
    });
    assert_eq!(board.mean_run_us, Some(9_000.0));
}

#[test]
fn a_resized_window_grants_growth_and_takes_shrinks_out_of_returns() {
    let mut board = board(2);
    board.credit = Resources::ZERO;
    board.window = 4;
    board.resize_window(10);
    assert_eq!(
        board.take_report().credit.core_count(),
        6,
        "growth is granted at once"
    );
    board.resize_window(5);
    board.give_back(Resources::cores(2));
    assert_eq!(
        board.take_report().credit.core_count(),
        0,
        "2 of the 5 owed kept back"
    );
    board.resize_window(7);
    assert_eq!(
        board.take_report().credit.core_count(),
        0,
        "growth first forgives what is owed"
    );
    board.give_back(Resources::cores(3));
    assert_eq!(board.take_report().credit.core_count(), 2, "1 still owed");
    board.reset_credit(2, 2);
    assert_eq!(
        board.take_report().credit.core_count(),
        4,
        "a new life: free cores + prefetch"
    );
    board.give_back(Resources::cores(1));
    assert_eq!(
        board.take_report().credit.core_count(),
        1,
        "and nothing owed"
    );
}

/// Only cores are prefetched: GPUs, memory and named resources are granted as far as
/// the node has them free, and come back when the attempt holding them ends; a named
/// resource is granted once the root's welcome numbers it. A GPU task holds its GPU.
/// (That its launch sees the GPU is the shell's: `agent/desk_tests.rs`.)
#[test]
fn credit_beyond_cores_is_granted_only_as_far_as_the_node_has_it_free() {
    let resources = NodeResources {
        cores: 4,
        cpus: Vec::new(),
        gpus: vec!["7".into(), "9".into()],
        memory_mib: 1000,
        custom: vec![("licence".into(), 3)],
    };
    let mut board = board_of(&resources, 4);
    let credit = board.take_report().credit;
    assert_eq!(
        (credit.core_count(), credit.gpu_count(), credit.memory_mib()),
        (4, 2, 1000)
    );
    let licence = ResourceKind::custom(0).unwrap();
    let numbered = board.capacity().with(licence, 3);
    board.handle_welcome(numbered);
    assert_eq!(board.take_report().credit, Resources::ZERO.with(licence, 3));
    assert_eq!(board.capacity(), numbered);

    let mut gpu_job = job_def(3, 1);
    gpu_job.resources = Resources::cores(1)
        .with(ResourceKind::GPUS, 1)
        .with(ResourceKind::MEMORY_MIB, 300)
        .with(licence, 1);
    board.jobs.insert(JobId(3), Arc::new(gpu_job));
    board.queue.extend([queued(1, 3)]);
    let started = start(&mut board, 1, at(0)).expect("it fits");
    assert_eq!(started.binding.gpus, Some(vec!["7".to_owned()]));
    assert_eq!(started.binding.memory_mib, 300);
    board.reset_credit(4, 4);
    let credit = board.take_report().credit;
    assert_eq!(
        (credit.core_count(), credit.gpu_count(), credit.memory_mib()),
        (3 + 4, 1, 700),
        "a new life: free cores plus prefetch, and only the free GPU and memory"
    );
    assert_eq!(credit.get(licence), 2);
    finish(&mut board, 1, 0, AttemptId(10), exited(), at(1));
    let back = board.take_report().credit;
    assert_eq!(
        (
            back.core_count(),
            back.gpu_count(),
            back.memory_mib(),
            back.get(licence)
        ),
        (1, 1, 300, 1)
    );
}

fn credit_of(messages: &[FromAgent]) -> u32 {
    messages
        .iter()
        .map(|message| match message {
            FromAgent::Report(report) => report.credit.core_count(),
            _ => 0,
        })
        .sum()
}

/// Each report sizes the window to the recent pace: short tasks grow the prefetch
/// (granted with the report), and a node that ran dry forgets the pace, so the next
/// work, which may be far longer, is prefetched at the floor (the shrink is kept back
/// from later returns).
#[test]
fn a_report_grows_the_window_to_the_pace_and_an_idle_node_forgets_it() {
    let config = BoardConfig {
        node: 7,
        slots: 2,
        prefetch: 2,
        credit: 4,
    };
    let mut board = Board::new(&config, &NodeResources::of_cores(2), at(0));
    board.jobs.insert(JobId(1), Arc::new(job_def(1, 1)));
    assert_eq!(credit_of(&report_at(&mut board, at(0))), 4, "cores + floor");
    board.queue.extend((1..=8).map(|task| queued(task, 1)));
    start(&mut board, 0, at(0)).unwrap();
    start(&mut board, 1, at(0)).unwrap();
    // 1 ms tasks: 2 cores × 40 ms cover / 1 ms = 80 cores, capped at 32 rounds.
    finish(&mut board, 0, 0, AttemptId(10), ran_for(1_000), at(1)).unwrap();
    let report = report_at(&mut board, at(30));
    assert_eq!(
        credit_of(&report),
        1 + (2 + 2 * PREFETCH_ROUNDS) - 4,
        "the returned core and the window's growth"
    );
    assert_eq!(board.window, 2 + 2 * PREFETCH_ROUNDS);
    // The node runs dry: before its next report it forgets the pace, and the window
    // shrinks back to cores + floor, taken out of the next returns.
    board.queue.clear();
    finish(&mut board, 0, 0, AttemptId(30), ran_for(1_000), at(31));
    finish(&mut board, 1, 0, AttemptId(20), ran_for(1_000), at(31));
    assert!(board.is_idle());
    let report = report_at(&mut board, at(32));
    assert_eq!(credit_of(&report), 2, "returned before the window shrank");
    assert_eq!(board.mean_run_us, None);
    assert_eq!(
        (board.window, board.owed),
        (4, 2 * PREFETCH_ROUNDS - 2),
        "the shrink is kept back from the next returns"
    );
}

/// A new life at the root (the node registered again) grants what is free now plus
/// the prefetch at the recent pace, and owes nothing.
#[test]
fn a_new_life_grants_what_is_free_plus_the_prefetch_at_the_pace() {
    let config = BoardConfig {
        node: 7,
        slots: 2,
        prefetch: 2,
        credit: 4,
    };
    let mut board = Board::new(&config, &NodeResources::of_cores(2), at(0));
    board.jobs.insert(JobId(1), Arc::new(job_def(1, 1)));
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.mean_run_us = Some(20_000.0);
    board.owed = 3;
    board.take_report();
    board.handle_new_life();
    // 1 free core, and 2 cores × 40 ms / 20 ms = 4 cores of prefetch.
    assert_eq!(board.take_report().credit.core_count(), 1 + 4);
    assert_eq!((board.window, board.owed), (2 + 4, 0));
}
