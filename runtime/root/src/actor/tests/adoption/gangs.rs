//! A gang attempt (an HPC job on several nodes) is adopted whole, once every member
//! listed its part; a gang one of whose members does not come back is stopped on the
//! others and runs again whole.

use saker_core::TerminalState;
use saker_wire::messages::{GangPart, Held, ProcessEnd};

use super::super::*;
use super::{cancels, harness_of_term, hello_holding};

/// The previous root: one gang job of two nodes, dispatched to nodes 1 and 2. Its
/// journal, the attempt's (task, attempt), and each member's part.
fn previous_gang() -> (Vec<Record>, (u64, u64), Vec<GangPart>) {
    let mut old = Harness::new();
    let mut request = single(&["./solver"]);
    request.spec.nodes = 2;
    old.submit(vec![request]);
    let mut records = old.journal_durable();
    old.join(1, 2);
    old.join(2, 2);
    old.report(1, 2, &[], Vec::new());
    old.report(2, 2, &[], Vec::new());
    let sent = old.sent();
    let parts: Vec<GangPart> = [1, 2]
        .into_iter()
        .map(|node| {
            sent.iter()
                .filter(|(route, _)| *route == node)
                .find_map(|(_, message)| match message {
                    ToAgent::Dispatch(dispatch) => dispatch.gang.clone(),
                    _ => None,
                })
                .expect("each member is sent its part")
        })
        .collect();
    let running = assignments(&sent, 1);
    records.extend(old.journal_durable());
    (records, running[0], parts)
}

fn held_part(task: u64, attempt: u64, part: &GangPart, ended: bool) -> Held {
    Held {
        attempt: AttemptId(attempt),
        task: TaskId(task),
        started_unix_us: UNIX_ORIGIN_US,
        ended,
        gang: Some(part.clone()),
    }
}

fn part_result(task: u64, attempt: u64, outcome: Outcome) -> TaskResult {
    TaskResult {
        body: ResultBody::Part {
            stdout: Output::default(),
            stderr: Output::default(),
            ends: vec![ProcessEnd {
                rank: 0,
                outcome: outcome.clone(),
                ended_unix_us: 1_700_000_000_000_000,
                aborted: false,
            }],
            pmi: None,
        },
        outcome,
        ..exited(task, attempt, 0)
    }
}

#[tokio::test]
async fn a_gang_is_adopted_once_every_member_listed_its_part_and_ends_once() {
    let (records, (task, attempt), parts) = previous_gang();
    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    // Member 2 first: its part ended while away, and its result comes before member
    // 1 has said hello. Nothing is stopped, nothing settled yet.
    hello_holding(
        &mut new,
        2,
        2,
        vec![held_part(task, attempt, &parts[1], true)],
    );
    let ok = Outcome::Exited { code: 0 };
    new.report(2, 0, &[], vec![part_result(task, attempt, ok.clone())]);
    assert!(results_of(&new.journal_durable()).is_empty());
    hello_holding(
        &mut new,
        1,
        2,
        vec![held_part(task, attempt, &parts[0], false)],
    );
    let sent = new.sent();
    assert!(
        cancels(&sent, 1).is_empty() && cancels(&sent, 2).is_empty(),
        "{sent:?}"
    );
    assert!(
        assignments(&sent, 1).is_empty() && assignments(&sent, 2).is_empty(),
        "the gang is not placed again: {sent:?}"
    );

    new.report(1, 0, &[], vec![part_result(task, attempt, ok)]);
    let results = results_of(&new.journal_durable());
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].state, TerminalState::Succeeded);
    assert_eq!(results[0].attempts, 1, "it ran once");
    let gang = results[0].gang.as_ref().expect("a gang's record");
    assert_eq!(gang.processes.len(), 2, "both members' parts: {gang:?}");
    let adoption = new.status().adoption;
    assert_eq!(
        adoption.map(|a| (a.adopted, a.ended_away, a.refused)),
        Some((1, 0, 0)),
        "{adoption:?}"
    );
}

#[tokio::test]
async fn a_gang_whose_member_does_not_come_back_is_stopped_and_runs_again_whole() {
    let (records, (task, attempt), parts) = previous_gang();
    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    hello_holding(
        &mut new,
        1,
        2,
        vec![held_part(task, attempt, &parts[0], false)],
    );
    new.join(3, 2);
    new.report(3, 2, &[], Vec::new());
    new.report(1, 2, &[], Vec::new());
    let sent = new.sent();
    assert!(cancels(&sent, 1).is_empty(), "{sent:?}");
    assert!(
        assignments(&sent, 3).is_empty(),
        "dispatch waits for node 2"
    );

    // Node 2 never comes back: node 1's part is stopped, and the job runs again
    // whole on the nodes there are.
    new.clock.advance(Duration::from_secs(5));
    new.handle(RootMsg::Timer);
    let sent = new.sent();
    assert_eq!(cancels(&sent, 1), [attempt]);
    let again = assignments(&sent, 1);
    assert_eq!(again.len(), 1, "{sent:?}");
    assert_eq!(again, assignments(&sent, 3));
    assert_eq!(again[0].0, task);
    assert_ne!(again[0].1, attempt);
    // The stopped part's end is dropped; the new attempt decides.
    new.report(
        1,
        0,
        &[],
        vec![part_result(task, attempt, Outcome::Cancelled)],
    );
    assert!(results_of(&new.journal_durable()).is_empty());
    let adoption = new.status().adoption;
    assert_eq!(
        adoption.map(|a| (a.adopted, a.refused, a.missing_nodes)),
        Some((0, 1, 1)),
        "{adoption:?}"
    );
}
