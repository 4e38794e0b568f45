//! Nodes lost, by mistake or for good, and tasks stopped from outside: each costs
//! replays, bounded by `max_replays`, never a failed task.

use super::*;
use saker_client::attempts::AttemptEnd;
use saker_client::results::{Failure, TerminalState};

fn signaled(task: u64, attempt: u64, signal: i32) -> TaskResult {
    TaskResult {
        outcome: Outcome::Signaled { signal },
        ..exited(task, attempt, 0)
    }
}

fn cancelled(task: u64, attempt: u64) -> TaskResult {
    TaskResult {
        outcome: Outcome::Cancelled,
        ..exited(task, attempt, 0)
    }
}

/// A new link for node `node`, as an agent that reattached opens it.
fn relink(h: &mut Harness, link: u64, node: u32) {
    let (tx, _rx) = saker_actors::link::channel();
    h.handle(RootMsg::LinkUp {
        link: LinkId(link),
        tx,
        node: Some(node),
    });
}

/// The hello of node `node`'s next life, over `link`.
fn hello_again(h: &mut Harness, link: u64, node: u32, cores: u32) {
    let hello = FromAgent::Hello(Hello {
        node: NodeId(node),
        hostname: format!("host{node}"),
        capacity: Resources::cores(cores),
        custom: Vec::new(),
        executors: cores,
        pid: 3000 + node,
        pilot_id: PILOT.to_owned(),
        hosts_actors: true,
        held: Vec::new(),
        actors: Vec::new(),
        scratch: String::new(),
        data_addr: String::new(),
    });
    h.agent_sends(link, node, &hello);
}

fn late_report(h: &mut Harness, link: u64, node: u32, results: Vec<TaskResult>) {
    let report = FromAgent::Report(Report {
        node: NodeId(node),
        seq: 1,
        credit: Resources::cores(0),
        started: Vec::new(),
        results,
    });
    h.agent_sends(link, node, &report);
}

/// Slurm ending an allocation (`scancel`, its time limit) sends SIGTERM to every
/// process of the step, the tasks before their agent; an agent that gets to run in
/// between reports its tasks killed by a signal it never sends. Such an attempt was
/// stopped from outside: lost and replayed, not the task failed (it failed tasks of a
/// cancelled allocation on a loaded machine). Past its replays the task fails with
/// that loss as its reason. SIGKILL stays the task's own failure: it is also the
/// kernel's out-of-memory kill.
#[tokio::test]
async fn a_task_killed_by_a_stop_signal_from_outside_is_replayed_not_failed() {
    let mut h = Harness::new();
    let mut stopped = single(&["sleep", "9"]);
    stopped.spec.max_replays = Some(1);
    h.submit(vec![stopped, single(&["sleep", "9"])]);
    h.journal_durable();
    h.join(1, 2);
    h.report(1, 2, &[], Vec::new());
    let [(task, first), (killed, killed_attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("two tasks dispatched");
    };
    h.report(
        1,
        2,
        &[(task, first), (killed, killed_attempt)],
        vec![
            signaled(task, first, 15),
            signaled(killed, killed_attempt, 9),
        ],
    );
    let replayed = assignments(&h.sent(), 1);
    assert_eq!(replayed.len(), 1, "only the SIGTERMed task runs again");
    let (again, second) = replayed[0];
    assert_eq!(again, task);
    assert_ne!(second, first, "as a new attempt");
    let records = h.journal_durable();
    let results = results_of(&records);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        (results[0].task.0, results[0].state, results[0].signal),
        (killed, TerminalState::Failed, Some(9)),
        "SIGKILL is the task's own failure"
    );
    assert_eq!(results[0].failure, Some(Failure::Signal));
    let note = records
        .iter()
        .find_map(|r| match r {
            Record::Attempt { task: t, note } if t.0 == task => Some(note.clone()),
            _ => None,
        })
        .expect("the stopped attempt is noted");
    assert_eq!((note.end, note.signal), (AttemptEnd::Lost, Some(15)));
    assert!(
        note.reason.contains("SIGTERM") && note.reason.contains("from outside"),
        "{note:?}"
    );

    // Stopped again: its one replay is used up, and it fails saying why.
    h.report(1, 2, &[(task, second)], vec![signaled(task, second, 15)]);
    let results = results_of(&h.journal_durable());
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert_eq!(
        (result.task.0, result.state, result.attempts),
        (task, TerminalState::Failed, 2)
    );
    let reason = result.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("SIGTERM") && reason.ends_with("no replays left"),
        "{reason}"
    );
    assert_eq!(result.failure, Some(Failure::Lost));
    assert_eq!(h.status().failed, 2);
}

/// An agent declared lost while it lives (its heartbeats held up past the timeout on
/// a starved machine): the root closes its link and replays its attempts, each at the
/// cost of one replay. What the agent then reports of its old life over its new link
/// (the attempts it stopped on losing its parent, one that ended meanwhile, even one
/// that failed) are duplicates; its new life takes the replays like any node. Every
/// task succeeds, with one replay allowed.
#[tokio::test]
async fn a_node_declared_lost_by_mistake_costs_one_replay_and_fails_no_task() {
    let mut h = Harness::new();
    let mut job = array(&["sleep", "1"], "1-3");
    job.spec.max_replays = Some(1);
    h.submit(vec![job]);
    h.journal_durable();
    h.join(1, 3);
    h.report(1, 3, &[], Vec::new());
    let old = assignments(&h.sent(), 1);
    assert_eq!(old.len(), 3);
    h.report(1, 0, &old, Vec::new());
    h.handle(RootMsg::LinkDown {
        link: LinkId(1),
        reason: "the link failed: heard nothing for 2s (no heartbeat)".into(),
    });
    // The agent finds its parent gone, stops its attempts and reattaches: first the
    // ends of its old life, then its hello, then credit.
    relink(&mut h, 11, 1);
    let [(t1, a1), (t2, a2), (t3, a3)] = old[..] else {
        unreachable!()
    };
    late_report(
        &mut h,
        11,
        1,
        vec![cancelled(t1, a1), exited(t2, a2, 0), exited(t3, a3, 1)],
    );
    hello_again(&mut h, 11, 1, 3);
    h.agent_sends(11, 1, &report_of(1, 3));
    let replayed = assignments(&h.sent(), 1);
    assert_eq!(
        replayed.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
        vec![t1, t2, t3],
        "every attempt of the old life runs again on the new one"
    );
    assert!(replayed.iter().all(|r| !old.contains(r)));
    h.report(
        1,
        3,
        &replayed,
        replayed.iter().map(|&(t, a)| exited(t, a, 0)).collect(),
    );
    let results = results_of(&h.journal_durable());
    assert_eq!(results.len(), 3);
    for result in &results {
        assert_eq!(result.state, TerminalState::Succeeded, "{result:?}");
        let [note] = &result.history[..] else {
            panic!("one lost attempt: {result:?}");
        };
        assert_eq!(note.end, AttemptEnd::Lost);
        assert!(note.reason.contains("heard nothing"), "{note:?}");
    }
    let status = h.status();
    assert_eq!((status.failed, status.duplicates), (0, 3));
    assert_eq!(status.agents, 1);
}

/// The same mistake seen first by the agent (the root's heartbeats held up): its new
/// link, its old life's ends and its hello reach the root before the old link's
/// close. The stopped attempts, still live, are replayed once each; the close that
/// comes last loses nothing of the new life.
#[tokio::test]
async fn a_mistaken_loss_seen_first_by_the_agent_costs_one_replay_and_fails_no_task() {
    let mut h = Harness::new();
    let mut job = array(&["sleep", "1"], "1-2");
    job.spec.max_replays = Some(1);
    h.submit(vec![job]);
    h.journal_durable();
    h.join(1, 2);
    h.report(1, 2, &[], Vec::new());
    let old = assignments(&h.sent(), 1);
    h.report(1, 0, &old, Vec::new());
    relink(&mut h, 11, 1);
    late_report(
        &mut h,
        11,
        1,
        old.iter().map(|&(t, a)| cancelled(t, a)).collect(),
    );
    hello_again(&mut h, 11, 1, 2);
    h.agent_sends(11, 1, &report_of(1, 2));
    let replayed = assignments(&h.sent(), 1);
    assert_eq!(replayed.len(), 2, "both run again on the new life");
    h.handle(RootMsg::LinkDown {
        link: LinkId(1),
        reason: "the link failed: connection closed by the agent".into(),
    });
    assert_eq!(h.status().agents, 1, "the new life stays");
    h.report(
        1,
        2,
        &replayed,
        replayed.iter().map(|&(t, a)| exited(t, a, 0)).collect(),
    );
    let results = results_of(&h.journal_durable());
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| r.state == TerminalState::Succeeded && r.history.len() == 1),
        "{results:?}"
    );
    assert_eq!(h.status().failed, 0);
}

/// A root that took over (a standby, or a resume that adopts agents) numbers its
/// attempts from 1 again, while an adopted agent may still hold a result of the
/// previous root's attempt with the same number. That result must not end the new
/// root's attempt of another task on another node: it would finish that task with
/// this one's output.
#[tokio::test]
async fn a_result_of_a_previous_roots_attempt_never_ends_another_task() {
    let mut old = Harness::new();
    old.submit(vec![array(&["true"], "1-3")]);
    let mut records = old.journal_durable();
    old.join(2, 1);
    old.report(2, 1, &[], Vec::new());
    let first = assignments(&old.sent(), 2);
    assert_eq!(first.len(), 1);
    old.report(2, 1, &first, vec![exited(first[0].0, first[0].1, 0)]);
    records.extend(old.journal_durable());
    // The old root's second attempt, on node 2, ends after the old root died.
    let pending = assignments(&old.sent(), 2)[0];
    assert_eq!(pending.1, 2);

    let mut new = Harness::new();
    new.restore(records).expect("the journal restores");
    new.join(1, 2);
    new.report(1, 2, &[], Vec::new());
    let live = assignments(&new.sent(), 1);
    assert_eq!(live.len(), 2, "{live:?}");
    let (other_task, same_number) = *live
        .iter()
        .find(|(task, attempt)| *attempt == pending.1 && *task != pending.0)
        .expect("the new root's attempt 2 runs another task");
    // Node 2's agent, adopted, links and sends what it held before its hello.
    relink(&mut new, 2, 2);
    late_report(&mut new, 2, 2, vec![exited(pending.0, pending.1, 0)]);
    assert!(
        results_of(&new.journal_durable()).is_empty(),
        "task {other_task} (attempt {same_number}) is not ended by task {}'s result",
        pending.0
    );
    new.report(
        1,
        2,
        &live,
        live.iter().map(|&(t, a)| exited(t, a, 0)).collect(),
    );
    let results = results_of(&new.journal_durable());
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| r.state == TerminalState::Succeeded && r.node.as_deref() == Some("host1")),
        "each result is its own attempt's, on node 1: {results:?}"
    );
    assert_eq!(new.status().succeeded, 3);
}
