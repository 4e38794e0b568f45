//! `Results` on its own: an attempt settled once, its task's record built from what
//! the accepted attempt left (and why earlier ones did not count), journaled as one
//! group, and shown to waiters and streams only once durable.

use saker_core::{AttemptOutcome, TerminalState};

use super::*;
use crate::actor::history::ResultSource;
use crate::actor::results::{Detail, Waiter};
use crate::attempts::{AttemptEnd, AttemptNote};
use crate::results::Timestamp;

/// What an agent's report of an attempt that exited `code` on `node` leaves.
fn detail(node: u32, code: i32) -> Detail {
    Detail {
        node: NodeId(node),
        executor: Some(0),
        received_unix_us: UNIX_ORIGIN_US + 10,
        start_unix_us: UNIX_ORIGIN_US + 20,
        end_unix_us: UNIX_ORIGIN_US + 30,
        exit_code: Some(code),
        signal: None,
        reason: None,
        failure: (code != 0).then_some(crate::results::Failure::Exit),
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
    let mut submissions = new_submissions();
    let mut request = single(&["true"]);
    request.spec.max_retries = max_retries;
    accept(&mut owned, &mut submissions, vec![request]);
    let [(task, attempt)] = owned.dispatched()[..] else {
        panic!("one task dispatched");
    };
    (owned, submissions, Results::default(), task, attempt)
}

/// Makes every pending append durable; hands `results` the results that waited.
fn make_durable(owned: &mut Owned, results: &mut Results, submissions: &mut Submissions) {
    let journal = owned.port.with(|r| r.durable.clone());
    for (records, after) in owned.appends() {
        let positions = journal.hold(records);
        match after.finish(Ok(positions)) {
            Some(RootMsg::Durable {
                results: done,
                positions,
            }) => results.on_durable(&mut owned.ctx, submissions, done, positions),
            None => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn an_accepted_attempt_makes_one_record_and_a_duplicate_changes_nothing() {
    let (mut owned, submissions, mut results, task, attempt) = one_task(0);
    owned.ctx.nodes.get_mut(&NodeId(1)).unwrap().hostname = "cn042".into();
    let dispatched = crate::actor::results::Dispatched {
        at_us: UNIX_ORIGIN_US + 5,
        started: None,
    };
    results.attempts.dispatched.insert(task, dispatched);
    settle(&mut owned, &mut results, task, attempt, 0);
    assert!(
        results.attempts.details.contains_key(&task),
        "kept for the record"
    );
    owned.finish_tasks(&mut results, &submissions);
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, &submissions);
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
    let [(records, AfterJournal::Results(waiting))] = &appends[..] else {
        panic!("one append of results: {appends:?}");
    };
    assert!(matches!(&records[..], [Record::Result(r)] if r.task == task));
    assert_eq!(waiting.len(), 1);
    results.journal(&mut owned.ctx);
    assert!(owned.appends().is_empty(), "nothing left to journal");
}

#[test]
fn a_waiter_is_answered_once_the_result_is_durable_not_before() {
    let (mut owned, mut submissions, mut results, task, attempt) = one_task(0);
    let (reply, mut everything) = oneshot::channel();
    results.log.waiters.push(Waiter { jobs: None, reply });
    let (reply, mut job_one) = oneshot::channel();
    let jobs = Some(vec![JobId(1)]);
    results.log.waiters.push(Waiter { jobs, reply });
    let (follower, mut followed) = tokio::sync::mpsc::unbounded_channel();
    results.log.followers.push(follower);
    results.check_waiters(&submissions);
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, &submissions);
    results.journal(&mut owned.ctx);
    results.check_waiters(&submissions);
    assert!(everything.try_recv().is_err(), "answered before durable");
    assert!(job_one.try_recv().is_err(), "answered before durable");
    assert!(followed.try_recv().is_err(), "streamed before durable");
    assert_eq!(results.log.index.find(task), None);
    make_durable(&mut owned, &mut results, &mut submissions);
    let done = WaitReport {
        succeeded: 1,
        failed: 0,
        cancelled: 0,
    };
    assert_eq!(everything.try_recv().unwrap().unwrap(), done);
    assert_eq!(job_one.try_recv().unwrap().unwrap(), done);
    assert!(results.log.waiters.is_empty());
    assert_eq!(followed.try_recv().expect("streamed").task, task);
    let at = results.log.index.find(task).expect("indexed");
    let journal = owned.port.with(|r| r.durable.clone());
    assert_eq!(journal.read(at).expect("readable").task, task);
    assert_eq!(results.log.totals.durable, 1);
    assert_eq!(
        submissions.jobs.final_counts(&JobId(1)),
        Some((1, 0, 0)),
        "the job is done"
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
    owned.finish_tasks(&mut results, &submissions);
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
    let (mut owned, mut submissions, mut results, _, _) = one_task(0);
    let jobs = accept(&mut owned, &mut submissions, vec![single(&["later"])]);
    submissions.dependency_failed.insert(jobs[0], JobId(1));
    let finished = FinishedTask {
        task: TaskId(2),
        job: jobs[0],
        offset: 0,
        state: TerminalState::Cancelled,
        attempts: 0,
    };
    results.finish_task(&mut owned.ctx, &submissions, finished);
    submissions.dependency_failed.clear();
    results.finish_task(&mut owned.ctx, &submissions, finished);
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

#[test]
fn memory_goes_back_once_an_idle_pilot_has_ended_enough_results() {
    let (mut owned, mut submissions, mut results, task, attempt) = one_task(0);
    results.log.release_after = 1;
    // Work left: however many results ended, nothing is given back.
    accept(&mut owned, &mut submissions, vec![single(&["more"])]);
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, &submissions);
    results.journal(&mut owned.ctx);
    make_durable(&mut owned, &mut results, &mut submissions);
    assert_eq!(owned.port.with(|r| r.memory_releases), 0);
    owned.credit(1, 1);
    let [(task, attempt)] = owned.dispatched()[..] else {
        panic!("the second task is dispatched");
    };
    settle(&mut owned, &mut results, task, attempt, 0);
    owned.finish_tasks(&mut results, &submissions);
    results.journal(&mut owned.ctx);
    make_durable(&mut owned, &mut results, &mut submissions);
    assert_eq!(owned.port.with(|r| r.memory_releases), 1, "idle now");
}
