//! `GangRuns` on its own: each member of an HPC job's attempt gets its part; the parts
//! are gathered and the attempt ends whole, once; the first failure stops the rest;
//! the leader's launches are relayed to members.

use saker_core::TerminalState;
use saker_wire::messages::{
    Assignment, GangLaunch, GangLaunchEnded, PmiFence, ProcessEnd, ResultBody,
};

use super::GangRuns;
use crate::actor::results::Results;
use crate::actor::submissions::Submissions;
use crate::actor::testing::*;

/// A gang of `ranks` ranks per node on nodes 1 and 2 (two cores each), dispatched and
/// sent: the owners, and the attempt's (task, attempt).
struct Gang {
    owned: Owned,
    submissions: Submissions,
    results: Results,
    gangs: GangRuns,
    task: TaskId,
    attempt: AttemptId,
}

fn gang(edit: impl FnOnce(&mut TaskSpec)) -> Gang {
    let mut owned = Owned::new();
    owned.add_node(1, 2);
    owned.add_node(2, 2);
    let mut submissions = Submissions::new(None, false);
    let mut request = single(&["./solver"]);
    request.spec.nodes = 2;
    edit(&mut request.spec);
    accept(&mut owned, &mut submissions, vec![request]);
    let mut dispatches = owned.dispatches();
    assert_eq!(dispatches.len(), 1, "one gang dispatch: {dispatches:?}");
    let dispatch = dispatches.remove(0);
    assert_eq!(dispatch.members, [NodeId(1), NodeId(2)]);
    let assignment = dispatch.assignments[0];
    let mut gangs = GangRuns::default();
    send_gang(&mut owned, &submissions, &mut gangs, dispatch);
    Gang {
        owned,
        submissions,
        results: Results::default(),
        gangs,
        task: assignment.task,
        attempt: assignment.attempt,
    }
}

/// Sends each member its part, as the router does.
fn send_gang(
    owned: &mut Owned,
    submissions: &Submissions,
    gangs: &mut GangRuns,
    dispatch: saker_core::Dispatch,
) {
    let first = dispatch.assignments[0];
    let def = submissions.definition(first.job).expect("a job in flight");
    let hosts = dispatch
        .members
        .iter()
        .map(|node| owned.nodes.hostname(*node))
        .collect();
    let parts = gangs.start(
        first.task,
        first.attempt,
        dispatch.members.clone(),
        hosts,
        def.hpc,
        "", // fences through the root, which these tests drive
    );
    let task = Assignment {
        task: first.task,
        attempt: first.attempt,
        job: first.job,
        index: 0,
    };
    for (node, part) in dispatch.members.into_iter().zip(parts) {
        owned
            .nodes
            .dispatch(&mut owned.ctx, node, vec![task], Some(part), |_| {
                Some(Arc::clone(&def))
            });
    }
}

impl Gang {
    /// `node`'s part ended with `outcome`, its process(es) likewise; whether the
    /// attempt was a gang in flight. Once every part is in, the gang's outcome is
    /// settled, as the router does.
    fn part(&mut self, node: u32, outcome: Outcome) -> bool {
        self.part_ended_at(
            node,
            outcome,
            UNIX_ORIGIN_US + 1_000 + u64::from(node),
            false,
        )
    }

    /// As [`Gang::part`], its process having ended at `ended` (µs since the epoch),
    /// after calling `PMI_Abort` if `aborted`.
    fn part_ended_at(&mut self, node: u32, outcome: Outcome, ended: u64, aborted: bool) -> bool {
        let result = TaskResult {
            task: self.task,
            attempt: self.attempt,
            executor: 0,
            outcome: outcome.clone(),
            received_unix_us: UNIX_ORIGIN_US + u64::from(node),
            start_unix_us: UNIX_ORIGIN_US + 100 + u64::from(node),
            end_unix_us: UNIX_ORIGIN_US + 1_000 + u64::from(node),
            fetch_us: 0,
            body: ResultBody::Part {
                stdout: Output {
                    inline: format!("out of {node}").into_bytes(),
                    ..Output::default()
                },
                stderr: Output::default(),
                ends: vec![ProcessEnd {
                    rank: 0,
                    outcome,
                    ended_unix_us: ended,
                    aborted,
                }],
                pmi: None,
            },
        };
        let in_flight = self.gangs.contains(&self.attempt);
        let owned = &mut self.owned;
        let settled = self
            .gangs
            .on_part_result(&mut owned.ctx, &owned.nodes, NodeId(node), result);
        if let Some(settled) = settled {
            self.results.settle(
                &mut owned.ctx,
                settled.task,
                settled.attempt,
                settled.outcome,
                settled.detail,
                settled.note,
            );
        }
        in_flight
    }

    /// How the core ended the task, if it has.
    fn ended(&mut self) -> Option<TerminalState> {
        let submissions = &self.submissions;
        self.owned.finish_tasks(&mut self.results, |job, offset| {
            submissions.facts(job, offset)
        });
        self.results.unjournaled_results().first().map(|r| r.state)
    }
}

#[test]
fn each_member_is_sent_its_part_of_the_attempt() {
    let g = gang(|_| {});
    let sent = g.owned.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let mut ports = Vec::new();
    for (member, (route, message)) in sent.iter().enumerate() {
        let ToAgent::Dispatch(dispatch) = message else {
            panic!("a dispatch: {message:?}");
        };
        assert_eq!(*route, member as u32 + 1);
        assert_eq!(dispatch.jobs.len(), 1, "with the job's definition");
        assert_eq!(dispatch.tasks[0].attempt, g.attempt);
        let part = dispatch.gang.as_ref().expect("a gang part");
        assert_eq!(part.member, member as u32);
        assert_eq!(part.nodes, [NodeId(1), NodeId(2)]);
        assert_eq!(part.hosts, ["host1", "host2"]);
        ports.push(part.port);
    }
    assert_eq!(ports[0], ports[1], "one rendezvous port");
    for node in [1, 2] {
        let entry = g.owned.nodes.get(NodeId(node)).expect("live");
        assert_eq!(entry.busy(), 1);
        assert!(g.owned.nodes.knows(NodeId(node), JobId(1)));
    }
    assert_eq!(g.owned.nodes.holders(JobId(1)), [NodeId(1), NodeId(2)]);
    assert!(g.gangs.contains(&g.attempt));
}

#[test]
fn the_attempt_ends_whole_once_every_members_part_is_in() {
    let mut g = gang(|spec| spec.ranks_per_node = Some(2));
    g.owned.sent();
    assert!(g.part(2, Outcome::Exited { code: 0 }));
    assert!(
        g.part(2, Outcome::Exited { code: 0 }),
        "a repeat is dropped"
    );
    assert!(
        g.part(3, Outcome::Exited { code: 3 }),
        "not a member: dropped"
    );
    assert_eq!(g.ended(), None, "the leader's part is still out");
    assert!(g.gangs.contains(&g.attempt));
    assert!(g.owned.sent().is_empty(), "nothing stopped");
    assert!(g.part(1, Outcome::Exited { code: 0 }));
    assert!(!g.gangs.contains(&g.attempt), "settled");
    assert_eq!(g.ended(), Some(TerminalState::Succeeded));
    assert_eq!(g.owned.ctx.core.counts().succeeded, 1);
    let record = &g.results.unjournaled_results()[0];
    assert_eq!(record.node.as_deref(), Some("host1"), "the leader's");
    assert_eq!(record.stdout, "out of 1");
    assert_eq!(
        record.start_time.unwrap().unix_micros(),
        UNIX_ORIGIN_US + 101
    );
    assert_eq!(record.end_time.unix_micros(), UNIX_ORIGIN_US + 1_002);
    let gang = record.gang.as_ref().expect("the gang's record");
    assert_eq!(gang.nodes, ["host1", "host2"]);
    assert_eq!(gang.ranks, 4);
    let ranks: Vec<(u32, &str)> = gang
        .processes
        .iter()
        .map(|process| (process.rank, process.node.as_str()))
        .collect();
    assert_eq!(
        ranks,
        [(0, "host1"), (2, "host2")],
        "ranks fill nodes in order"
    );
    // A part after the end takes the ordinary path.
    assert!(!g.part(1, Outcome::Exited { code: 0 }));
}

#[test]
fn the_first_failed_part_stops_the_others_and_decides_the_outcome() {
    let mut g = gang(|_| {});
    g.owned.sent();
    assert!(g.part(2, Outcome::Exited { code: 3 }));
    let sent = g.owned.sent();
    assert_eq!(
        sent,
        [(
            1,
            ToAgent::Cancel {
                attempts: vec![g.attempt]
            }
        )],
        "the leader's part is stopped"
    );
    assert_eq!(g.ended(), None, "until the stopped part is in");
    assert!(g.part(1, Outcome::Cancelled));
    assert!(g.owned.sent().is_empty(), "stopped once");
    assert_eq!(g.ended(), Some(TerminalState::Failed));
    let record = &g.results.unjournaled_results()[0];
    assert_eq!(record.exit_code, Some(3));
    assert_eq!(record.reason.as_deref(), Some("rank 1: exit 3 (on host2)"));
}

#[test]
fn a_launchers_end_stops_the_members_still_running() {
    let mut g = gang(|spec| spec.mpi = Some(saker_client::spec::MpiKind::Openmpi));
    g.owned.sent();
    assert!(g.part(1, Outcome::Exited { code: 0 }));
    let sent = g.owned.sent();
    assert!(
        matches!(&sent[..], [(2, ToAgent::Cancel { .. })]),
        "the member's daemons stop with the launcher: {sent:?}"
    );
    assert!(g.part(2, Outcome::Cancelled));
    assert_eq!(
        g.ended(),
        Some(TerminalState::Succeeded),
        "the launcher's end"
    );
}

#[test]
fn launches_are_relayed_from_the_leader_to_members_and_back() {
    let mut g = gang(|spec| spec.mpi = Some(saker_client::spec::MpiKind::Openmpi));
    g.owned.sent();
    let launch = |member, launch| GangLaunch {
        attempt: g.attempt,
        member,
        launch,
        command: "orted".into(),
        ranks: None,
    };
    g.gangs
        .relay_launch(&mut g.owned.ctx, &g.owned.nodes, NodeId(1), launch(1, 7));
    assert_eq!(g.owned.sent(), [(2, ToAgent::GangLaunch(launch(1, 7)))]);
    let ended = GangLaunchEnded {
        attempt: g.attempt,
        launch: 7,
        code: 0,
        stdout: b"rank 0\n".to_vec(),
        stderr: Vec::new(),
    };
    g.gangs
        .relay_launch_end(&mut g.owned.ctx, &g.owned.nodes, ended.clone());
    assert_eq!(g.owned.sent(), [(1, ToAgent::GangLaunchEnded(ended))]);
    // Not from the leader, or to no member: answered as failed, to the asker.
    let failed = |launch| GangLaunchEnded {
        attempt: g.attempt,
        launch,
        code: 255,
        stdout: Vec::new(),
        stderr: b"saker: the job's member is gone\n".to_vec(),
    };
    g.gangs
        .relay_launch(&mut g.owned.ctx, &g.owned.nodes, NodeId(2), launch(0, 8));
    assert_eq!(g.owned.sent(), [(2, ToAgent::GangLaunchEnded(failed(8)))]);
    g.gangs
        .relay_launch(&mut g.owned.ctx, &g.owned.nodes, NodeId(1), launch(5, 9));
    assert_eq!(g.owned.sent(), [(1, ToAgent::GangLaunchEnded(failed(9)))]);
}

#[test]
fn a_gang_that_lost_a_member_is_forgotten() {
    let mut g = gang(|_| {});
    let now = g.owned.ctx.now();
    g.gangs.forget_dead_gangs(&g.owned.ctx);
    assert!(g.gangs.contains(&g.attempt), "all members live");
    g.owned.ctx.core.handle_node_lost(NodeId(2), now).unwrap();
    g.gangs.forget_dead_gangs(&g.owned.ctx);
    assert!(!g.gangs.contains(&g.attempt), "the core replays it");
}

#[test]
fn pmi_fences_go_to_every_member_once_each_members_keys_are_in() {
    let mut g = gang(|spec| spec.mpi = Some(saker_client::spec::MpiKind::Pmi));
    g.owned.sent();
    let fence = |member: u32, epoch, key: &str| PmiFence {
        attempt: g.attempt,
        member,
        epoch,
        puts: vec![(key.to_owned(), format!("card-{member}"))],
    };
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(2), fence(1, 0, "b"));
    assert!(
        g.owned.sent().is_empty(),
        "the leader's keys are not in yet"
    );
    // From a node that is not that member, or of another epoch: dropped.
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(2), fence(0, 0, "x"));
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(1), fence(0, 3, "x"));
    assert!(g.owned.sent().is_empty());
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(1), fence(0, 0, "a"));
    let all = PmiFence {
        attempt: g.attempt,
        member: 0,
        epoch: 0,
        puts: vec![("a".into(), "card-0".into()), ("b".into(), "card-1".into())],
    };
    let sent = g.owned.sent();
    assert_eq!(
        sent,
        [
            (1, ToAgent::PmiFenced(all.clone())),
            (2, ToAgent::PmiFenced(all.clone()))
        ],
        "every member's keys, in member order, to every member"
    );
    // The next fence is epoch 1. A member that sends epoch 0 again (it missed the
    // answer: its link broke) hears it again, alone.
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(1), fence(0, 1, "c"));
    assert!(g.owned.sent().is_empty());
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(2), fence(1, 0, "b"));
    assert_eq!(g.owned.sent(), [(2, ToAgent::PmiFenced(all))]);
    let (ctx, nodes) = (&mut g.owned.ctx, &g.owned.nodes);
    g.gangs
        .on_pmi_fence(ctx, nodes, NodeId(2), fence(1, 1, "d"));
    let sent = g.owned.sent();
    assert_eq!(sent.len(), 2);
    assert!(matches!(&sent[0].1, ToAgent::PmiFenced(f) if f.epoch == 1 && f.puts.len() == 2));
}

#[test]
fn of_two_failed_ranks_the_one_that_ended_first_decides_whichever_arrives_first() {
    // Rank 1 (node 2) crashed; rank 0 (node 1) exited non-zero after it, but its
    // part's result reached the root first.
    let mut g = gang(|_| {});
    g.owned.sent();
    let at = |ms: u64| UNIX_ORIGIN_US + ms * 1_000;
    assert!(g.part_ended_at(1, Outcome::Exited { code: 9 }, at(5), false));
    assert!(g.part_ended_at(2, Outcome::Signaled { signal: 11 }, at(2), false));
    assert_eq!(g.ended(), Some(TerminalState::Failed));
    let record = &g.results.unjournaled_results()[0];
    assert_eq!(record.signal, Some(11));
    assert_eq!(
        record.reason.as_deref(),
        Some("rank 1: killed by signal 11 (on host2)")
    );

    // A rank's MPI_Abort decides only when nothing else failed, even if it ended
    // first (a rank's error handler often aborts on a failed peer).
    let mut g = gang(|_| {});
    g.owned.sent();
    assert!(g.part_ended_at(1, Outcome::Exited { code: 7 }, at(1), true));
    assert!(g.part_ended_at(2, Outcome::Exited { code: 3 }, at(4), false));
    assert_eq!(g.ended(), Some(TerminalState::Failed));
    let record = &g.results.unjournaled_results()[0];
    assert_eq!(record.reason.as_deref(), Some("rank 1: exit 3 (on host2)"));
}
