//! `Nodes` on its own: who is live and through which link, what each node is sent of
//! the jobs' definitions (once, and again after it may have lost them), and what it
//! is told to forget or to replace.

use saker_wire::messages::{Assignment, Command, Dispatch, JobDef, Payload};

use super::{FORGET_BATCH, Joining, Nodes};
use crate::actor::testing::*;

fn joining(node: u32, cores: u32) -> Joining {
    Joining {
        link: LinkId(u64::from(node)),
        hostname: format!("host{node}"),
        scratch: String::new(),
        data_addr: String::new(),
        capacity: Resources::cores(cores),
        hosts_actors: false,
    }
}

/// A job's definition whose function payload is `bytes` long.
fn def(job: u32, bytes: usize) -> Arc<JobDef> {
    let payload = if bytes == 0 {
        Payload::Command(Command {
            argv: vec!["true".into()],
            env: Vec::new(),
            cwd: None,
        })
    } else {
        Payload::Function(saker_wire::messages::Function {
            kind: "python".into(),
            data: vec![7; bytes],
        })
    };
    Arc::new(JobDef {
        job: JobId(job),
        payload,
        resources: Resources::cores(1),
        placement: saker_core::Placement::Single,
        hpc: None,
        time_limit_ms: 0,
        inline_output_bytes: 0,
        is_array: false,
        reads: Vec::new(),
        writes: Vec::new(),
    })
}

fn task(task: u64, job: u32) -> Assignment {
    Assignment {
        task: TaskId(task),
        attempt: AttemptId(task),
        job: JobId(job),
        index: 0,
    }
}

/// The dispatches sent since the last look, as (node, dispatch).
fn dispatches(owned: &Owned) -> Vec<(u32, Dispatch)> {
    owned
        .sent()
        .into_iter()
        .map(|(node, message)| match message {
            ToAgent::Dispatch(dispatch) => (node, dispatch),
            other => panic!("not a dispatch: {other:?}"),
        })
        .collect()
}

#[test]
fn a_node_is_live_only_through_the_link_it_joined_over() {
    let mut nodes = Nodes::default();
    nodes.join(NodeId(1), joining(1, 2));
    assert!(nodes.is_live(NodeId(1), LinkId(1)));
    assert!(!nodes.is_live(NodeId(1), LinkId(2)), "a stale copy's link");
    assert!(!nodes.is_live(NodeId(2), LinkId(1)), "not a node of it");
    assert_eq!(nodes.hostname(NodeId(1)), "host1");
    assert_eq!(nodes.hostname(NodeId(9)), "node-9", "a stand-in once gone");
    let lost = nodes.lose(NodeId(1)).expect("it was live");
    assert_eq!(lost.hostname(), "host1");
    assert!(nodes.lose(NodeId(1)).is_none(), "lost once");
    assert!(!nodes.contains(NodeId(1)));
}

#[test]
fn a_newer_link_of_a_node_supersedes_the_older_and_a_link_down_names_its_nodes() {
    let mut owned = Owned::new();
    let (tx, _rx) = saker_actors::link::channel();
    owned
        .nodes
        .link_up(&mut owned.ctx, LinkId(10), tx, Some(NodeId(3)));
    let (tx, _rx) = saker_actors::link::channel();
    owned
        .nodes
        .link_up(&mut owned.ctx, LinkId(11), tx, Some(NodeId(3)));
    assert_eq!(
        owned.port.with(|r| r.superseded.clone()),
        [(LinkId(10), NodeId(3))],
        "the older copy is told to stop"
    );
    // Nodes 5 and 4 joined through link 11 (4 relayed by 3's agent), 6 elsewhere.
    for (node, link) in [(5, 11), (4, 11), (6, 12)] {
        let mut joining = joining(node, 1);
        joining.link = LinkId(link);
        owned.nodes.join(NodeId(node), joining);
    }
    assert_eq!(
        owned.nodes.link_down(&mut owned.ctx, LinkId(11)),
        [NodeId(4), NodeId(5)],
        "in id order, for the router to lose"
    );
    assert!(owned.nodes.link_down(&mut owned.ctx, LinkId(10)).is_empty());
}

#[test]
fn a_definition_goes_to_a_node_once_with_the_first_of_its_tasks_there() {
    let mut owned = Owned::new();
    owned.add_node(1, 4);
    owned.add_node(2, 4);
    let mut asked = Vec::new();
    let mut definition = |job: JobId| {
        asked.push(job);
        Some(def(job.0, 0))
    };
    let nodes = &mut owned.nodes;
    nodes.dispatch(
        &mut owned.ctx,
        NodeId(1),
        vec![task(1, 1), task(2, 1), task(3, 2)],
        None,
        &mut definition,
    );
    nodes.dispatch(
        &mut owned.ctx,
        NodeId(1),
        vec![task(4, 1)],
        None,
        &mut definition,
    );
    nodes.dispatch(
        &mut owned.ctx,
        NodeId(2),
        vec![task(5, 1)],
        None,
        &mut definition,
    );
    assert_eq!(asked, [JobId(1), JobId(2), JobId(1)], "once a node");
    let sent = dispatches(&owned);
    let jobs: Vec<(u32, Vec<u32>, usize)> = sent
        .iter()
        .map(|(node, d)| {
            (
                *node,
                d.jobs.iter().map(|j| j.job.0).collect(),
                d.tasks.len(),
            )
        })
        .collect();
    assert_eq!(jobs, [(1, vec![1, 2], 3), (1, vec![], 1), (2, vec![1], 1)]);
    assert_eq!(owned.nodes.holders(JobId(1)), [NodeId(1), NodeId(2)]);
    assert_eq!(owned.nodes.get(NodeId(1)).unwrap().busy(), 4);
    owned.nodes.attempt_ended(NodeId(1));
    assert_eq!(owned.nodes.get(NodeId(1)).unwrap().busy(), 3);
    assert!(
        !owned
            .nodes
            .dispatch(&mut owned.ctx, NodeId(9), vec![task(6, 1)], None, |_| None),
        "not a live node"
    );
}

#[test]
fn large_payloads_split_a_dispatch_into_frames_within_the_budget() {
    let mut owned = Owned::new();
    owned.add_node(1, 4);
    let big = saker_wire::messages::FRAME_DATA_BUDGET / 2 + 1;
    let tasks = vec![task(1, 1), task(2, 2), task(3, 3)];
    owned
        .nodes
        .dispatch(&mut owned.ctx, NodeId(1), tasks, None, |job| {
            Some(def(job.0, big))
        });
    let frames: Vec<(Vec<u32>, Vec<u64>)> = dispatches(&owned)
        .into_iter()
        .map(|(_, d)| {
            (
                d.jobs.iter().map(|j| j.job.0).collect(),
                d.tasks.iter().map(|t| t.task.0).collect(),
            )
        })
        .collect();
    assert_eq!(
        frames,
        [(vec![1], vec![1]), (vec![2], vec![2]), (vec![3], vec![3])],
        "each task with its definition, one payload a frame"
    );
}

#[test]
fn a_finished_job_is_forgotten_with_the_next_dispatch_or_in_a_batch_of_its_own() {
    let mut owned = Owned::new();
    owned.add_node(1, 4);
    owned
        .nodes
        .dispatch(&mut owned.ctx, NodeId(1), vec![task(1, 1)], None, |j| {
            Some(def(j.0, 0))
        });
    dispatches(&owned);
    owned.nodes.forget(&mut owned.ctx, JobId(1));
    assert!(owned.sent().is_empty(), "it waits for the next dispatch");
    assert!(owned.nodes.holders(JobId(1)).is_empty());
    assert!(!owned.nodes.knows(NodeId(1), JobId(1)));
    owned
        .nodes
        .dispatch(&mut owned.ctx, NodeId(1), vec![task(2, 2)], None, |j| {
            Some(def(j.0, 0))
        });
    let [(1, dispatch)] = &dispatches(&owned)[..] else {
        panic!("one dispatch");
    };
    assert_eq!(dispatch.forget, [JobId(1)]);
    // A node given no more work is told once many have piled up.
    let jobs = 3..3 + FORGET_BATCH as u32;
    for job in jobs.clone() {
        owned.nodes.dispatch(
            &mut owned.ctx,
            NodeId(1),
            vec![task(u64::from(job), job)],
            None,
            |j| Some(def(j.0, 0)),
        );
    }
    dispatches(&owned);
    for job in jobs {
        owned.nodes.forget(&mut owned.ctx, JobId(job));
    }
    let [(1, dispatch)] = &dispatches(&owned)[..] else {
        panic!("one batch of forgotten jobs");
    };
    assert!(dispatch.tasks.is_empty() && dispatch.jobs.is_empty());
    assert_eq!(dispatch.forget.len(), FORGET_BATCH);
}

#[test]
fn a_new_definition_reaches_only_the_live_nodes_holding_the_old_one() {
    let mut owned = Owned::new();
    for node in [1, 2, 3] {
        owned.add_node(node, 2);
    }
    for node in [1, 3] {
        owned.nodes.dispatch(
            &mut owned.ctx,
            NodeId(node),
            vec![task(u64::from(node), 1)],
            None,
            |j| Some(def(j.0, 0)),
        );
    }
    owned.nodes.lose(NodeId(3));
    dispatches(&owned);
    owned.nodes.redefine(&mut owned.ctx, &def(1, 0));
    let sent: Vec<u32> = dispatches(&owned)
        .into_iter()
        .map(|(node, _)| node)
        .collect();
    assert_eq!(
        sent,
        [1],
        "not node 2, which never held it, nor lost node 3"
    );
    assert_eq!(owned.nodes.holders(JobId(1)), [NodeId(1)]);
}

#[test]
fn a_node_that_may_have_lost_definitions_is_sent_them_again() {
    let mut owned = Owned::new();
    owned.add_node(1, 2);
    let mut sends = 0;
    let mut definition = |job: JobId| {
        sends += 1;
        Some(def(job.0, 0))
    };
    let nodes = &mut owned.nodes;
    nodes.dispatch(
        &mut owned.ctx,
        NodeId(1),
        vec![task(1, 1)],
        None,
        &mut definition,
    );
    nodes.resend_definitions(NodeId(1));
    assert!(nodes.holders(JobId(1)).is_empty());
    nodes.dispatch(
        &mut owned.ctx,
        NodeId(1),
        vec![task(2, 1)],
        None,
        &mut definition,
    );
    assert_eq!(sends, 2);
}

#[test]
fn what_the_nodes_offer_is_the_most_of_each_kind_on_any_one() {
    let mut nodes = Nodes::default();
    assert_eq!(nodes.offered().joined, 0);
    let gpus = saker_core::ResourceKind::GPUS;
    let memory = saker_core::ResourceKind::MEMORY_MIB;
    let mut wide = joining(1, 64);
    wide.capacity = wide.capacity.with(memory, 1024);
    let mut gpu = joining(2, 8);
    gpu.capacity = gpu.capacity.with(gpus, 4).with(memory, 4096);
    nodes.join(NodeId(1), wide);
    nodes.join(NodeId(2), gpu);
    let offered = nodes.offered();
    assert_eq!(offered.joined, 2);
    assert_eq!(
        (
            offered.most.core_count(),
            offered.most.gpu_count(),
            offered.most.memory_mib()
        ),
        (64, 4, 4096)
    );
}
