use std::sync::Arc;

use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::{JobId, ResultRecord, TaskId, TerminalState, Timestamp};
use saker_client::spec::{JobRequest, TaskSpec};
use saker_core::NodeId;
use saker_root::records::Record;

use super::*;
use crate::report::timeline::{BINS, Gantt, Timeline};

const SECOND: u64 = 1_000_000;
const T0: u64 = 1_700_000_000 * SECOND;

fn at(seconds: f64) -> Timestamp {
    Timestamp::from_unix_micros(T0 + (seconds * 1e6) as u64)
}

fn submit(job: u32, first_task: u64, count: u32, cores: u32) -> Record {
    let mut spec = TaskSpec::new(vec!["true".to_owned()]);
    spec.cores = cores;
    Record::Submit {
        job: JobId(job),
        first_task: TaskId(first_task),
        count,
        submitted_unix_us: T0,
        request: Box::new(JobRequest::single(spec)),
    }
}

fn joined(node: u32, host: &str, cores: u32, seconds: f64) -> Record {
    Record::NodeJoined {
        node: NodeId(node),
        host: host.to_owned(),
        cores,
        gpus: 0,
        unix_us: at(seconds).unix_micros(),
    }
}

/// A result of `task` in `job` that ran on `node` from `start` to `end` seconds.
fn result(task: u64, job: u32, node: u32, start: f64, end: f64, state: TerminalState) -> Record {
    Record::Result(Arc::new(ResultRecord {
        task: TaskId(task),
        job: JobId(job),
        index: None,
        state,
        exit_code: Some(if state == TerminalState::Succeeded {
            0
        } else {
            3
        }),
        signal: None,
        reason: None,
        failure: (state == TerminalState::Failed).then_some(saker_client::results::Failure::Exit),
        attempts: 1,
        node: Some("same-host".to_owned()),
        node_id: Some(node),
        executor: Some(0),
        submit_time: at(0.0),
        dispatch_time: Some(at(start - 0.001)),
        received_time: None,
        start_time: Some(at(start)),
        end_time: at(end),
        accept_time: Some(at(end + 0.001)),
        fetch_us: None,
        stdout: String::new(),
        stderr: String::new(),
        stdout_path: None,
        stderr_path: None,
        output: None,
        seq: task,
        history: Vec::new(),
        gang: None,
    }))
}

fn fold(records: &[Record]) -> Digest {
    let mut digest = Digest::default();
    for record in records {
        digest.add(record);
    }
    digest
}

/// Two agents on one host with 2 cores each, 10 s: node 1 busy on both cores all
/// the time, node 2 on one core for the first half: 15 of 40 core-seconds... plus
/// node 1's 20: (20 + 5) / 40.
#[test]
fn efficiency_is_busy_over_available_core_seconds_and_agents_on_one_host_stay_apart() {
    let mut records = vec![
        joined(1, "same-host", 2, -5.0),
        joined(2, "same-host", 2, -5.0),
        submit(1, 1, 3, 1),
    ];
    records.push(result(1, 1, 1, 0.0, 10.0, TerminalState::Succeeded));
    records.push(result(2, 1, 1, 0.0, 10.0, TerminalState::Succeeded));
    records.push(result(3, 1, 2, 0.0, 5.0, TerminalState::Failed));
    let digest = fold(&records);
    assert_eq!(
        (digest.submitted, digest.succeeded, digest.failed),
        (3, 2, 1)
    );
    assert_eq!(digest.nodes.len(), 2, "{:?}", digest.nodes);
    assert_eq!(digest.failures["exit 3"].examples, vec![3]);
    let timeline = Timeline::new(&digest).unwrap();
    assert!((timeline.makespan_seconds() - 10.0).abs() < 1e-9);
    assert!((timeline.busy_core_seconds - 25.0).abs() < 1e-6);
    assert!((timeline.capacity_core_seconds - 40.0).abs() < 1e-6);
    assert!((timeline.efficiency().unwrap() - 0.625).abs() < 1e-9);
    // Node 2 is busy on one core in the first half only.
    assert!((timeline.node_busy[1][0] - 1.0).abs() < 1e-9);
    assert!(timeline.node_busy[1][BINS - 1].abs() < 1e-9);
    assert_eq!(timeline.ended.iter().sum::<u64>(), 3);
}

/// A node that left halfway offers its cores for half the makespan; cores per task
/// come from the job's spec.
#[test]
fn a_node_that_left_offers_capacity_only_while_there() {
    let records = vec![
        joined(1, "a", 4, 0.0),
        joined(2, "b", 4, 0.0),
        Record::NodeLeft {
            node: NodeId(2),
            reason: "lost".into(),
            unix_us: at(5.0).unix_micros(),
        },
        submit(1, 1, 1, 4),
        result(1, 1, 1, 0.0, 10.0, TerminalState::Succeeded),
    ];
    let timeline = Timeline::new(&fold(&records)).unwrap();
    assert!((timeline.capacity_core_seconds - 60.0).abs() < 1e-6);
    assert!((timeline.busy_core_seconds - 40.0).abs() < 1e-6);
    assert!((timeline.capacity[0] - 8.0).abs() < 1e-9);
    assert!((timeline.capacity[BINS - 1] - 4.0).abs() < 1e-9);
}

/// Earlier attempts count as retries or replays and are drawn; failures group by
/// exit code or by their reason with numbers taken out.
#[test]
fn retries_replays_and_failure_groups() {
    let note = |end, start: f64| AttemptNote {
        attempt: 1,
        end,
        reason: "agent 3 on n1 lost: link closed".into(),
        exit_code: None,
        signal: None,
        node: Some("same-host".into()),
        start_time: Some(at(start)),
        end_time: at(start + 1.0),
    };
    let mut records = vec![joined(1, "same-host", 1, 0.0), submit(1, 1, 3, 1)];
    let Record::Result(mut first) = result(1, 1, 1, 2.0, 3.0, TerminalState::Succeeded) else {
        unreachable!()
    };
    Arc::make_mut(&mut first).history =
        vec![note(AttemptEnd::Failed, 0.0), note(AttemptEnd::Lost, 1.0)];
    records.push(Record::Result(first));
    for (task, agent) in [(2, 7), (3, 9)] {
        let Record::Result(mut lost) = result(task, 1, 1, 3.0, 4.0, TerminalState::Failed) else {
            unreachable!()
        };
        let lost_mut = Arc::make_mut(&mut lost);
        lost_mut.exit_code = None;
        lost_mut.executor = Some(task as u32 - 2);
        lost_mut.reason = Some(format!(
            "agent {agent} on n1 lost: link closed; no replays left"
        ));
        records.push(Record::Result(lost));
    }
    let digest = fold(&records);
    assert_eq!(
        (
            digest.retried,
            digest.replayed,
            digest.tasks_with_earlier_attempts
        ),
        (1, 1, 1)
    );
    let group = &digest.failures["agent N on n1 lost: link closed; no replays left"];
    assert_eq!((group.count, group.examples.clone()), (2, vec![2, 3]));
    assert_eq!(digest.spans.len(), 5);
    let timeline = Timeline::new(&digest).unwrap();
    let gantt = Gantt::new(&digest, &timeline);
    // Executors 0 and 1, and one lane for the earlier attempts (no executor kept).
    assert_eq!(gantt.total_lanes, 3, "{gantt:?}");
    assert_eq!(gantt.attempts, 5);
    let kinds: Vec<SpanKind> = gantt.bars.iter().map(|b| b.kind).collect();
    for kind in SpanKind::ALL {
        assert!(kinds.contains(&kind), "{kind:?} missing from {kinds:?}");
    }
    // The colour key is in the caption, not drawn over the bars.
    let plot = crate::report::plots::gantt(&digest, &timeline, &gantt).unwrap();
    assert!(
        !plot.svg.contains("failed, retried"),
        "a key inside the plot"
    );
    assert_eq!(plot.legend.len(), 4);
}

/// A million back-to-back attempts on one lane merge into a handful of bars.
#[test]
fn the_gantt_view_merges_attempts_closer_than_a_pixel() {
    let mut digest = fold(&[joined(1, "h", 1, 0.0), submit(1, 1, 1, 1)]);
    digest.first_submit_us = Some(T0);
    digest.last_end_us = Some(T0 + 1_000_000 * 10);
    for k in 0..1_000_000u64 {
        digest.spans.push(Span {
            start_us: T0 + k * 10,
            end_us: T0 + k * 10 + 9,
            node: 0,
            cores: 1,
            executor: 0,
            kind: if k == 500_000 {
                SpanKind::Failed
            } else {
                SpanKind::Succeeded
            },
        });
    }
    let timeline = Timeline::new(&digest).unwrap();
    let gantt = Gantt::new(&digest, &timeline);
    assert_eq!(gantt.total_lanes, 1);
    assert_eq!(gantt.attempts, 1_000_000);
    assert_eq!(gantt.bars.len(), 3, "{:?}", gantt.bars);
}

/// An elastic pilot's allocations: asked for and ended, with why, in one row each.
#[test]
fn allocations_are_listed_with_why_they_were_asked_for_and_ended() {
    let allocation = |id: u64, ended: bool, reason: &str, seconds: f64| Record::Allocation {
        allocation: id,
        job_id: 100 + id as u32,
        nodes: 2,
        first_node: 2 * id as u32,
        ended,
        reason: reason.into(),
        unix_us: at(seconds).unix_micros(),
    };
    let digest = fold(&[
        allocation(0, false, "600 queued tasks and no node", 0.0),
        allocation(1, false, "more work", 5.0),
        allocation(0, true, "idle for 5s with nothing queued", 60.0),
    ]);
    assert_eq!(digest.allocations.len(), 2);
    let first = &digest.allocations[0];
    assert_eq!((first.job_id, first.first_node), (100, 0));
    assert_eq!(first.ended_us, Some(at(60.0).unix_micros()));
    assert_eq!(
        first.ended.as_deref(),
        Some("idle for 5s with nothing queued")
    );
    assert_eq!(digest.allocations[1].ended, None);
    let context = crate::report::page::Context {
        dir: "/d".into(),
        generated: at(0.0),
        live: None,
    };
    let html = crate::report::render(&digest, &context).unwrap();
    assert!(html.contains("<td class=\"l\">600 queued tasks and no node</td>"));
    assert!(html.contains("<td>1m00s</td>"), "held for a minute");
}

#[test]
fn each_takeover_is_listed_with_what_the_new_root_adopted() {
    let adoption = saker_client::AdoptionStatus {
        adopted: 64,
        ended_away: 3,
        refused: 2,
        missing_nodes: 1,
        waited_ms: 5000,
        delivered: 7,
    };
    let digest = fold(&[Record::Reconciled {
        term: 2,
        adoption,
        unix_us: at(30.0).unix_micros(),
    }]);
    assert_eq!(digest.takeovers.len(), 1);
    assert_eq!(digest.takeovers[0].adoption, adoption);
    let context = crate::report::page::Context {
        dir: "/d".into(),
        generated: at(0.0),
        live: None,
    };
    let html = crate::report::render(&digest, &context).unwrap();
    assert!(html.contains("<h2>Takeovers and resumes</h2>"));
    assert!(
        html.contains(
            "<td>2</td><td>64</td><td>3</td><td>7</td><td>2</td><td>1</td><td>5000 ms</td>"
        ),
        "{}",
        &html[html.find("takeovers").unwrap()..][..600]
    );
}

#[test]
fn numbers_in_reasons_are_taken_out_but_not_from_names() {
    assert_eq!(
        normalise("agent 12 on node001 lost: 3 bytes"),
        "agent N on node001 lost: N bytes"
    );
    assert_eq!(normalise("exit 1"), "exit N");
}

/// The page's size does not grow with the task count: a million attempts of about a
/// second on 64 nodes × 16 slots, 1 % failed at random, stay under 3 MiB (the perf
/// row measures one node; this is the many-lane case).
#[test]
fn a_million_attempts_on_many_nodes_make_a_page_under_3_mib() {
    let mut records = vec![submit(1, 1, 1_000_000, 1)];
    for node in 0..64 {
        records.push(joined(node, &format!("node{node:03}"), 16, 0.0));
    }
    let mut digest = fold(&records);
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // Each slot runs its tasks back to back: 977 tasks of 0.5–1.5 s.
    let mut end_max = 0;
    for node in 0..64u32 {
        for executor in 0..16u16 {
            let mut at = T0;
            for _ in 0..977 {
                let length = 500_000 + random() % 1_000_000;
                let failed = random() % 100 == 0;
                digest.spans.push(Span {
                    start_us: at,
                    end_us: at + length,
                    node,
                    cores: 1,
                    executor,
                    kind: if failed {
                        SpanKind::Failed
                    } else {
                        SpanKind::Succeeded
                    },
                });
                at += length + 2_000;
            }
            end_max = end_max.max(at);
        }
    }
    digest.succeeded = digest.spans.len() as u64;
    digest.first_submit_us = Some(T0);
    digest.last_end_us = Some(end_max);
    for histogram in &mut digest.stages {
        histogram.record(1_000).unwrap();
    }
    let context = crate::report::page::Context {
        dir: "/d".into(),
        generated: at(0.0),
        live: None,
    };
    let html = crate::report::render(&digest, &context).unwrap();
    if let Ok(path) = std::env::var("SAKER_REPORT_SAMPLE") {
        std::fs::write(path, &html).unwrap();
    }
    assert!(html.len() < 3 << 20, "{} bytes", html.len());
    // 64 nodes, two to a row: 32 rows, every one with a node in it.
    assert!(
        html.contains("node060 #60 … node061 #61"),
        "rows name their nodes"
    );
    assert!(!html.contains("\n… node"), "no row without nodes");
    eprintln!("{} attempts: {} bytes", digest.spans.len(), html.len());
}
