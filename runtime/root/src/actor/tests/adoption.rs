//! A root of a later term (a standby that took over, a resumed root) adopts what the
//! previous root's agents still run: nothing runs twice, nothing is lost.

use saker_core::TerminalState;
use saker_wire::messages::{Held, Report};

use super::*;

mod actors;
mod gangs;

/// A root of term `term`, as `Root::pre_start` makes one after `term - 1` roots.
pub(super) fn harness_of_term(term: u32) -> Harness {
    let mut h = Harness::new();
    let args = StateArgs {
        pilot_id: PILOT.to_owned(),
        core: CoreConfig {
            term,
            ..CoreConfig::default()
        },
        allocation: None,
        max_nodes: Some(4),
        expected_node: None,
        process: None,
    };
    h.root = RootState::new(
        args,
        Box::new(h.port.clone()),
        Box::new(h.port.clone()),
        Box::new(h.clock.clone()),
    );
    h
}

/// Node `node` links and says hello holding `held`.
pub(super) fn hello_holding(h: &mut Harness, node: u32, cores: u32, held: Vec<Held>) {
    let (tx, _rx) = saker_actors::link::channel();
    h.handle(RootMsg::LinkUp {
        link: LinkId(u64::from(node)),
        tx,
        node: Some(node),
    });
    h.hello_holding(node, cores, PILOT, held);
}

fn held(task: u64, attempt: u64, ended: bool) -> Held {
    Held {
        attempt: AttemptId(attempt),
        task: TaskId(task),
        started_unix_us: UNIX_ORIGIN_US,
        ended,
        gang: None,
    }
}

/// The attempts `sent` asks `node` to cancel.
pub(super) fn cancels(sent: &[(u32, ToAgent)], node: u32) -> Vec<u64> {
    sent.iter()
        .filter(|(route, _)| *route == node)
        .filter_map(|(_, message)| match message {
            ToAgent::Cancel { attempts } => Some(attempts.iter().map(|a| a.0)),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The previous root: four tasks, two of them dispatched to node 1; node 3 idle. Its
/// journal, and what node 1 runs.
fn previous_root() -> (Vec<Record>, Vec<(u64, u64)>) {
    let mut old = Harness::new();
    old.submit(vec![array(&["true"], "1-4")]);
    let mut records = old.journal_durable();
    old.join(3, 2);
    old.join(1, 2);
    old.report(1, 2, &[], Vec::new());
    let running = assignments(&old.sent(), 1);
    assert_eq!(running.len(), 2, "{running:?}");
    records.extend(old.journal_durable());
    (records, running)
}

#[tokio::test]
async fn a_new_root_adopts_what_runs_and_what_ended_and_runs_nothing_twice() {
    let (records, running) = previous_root();
    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    // Another node is there first: nothing is dispatched while node 1 may still run
    // some of the queued tasks.
    new.join(2, 2);
    new.report(2, 2, &[], Vec::new());
    assert!(
        assignments(&new.sent(), 2).is_empty(),
        "dispatch waits for the previous root's nodes"
    );
    assert!(
        new.port
            .with(|r| r.wakes.contains(&(Duration::from_secs(5), Wake::Timer))),
        "and not forever"
    );

    // Node 3 comes back holding nothing: dispatch still waits for node 1.
    hello_holding(&mut new, 3, 2, Vec::new());
    assert!(assignments(&new.sent(), 2).is_empty());
    // Node 1 comes back: its first attempt runs, its second ended while away.
    let (first, second) = (running[0], running[1]);
    hello_holding(
        &mut new,
        1,
        2,
        vec![
            held(first.0, first.1, false),
            held(second.0, second.1, true),
        ],
    );
    let sent = new.sent();
    assert!(cancels(&sent, 1).is_empty(), "both are adopted: {sent:?}");
    // Dispatch goes on at once: the other two tasks, to node 2 (node 3 has sent no
    // credit yet).
    let others = assignments(&sent, 2);
    let tasks: Vec<u64> = others.iter().map(|&(task, _)| task).collect();
    assert_eq!(tasks.len(), 2, "{sent:?}");
    assert!(!tasks.contains(&first.0) && !tasks.contains(&second.0));
    assert!(
        others
            .iter()
            .all(|&(_, attempt)| AttemptId(attempt).term() == 2),
        "the new root numbers its attempts in its own term: {others:?}"
    );
    assert!(assignments(&sent, 1).is_empty());

    // The result that waited, then the running one's, then the rest.
    new.report(1, 0, &[], vec![exited(second.0, second.1, 0)]);
    new.report(1, 0, &[], vec![exited(first.0, first.1, 0)]);
    new.report(
        2,
        0,
        &others,
        others.iter().map(|&(t, a)| exited(t, a, 0)).collect(),
    );
    let records = new.journal_durable();
    let reconciled: Vec<_> = records
        .iter()
        .filter_map(|record| match record {
            Record::Reconciled { term, adoption, .. } => {
                Some((*term, adoption.adopted, adoption.ended_away))
            }
            _ => None,
        })
        .collect();
    assert_eq!(reconciled, [(2, 1, 1)], "journaled once, for the report");
    let results = results_of(&records);
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        results.iter().all(|r| r.state == TerminalState::Succeeded
            && r.attempts == 1
            && r.history.is_empty()),
        "each task ran once: {results:?}"
    );
    let status = new.status();
    assert_eq!((status.succeeded, status.replays), (4, 0));
    let adoption = status.adoption;
    assert_eq!(
        adoption.map(|a| (a.adopted, a.ended_away, a.refused, a.missing_nodes)),
        Some((1, 1, 0, 0)),
        "{adoption:?}"
    );
}

#[tokio::test]
async fn what_cannot_be_adopted_is_stopped_on_its_node() {
    let (records, running) = previous_root();
    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    let first = running[0];
    hello_holding(
        &mut new,
        1,
        2,
        vec![
            held(first.0, first.1, false),
            // Held twice (a stale inventory): the second is not adopted.
            held(first.0, first.1 + 100, false),
            // A task the journal does not know.
            held(999, 7, false),
            // An attempt of this root's own term: no earlier root dispatched it.
            held(running[1].0, AttemptId::first_of_term(2).0, false),
        ],
    );
    let mut stopped = cancels(&new.sent(), 1);
    stopped.sort_unstable();
    let mut expected = vec![first.1 + 100, 7, AttemptId::first_of_term(2).0];
    expected.sort_unstable();
    assert_eq!(stopped, expected);
}

/// The previous root accepted a result, but died before its acknowledgement reached
/// the agent, which holds it as ended and sends it again: recognised, not stopped, not
/// journaled twice, not counted as a duplicate.
#[tokio::test]
async fn a_result_the_previous_root_accepted_is_dropped_when_sent_again() {
    let mut old = Harness::new();
    old.submit(vec![array(&["true"], "1-2")]);
    old.join(1, 2);
    old.report(1, 2, &[], Vec::new());
    let running = assignments(&old.sent(), 1);
    let (task, attempt) = running[0];
    old.report(1, 0, &[], vec![exited(task, attempt, 0)]);
    let records = old.journal_durable();
    assert_eq!(results_of(&records).len(), 1);

    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    let (other, other_attempt) = running[1];
    hello_holding(
        &mut new,
        1,
        2,
        vec![held(task, attempt, true), held(other, other_attempt, false)],
    );
    assert!(cancels(&new.sent(), 1).is_empty(), "nothing to stop");
    new.report(1, 0, &[], vec![exited(task, attempt, 0)]);
    new.report(1, 0, &[], vec![exited(other, other_attempt, 0)]);
    let results = results_of(&new.journal_durable());
    assert_eq!(
        results.iter().map(|r| r.task.0).collect::<Vec<_>>(),
        vec![other],
        "only the adopted task's result is new"
    );
    let status = new.status();
    assert_eq!((status.succeeded, status.duplicates), (2, 0));
    let adoption = status.adoption.expect("a later term");
    assert_eq!(
        (adoption.adopted, adoption.delivered, adoption.refused),
        (1, 1, 0)
    );
}

#[tokio::test]
async fn dispatch_waits_no_longer_than_the_adoption_wait() {
    let (records, _) = previous_root();
    let mut new = harness_of_term(2);
    new.restore(records).expect("the journal restores");
    new.join(2, 2);
    new.report(2, 2, &[], Vec::new());
    assert!(assignments(&new.sent(), 2).is_empty());
    // Node 1 never comes back.
    new.clock.advance(Duration::from_secs(5));
    new.handle(RootMsg::Timer);
    assert_eq!(
        assignments(&new.sent(), 2).len(),
        2,
        "its work runs elsewhere once the wait is over"
    );
}

/// An agent keeps the results it sent until the root says they are in the journal;
/// the root says so per node, with the last report read before the append: in a
/// frame of its own at most once a `DURABLE_GAP`, otherwise with the next dispatch.
#[tokio::test]
async fn a_node_hears_which_of_its_reports_are_durable_once_they_are() {
    let mut h = Harness::new();
    h.submit(vec![array(&["true"], "1-4")]);
    h.journal_durable();
    h.join(1, 2);
    h.report(1, 2, &[], Vec::new());
    let report = |seq: u64, ran: &[(u64, u64)], credit: u32| {
        FromAgent::Report(Report {
            node: NodeId(1),
            seq,
            credit: Resources::cores(credit),
            started: Vec::new(),
            results: ran.iter().map(|&(t, a)| exited(t, a, 0)).collect(),
        })
    };
    let durable = |sent: &[(u32, ToAgent)]| {
        sent.iter()
            .filter_map(|(node, message)| match message {
                ToAgent::Durable { through } => Some((*node, *through)),
                ToAgent::Dispatch(dispatch) if dispatch.durable > 0 => {
                    Some((*node, dispatch.durable))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let first = assignments(&h.sent(), 1);
    h.agent_sends(1, 1, &report(7, &first, 2));
    let sent = h.sent();
    assert!(durable(&sent).is_empty(), "not before the journal has them");
    let second = assignments(&sent, 1);
    h.journal_durable();
    assert_eq!(durable(&h.sent()), [(1, 7)], "said at once, the first time");

    // Within the gap: said with the next dispatch, not in a frame of its own.
    h.agent_sends(1, 1, &report(8, &second, 2));
    h.journal_durable();
    assert!(durable(&h.sent()).is_empty());
    h.submit(vec![single(&["true"])]);
    h.journal_durable();
    let sent = h.sent();
    assert_eq!(assignments(&sent, 1).len(), 1, "{sent:?}");
    assert_eq!(durable(&sent), [(1, 8)], "carried by the dispatch");
}
