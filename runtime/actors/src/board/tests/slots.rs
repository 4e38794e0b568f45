//! Which slot takes which attempt, and how attempts end, are cancelled and lost.

use saker_wire::messages::{ResourceKind, TaskResult};

use super::*;

#[test]
fn a_finished_slot_starts_the_next_queued_attempt_itself() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    let first = start(&mut board, 0, at(0)).expect("a free core");
    assert_eq!(first.attempt, AttemptId(10));
    assert!(start(&mut board, 0, at(0)).is_none(), "the slot is busy");
    let second = finish(&mut board, 0, 0, AttemptId(10), exited(), at(1)).expect("the next one");
    assert_eq!(second.attempt, AttemptId(20));
    assert_eq!((second.slot, task_of(&second)), (0, task(2, 1)));
    assert!(
        finish(&mut board, 0, 0, AttemptId(20), exited(), at(2)).is_none(),
        "queue empty"
    );
    let report = board.take_report();
    assert_eq!(report.credit.core_count(), 2);
    assert_eq!(report.started.len(), 2);
    assert_eq!(report.results.len(), 2);
    assert_eq!(board.free.core_count(), 1);
    assert!(!board.has_news());
}

#[test]
fn a_task_needing_what_the_node_does_not_offer_fails_and_blocks_nothing() {
    let mut board = board(2);
    let mut gpu_job = job_def(3, 1);
    gpu_job.resources = Resources::cores(1).with(ResourceKind::GPUS, 1);
    board.jobs.insert(JobId(3), Arc::new(gpu_job));
    board.queue.extend([queued(1, 3), queued(2, 1)]);
    let started = start(&mut board, 0, at(0)).expect("the next task starts");
    assert_eq!(started.attempt, AttemptId(20));
    let report = board.take_report();
    let [failed] = report.results.as_slice() else {
        panic!("one result: {:?}", report.results);
    };
    assert_eq!(failed.task, TaskId(1));
    assert!(
        matches!(&failed.outcome, Outcome::SpawnFailed { reason } if reason.contains("1 GPU")),
        "{:?}",
        failed.outcome
    );
    assert_eq!(
        board.free,
        Resources::cores(1),
        "only the started task holds"
    );
}

#[test]
fn work_that_does_not_fit_waits_and_unknown_jobs_are_lost() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 9), queued(2, 1), queued(3, 2)]);
    // Task 1's job is unknown: lost at once (replayed by the root); task 2 starts.
    assert_eq!(start(&mut board, 0, at(0)).unwrap().attempt, AttemptId(20));
    let report = board.take_report();
    assert!(
        matches!(&report.results[0].outcome, Outcome::Lost { reason } if reason == "unknown job 9 on this agent")
    );
    // Task 3 needs both cores: it waits for task 2.
    assert!(start(&mut board, 1, at(0)).is_none());
    assert_eq!(
        finish(&mut board, 0, 0, AttemptId(20), exited(), at(1))
            .unwrap()
            .attempt,
        AttemptId(30)
    );
    assert_eq!(board.free.core_count(), 0);
}

#[test]
fn cancels_answer_queued_work_and_stop_running_work() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    let running = start(&mut board, 0, at(0)).unwrap();
    board.handle_cancel(AttemptId(20), at(5));
    let report = board.take_report();
    assert_eq!(report.results[0].outcome, Outcome::Cancelled);
    assert_eq!(report.credit.core_count(), 1);
    assert_eq!(
        (
            report.results[0].start_unix_us,
            report.results[0].end_unix_us
        ),
        (at(5).unix_us, at(5).unix_us),
        "answered when cancelled"
    );
    assert!(effects(&mut board).is_empty(), "nothing ran to stop");
    board.handle_cancel(AttemptId(10), at(6));
    assert_eq!(
        effects(&mut board),
        [Effect::Cancel {
            slot: 0,
            attempt: running.attempt
        }]
    );
    // A stopped attempt still reports; nothing is left to start.
    assert!(finish(&mut board, 0, 0, AttemptId(10), exited(), at(7)).is_none());
    assert_eq!(board.take_report().results.len(), 1);
}

#[test]
fn a_lost_slot_reports_its_attempt_and_ignores_the_old_runner() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_slot_lost(0, "slot failed".into(), at(3));
    assert_eq!(
        effects(&mut board),
        [Effect::Detach { slot: 0 }],
        "the handle is let go of: killed"
    );
    let report = board.take_report();
    assert!(
        matches!(&report.results[0].outcome, Outcome::Lost { reason } if reason == "slot failed")
    );
    assert_eq!(report.results[0].start_unix_us, at(0).unix_us);
    assert_eq!(report.results[0].end_unix_us, at(3).unix_us);
    assert_eq!(report.credit.core_count(), 1, "its core comes back");
    // The old runner's report is dropped and starts nothing.
    assert!(finish(&mut board, 0, 0, AttemptId(10), exited(), at(4)).is_none());
    assert!(board.take_report().results.is_empty());
    // The slot is down until a fresh thread (generation 1) runs it.
    assert!(start(&mut board, 0, at(4)).is_none());
    assert_eq!(board.idle_slots().count(), 0);
    assert_eq!(board.slot(0), Some((1, SlotState::Down)));
    board.handle_slot_up(0);
    let next = start(&mut board, 0, at(5)).unwrap();
    assert_eq!(next.attempt, AttemptId(20));
    assert!(finish(&mut board, 0, 1, AttemptId(20), exited(), at(6)).is_none());
}

#[test]
fn a_given_up_slot_takes_no_work_and_the_last_one_counts_out() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    board.handle_slot_lost(0, "slot 0 failed".into(), at(0));
    assert_eq!(board.handle_slot_given_up(0), 1, "slot 1 is left");
    board.handle_slot_up(0);
    assert_eq!(board.idle_slots().collect::<Vec<_>>(), [1], "not revived");
    assert!(start(&mut board, 0, at(0)).is_none());
    assert_eq!(start(&mut board, 1, at(0)).unwrap().attempt, AttemptId(10));
    assert!(!board.wants_agent(), "no idle slot for the queued work");
    board.handle_slot_lost(1, "slot 1 failed".into(), at(1));
    assert_eq!(board.handle_slot_given_up(1), 0);
    assert!(
        matches!(&board.take_report().results[0].outcome, Outcome::Lost { reason } if reason == "slot 1 failed")
    );
}

#[test]
fn a_stopping_board_starts_nothing_and_unstart_puts_work_back() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_unstart(0, at(0));
    assert_eq!(board.queue.len(), 2);
    assert!(board.take_report().started.is_empty());
    assert_eq!(board.free.core_count(), 1);
    start(&mut board, 0, at(1)).unwrap();
    board.handle_stopping();
    assert!(finish(&mut board, 0, 0, AttemptId(10), exited(), at(2)).is_none());
    board.handle_stop_all(at(2));
    assert!(board.queue.is_empty());
}

#[test]
fn a_slot_that_frees_takes_the_next_queued_attempt_and_the_agent_is_woken_for_others() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    assert!(
        board.wants_agent(),
        "slot 1 is idle with work queued: the agent starts it"
    );
    start(&mut board, 1, at(0)).unwrap();
    assert!(!board.wants_agent(), "no idle slot");
    let next = finish(&mut board, 1, 0, AttemptId(20), exited(), at(1)).unwrap();
    assert_eq!((next.slot, next.attempt), (1, AttemptId(30)));
    assert!(!board.wants_agent(), "the slot took it itself");
}

#[test]
fn an_attempt_takes_its_own_slots_cpu_and_a_wide_one_waits_for_enough_cores() {
    let resources = NodeResources {
        cores: 2,
        cpus: vec![4, 6],
        gpus: Vec::new(),
        memory_mib: 0,
        custom: Vec::new(),
    };
    let mut board = board_of(&resources, 0);
    board
        .queue
        .extend([queued(1, 1), queued(2, 2), queued(3, 1)]);
    let one = start(&mut board, 1, at(0)).unwrap();
    assert_eq!(one.binding.cpus, [6], "slot 1's own CPU");
    // Task 2 needs both cores: it waits at the head, and so does task 3 behind it.
    assert!(start(&mut board, 0, at(0)).is_none());
    let two = finish(&mut board, 1, 0, AttemptId(10), exited(), at(1)).unwrap();
    assert_eq!(two.attempt, AttemptId(20));
    assert_eq!(two.binding.cpus, [4, 6], "its slot's CPU and the other");
    assert_eq!(board.free.core_count(), 0);
    assert!(start(&mut board, 0, at(1)).is_none());
    let three = finish(&mut board, 1, 0, AttemptId(20), exited(), at(2)).unwrap();
    assert_eq!(three.binding.cpus, [6]);
}

#[test]
fn gpus_memory_and_named_resources_are_held_while_an_attempt_runs() {
    let resources = NodeResources {
        cores: 4,
        cpus: Vec::new(),
        gpus: vec!["a".into(), "b".into()],
        memory_mib: 1_000,
        custom: vec![("licence".into(), 1)],
    };
    let mut board = board_of(&resources, 0);
    let licence = ResourceKind::custom(0).unwrap();
    board.handle_welcome(board.capacity().with(licence, 1));
    let mut heavy = job_def(3, 1);
    heavy.resources = Resources::cores(1)
        .with(ResourceKind::GPUS, 2)
        .with(ResourceKind::MEMORY_MIB, 600)
        .with(licence, 1);
    board.jobs.insert(JobId(3), Arc::new(heavy));
    board
        .queue
        .extend([queued(1, 3), queued(2, 3), queued(3, 1)]);
    let first = start(&mut board, 0, at(0)).unwrap();
    assert_eq!(first.binding.gpus, Some(vec!["a".into(), "b".into()]));
    assert_eq!(first.binding.memory_mib, 600);
    // The next needs the GPUs and the licence again: it waits at the head with
    // cores free, and the 1-core task behind it waits too (no overtaking).
    assert!(start(&mut board, 1, at(0)).is_none());
    assert_eq!(board.free.core_count(), 3);
    assert_eq!(board.free.get(licence), 0);
    let second = finish(&mut board, 0, 0, AttemptId(10), exited(), at(1)).unwrap();
    assert_eq!(second.attempt, AttemptId(20));
    assert_eq!(second.binding.gpus, Some(vec!["a".into(), "b".into()]));
    let third = start(&mut board, 1, at(1)).unwrap();
    assert_eq!(third.binding.gpus, Some(Vec::new()), "sees no GPU");
    assert_eq!(third.binding.memory_mib, 0);
}

#[test]
fn a_returned_attempt_is_answered_only_while_it_waits_in_the_queue() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_return(AttemptId(10), at(1));
    board.handle_return(AttemptId(20), at(1));
    assert!(effects(&mut board).is_empty(), "the started one runs on");
    let report = board.take_report();
    let answered: Vec<(AttemptId, &Outcome)> = report
        .results
        .iter()
        .map(|r| (r.attempt, &r.outcome))
        .collect();
    assert_eq!(answered, [(AttemptId(20), &Outcome::Cancelled)]);
    assert_eq!(report.credit.core_count(), 1, "its credit comes back");
}

#[test]
fn stop_all_drops_the_queue_and_stops_every_running_attempt() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    start(&mut board, 1, at(0)).unwrap();
    board.take_report();
    board.handle_stop_all(at(1));
    assert_eq!(
        effects(&mut board),
        [
            Effect::Cancel {
                slot: 0,
                attempt: AttemptId(10)
            },
            Effect::Cancel {
                slot: 1,
                attempt: AttemptId(20)
            }
        ]
    );
    assert!(board.queue.is_empty());
    // The dropped task is not answered (the root replays it); the stopped ones
    // report as they end, and start nothing after them.
    assert!(board.take_report().results.is_empty());
    let cancelled = Finished {
        outcome: Outcome::Cancelled,
        ..exited()
    };
    assert!(finish(&mut board, 0, 0, AttemptId(10), cancelled, at(2)).is_none());
    let results: Vec<TaskResult> = board.take_report().results;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, Outcome::Cancelled);
}
