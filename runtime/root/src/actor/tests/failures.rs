//! Each way an attempt can fail names itself in the task's result (`failure`), so
//! that programs can tell them apart without matching the human `reason`.

use super::*;
use saker_client::results::Failure;

#[tokio::test]
async fn each_way_an_attempt_fails_gives_its_result_a_failure_word() {
    let cases: [(Outcome, Option<Failure>, Option<&str>); 8] = [
        (Outcome::Exited { code: 0 }, None, None),
        (
            Outcome::Exited { code: 3 },
            Some(Failure::Exit),
            Some("exit"),
        ),
        (
            Outcome::Signaled { signal: 9 },
            Some(Failure::Signal),
            Some("signal"),
        ),
        (
            Outcome::TimedOut,
            Some(Failure::TimeLimit),
            Some("time_limit"),
        ),
        (
            Outcome::OutOfMemory { limit_mib: 64 },
            Some(Failure::OutOfMemory),
            Some("out_of_memory"),
        ),
        (
            Outcome::SpawnFailed {
                reason: "program not found: /no/such".into(),
            },
            Some(Failure::Spawn),
            Some("spawn"),
        ),
        (
            Outcome::WorkerFailed {
                reason: "worker ended: No module named 'saker'".into(),
            },
            Some(Failure::WorkerStart),
            Some("worker_start"),
        ),
        (
            Outcome::Raised {
                message: "ValueError: no".into(),
            },
            Some(Failure::Raised),
            Some("raised"),
        ),
    ];
    let mut h = Harness::new();
    h.submit((0..cases.len()).map(|_| single(&["true"])).collect());
    h.journal_durable();
    h.join(1, cases.len() as u32);
    h.report(1, cases.len() as u32, &[], Vec::new());
    let dispatched = assignments(&h.sent(), 1);
    assert_eq!(dispatched.len(), cases.len());
    let results = cases
        .iter()
        .zip(&dispatched)
        .map(|((outcome, _, _), &(task, attempt))| TaskResult {
            outcome: outcome.clone(),
            ..exited(task, attempt, 0)
        })
        .collect();
    h.report(1, 0, &dispatched, results);
    let records = results_of(&h.journal_durable());
    assert_eq!(records.len(), cases.len(), "{records:?}");
    for ((outcome, failure, word), &(task, _)) in cases.iter().zip(&dispatched) {
        let record = records
            .iter()
            .find(|record| record.task.0 == task)
            .expect("a result of every task");
        assert_eq!(record.failure, *failure, "{outcome:?}: {record:?}");
        let json = serde_json::to_value(&**record).unwrap();
        assert_eq!(json["failure"].as_str(), *word, "{outcome:?}: {json}");
    }
}

/// A task lost with its node and no replay left fails as `lost`: the root, not an
/// agent, wrote that attempt's end.
#[tokio::test]
async fn a_task_lost_with_its_node_and_no_replay_left_fails_as_lost() {
    let mut h = Harness::new();
    let mut job = single(&["sleep", "9"]);
    job.spec.max_replays = Some(0);
    h.submit(vec![job]);
    h.journal_durable();
    h.join(1, 1);
    h.report(1, 1, &[], Vec::new());
    let started = assignments(&h.sent(), 1);
    assert_eq!(started.len(), 1);
    h.report(1, 0, &started, Vec::new());
    h.handle(RootMsg::LinkDown {
        link: LinkId(1),
        reason: "the link failed: heard nothing for 2s (no heartbeat)".into(),
    });
    let results = results_of(&h.journal_durable());
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        results[0].state,
        saker_client::results::TerminalState::Failed
    );
    assert_eq!(results[0].failure, Some(Failure::Lost), "{:?}", results[0]);
}
