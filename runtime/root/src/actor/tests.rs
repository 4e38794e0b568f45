//! The root's logic through its router, with the recording port and manual clock of
//! `testing.rs`: no sockets, no disk, no timers. Each owner's own tests are beside it
//! (`submissions/tests.rs`, `results/tests.rs`, `nodes/tests.rs`, …).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use saker_actors::link::LinkId;
use saker_core::{AttemptId, CoreConfig, NodeId, Resources, TaskId};
use saker_wire::messages::{
    FromAgent, Hello, Outcome, Payload, Report, Started, TaskResult, ToAgent,
};
use tokio::sync::oneshot;

use super::port::{Clock, Wake};
use super::state::{RootState, StateArgs};
use super::testing::*;
use super::{RootMsg, Turn};
use crate::client::ClientRequest;
use crate::records::Record;
use saker_client::spec::{JobRequest, TaskSpec};
use saker_client::{StatusReport, SubmitReply, WaitReport};

mod adoption;
mod compaction;
mod dependencies;
mod disk_full;
mod elastic;
mod failures;
mod history;
mod losses;
mod objects;
mod placed;
mod recompute;
mod transfers;
mod updates;
mod waiting;

struct Harness {
    root: RootState,
    port: TestPort,
    clock: ManualClock,
    /// What the agents joining from now on say of hosting actors.
    hosts_actors: bool,
}

impl Harness {
    /// Restores this (new) root from `records`, as a resumed pilot reads its journal:
    /// they are this root's journal from now on.
    fn restore(
        &mut self,
        records: Vec<Record>,
    ) -> Result<super::restore::RestoreSummary, super::restore::RestoreError> {
        let journal = self.port.with(|r| r.durable.clone());
        let positions = journal.hold(records.clone());
        self.root.restore(records, positions)
    }

    fn new() -> Harness {
        let port = TestPort::default();
        let clock = ManualClock(Arc::new(Mutex::new(0)));
        let args = StateArgs {
            pilot_id: PILOT.to_owned(),
            core: CoreConfig::default(),
            allocation: None,
            max_nodes: Some(4),
            expected_node: None,
            process: None,
        };
        let root = RootState::new(
            args,
            Box::new(port.clone()),
            Box::new(port.clone()),
            Box::new(clock.clone()),
        );
        Harness {
            root,
            port,
            clock,
            hosts_actors: true,
        }
    }

    fn handle(&mut self, message: RootMsg) -> Turn {
        self.root.handle(message)
    }

    /// A frame from an agent on `link`, encoded as the agent would.
    fn agent_sends(&mut self, link: u64, route: u32, message: &FromAgent) {
        let bytes = saker_wire::encode(route, message).expect("agent messages encode");
        let mut decoder = saker_wire::FrameDecoder::new();
        decoder.push(&bytes);
        let frame = decoder.next_frame().expect("valid").expect("whole");
        self.root
            .on_agent_frame(LinkId(link), frame.route, &frame.payload);
        self.root.flush();
    }

    /// Links node `node` (on link `node`) with `cores` cores, as a hello does.
    fn join(&mut self, node: u32, cores: u32) {
        let (tx, _rx) = saker_actors::link::channel();
        self.handle(RootMsg::LinkUp {
            link: LinkId(u64::from(node)),
            tx,
            node: Some(node),
        });
        self.hello(node, cores, PILOT);
    }

    fn hello(&mut self, node: u32, cores: u32, pilot_id: &str) {
        self.hello_holding(node, cores, pilot_id, Vec::new());
    }

    /// Node `node`'s hello, listing the attempts it holds from an earlier root.
    fn hello_holding(
        &mut self,
        node: u32,
        cores: u32,
        pilot_id: &str,
        held: Vec<saker_wire::messages::Held>,
    ) {
        self.hello_hosting(node, cores, pilot_id, held, Vec::new());
    }

    /// Node `node`'s hello, listing the attempts and actors' lives it holds from an
    /// earlier root.
    fn hello_hosting(
        &mut self,
        node: u32,
        cores: u32,
        pilot_id: &str,
        held: Vec<saker_wire::messages::Held>,
        actors: Vec<saker_wire::messages::HeldActor>,
    ) {
        let hello = FromAgent::Hello(Hello {
            node: NodeId(node),
            hostname: format!("host{node}"),
            capacity: Resources::cores(cores),
            custom: Vec::new(),
            executors: cores,
            pid: 1000 + node,
            pilot_id: pilot_id.to_owned(),
            hosts_actors: self.hosts_actors,
            held,
            actors,
            scratch: format!("/scratch/node-{node}"),
            data_addr: format!("10.0.0.{node}:5000"),
        });
        self.agent_sends(u64::from(node), node, &hello);
    }

    /// Reports every (task, attempt) `node` was sent started and exited 0, in one
    /// report granting no credit; returns them.
    fn succeed_sent(&mut self, node: u32) -> Vec<(u64, u64)> {
        let dispatched = assignments(&self.sent(), node);
        let results = dispatched
            .iter()
            .map(|&(task, attempt)| exited(task, attempt, 0))
            .collect();
        self.report(node, 0, &dispatched, results);
        dispatched
    }

    fn report(&mut self, node: u32, credit: u32, started: &[(u64, u64)], results: Vec<TaskResult>) {
        let report = FromAgent::Report(Report {
            node: NodeId(node),
            seq: 1,
            credit: Resources::cores(credit),
            started: started
                .iter()
                .map(|&(task, attempt)| Started {
                    task: TaskId(task),
                    attempt: AttemptId(attempt),
                    executor: 0,
                    at_unix_us: UNIX_ORIGIN_US,
                })
                .collect(),
            results,
        });
        self.agent_sends(u64::from(node), node, &report);
    }

    fn submit(
        &mut self,
        jobs: Vec<JobRequest>,
    ) -> oneshot::Receiver<Result<SubmitReply, saker_client::RequestError>> {
        let (reply, answer) = oneshot::channel();
        self.handle(RootMsg::Client(ClientRequest::Submit {
            jobs,
            wait: None,
            reply,
        }));
        answer
    }

    /// Submits `jobs`, to be answered once their tasks have ended (`wait`).
    fn submit_waiting(
        &mut self,
        jobs: Vec<JobRequest>,
        wait: saker_client::SubmitWait,
    ) -> oneshot::Receiver<Result<SubmitReply, saker_client::RequestError>> {
        let (reply, answer) = oneshot::channel();
        self.handle(RootMsg::Client(ClientRequest::Submit {
            jobs,
            wait: Some(wait),
            reply,
        }));
        answer
    }

    /// Makes every pending append durable, as the journal would, and hands the root
    /// what waited on them.
    fn journal_durable(&mut self) -> Vec<Record> {
        let (appends, journal) = self
            .port
            .with(|r| (std::mem::take(&mut r.appends), r.durable.clone()));
        let mut records = Vec::new();
        for (batch, after) in appends {
            records.extend(batch.iter().cloned());
            let positions = journal.hold(batch);
            if let Some(message) = after.finish(Ok(positions)) {
                self.handle(message);
            }
        }
        records
    }

    fn sent(&self) -> Vec<(u32, ToAgent)> {
        self.port.with(|r| std::mem::take(&mut r.sent))
    }

    fn status(&mut self) -> StatusReport {
        let (reply, mut answer) = oneshot::channel();
        self.handle(RootMsg::Client(ClientRequest::Status { jobs: None, reply }));
        answer
            .try_recv()
            .expect("status answers at once")
            .expect("ok")
    }

    /// `status` with `jobs`: their counts, or the refusal.
    fn status_of(
        &mut self,
        jobs: &[u32],
    ) -> Result<Vec<saker_client::JobTaskCounts>, saker_client::RequestError> {
        let (reply, mut answer) = oneshot::channel();
        let jobs = Some(jobs.iter().map(|&job| saker_core::JobId(job)).collect());
        self.handle(RootMsg::Client(ClientRequest::Status { jobs, reply }));
        let report = answer.try_recv().expect("status answers at once")?;
        Ok(report.job_counts.expect("the counts asked for"))
    }
}

#[tokio::test]
async fn an_agent_is_welcomed_and_one_of_another_pilot_is_refused() {
    let mut h = Harness::new();
    h.join(1, 2);
    h.hello(2, 2, "some-other-pilot");
    let sent = h.sent();
    assert!(
        matches!(&sent[0], (1, ToAgent::Welcome(w)) if w.node == NodeId(1) && w.pilot_id == PILOT),
        "{sent:?}"
    );
    assert!(
        matches!(&sent[1], (2, ToAgent::Refused { reason }) if reason.contains("some-other-pilot")),
        "{sent:?}"
    );
    assert_eq!(h.status().agents, 1);
}

#[tokio::test]
async fn a_submission_is_acknowledged_only_once_it_is_durable() {
    let mut h = Harness::new();
    let mut answer = h.submit(vec![array(&["echo", "{index}"], "1-3"), single(&["true"])]);
    assert!(answer.try_recv().is_err(), "acknowledged before durable");
    let records = h.journal_durable();
    let submits: Vec<(u32, u64, u32)> = records
        .iter()
        .filter_map(|record| match record {
            Record::Submit {
                job,
                first_task,
                count,
                ..
            } => Some((job.0, first_task.0, *count)),
            _ => None,
        })
        .collect();
    assert_eq!(submits, vec![(1, 1, 3), (2, 4, 1)]);
    let reply = answer.try_recv().expect("acknowledged").expect("accepted");
    let jobs: Vec<(u32, u64, u64)> = reply
        .jobs
        .iter()
        .map(|j| (j.job.0, j.first_task.0, j.count))
        .collect();
    assert_eq!(jobs, vec![(1, 1, 3), (2, 4, 1)]);
}

#[tokio::test]
async fn a_submission_with_one_bad_job_is_refused_whole() {
    let mut h = Harness::new();
    let mut bad = single(&["true"]);
    bad.spec.cores = 0;
    let mut answer = h.submit(vec![single(&["true"]), bad]);
    let error = answer.try_recv().expect("answered at once").unwrap_err();
    assert!(
        error.message.contains("job 1 of the submission"),
        "{error:?}"
    );
    assert!(h.journal_durable().is_empty(), "nothing is journaled");
    assert_eq!(h.status().queued, 0, "nothing is queued");
}

#[tokio::test]
async fn a_submission_the_core_would_refuse_in_part_is_refused_whole() {
    let mut h = Harness::new();
    let mut gang = single(&["mpirun", "./solver"]);
    gang.spec.nodes = 5;
    let mut answer = h.submit(vec![single(&["true"]), array(&["true"], "1-9"), gang]);
    let error = answer.try_recv().expect("answered at once").unwrap_err();
    assert!(
        error.message.contains("job 2 of the submission")
            && error.message.contains("5 nodes; this pilot has at most 4"),
        "{error:?}"
    );
    assert!(h.journal_durable().is_empty(), "nothing is journaled");
    assert_eq!(h.status().queued, 0, "nothing is queued");
    // Job ids were not used up by the refused submission.
    let mut answer = h.submit(vec![single(&["true"])]);
    h.journal_durable();
    let reply = answer.try_recv().expect("acknowledged").expect("accepted");
    assert_eq!(reply.jobs[0].job.0, 1);
}

#[tokio::test]
async fn a_task_asking_for_gpus_goes_only_to_a_node_that_offers_them() {
    use saker_core::ResourceKind;
    let mut h = Harness::new();
    let mut gpu = single(&["train"]);
    gpu.spec.gpus = 1;
    gpu.spec.memory_mib = 1024;
    gpu.spec.resources = [("licence".to_owned(), 2)].into();
    h.submit(vec![gpu, single(&["true"])]);
    h.journal_durable();
    let licence = ResourceKind::custom(0).expect("a custom kind");
    let with_gpu = Resources::cores(2)
        .with(ResourceKind::GPUS, 1)
        .with(ResourceKind::MEMORY_MIB, 4096)
        .with(licence, 4);
    for (node, capacity) in [(1, Resources::cores(2)), (2, with_gpu)] {
        let (tx, _rx) = saker_actors::link::channel();
        h.handle(RootMsg::LinkUp {
            link: LinkId(u64::from(node)),
            tx,
            node: Some(node),
        });
        // Named resources travel by name; the root numbers them (the licence took
        // the first custom kind when the job asked for it).
        let offered = (node == 2).then(|| saker_wire::NamedAmount {
            name: "licence".into(),
            amount: 4,
        });
        let hello = FromAgent::Hello(Hello {
            node: NodeId(node),
            hostname: format!("host{node}"),
            capacity: capacity.with(licence, 0),
            custom: offered.into_iter().collect(),
            executors: 2,
            pid: 1,
            pilot_id: PILOT.to_owned(),
            hosts_actors: true,
            held: Vec::new(),
            actors: Vec::new(),
            scratch: String::new(),
            data_addr: String::new(),
        });
        h.agent_sends(u64::from(node), node, &hello);
        let credit = FromAgent::Report(Report {
            node: NodeId(node),
            seq: 1,
            credit: capacity,
            started: Vec::new(),
            results: Vec::new(),
        });
        h.agent_sends(u64::from(node), node, &credit);
    }
    let sent = h.sent();
    assert_eq!(
        assignments(&sent, 1),
        vec![(2, 1)],
        "the plain task only: {sent:?}"
    );
    let welcomed = sent.iter().find_map(|(node, message)| match message {
        ToAgent::Welcome(welcome) if *node == 2 => Some(welcome.capacity),
        _ => None,
    });
    assert_eq!(welcomed, Some(with_gpu), "the licence in the root's kind");
    let to_gpu_node = sent.iter().find_map(|(node, message)| match message {
        ToAgent::Dispatch(dispatch) if *node == 2 => Some(dispatch.clone()),
        _ => None,
    });
    let dispatch = to_gpu_node.expect("the GPU node gets the GPU task");
    assert_eq!(dispatch.tasks[0].task, TaskId(1));
    let needs = dispatch.jobs[0].resources;
    assert_eq!(
        (
            needs.core_count(),
            needs.gpu_count(),
            needs.memory_mib(),
            needs.get(licence)
        ),
        (1, 1, 1024, 2)
    );
}

#[tokio::test]
async fn credit_brings_work_with_each_job_definition_sent_once_per_node() {
    let mut h = Harness::new();
    h.submit(vec![array(&["echo", "{index}"], "10-12")]);
    h.journal_durable();
    h.join(1, 2);
    h.sent();
    h.report(1, 2, &[], Vec::new());
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(first))] = sent.as_slice() else {
        panic!("one dispatch to node 1: {sent:?}");
    };
    assert_eq!(first.jobs.len(), 1);
    let Payload::Command(command) = &first.jobs[0].payload else {
        panic!("a command job")
    };
    assert_eq!(command.argv, vec!["echo", "{index}"]);
    let indices: Vec<u32> = first.tasks.iter().map(|t| t.index).collect();
    assert_eq!(indices, vec![10, 11], "array indices, not offsets");
    h.report(1, 1, &[], Vec::new());
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(second))] = sent.as_slice() else {
        panic!("one dispatch to node 1: {sent:?}");
    };
    assert!(second.jobs.is_empty(), "the node has the job already");
    assert_eq!(second.tasks[0].index, 12);
}

/// An attempt lost for want of its job's definition (it reached another life of the
/// node) is replayed with the definition sent again, not failed.
#[tokio::test]
async fn a_lost_attempt_brings_its_job_definition_again() {
    let mut h = Harness::new();
    h.submit(vec![array(&["echo", "{index}"], "1-2")]);
    h.journal_durable();
    h.join(1, 1);
    h.sent();
    h.report(1, 1, &[], Vec::new());
    let sent = h.sent();
    let [(1, ToAgent::Dispatch(first))] = sent.as_slice() else {
        panic!("one dispatch to node 1: {sent:?}");
    };
    assert_eq!(first.jobs.len(), 1);
    let (task, attempt) = (first.tasks[0].task.0, first.tasks[0].attempt.0);
    let lost = TaskResult {
        outcome: Outcome::Lost {
            reason: "unknown job 1 on this agent".into(),
        },
        ..exited(task, attempt, 0)
    };
    h.report(1, 1, &[], vec![lost]);
    let sent = h.sent();
    let replay = sent
        .iter()
        .find_map(|(node, message)| match message {
            ToAgent::Dispatch(d) if *node == 1 && !d.tasks.is_empty() => Some(d.clone()),
            _ => None,
        })
        .expect("the lost attempt's task is sent again");
    assert_eq!(replay.jobs.len(), 1, "with its definition: {replay:?}");
}

#[tokio::test]
async fn results_reach_waiters_only_once_durable_and_a_duplicate_counts_once() {
    let mut h = Harness::new();
    h.submit(vec![single(&["true"])]);
    h.journal_durable();
    h.join(1, 1);
    h.report(1, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("one task dispatched");
    };
    let (reply, mut waiting) = oneshot::channel::<Result<WaitReport, _>>();
    h.handle(RootMsg::Client(ClientRequest::Wait { jobs: None, reply }));
    h.report(1, 0, &[(task, attempt)], vec![exited(task, attempt, 0)]);
    h.report(1, 0, &[], vec![exited(task, attempt, 0)]);
    assert!(waiting.try_recv().is_err(), "answered before durable");
    let results: Vec<Record> = h
        .journal_durable()
        .into_iter()
        .filter(|r| matches!(r, Record::Result(_)))
        .collect();
    assert_eq!(results.len(), 1, "one result per task");
    let report = waiting.try_recv().expect("answered").expect("ok");
    assert_eq!(
        report,
        WaitReport {
            succeeded: 1,
            failed: 0,
            cancelled: 0
        }
    );
    let status = h.status();
    assert_eq!((status.succeeded, status.duplicates), (1, 1));
}

/// `status` with `jobs` follows each job's task from queued through dispatched
/// (`assigned`) and started (`running`) to its end, while another waits for the one
/// slot; an unknown job refuses the request.
#[tokio::test]
async fn status_with_jobs_follows_each_task_from_queued_to_succeeded() {
    use saker_client::{ErrorKind, JobTaskCounts};
    let counts = |job: u32, state: &str| {
        let mut counts = JobTaskCounts {
            job: saker_core::JobId(job),
            count: 1,
            ..JobTaskCounts::default()
        };
        match state {
            "queued" => counts.queued = 1,
            "assigned" => counts.assigned = 1,
            "running" => counts.running = 1,
            "succeeded" => counts.succeeded = 1,
            _ => unreachable!("{state}"),
        }
        counts
    };
    let mut h = Harness::new();
    h.submit(vec![single(&["sleep", "9"]), single(&["true"])]);
    h.journal_durable();
    assert_eq!(h.status().job_counts, None, "only when asked for");
    assert_eq!(
        h.status_of(&[2, 1]).unwrap(),
        vec![counts(2, "queued"), counts(1, "queued")],
        "in the order asked"
    );
    h.join(1, 1);
    h.report(1, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("one task dispatched");
    };
    assert_eq!(task, 1);
    assert_eq!(
        h.status_of(&[1, 2]).unwrap(),
        vec![counts(1, "assigned"), counts(2, "queued")]
    );
    // The pilot-wide picture cannot tell these apart: both are "running" there.
    assert_eq!((h.status().running, h.status().queued), (1, 1));
    h.report(1, 0, &[(task, attempt)], Vec::new());
    assert_eq!(
        h.status_of(&[1, 2]).unwrap(),
        vec![counts(1, "running"), counts(2, "queued")]
    );
    // The end frees the slot: the second job's task goes out, and starts.
    h.report(1, 1, &[], vec![exited(task, attempt, 0)]);
    let [(second, second_attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("the second task dispatched");
    };
    assert_eq!(
        h.status_of(&[1, 2]).unwrap(),
        vec![counts(1, "succeeded"), counts(2, "assigned")]
    );
    h.report(1, 0, &[(second, second_attempt)], Vec::new());
    assert_eq!(h.status_of(&[2]).unwrap(), vec![counts(2, "running")]);
    h.journal_durable();
    assert_eq!(h.status_of(&[1]).unwrap(), vec![counts(1, "succeeded")]);
    for unknown in [&[3][..], &[1, 3], &[0]] {
        let refused = h.status_of(unknown).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::UnknownJob, "{unknown:?}");
    }
    assert_eq!(h.status_of(&[]).unwrap(), Vec::new());
}

#[tokio::test]
async fn a_lost_link_replays_its_attempts_on_another_node_and_notes_why() {
    let mut h = Harness::new();
    h.submit(vec![single(&["sleep", "9"])]);
    h.journal_durable();
    h.join(1, 1);
    h.report(1, 1, &[], Vec::new());
    let [(task, lost_attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("one task dispatched");
    };
    // It started, then its node went: the note says when it started.
    h.report(1, 0, &[(task, lost_attempt)], Vec::new());
    h.handle(RootMsg::LinkDown {
        link: LinkId(1),
        reason: "connection reset".into(),
    });
    h.join(2, 1);
    h.report(2, 1, &[], Vec::new());
    let replayed = assignments(&h.sent(), 2);
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0].0, task, "the same task");
    assert_ne!(replayed[0].1, lost_attempt, "a new attempt");
    h.report(2, 0, &[], vec![exited(task, replayed[0].1, 0)]);
    let records = h.journal_durable();
    let note = records.iter().find_map(|r| match r {
        Record::Attempt { task: t, note } if t.0 == task => Some(note.clone()),
        _ => None,
    });
    let note = note.expect("the lost attempt is journaled");
    assert!(note.reason.contains("connection reset"), "{note:?}");
    assert_eq!(
        note.start_time,
        Some(saker_client::results::Timestamp::from_unix_micros(
            UNIX_ORIGIN_US
        )),
        "as its agent reported"
    );
    let result = records.iter().find_map(|r| match r {
        Record::Result(result) => Some(result.clone()),
        _ => None,
    });
    let result = result.expect("the task finished");
    assert_eq!(result.attempts, 2);
    assert_eq!(result.node.as_deref(), Some("host2"));
    assert_eq!(result.history.len(), 1);
}

/// One node's agent started twice: the newer link supersedes the older, the work
/// given to the older copy is replayed on the newer, and the stale copy's credit and
/// goodbye count for nothing (a route or a loss that followed it would strand work).
#[tokio::test]
async fn a_stale_copy_of_a_node_is_superseded_and_cannot_end_the_live_one() {
    let mut h = Harness::new();
    h.submit(vec![single(&["sleep", "9"])]);
    h.journal_durable();
    h.join(5, 1);
    h.report(5, 1, &[], Vec::new());
    let [(task, first)] = assignments(&h.sent(), 5)[..] else {
        panic!("one task dispatched");
    };
    let (tx, _rx) = saker_actors::link::channel();
    h.handle(RootMsg::LinkUp {
        link: LinkId(50),
        tx,
        node: Some(5),
    });
    assert_eq!(
        h.port.with(|r| r.superseded.clone()),
        vec![(LinkId(5), NodeId(5))]
    );
    let hello = FromAgent::Hello(Hello {
        node: NodeId(5),
        hostname: "host5".into(),
        capacity: Resources::cores(1),
        custom: Vec::new(),
        executors: 1,
        pid: 2005,
        pilot_id: PILOT.to_owned(),
        hosts_actors: true,
        held: Vec::new(),
        actors: Vec::new(),
        scratch: String::new(),
        data_addr: String::new(),
    });
    h.agent_sends(50, 5, &hello);
    h.agent_sends(50, 5, &report_of(5, 1));
    let replayed = assignments(&h.sent(), 5);
    assert_eq!(
        replayed.len(),
        1,
        "the stale copy's task runs on the new one"
    );
    assert_eq!(replayed[0].0, task);
    assert_ne!(replayed[0].1, first);
    // The stale copy's credit brings nothing; its goodbye ends nothing.
    h.agent_sends(5, 5, &report_of(5, 1));
    h.agent_sends(
        5,
        5,
        &FromAgent::Goodbye {
            node: NodeId(5),
            reason: "stopping".into(),
        },
    );
    h.root.drain();
    assert!(assignments(&h.sent(), 5).is_empty());
    assert_eq!(h.status().agents, 1, "the newer agent stays registered");
    assert_eq!(h.status().running, 1);
}

fn report_of(node: u32, credit: u32) -> FromAgent {
    FromAgent::Report(Report {
        node: NodeId(node),
        seq: 1,
        credit: Resources::cores(credit),
        started: Vec::new(),
        results: Vec::new(),
    })
}

#[tokio::test]
async fn an_invalid_frame_loses_its_node_and_nothing_else() {
    let mut h = Harness::new();
    h.join(1, 1);
    h.join(2, 1);
    h.root
        .on_agent_frame(LinkId(1), 1, b"not an rkyv archive, not even aligned");
    h.root.drain();
    assert_eq!(h.status().agents, 1, "only the sender's node is gone");
}

#[tokio::test]
async fn the_walltime_deadline_stops_the_agents_and_status_keeps_its_picture() {
    let mut h = Harness::new();
    h.submit(vec![array(&["sleep", "100"], "1-4")]);
    h.journal_durable();
    h.join(1, 1);
    let deadline = UNIX_ORIGIN_US + 10_000_000;
    h.root.set_deadline(deadline);
    let wakes = h.port.with(|r| r.wakes.clone());
    assert!(
        wakes.contains(&(Duration::from_secs(10), Wake::Walltime)),
        "{wakes:?}"
    );
    h.report(1, 1, &[], Vec::new());
    let [(task, attempt)] = assignments(&h.sent(), 1)[..] else {
        panic!("one task dispatched");
    };
    h.report(1, 0, &[(task, attempt)], Vec::new());
    h.clock.advance(Duration::from_secs(10));
    h.handle(RootMsg::Walltime);
    let sent = h.sent();
    assert!(
        sent.iter()
            .any(|(node, m)| *node == 1 && matches!(m, ToAgent::Shutdown { .. })),
        "{sent:?}"
    );
    assert!(h.port.with(|r| r.shutdown_requested));
    let at_deadline = h.status();
    assert!(at_deadline.walltime_reached);
    assert_eq!((at_deadline.running, at_deadline.queued), (1, 3));
    // The agent's goodbye must not change what the deadline left.
    h.agent_sends(
        1,
        1,
        &FromAgent::Goodbye {
            node: NodeId(1),
            reason: "shutting down".into(),
        },
    );
    assert_eq!(h.status(), at_deadline);
}

#[tokio::test]
async fn a_failed_journal_stops_the_root() {
    let mut h = Harness::new();
    h.join(1, 1);
    let turn = h.handle(RootMsg::JournalFailed {
        error: saker_journal::JournalError::WriterStopped,
    });
    let Turn::Stop(reason) = turn else {
        panic!("the root goes on without a journal");
    };
    assert!(reason.starts_with("journal failed: "), "{reason}");
    assert!(h.port.with(|r| r.shutdown_requested));
    assert!(
        h.sent()
            .iter()
            .any(|(_, m)| matches!(m, ToAgent::Shutdown { .. }))
    );
    h.root.close_journal();
    assert!(h.port.with(|r| r.journal_closed));
}

#[tokio::test(start_paused = true)]
async fn a_full_frame_budget_holds_links_back_until_the_root_handles_a_frame() {
    use super::FrameBudget;
    let budget = FrameBudget::new(2);
    let first = budget.reserve().await.expect("room");
    let _second = budget.reserve().await.expect("room");
    assert_eq!(budget.available(), 0);
    // Paused time: the timeout fires only if nothing else could make progress.
    let waited = tokio::time::timeout(Duration::from_secs(60), budget.reserve()).await;
    assert!(
        waited.is_err(),
        "a third frame got room while two were held"
    );
    let third = tokio::spawn({
        let budget = budget.clone();
        async move { budget.reserve().await.is_some() }
    });
    drop(first);
    assert!(
        third.await.expect("no panic"),
        "room came back with the handled frame"
    );
}

/// A pilot with no agents of its own (they join later, or never: a queue) knows
/// nothing of its nodes, so it refuses no task for its resources.
#[tokio::test]
async fn a_pilot_of_no_agents_queues_whatever_is_asked() {
    let mut h = Harness::new();
    h.root.ctx.pilot.max_nodes = Some(0);
    let mut big = single(&["true"]);
    big.spec.cores = 64;
    big.spec.gpus = 2;
    let mut answer = h.submit(vec![big]);
    h.journal_durable();
    assert!(answer.try_recv().expect("answered").is_ok());
}
