//! A node between roots: what runs goes on, results wait, the hello lists both.

use super::*;

#[test]
fn a_lost_parent_keeps_running_work_drops_the_queue_and_holds_results() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    let first = start(&mut board, 0, at(0)).unwrap();
    let second = start(&mut board, 1, at(1)).unwrap();
    // What was reported before the loss is gone with the old root: start afresh.
    report_at(&mut board, at(2));

    board.handle_parent_lost();
    assert!(board.is_away());
    assert!(
        effects(&mut board).is_empty(),
        "nothing running is stopped: {first:?} {second:?}"
    );
    assert!(
        board.queue.is_empty(),
        "queued work goes back to the next root"
    );
    assert_eq!(
        board.held(),
        [
            Held {
                attempt: AttemptId(10),
                task: TaskId(1),
                started_unix_us: at(0).unix_us,
                ended: false,
                gang: None,
            },
            Held {
                attempt: AttemptId(20),
                task: TaskId(2),
                started_unix_us: at(1).unix_us,
                ended: false,
                gang: None,
            },
        ]
    );

    // One ends while no root hears: nothing goes up, the slot starts nothing.
    assert!(finish(&mut board, 0, 0, AttemptId(10), exited(), at(30)).is_none());
    assert!(!board.report_from_slot(at(500)), "no report while away");
    assert_eq!(board.poll_flush(at(500)), None);
    assert!(report_at(&mut board, at(500)).is_empty());
    assert_eq!(
        board.held(),
        [
            Held {
                attempt: AttemptId(20),
                task: TaskId(2),
                started_unix_us: at(1).unix_us,
                ended: false,
                gang: None,
            },
            Held {
                attempt: AttemptId(10),
                task: TaskId(1),
                started_unix_us: exited().start_unix_us,
                ended: true,
                gang: None,
            },
        ],
        "the running one, then the result that waits"
    );

    // A new life: the result goes up, with credit for the free core only (and the
    // prefetch at the recent pace).
    let prefetch = board.prefetch(2, 0, PREFETCH_COVER);
    board.handle_new_life();
    assert!(!board.is_away());
    let report = report_at(&mut board, at(600));
    let [FromAgent::Report(report)] = report.as_slice() else {
        panic!("one report: {report:?}");
    };
    assert_eq!(report.results.len(), 1);
    assert_eq!(report.results[0].attempt, AttemptId(10));
    assert_eq!(
        report.credit.core_count(),
        1 + prefetch,
        "the core still held by attempt 20 is not granted"
    );
}

#[test]
fn a_lost_parent_stops_gang_parts_and_fetches_but_not_tasks() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_parent_lost();
    board.handle_stop_all(at(6));
    assert_eq!(
        effects(&mut board),
        [Effect::Cancel {
            slot: 0,
            attempt: AttemptId(10)
        }],
        "an agent that gives up looking for a root stops what it kept running"
    );
}

#[test]
fn results_sent_but_not_yet_durable_go_to_the_next_root_again() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    finish(&mut board, 0, 0, AttemptId(10), exited(), at(5)).unwrap();
    let sent = report_at(&mut board, at(6));
    let [FromAgent::Report(first)] = sent.as_slice() else {
        panic!("one report: {sent:?}");
    };
    board.handle_sent(first.clone());
    assert_eq!(board.unacked(), 1);
    finish(&mut board, 0, 0, AttemptId(20), exited(), at(7));
    let sent = report_at(&mut board, at(8));
    let [FromAgent::Report(second)] = sent.as_slice() else {
        panic!("one report: {sent:?}");
    };
    assert_eq!(second.seq, first.seq + 1, "reports are numbered");
    board.handle_sent(second.clone());
    // The root wrote the first report's results: only the second's are kept.
    board.handle_durable(first.seq);
    assert_eq!(board.unacked(), 1);

    // The root dies before writing the second: its result goes to the next root,
    // listed in the hello as ended, and in the first report after it.
    board.handle_parent_lost();
    assert_eq!(board.unacked(), 0);
    assert_eq!(
        board.held(),
        [Held {
            attempt: AttemptId(20),
            task: TaskId(2),
            started_unix_us: exited().start_unix_us,
            ended: true,
            gang: None,
        }]
    );
    board.handle_new_life();
    let sent = report_at(&mut board, at(10));
    let [FromAgent::Report(again)] = sent.as_slice() else {
        panic!("one report: {sent:?}");
    };
    assert_eq!(again.results.len(), 1);
    assert_eq!(again.results[0].attempt, AttemptId(20));
}

/// The one effect the board has for its desk.
fn one_effect(board: &mut Board) -> Effect {
    let mut effects = effects(board);
    assert_eq!(effects.len(), 1, "{effects:?}");
    effects.remove(0)
}

/// The attempts of the results in the reports due at `now` (large results may take
/// several).
fn reported(board: &mut Board, now: Moment) -> Vec<AttemptId> {
    report_at(board, now)
        .iter()
        .flat_map(|sent| match sent {
            FromAgent::Report(report) => report.results.iter().map(|r| r.attempt).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// A finished attempt whose stdout holds `bytes` bytes.
fn exited_with(bytes: usize) -> Finished {
    let mut finished = exited();
    finished.stdout.inline = vec![b'x'; bytes];
    finished.stdout.total_bytes = bytes as u64;
    finished
}

#[test]
fn results_held_past_the_memory_bound_go_to_disk_and_come_back_at_the_next_life() {
    let mut board = board(1);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_parent_lost();
    // Half the bound: kept in memory.
    finish(
        &mut board,
        0,
        0,
        AttemptId(10),
        exited_with(AWAY_MEMORY_BYTES / 2),
        at(2),
    );
    assert!(effects(&mut board).is_empty());
    // Over it: everything held in memory goes to disk, listed still.
    board.queue.extend([queued(2, 1)]);
    start(&mut board, 0, at(3)).unwrap();
    finish(
        &mut board,
        0,
        0,
        AttemptId(20),
        exited_with(AWAY_MEMORY_BYTES / 2),
        at(4),
    );
    let Effect::SpillResults { results } = one_effect(&mut board) else {
        panic!("the results are written to disk");
    };
    assert_eq!(
        results.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [AttemptId(10), AttemptId(20)]
    );
    assert_eq!(board.spilled(), 2);
    assert_eq!(
        board
            .held()
            .iter()
            .map(|h| (h.attempt, h.ended))
            .collect::<Vec<_>>(),
        [(AttemptId(10), true), (AttemptId(20), true)]
    );

    // A small one after: in memory. At the next life the disk's are read back first.
    board.queue.extend([queued(3, 1)]);
    start(&mut board, 0, at(5)).unwrap();
    finish(&mut board, 0, 0, AttemptId(30), exited(), at(6));
    assert!(effects(&mut board).is_empty());
    board.handle_new_life();
    let Effect::ReadSpilled { held } = one_effect(&mut board) else {
        panic!("the results on disk are read back");
    };
    assert_eq!(held.len(), 2);
    board.handle_spilled_read(&held, Some(results));
    assert_eq!(
        reported(&mut board, at(7)),
        [AttemptId(10), AttemptId(20), AttemptId(30)]
    );
    assert_eq!(board.spilled(), 0);
}

#[test]
fn held_results_that_cannot_be_written_or_read_back_are_neither_lost_nor_waited_for() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_parent_lost();
    finish(
        &mut board,
        0,
        0,
        AttemptId(10),
        exited_with(AWAY_MEMORY_BYTES + 1),
        at(2),
    );
    let Effect::SpillResults { results } = one_effect(&mut board) else {
        panic!("the result is written to disk");
    };
    // The disk is full: it stays in memory, and no more are tried this life.
    board.handle_spill_failed(results);
    assert_eq!(board.spilled(), 0);
    assert_eq!(board.held().len(), 1);
    board.queue.extend([queued(2, 1)]);
    start(&mut board, 0, at(3)).unwrap();
    finish(
        &mut board,
        0,
        0,
        AttemptId(20),
        exited_with(AWAY_MEMORY_BYTES),
        at(4),
    );
    assert!(effects(&mut board).is_empty());

    // Written, then unreadable at the next life: each ends lost, for the root to run
    // it again rather than wait for a result that never comes.
    board.handle_new_life();
    board.handle_parent_lost();
    assert!(matches!(
        effects(&mut board).as_slice(),
        [Effect::SpillResults { .. }]
    ));
    board.handle_new_life();
    let Effect::ReadSpilled { held } = one_effect(&mut board) else {
        panic!("the results on disk are read back");
    };
    board.handle_spilled_read(&held, None);
    let outcomes: Vec<bool> = report_at(&mut board, at(7))
        .iter()
        .flat_map(|sent| match sent {
            FromAgent::Report(report) => report.results.clone(),
            _ => Vec::new(),
        })
        .map(|r| matches!(r.outcome, Outcome::Lost { .. }))
        .collect();
    assert_eq!(outcomes, [true, true], "both end lost");
}
