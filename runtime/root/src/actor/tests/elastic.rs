//! An elastic root against a scripted batch system: what it submits, journals,
//! releases and cancels, and what a resumed root adopts.

use std::time::Duration;

use super::*;
use crate::actor::ElasticConfig;
use crate::actor::port::{BatchOutcome, BatchWork};

const SECOND: u64 = 1_000_000;

fn config() -> ElasticConfig {
    elastic_config()
}

fn elastic_harness() -> Harness {
    let mut h = Harness::new();
    h.root.set_elastic(config());
    h
}

impl Harness {
    fn round(&mut self) -> BatchWork {
        self.clock.advance(Duration::from_secs(1));
        self.handle(RootMsg::Provision);
        self.port
            .with(|r| r.batches.pop())
            .expect("a round hands work over")
    }

    /// The nodes told to stop since the last look, each asked to let its running
    /// tasks be (a release, not a kill).
    fn stops_sent(&mut self) -> Vec<u32> {
        self.sent()
            .into_iter()
            .filter_map(|(route, message)| match message {
                ToAgent::Shutdown { kill_running, .. } => {
                    assert!(!kill_running, "a release kills nothing");
                    Some(route)
                }
                _ => None,
            })
            .collect()
    }

    fn allocation_records(&mut self) -> Vec<(u64, u32, bool)> {
        self.journal_durable()
            .into_iter()
            .filter_map(|record| match record {
                Record::Allocation {
                    allocation,
                    job_id,
                    ended,
                    ..
                } => Some((allocation, job_id, ended)),
                _ => None,
            })
            .collect()
    }
}

fn state(allocation: u64, word: &str) -> (u64, crate::actor::port::JobState) {
    (allocation, Ok((word.to_owned(), None)))
}

#[tokio::test]
async fn it_asks_for_allocations_releases_the_idle_one_and_cancels_the_unneeded() {
    let mut h = elastic_harness();
    let _submitted = h.submit(vec![array(&["true"], "1-2")]);
    h.journal_durable();
    // Two tasks of a minute each (no run time seen yet) on 2-core nodes within 10 s:
    // more than the limit of two nodes, both asked for at once.
    let work = h.round();
    let firsts: Vec<String> = work
        .submits
        .iter()
        .map(|s| s.request.script.clone())
        .collect();
    assert_eq!(work.submits.len(), 2, "{work:?}");
    assert!(firsts[0].contains("--subtree-base 0") && firsts[1].contains("--subtree-base 1"));
    assert_eq!(work.submits[0].request.partition.as_deref(), Some("debug"));
    assert_eq!(
        work.submits[1].request.name.as_deref(),
        Some("saker-test-1")
    );
    // While its work is in flight no other round starts.
    h.clock.advance(Duration::from_secs(1));
    h.handle(RootMsg::Provision);
    assert!(
        h.port.with(|r| r.batches.is_empty()),
        "a round was under way"
    );
    h.handle(RootMsg::Batch(BatchOutcome {
        submitted: vec![
            (0, Ok(saker_slurm::SlurmJobId(500))),
            (1, Ok(saker_slurm::SlurmJobId(501))),
        ],
        states: Vec::new(),
        ..BatchOutcome::default()
    }));
    assert_eq!(h.allocation_records(), [(0, 500, false), (1, 501, false)]);

    // Allocation 0's agent joins and runs both tasks.
    h.join(0, 2);
    h.report(0, 2, &[], Vec::new());
    assert_eq!(h.succeed_sent(0).len(), 2);
    h.journal_durable();
    assert_eq!(h.status().succeeded, 2);
    // Nothing queued: the pending allocation is cancelled; the running one is idle.
    let work = h.round();
    assert!(work.submits.is_empty(), "{work:?}");
    assert_eq!(work.cancels, [saker_slurm::SlurmJobId(501)]);
    assert_eq!(work.queries.len(), 2);
    h.handle(RootMsg::Batch(BatchOutcome {
        submitted: Vec::new(),
        states: vec![state(0, "RUNNING"), state(1, "CANCELLED")],
        ..BatchOutcome::default()
    }));
    assert_eq!(h.allocation_records(), [(1, 501, true)]);
    let allocations = h.status().allocations;
    assert_eq!(allocations.len(), 1);
    assert_eq!(
        (
            allocations[0].state.as_str(),
            allocations[0].slurm_state.as_str()
        ),
        ("running", "RUNNING")
    );

    // Idle for the release time: its agent is told to stop (not killed), and the job
    // ending is journaled.
    h.sent();
    h.clock.advance(Duration::from_secs(30));
    let work = h.round();
    assert!(work.cancels.is_empty(), "released, not cancelled: {work:?}");
    assert_eq!(h.stops_sent(), [0]);
    h.handle(RootMsg::Batch(BatchOutcome {
        submitted: Vec::new(),
        states: vec![state(0, "COMPLETED")],
        ..BatchOutcome::default()
    }));
    assert_eq!(h.allocation_records(), [(0, 500, true)]);
    assert!(h.status().allocations.is_empty());
}

#[tokio::test]
async fn a_refused_submission_ends_the_allocation_with_the_reason() {
    let mut h = elastic_harness();
    let _submitted = h.submit(vec![single(&["true"])]);
    h.journal_durable();
    let work = h.round();
    assert_eq!(work.submits.len(), 2);
    h.handle(RootMsg::Batch(BatchOutcome {
        submitted: vec![
            (
                0,
                Err(Arc::new(saker_slurm::SlurmError::InvalidRequest {
                    field: "partition",
                    reason: "no such partition",
                })),
            ),
            (1, Ok(saker_slurm::SlurmJobId(7))),
        ],
        states: Vec::new(),
        ..BatchOutcome::default()
    }));
    // Never submitted: nothing to adopt or end in the journal.
    assert_eq!(h.allocation_records(), [(1, 7, false)]);
    let allocations = h.status().allocations;
    assert_eq!(allocations.len(), 1);
    assert_eq!(allocations[0].job_id, Some(7));
}

/// A resumed root adopts the allocation its journal names as submitted and not
/// ended: it counts it, so it asks for no duplicate, and its node ids are not reused.
#[tokio::test]
async fn a_resumed_root_adopts_its_allocations_instead_of_asking_again() {
    let mut h = elastic_harness();
    let submit = Record::Submit {
        job: saker_client::results::JobId(1),
        first_task: saker_client::results::TaskId(1),
        count: 1,
        submitted_unix_us: UNIX_ORIGIN_US,
        request: Box::new(single(&["true"])),
    };
    let adopted = Record::Allocation {
        allocation: 4,
        job_id: 900,
        nodes: 1,
        first_node: 7,
        ended: false,
        reason: "earlier".into(),
        unix_us: UNIX_ORIGIN_US,
    };
    let ended = Record::Allocation {
        allocation: 3,
        job_id: 899,
        nodes: 1,
        first_node: 6,
        ended: true,
        reason: "released".into(),
        unix_us: UNIX_ORIGIN_US,
    };
    h.restore(vec![submit, adopted, ended]).unwrap();
    let allocations = h.status().allocations;
    assert_eq!(allocations.len(), 1, "{allocations:?}");
    assert_eq!(
        (allocations[0].allocation, allocations[0].job_id),
        (4, Some(900))
    );
    // First, strays: none beyond the adopted one.
    let work = h.round();
    assert_eq!(work.find_named.as_deref(), Some("saker-test-"), "{work:?}");
    assert!(work.submits.is_empty());
    h.handle(RootMsg::Batch(BatchOutcome {
        found: vec![(
            saker_slurm::SlurmJobId(900),
            "saker-test-4".into(),
            "RUNNING".into(),
        )],
        ..BatchOutcome::default()
    }));
    assert!(h.port.with(|r| r.batches.is_empty()), "nothing to cancel");
    // One task of a minute, wanted: 6 nodes' worth in 10 s, capped at 2. The adopted
    // one counts: one more is asked for, numbered after both.
    let work = h.round();
    assert_eq!(work.submits.len(), 1, "{work:?}");
    assert!(work.submits[0].request.script.contains("--subtree-base 8"));
    assert_eq!(
        work.submits[0].request.name.as_deref(),
        Some("saker-test-5")
    );
    assert!(work.queries.contains(&(4, saker_slurm::SlurmJobId(900))));
}

#[tokio::test]
async fn pause_stops_submissions_and_a_pilot_that_is_not_elastic_says_so() {
    let mut h = elastic_harness();
    let (reply, mut answer) = oneshot::channel();
    h.handle(RootMsg::Client(ClientRequest::Provisioning {
        pause: true,
        reply,
    }));
    assert!(answer.try_recv().unwrap().unwrap(), "paused");
    assert!(h.status().provisioning_paused);
    let _submitted = h.submit(vec![single(&["true"])]);
    h.journal_durable();
    assert!(h.round().submits.is_empty());

    let mut plain = Harness::new();
    let (reply, mut answer) = oneshot::channel();
    plain.handle(RootMsg::Client(ClientRequest::Provisioning {
        pause: true,
        reply,
    }));
    let error = answer.try_recv().unwrap().unwrap_err();
    assert!(error.message.contains("not elastic"), "{error:?}");
}

/// An HPC job wider than what a minute's work asks for: as many nodes as it spans.
#[tokio::test]
async fn an_hpc_job_asks_for_as_many_nodes_as_it_spans() {
    let mut config = config();
    config.provision.max_nodes = 4;
    config.provision.max_pending = 4;
    // Work alone would want one node: a minute's estimate over a long window.
    config.provision.grow_after_us = 3600 * SECOND;
    let mut h = Harness::new();
    h.root.set_elastic(config);
    let mut spec = TaskSpec::new(vec!["true".to_owned()]);
    spec.nodes = 3;
    let mut answer = h.submit(vec![JobRequest::single(spec)]);
    h.journal_durable();
    assert!(answer.try_recv().unwrap().is_ok(), "within --max-nodes");
    let work = h.round();
    assert_eq!(work.submits.len(), 3, "{work:?}");
}

#[tokio::test]
async fn time_limits_size_the_backlog_before_any_run_time_is_known() {
    // 20 tasks limited to one second: 20 core-seconds, one 2-core node drains them
    // within 10 s. Weighed at the default minute each, they would want both nodes.
    let mut h = elastic_harness();
    let mut short = array(&["true"], "1-20");
    short.spec.time_limit = Some(Duration::from_secs(1));
    let _submitted = h.submit(vec![short]);
    h.journal_durable();
    let work = h.round();
    assert_eq!(work.submits.len(), 1, "{work:?}");

    let mut h = elastic_harness();
    let _submitted = h.submit(vec![array(&["true"], "1-20")]);
    h.journal_durable();
    let work = h.round();
    assert_eq!(work.submits.len(), 2, "{work:?}");
}

#[tokio::test]
async fn a_resumed_root_cancels_jobs_of_its_own_the_journal_does_not_know() {
    let mut h = elastic_harness();
    let adopted = Record::Allocation {
        allocation: 0,
        job_id: 900,
        nodes: 1,
        first_node: 0,
        ended: false,
        reason: "earlier".into(),
        unix_us: UNIX_ORIGIN_US,
    };
    let released = Record::Allocation {
        allocation: 1,
        job_id: 901,
        nodes: 1,
        first_node: 1,
        ended: true,
        reason: "released".into(),
        unix_us: UNIX_ORIGIN_US,
    };
    h.restore(vec![adopted, released]).unwrap();
    let work = h.round();
    assert_eq!(work.find_named.as_deref(), Some("saker-test-"));
    let found = |job: u32, name: &str, state: &str| {
        (
            saker_slurm::SlurmJobId(job),
            name.to_owned(),
            state.to_owned(),
        )
    };
    h.handle(RootMsg::Batch(BatchOutcome {
        found: vec![
            found(900, "saker-test-0", "RUNNING"),
            // Ended in the journal, still running: its release did not finish.
            found(901, "saker-test-1", "RUNNING"),
            // Submitted just before the crash, never journaled.
            found(902, "saker-test-2", "PENDING"),
            found(903, "saker-test-3", "COMPLETED"),
            found(904, "saker-test-x", "RUNNING"),
        ],
        ..BatchOutcome::default()
    }));
    let cancels = h.port.with(|r| r.batches.pop()).expect("strays cancelled");
    assert_eq!(
        cancels.cancels,
        [saker_slurm::SlurmJobId(901), saker_slurm::SlurmJobId(902)]
    );
    // Allocation numbers seen in Slurm are not given out again.
    let _submitted = h.submit(vec![array(&["true"], "1-4")]);
    h.journal_durable();
    let work = h.round();
    assert_eq!(work.submits.len(), 1, "{work:?}");
    assert_eq!(
        work.submits[0].request.name.as_deref(),
        Some("saker-test-4")
    );
}

#[tokio::test]
async fn an_allocation_close_to_its_end_takes_no_new_work_and_is_let_go_once_done() {
    let mut h = elastic_harness();
    let _submitted = h.submit(vec![array(&["true"], "1-6")]);
    h.journal_durable();
    let work = h.round();
    assert_eq!(work.submits.len(), 2, "{work:?}");
    h.handle(RootMsg::Batch(BatchOutcome {
        submitted: vec![
            (0, Ok(saker_slurm::SlurmJobId(500))),
            (1, Ok(saker_slurm::SlurmJobId(501))),
        ],
        ..BatchOutcome::default()
    }));
    h.join(0, 2);
    h.report(0, 2, &[], Vec::new());
    let running = assignments(&h.sent(), 0);
    assert_eq!(running.len(), 2);
    // Slurm ends allocation 0 in 2 s: within the drain margin (three 1 s rounds).
    h.round();
    let end = h.clock.unix_micros() + 2 * SECOND;
    h.handle(RootMsg::Batch(BatchOutcome {
        states: vec![
            (0, Ok(("RUNNING".to_owned(), Some(end)))),
            state(1, "PENDING"),
        ],
        ..BatchOutcome::default()
    }));
    h.round();
    h.handle(RootMsg::Batch(BatchOutcome::default()));
    let allocations = h.status().allocations;
    assert_eq!(allocations[0].state, "draining", "{allocations:?}");
    assert!(
        allocations[0].reason.contains("draining"),
        "{allocations:?}"
    );
    // Its agent asks for more: nothing is sent; its running tasks finish.
    h.report(0, 2, &running, Vec::new());
    assert!(
        assignments(&h.sent(), 0).is_empty(),
        "a draining node got work"
    );
    let done = running
        .iter()
        .map(|&(task, attempt)| exited(task, attempt, 0))
        .collect();
    h.report(0, 0, &[], done);
    h.journal_durable();
    assert_eq!(h.status().succeeded, 2);
    // Idle: let go before Slurm's limit (its agent told to stop, not killed).
    h.sent();
    h.round();
    assert_eq!(h.stops_sent(), [0]);
    let allocations = h.status().allocations;
    assert_eq!(
        (
            allocations[0].state.as_str(),
            allocations[0].reason.as_str()
        ),
        ("ending", "drained before its end")
    );
}
