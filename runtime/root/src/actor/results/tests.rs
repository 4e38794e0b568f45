//! `Results` on its own: an attempt settled once, its task's record built from what
//! the accepted attempt left (and why earlier ones did not count), journaled as one
//! group, and streamed and indexed only once durable.

use saker_core::{AttemptOutcome, TerminalState};

use super::{Detail, FinishedTask, JobFacts, Results};
use crate::actor::submissions::Submissions;
use crate::actor::testing::*;
use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::Timestamp;

/// What an agent's report of an attempt that exited `code` on `node` leaves.
fn detail(node: u32, code: i32) -> Detail {
    Detail {
        node: NodeId(node),
        host: format!("host{node}"),
        executor: Some(0),
        received_unix_us: UNIX_ORIGIN_US + 10,
        fetch_us: 0,
        start_unix_us: UNIX_ORIGIN_US + 20,
        end_unix_us: UNIX_ORIGIN_US + 30,
        exit_code: Some(code),
        signal: None,
        reason: None,
        failure: (code != 0).then_some(saker_client::results::Failure::Exit),
        stdout: format!("exit {code}\n"),
        stderr: String::new(),
        stdout_path: None,
        stderr_path: None,
        output: None,
        gang: None,
    }
}

fn note(attempt: AttemptId, code: i32) -> AttemptNote {
    AttemptNote {
        attempt: attempt.0,
        end: AttemptEnd::Failed,
        reason: format!("exit {code}"),
        exit_code: Some(code),
        signal: None,
        node: Some("host1".into()),
        start_time: None,
        end_time: Timestamp::from_unix_micros(UNIX_ORIGIN_US + 30),
    }
}

/// Reports `attempt` of `task` ended with `code` (0: succeeded).
fn settle(owned: &mut Owned, results: &mut Results, task: TaskId, attempt: AttemptId, code: i32) {
    let outcome = if code == 0 {
        AttemptOutcome::Succeeded
    } else {
        AttemptOutcome::Failed
    };
    let (detail, note) = (detail(1, code), note(attempt, code));
    results.settle(&mut owned.ctx, task, attempt, outcome, detail, note);
}

/// One node of one core, one single-task job submitted (and its task dispatched).
fn one_task(max_retries: u32) -> (Owned, Submissions, Results, TaskId, AttemptId) {
    let mut owned = Owned::new();
    owned.add_node(1, 1);
    let mut submissions = Submissions::new(None, false);
    let mut request = single(&["true"]);
    request.spec.max_retries = max_retries;
    accept(&mut owned, &mut submissions, vec![request]);
    let [(task, attempt)] = owned.dispatched()[..] else {
        panic!("one task dispatched");
    };
    (owned, submissions, Results::default(), task, attempt)
}

/// Makes every pending append durable; hands `results` the results that waited.
fn make_durable(owned: &mut Owned, results: &mut Results) {
    let journal = owned.port.with(|r| r.durable.clone());
    for (records, after) in owned.appends() {
        let positions = journal.hold(records);
        match after.finish(Ok(positions)) {
            Some(RootMsg::Durable {
                results: done,
                positions,
                ..
            }) => results.on_durable(&mut owned.ctx, &done, positions),
            None => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
}

/// What the router hands `results` of a finished task's job.
fn facts_of(submissions: &Submissions) -> impl Fn(JobId, u32) -> Option<JobFacts> + '_ {
    |job, offset| submissions.facts(job, offset)
}

#[test]
fn an_accepted_attempt_makes_one_record_and_a_duplicate_changes_nothing() {
    let (mut owned, submissions, mut results, task, attempt) = one_task(0);
    results.dispatched(task, UNIX_ORIGIN_US + 5);
    let detail = Detail {
        host: "cn042".into(),
        ..detail(1, 0)
    };
    let note = note(attempt, 0);
    let succeeded = AttemptOutcome::Succeeded;
    results.settle(&mut owned.ctx, task, attempt, succeeded, detail, note);
    assert!(
        results.attempts.details.contains_key(&task),
        "kept for the record"
    );
    owned.finish_tasks(&mut results, facts_of(&submissions));
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, facts_of(&submissions));
    assert!(
        results.attempts.details.is_empty(),
        "the duplicate is not kept"
    );
    assert!(results.unjournaled.records.is_empty(), "nor noted");
    let [record] = &results.unjournaled.results[..] else {
        panic!("one record: {:?}", results.unjournaled.results);
    };
    assert_eq!(
        (record.task, record.state, record.attempts, record.seq),
        (task, TerminalState::Succeeded, 1, 1)
    );
    assert_eq!(record.node.as_deref(), Some("cn042"));
    assert_eq!(
        (record.exit_code, record.stdout.as_str()),
        (Some(0), "exit 0\n")
    );
    assert_eq!(
        record.dispatch_time,
        Some(Timestamp::from_unix_micros(UNIX_ORIGIN_US + 5))
    );
    assert!(
        results.attempts.dispatched.is_empty(),
        "no longer in flight"
    );
    assert_eq!(owned.ctx.core.counts().duplicates, 1);
    // Journaled as one group, which waits for the results to be durable.
    results.journal(&mut owned.ctx);
    let appends = owned.appends();
    let [(records, AfterJournal::Results(waiting, _))] = &appends[..] else {
        panic!("one append of results: {appends:?}");
    };
    assert!(matches!(&records[..], [Record::Result(r)] if r.task == task));
    assert_eq!(waiting.len(), 1);
    results.journal(&mut owned.ctx);
    assert!(owned.appends().is_empty(), "nothing left to journal");
}

#[test]
fn a_result_is_streamed_and_indexed_once_durable_not_before() {
    let (mut owned, submissions, mut results, task, attempt) = one_task(0);
    let (follower, mut followed) = tokio::sync::mpsc::unbounded_channel();
    results.log.followers.push(follower);
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, facts_of(&submissions));
    results.journal(&mut owned.ctx);
    assert!(followed.try_recv().is_err(), "streamed before durable");
    assert_eq!(results.log.index.find(task), None);
    make_durable(&mut owned, &mut results);
    assert_eq!(followed.try_recv().expect("streamed").task, task);
    let at = results.log.index.find(task).expect("indexed");
    let journal = owned.port.with(|r| r.durable.clone());
    assert_eq!(journal.read(at).expect("readable").task, task);
    assert_eq!(results.log.index.len(), 1);
    results.end_streams();
    assert!(
        matches!(
            followed.try_recv(),
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)
        ),
        "a stream ends with the pilot"
    );
}

#[test]
fn a_failed_attempt_with_a_retry_left_is_noted_and_becomes_the_records_history() {
    let (mut owned, submissions, mut results, task, first) = one_task(1);
    settle(&mut owned, &mut results, task, first, 3);
    assert!(results.attempts.details.is_empty(), "it does not count");
    let noted = std::mem::take(&mut results.unjournaled.records);
    assert!(
        matches!(&noted[..], [Record::Attempt { task: t, note }]
            if *t == task && note.end == AttemptEnd::Failed && note.exit_code == Some(3)),
        "{noted:?}"
    );
    // The retry waits out its backoff, then runs and succeeds.
    owned.clock.advance(Duration::from_secs(60));
    let now = owned.ctx.now();
    owned.ctx.core.handle_timeout(now);
    owned.credit(1, 1);
    let [(retried, second)] = owned.dispatched()[..] else {
        panic!("the retry is dispatched");
    };
    assert_eq!(retried, task);
    settle(&mut owned, &mut results, task, second, 0);
    owned.finish_tasks(&mut results, facts_of(&submissions));
    let [record] = &results.unjournaled.results[..] else {
        panic!("one record");
    };
    assert_eq!(
        (record.state, record.attempts),
        (TerminalState::Succeeded, 2)
    );
    assert_eq!(record.history.len(), 1);
    assert_eq!(record.history[0].attempt, first.0);
    assert!(results.attempts.history.is_empty(), "moved into the record");
}

#[test]
fn a_task_cancelled_for_its_dependency_says_which() {
    let mut owned = Owned::new();
    let mut results = Results::default();
    let finished = FinishedTask {
        task: TaskId(2),
        job: JobId(2),
        offset: 0,
        state: TerminalState::Cancelled,
        attempts: 0,
    };
    let job = JobFacts {
        index: None,
        submitted_us: UNIX_ORIGIN_US,
        dependency_failed: Some(JobId(1)),
    };
    results.finish_task(&mut owned.ctx, finished, job);
    let job = JobFacts {
        dependency_failed: None,
        ..job
    };
    results.finish_task(&mut owned.ctx, finished, job);
    let reasons: Vec<Option<&str>> = results
        .unjournaled
        .results
        .iter()
        .map(|record| record.reason.as_deref())
        .collect();
    assert_eq!(
        reasons,
        [
            Some("dependency 1 failed"),
            Some("cancelled before it started")
        ]
    );
}

fn position(segment: u64, offset: u64) -> saker_journal::Position {
    saker_journal::Position {
        segment: saker_journal::SegmentNumber(segment),
        offset,
    }
}

#[test]
fn a_compaction_moves_the_index_and_starts_a_new_generation_of_readers() {
    let mut results = Results::default();
    for task in 1..=3 {
        results
            .log
            .index
            .insert(TaskId(task), task, position(1, 16 * task));
    }
    let reading = Arc::clone(&results.log.readers);
    let done = crate::compact::CompactionDone {
        base: saker_journal::SegmentNumber(3),
        kept: vec![(TaskId(3), 3, position(3, 16))],
        dropped: vec![(TaskId(1), 1), (TaskId(2), 2)],
        compacted_total: 2,
        compacted_through: 2,
        records_before: 9,
        records_after: 4,
    };
    let superseded = results.compacted(&done);
    assert!(Arc::ptr_eq(&superseded, &reading), "the readers before it");
    let index = &results.log.index;
    assert_eq!(index.find(TaskId(3)), Some(position(3, 16)));
    assert!(index.is_compacted(TaskId(1)) && index.is_compacted(TaskId(2)));
    assert_eq!(
        (results.log.compacted, results.log.compacted_through),
        (2, 2)
    );
    assert!(
        !Arc::ptr_eq(&reading, &results.log.readers),
        "reads from now on are of the new generation"
    );
}

#[test]
fn resumed_results_are_indexed_again_in_seq_order_with_the_unfinished_tasks_notes() {
    let record = |task: u64, job: u32, seq: u64| {
        let mut record = saker_client::results::sample_record(task);
        record.job = JobId(job);
        record.seq = seq;
        Record::Result(Arc::new(record))
    };
    let mut journaled = super::Journaled::default();
    // Journaled out of `seq` order; a compaction's summary first, as a base has it.
    let records = vec![
        Record::Compaction {
            next_seq: 4,
            compacted: 3,
            compacted_through: 3,
            keep: "none".into(),
            unix_us: UNIX_ORIGIN_US,
        },
        record(5, 1, 5),
        record(4, 1, 4),
        Record::Attempt {
            task: TaskId(5),
            note: note(AttemptId(1), 2),
        },
        Record::Attempt {
            task: TaskId(6),
            note: note(AttemptId(2), 3),
        },
        record(7, 2, 6),
    ];
    for (at, record) in records.into_iter().enumerate() {
        let place = position(1, 16 * (at as u64 + 1));
        journaled.gather(at, record, Some(place)).expect("placed");
    }
    let ended: Vec<(JobId, TaskId)> = journaled.ended().map(|(_, j, t, _)| (j, t)).collect();
    assert_eq!(ended.len(), 3);
    let earlier = journaled.earlier();
    assert_eq!(earlier[&TaskId(6)].failures, 1);
    let mut results = Results::default();
    // Job 2 was finished by a compaction: tasks 7 and 8, whose 8 it dropped.
    results.resume(journaled, &[(JobId(2), TaskId(7), 2)]);
    assert_eq!(results.log.next_seq, 7, "after the highest seq");
    assert_eq!(
        (results.log.compacted, results.log.compacted_through),
        (3, 3)
    );
    assert_eq!(results.log.index.find(TaskId(4)), Some(position(1, 48)));
    assert_eq!(results.log.index.find(TaskId(7)), Some(position(1, 96)));
    assert!(results.log.index.is_compacted(TaskId(8)));
    assert!(
        !results.log.index.is_compacted(TaskId(7)),
        "its result was kept"
    );
    assert_eq!(results.log.index.last_seq(), 6);
    let notes: Vec<TaskId> = results.attempts.history.keys().copied().collect();
    assert_eq!(
        notes,
        [TaskId(6)],
        "a finished task's notes are in its result"
    );
    // Results of jobs a compaction finished count in no stage.
    assert_eq!(
        results.log.stages.summaries().first().map(|s| s.count),
        Some(2)
    );
    let missing = super::Journaled::default().gather(0, record(1, 1, 1), None);
    assert!(matches!(
        missing,
        Err(crate::actor::restore::RestoreError::NoPosition { position: 0 })
    ));
}
