use super::*;
use crate::board::tests::task;
use crate::link::{FrameBuf, channel};
use saker_wire::messages::{
    AttemptId, Command, Dispatch, EnvVar, JobDef, JobId, Outcome, Payload, Placement, Report,
    ResultBody, TaskId,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

pub(super) fn decode(frame: &FrameBuf) -> FromAgent {
    let len = u32::from_le_bytes(frame[0..4].try_into().unwrap()) as usize;
    saker_wire::frame::decode_from_agent(&frame[8..8 + len]).unwrap()
}

/// Collects reports until `done` has seen what it waits for.
async fn until(
    rx: &mut UnboundedReceiver<FrameBuf>,
    mut done: impl FnMut(&Report) -> bool,
) -> Vec<Report> {
    let mut seen = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("agent went silent")
            .expect("agent closed its link");
        if let FromAgent::Report(report) = decode(&frame) {
            let stop = done(&report);
            seen.push(report);
            if stop {
                return seen;
            }
        }
    }
}

pub(super) fn job(id: u32, argv: &[&str]) -> Arc<JobDef> {
    Arc::new(JobDef {
        job: JobId(id),
        payload: Payload::Command(Command {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![EnvVar {
                key: "X".into(),
                value: "1".into(),
            }],
            cwd: None,
        }),
        resources: Resources::cores(1),
        placement: Placement::Single,
        hpc: None,
        time_limit_ms: 0,
        inline_output_bytes: 1024,
        is_array: false,
        reads: Vec::new(),
        writes: Vec::new(),
    })
}

async fn start_agent(
    cores: u32,
) -> (
    ActorRef<AgentMsg>,
    UnboundedReceiver<FrameBuf>,
    tempfile::TempDir,
) {
    let started = start_agent_with(cores, RestartPolicy::default()).await;
    (started.agent, started.rx, started.dir)
}

/// An agent under test, registered with its "parent" `rx`.
pub(super) struct Started {
    pub agent: ActorRef<AgentMsg>,
    pub rx: UnboundedReceiver<FrameBuf>,
    pub dir: tempfile::TempDir,
    pub exit: tokio::sync::oneshot::Receiver<AgentExit>,
}

/// Starts an agent of node 3, and takes its hello and first credit. No timers: fit for
/// paused time.
pub(super) async fn start_agent_with(cores: u32, restarts: RestartPolicy) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let (parent, mut rx) = channel();
    let config = AgentConfig {
        node: 3,
        hostname: "test-host".into(),
        resources: NodeResources::of_cores(cores),
        limit_memory: false,
        prefetch: cores,
        pilot_id: "p".into(),
        spill_dir: dir.path().to_path_buf(),
        scratch: dir.path().join("scratch"),
        shared_scratch: false,
        object_memory: None,
        restarts,
    };
    let (exit_tx, exit) = tokio::sync::oneshot::channel();
    let (agent, _) = Actor::spawn(
        None,
        Agent,
        AgentArgs {
            config,
            parent,
            exit: Some(exit_tx),
            direct: None,
        },
    )
    .await
    .unwrap();
    let hello = decode(&rx.recv().await.unwrap());
    assert!(
        matches!(hello, FromAgent::Hello(Hello { node: NodeId(3), capacity: offered, .. }) if offered.core_count() == cores)
    );
    let FromAgent::Report(first) = decode(&rx.recv().await.unwrap()) else {
        panic!("no first report");
    };
    assert_eq!(
        first.credit.core_count(),
        2 * cores,
        "initial credit = slots + prefetch"
    );
    Started {
        agent,
        rx,
        dir,
        exit,
    }
}

/// A rejoin (the root lost this node while it was alive) stops the old work, says
/// hello again, and grants credit for what is free now plus the prefetch; the
/// stopped attempt still reports (the root counts it a duplicate) and returns its
/// core.
#[tokio::test]
async fn rejoin_stops_old_work_and_registers_again() {
    let (agent, mut rx, _dir) = start_agent(2).await;
    let dispatch = Dispatch {
        jobs: vec![job(1, &["sleep", "30"])],
        tasks: vec![task(1, 1), task(2, 1), task(3, 1)],
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    until(&mut rx, |r| r.started.len() == 2).await;
    agent.send_message(AgentMsg::Down(ToAgent::Rejoin)).unwrap();
    let mut hellos = 0;
    let mut credit_after_hello = 0;
    let mut results = Vec::new();
    while results.len() < 2 {
        let frame = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("agent went silent")
            .expect("agent closed its link");
        match decode(&frame) {
            FromAgent::Hello(hello) => {
                assert_eq!(hello.node, NodeId(3));
                hellos += 1;
            }
            FromAgent::Report(report) => {
                if hellos > 0 {
                    credit_after_hello += report.credit.core_count();
                }
                results.extend(report.results);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(hellos, 1);
    assert!(results.iter().all(|r| r.outcome == Outcome::Cancelled));
    // The queued third task was dropped without a result: the root replays it.
    assert!(results.iter().all(|r| r.task != TaskId(3)), "{results:?}");
    // prefetch (2) + both cores as the killed attempts end (0 were free).
    assert_eq!(credit_after_hello, 4);
    agent.stop(None);
}

#[tokio::test]
async fn runs_tasks_and_returns_their_cores_as_credit() {
    let (agent, mut rx, _dir) = start_agent(2).await;
    let dispatch = Dispatch {
        jobs: vec![job(1, &["sh", "-c", "echo $X"])],
        tasks: vec![task(1, 1), task(2, 1), task(3, 1)],
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    let mut results = Vec::new();
    let mut credit = 0;
    until(&mut rx, |r| {
        results.extend(r.results.clone());
        credit += r.credit.core_count();
        results.len() == 3
    })
    .await;
    assert!(
        results
            .iter()
            .all(|r| r.outcome == Outcome::Exited { code: 0 })
    );
    assert!(
        results.iter().all(
            |r| matches!(&r.body, ResultBody::Command { stdout, .. } if stdout.inline == b"1\n")
        )
    );
    // Each finished task hands back its core; these are short, so the agent may
    // also have grown its prefetch (from 1 round of 2 cores to the most rounds).
    let growth = 2 * crate::board::PREFETCH_ROUNDS - 2;
    assert!((3..=3 + growth).contains(&credit), "credit {credit}");
    agent.stop(None);
}

/// A result that is not urgent (work is still queued) waits out the report gap,
/// but no longer: a long attempt on the only slot must not hold it back.
#[tokio::test]
async fn a_paced_result_goes_up_while_a_long_attempt_runs() {
    let (agent, mut rx, dir) = start_agent(1).await;
    let gate = dir.path().join("gate");
    // (Given up after about 30 s, so that a failing test leaves no process behind.)
    let wait = format!(
        "for i in $(seq 3000); do [ -e '{}' ] && exit 0; sleep 0.01; done; exit 1",
        gate.display()
    );
    let dispatch = Dispatch {
        jobs: vec![job(1, &["true"]), job(2, &["sh", "-c", &wait])],
        tasks: vec![task(1, 1), task(2, 2), task(3, 1)],
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    // Task 2 runs until the gate exists, and only this report can open it.
    until(&mut rx, |r| r.results.iter().any(|x| x.task == TaskId(1))).await;
    std::fs::write(&gate, b"").unwrap();
    let mut done = Vec::new();
    until(&mut rx, |r| {
        done.extend(r.results.iter().filter(|x| x.task != TaskId(1)).cloned());
        done.len() == 2
    })
    .await;
    assert!(
        done.iter()
            .all(|r| r.outcome == Outcome::Exited { code: 0 })
    );
    agent.stop(None);
}

#[tokio::test]
async fn a_forgotten_job_is_dropped_and_a_new_task_of_it_fails_unknown() {
    let (agent, mut rx, _dir) = start_agent(1).await;
    let dispatch = Dispatch {
        jobs: vec![job(1, &["true"]), job(2, &["true"])],
        tasks: vec![task(1, 1)],
        forget: Vec::new(),
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    until(&mut rx, |r| {
        r.results.iter().any(|x| x.attempt == AttemptId(10))
    })
    .await;
    // Job 1 is forgotten; job 2 is not. (The root never sends a task of a
    // forgotten job; this shows the definition is gone.)
    let dispatch = Dispatch {
        jobs: Vec::new(),
        tasks: vec![task(2, 1), task(3, 2)],
        forget: vec![JobId(1)],
        gang: None,
        durable: 0,
    };
    agent
        .send_message(AgentMsg::Down(ToAgent::Dispatch(dispatch)))
        .unwrap();
    let mut results = Vec::new();
    until(&mut rx, |r| {
        results.extend(r.results.clone());
        results.len() == 2
    })
    .await;
    let outcome = |attempt| {
        &results
            .iter()
            .find(|r| r.attempt == attempt)
            .unwrap()
            .outcome
    };
    assert!(
        matches!(outcome(AttemptId(20)), Outcome::Lost { reason } if reason == "unknown job 1 on this agent"),
        "{results:?}"
    );
    assert_eq!(outcome(AttemptId(30)), &Outcome::Exited { code: 0 });
    agent.stop(None);
}
