//! Report pacing (due, urgent, the gap), the report clock, and what goes up in what
//! order.

use saker_wire::ItemWritten;
use saker_wire::messages::{
    FRAME_DATA_BUDGET, FromAgent, GangLaunch, NodeId, ResultBody, TaskResult,
};

use super::*;

#[test]
fn one_slot_at_a_time_keeps_the_report_clock() {
    let gap = REPORT_GAP;
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1), queued(4, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    start(&mut board, 1, at(0)).unwrap();
    let now = at(0);
    // Slot 0's attempt ends within the gap, with work still queued: not due, and
    // slot 0 keeps the clock for the end of the gap.
    finish(&mut board, 0, 0, AttemptId(10), exited(), now).unwrap();
    assert!(!board.report_from_slot(now));
    assert_eq!(board.keep_report_clock(0, 0), Some(now.since_start + gap));
    // Slot 1 has news too, but the clock is kept already: no second wake-up.
    finish(&mut board, 1, 0, AttemptId(20), exited(), now).unwrap();
    assert_eq!(board.keep_report_clock(1, 0), None);
    // At the end of the gap the keeper's report is due; once it is sent, nothing
    // is left and the clock is free for whichever slot has news next.
    assert!(board.report_from_slot(now.after(gap)));
    board.take_report();
    assert_eq!(board.keep_report_clock(0, 0), None);
    finish(&mut board, 1, 0, AttemptId(40), exited(), now);
    assert_eq!(board.keep_report_clock(1, 0), Some(now.since_start + gap));
    // A stale thread (its executor was replaced) keeps nothing; losing the keeper's
    // slot frees the clock.
    assert_eq!(board.keep_report_clock(0, 7), None);
    board.handle_slot_lost(1, "slot failed".into(), now);
    assert_eq!(board.keep_report_clock(0, 0), Some(now.since_start + gap));
    // After the goodbye nothing is reported, so nobody keeps the clock.
    board.handle_goodbye_sent();
    assert!(!board.report_from_slot(now.after(gap)));
    assert_eq!(board.keep_report_clock(0, 0), None);
}

/// Function outputs past the frame budget go up in several reports, none lost, each
/// within the budget unless one output alone exceeds it.
#[test]
fn large_outputs_are_split_across_reports() {
    let mut board = board_of(&NodeResources::of_cores(4), 4);
    let sizes = [3 << 20, 3 << 20, 3 << 20, FRAME_DATA_BUDGET + 1, 10, 10];
    push_results(&mut board, &sizes);
    let mut reports = Vec::new();
    while board.has_news() {
        reports.push(board.take_report());
    }
    let tasks: Vec<Vec<u64>> = reports
        .iter()
        .map(|r| r.results.iter().map(|t| t.task.0).collect())
        .collect();
    assert_eq!(tasks, [vec![0, 1], vec![2], vec![3], vec![4, 5]]);
    // One report sent through `poll_up` sends them all, the credit with the first.
    push_results(&mut board, &sizes);
    board.credit = Resources::cores(3);
    let messages = report_at(&mut board, at(0));
    let reports: Vec<(u32, usize)> = messages
        .iter()
        .map(|message| match message {
            FromAgent::Report(report) => (report.credit.core_count(), report.results.len()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(reports, [(3, 2), (0, 1), (0, 1), (0, 2)]);
}

fn push_results(board: &mut Board, sizes: &[usize]) {
    for (i, size) in sizes.iter().enumerate() {
        board.pending.results.push(TaskResult {
            task: TaskId(i as u64),
            attempt: AttemptId(i as u64),
            executor: 0,
            outcome: Outcome::Exited { code: 0 },
            received_unix_us: 0,
            start_unix_us: 0,
            end_unix_us: 0,
            fetch_us: 0,
            body: ResultBody::Function {
                output: Some(vec![0; *size]),
            },
        });
    }
}

/// Under load, results wait out the gap since the last report; a node whose queue
/// ran dry reports at once (its slots wait for the credit); starts alone wait.
#[test]
fn a_report_waits_out_the_gap_unless_the_queue_ran_dry() {
    let mut board = board(1);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    assert!(board.has_news(), "a start");
    assert!(!board.report_due(at(1)), "starts alone wait");
    finish(&mut board, 0, 0, AttemptId(10), exited(), at(5)).unwrap();
    assert!(!board.is_urgent(), "work is still queued");
    assert!(!board.report_due(at(19)));
    assert!(board.report_due(at(20)), "the gap has passed");
    assert!(board.start_report(at(20)));
    while board.poll_up().is_some() {}
    // The last queued task starts: with the queue empty, its credit is urgent.
    finish(&mut board, 0, 0, AttemptId(20), exited(), at(21)).unwrap();
    assert!(board.is_urgent());
    assert!(board.report_due(at(21)), "within the gap, but urgent");
}

/// The agent's own news (a cancelled queued task, say) schedules one flush at the end
/// of the gap; it is not scheduled twice, and is brought forward when the news turns
/// urgent. Once it came, the next news schedules another.
#[test]
fn the_agents_flush_is_scheduled_once_and_brought_forward_when_urgent() {
    let mut board = board(1);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    assert_eq!(board.poll_flush(at(0)), None, "no news");
    start(&mut board, 0, at(0)).unwrap();
    board.handle_cancel(AttemptId(30), at(5));
    assert_eq!(board.poll_flush(at(5)), Some(Flush::At(REPORT_GAP)));
    assert_eq!(board.poll_flush(at(6)), None, "scheduled already");
    board.handle_cancel(AttemptId(20), at(7));
    assert!(board.is_urgent(), "the queue ran dry");
    assert_eq!(board.poll_flush(at(7)), Some(Flush::Now));
    assert_eq!(board.poll_flush(at(8)), None);
    board.handle_flush();
    assert!(board.start_report(at(8)));
    while board.poll_up().is_some() {}
    board.handle_cancel(AttemptId(10), at(9));
    assert!(
        board
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Cancel { .. }))
    );
    assert_eq!(board.poll_flush(at(9)), None, "nothing new to report yet");
    finish(&mut board, 0, 0, AttemptId(10), exited(), at(10));
    assert_eq!(
        board.poll_flush(at(10)),
        Some(Flush::Now),
        "urgent: queue empty"
    );
}

/// Ends of gang daemons go first (a leader's launcher waits on them), then items
/// written (before the results that wrote them), then requests for items, then the
/// report.
#[test]
fn a_report_sends_launch_ends_then_items_written_then_item_requests_then_the_report() {
    let mut board = board(2);
    let mut writer = job_def(3, 1);
    writer.writes = vec!["out".into()];
    let mut reader = job_def(4, 1);
    reader.reads = vec!["in".into()];
    board.jobs.insert(JobId(3), Arc::new(writer));
    board.jobs.insert(JobId(4), Arc::new(reader));
    board.queue.extend([queued(1, 3), queued(2, 4)]);
    start(&mut board, 0, at(0)).unwrap();
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(1, at(0)) else {
        panic!("the reader asks what to fetch");
    };
    board.handle_items_checked(attempt, Some("in".into()));
    assert!(
        board.poll_start(1, at(0)).is_none(),
        "staged: nothing to start"
    );
    let written = vec![ItemWritten {
        name: "out".into(),
        bytes: 3,
    }];
    assert!(board.handle_attempt_done(0, 0, AttemptId(10), exited(), Some(Ok(written)), at(1)));
    board.handle_gang_launch(GangLaunch {
        attempt: AttemptId(99),
        member: 1,
        launch: 4,
        command: "orted".into(),
        ranks: None,
    });
    let messages = report_at(&mut board, at(2));
    let kinds: Vec<&str> = messages
        .iter()
        .map(|message| match message {
            FromAgent::GangLaunchEnded(ended) => {
                assert_eq!((ended.launch, ended.code), (4, 255), "no such part");
                "launch ended"
            }
            FromAgent::ItemsWritten(written) => {
                assert_eq!((written.node, written.attempt), (NodeId(7), AttemptId(10)));
                "items written"
            }
            FromAgent::ItemRead(read) => {
                assert_eq!((read.item.as_str(), read.offset), ("in", 0));
                "item read"
            }
            FromAgent::Report(report) => {
                assert_eq!(report.results.len(), 1);
                "report"
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["launch ended", "items written", "item read", "report"]
    );
    assert!(!board.has_news());
}

/// Requests for items are urgent: a reader waits for them.
#[test]
fn item_requests_go_up_at_once() {
    let mut board = board(1);
    let mut reader = job_def(4, 1);
    reader.reads = vec!["in".into()];
    board.jobs.insert(JobId(4), Arc::new(reader));
    board.queue.extend([queued(1, 4), queued(2, 1)]);
    board.take_report();
    let Some(Next::CheckItems { attempt, .. }) = board.poll_start(0, at(1)) else {
        panic!("a question");
    };
    board.handle_items_checked(attempt, Some("in".into()));
    start(&mut board, 0, at(1)).unwrap();
    assert!(board.queue.is_empty());
    assert_eq!(board.fetches.outbox.len(), 1);
    assert!(board.is_urgent());
    assert!(board.report_due(at(1)));
}

/// After the goodbye nothing goes up, whatever news comes.
#[test]
fn nothing_is_reported_after_the_goodbye() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1)]);
    start(&mut board, 0, at(0)).unwrap();
    board.handle_goodbye_sent();
    finish(&mut board, 0, 0, AttemptId(10), exited(), at(30));
    assert!(board.has_news());
    assert!(!board.report_from_slot(at(30)));
    assert!(!board.start_report(at(30)));
    assert!(board.poll_up().is_none());
}
