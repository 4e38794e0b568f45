//! The agent as supervisor, under real faults: a node out of file descriptors (the
//! test lowers its own soft limit, so it runs alone in a child process), and a task
//! whose program is missing. On paused time, so backoffs are exact: paused time moves
//! only to the next timer, so a restart that did not wait would show no time passed.

use std::time::Duration;

use saker_wire::messages::{AttemptId, Dispatch, NodeId, Outcome, Report, TaskResult};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::tests::{Started, decode, job, start_agent_with};
use super::*;
use crate::board::tests::task;
use crate::link::FrameBuf;
use crate::test_support::{exhaust_open_files, in_child_process, restore_open_files};

const BACKOFF: Duration = Duration::from_millis(100);

fn policy(max_restarts: u32) -> RestartPolicy {
    RestartPolicy {
        max_restarts,
        window: Duration::from_secs(60),
        backoff: BACKOFF,
        max_backoff: Duration::from_secs(1),
    }
}

fn dispatch(
    agent: &ActorRef<AgentMsg>,
    jobs: Vec<std::sync::Arc<saker_wire::messages::JobDef>>,
    tasks: &[u64],
) {
    let dispatch = Dispatch {
        jobs,
        tasks: tasks.iter().map(|&id| task(id, 1)).collect(),
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
}

/// The next frame up. Slots run in real time, which paused time does not see, so the
/// guard is a real-time deadline.
async fn next_up(rx: &mut UnboundedReceiver<FrameBuf>) -> Option<FromAgent> {
    let (expired_tx, mut expired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        let _ = expired_tx.send(());
    });
    loop {
        tokio::select! {
            frame = rx.recv() => match frame {
                // The end of the stream, queued as the agent stops.
                Some(frame) if frame.is_empty() => continue,
                frame => return frame.map(|frame| decode(&frame)),
            },
            _ = &mut expired => panic!("the agent went silent for 30 s"),
        }
    }
}

/// Reports until one carries `attempt`'s result; that result, and the paused time.
async fn result_of(
    rx: &mut UnboundedReceiver<FrameBuf>,
    attempt: AttemptId,
) -> (TaskResult, Instant) {
    loop {
        match next_up(rx).await {
            Some(FromAgent::Report(Report { results, .. })) => {
                if let Some(result) = results.into_iter().find(|r| r.attempt == attempt) {
                    return (result, Instant::now());
                }
            }
            other => panic!("expected a report, got {other:?}"),
        }
    }
}

fn lost_for_want_of_descriptors(result: &TaskResult) -> bool {
    matches!(&result.outcome, Outcome::Lost { reason }
        if reason.starts_with("slot 0 failed: could not start attempt")
            && reason.contains("out of file descriptors"))
}

/// A slot whose thread cannot open the pipes of a task loses that attempt (for the
/// root to replay) and takes work again after the backoff, not before.
#[tokio::test(start_paused = true)]
async fn a_slot_out_of_file_descriptors_loses_its_attempt_and_restarts_after_the_backoff() {
    if !in_child_process(
        module_path!(),
        "a_slot_out_of_file_descriptors_loses_its_attempt_and_restarts_after_the_backoff",
    ) {
        return;
    }
    let Started { agent, mut rx, .. } = start_agent_with(1, policy(3)).await;
    let limit = exhaust_open_files();
    dispatch(&agent, vec![job(1, &["true"])], &[1]);
    let (lost, failed_at) = result_of(&mut rx, AttemptId(10)).await;
    assert!(lost_for_want_of_descriptors(&lost), "{lost:?}");
    // The fault clears; the next task waits for the slot's restart.
    restore_open_files(limit);
    dispatch(&agent, Vec::new(), &[2]);
    let (done, at) = result_of(&mut rx, AttemptId(20)).await;
    assert_eq!(done.outcome, Outcome::Exited { code: 0 });
    assert_eq!(done.executor, 0);
    assert!(
        at - failed_at >= BACKOFF,
        "restarted after {:?}",
        at - failed_at
    );
    agent.stop(None);
}

/// A slot that keeps failing is restarted after doubling backoffs, then given up; a
/// node with no slot left says goodbye with the reason and its agent exits failed.
#[tokio::test(start_paused = true)]
async fn a_slot_that_keeps_failing_is_given_up_and_its_agent_says_goodbye() {
    if !in_child_process(
        module_path!(),
        "a_slot_that_keeps_failing_is_given_up_and_its_agent_says_goodbye",
    ) {
        return;
    }
    let Started {
        agent,
        mut rx,
        exit,
        ..
    } = start_agent_with(1, policy(2)).await;
    let _limit = exhaust_open_files();
    let mut failed_at = Vec::new();
    for id in 1..=3 {
        let jobs = if id == 1 {
            vec![job(1, &["true"])]
        } else {
            Vec::new()
        };
        dispatch(&agent, jobs, &[id]);
        let (lost, at) = result_of(&mut rx, AttemptId(id * 10)).await;
        assert!(lost_for_want_of_descriptors(&lost), "{lost:?}");
        failed_at.push(at);
    }
    // Each restart waited its backoff: 100 ms, then 200 ms (and no longer than the next
    // doubling: only a paced report's timer, 20 ms, may move paused time further).
    let gaps = [failed_at[1] - failed_at[0], failed_at[2] - failed_at[1]];
    assert!(gaps[0] >= BACKOFF && gaps[0] < 2 * BACKOFF, "{gaps:?}");
    assert!(gaps[1] >= 2 * BACKOFF && gaps[1] < 4 * BACKOFF, "{gaps:?}");
    // The third failure within the window is one past two restarts: given up.
    let Some(FromAgent::Goodbye {
        node: NodeId(3),
        reason,
    }) = next_up(&mut rx).await
    else {
        panic!("no goodbye");
    };
    assert!(
        reason.starts_with("every slot of this node (1) failed too often"),
        "{reason}"
    );
    assert!(reason.contains("out of file descriptors"), "{reason}");
    assert!(
        next_up(&mut rx).await.is_none(),
        "nothing after the goodbye"
    );
    let exit = exit.await.expect("an exit reason");
    assert!(
        matches!(
            exit,
            AgentExit::Failed(AgentFailure::NoSlotLeft {
                slots: 1,
                last: SlotFault::NoResources {
                    attempt: AttemptId(30),
                    ..
                }
            })
        ),
        "{exit:?}"
    );
}

/// A task whose program is missing fails by its own fault: its slot is not restarted,
/// and runs the next task at once.
#[tokio::test(start_paused = true)]
async fn a_missing_program_is_the_tasks_failure_not_the_slots() {
    let Started { agent, mut rx, .. } = start_agent_with(1, policy(3)).await;
    let started = Instant::now();
    let jobs = vec![job(1, &["/no/such/program-saker"]), job(2, &["true"])];
    let dispatch = Dispatch {
        jobs,
        tasks: vec![task(1, 1), task(2, 2)],
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    let (failed, _) = result_of(&mut rx, AttemptId(10)).await;
    assert_eq!(
        failed.outcome,
        Outcome::SpawnFailed {
            reason: "program not found: /no/such/program-saker".into()
        }
    );
    let (done, at) = result_of(&mut rx, AttemptId(20)).await;
    assert_eq!(done.outcome, Outcome::Exited { code: 0 });
    // A restart would have waited the backoff first.
    assert!(at - started < BACKOFF, "{:?}", at - started);
    agent.stop(None);
}
