//! This node's parts of gang attempts.

use saker_wire::messages::{
    Dispatch, FromAgent, GangLaunch, GangPart, Hpc, LauncherKind, MpiKind, NodeId, ProcessEnd,
    ResultBody, TaskResult,
};

use super::*;

/// Job `job`, a gang needing `cores` cores on each member, laid out as `hpc`.
pub(super) fn gang_job(job: u32, cores: u32, hpc: Option<Hpc>) -> Arc<JobDef> {
    let mut def = job_def(job, cores);
    def.placement = Placement::Gang { nodes: 2 };
    def.hpc = hpc;
    Arc::new(def)
}

pub(super) fn hpc(ranks: u32, ranks_per_node: u32, mpi: MpiKind) -> Hpc {
    Hpc {
        ranks,
        ranks_per_node,
        cores_per_rank: 1,
        mpi,
        launcher: LauncherKind::Agents,
    }
}

/// This node as `member` of a gang of `members` nodes on distinct hosts.
pub(super) fn member(member: u32, members: u32) -> GangPart {
    GangPart {
        member,
        nodes: (0..members).map(NodeId).collect(),
        hosts: (0..members).map(|m| format!("host{m}")).collect(),
        port: 29_500,
        hub: String::new(),
    }
}

/// The root sends this node its part of gang attempt `task * 10` of `job`.
pub(super) fn take(board: &mut Board, job: Arc<JobDef>, task_id: u64, gang: GangPart, now: Moment) {
    let dispatch = Dispatch {
        tasks: vec![task(task_id, job.job.0)],
        jobs: vec![job],
        forget: Vec::new(),
        gang: Some(gang),
        durable: 0,
    };
    board.handle_dispatch(dispatch, now);
}

pub(super) fn process_of(start: &Start) -> &PartProcess {
    match &start.run {
        Run::Part { process, .. } => process,
        Run::Task { .. } => panic!("a task, not a part's process: {start:?}"),
    }
}

pub(super) fn own_process(effect: &Effect) -> &PartProcess {
    match effect {
        Effect::RunOwn { process, .. } => process,
        other => panic!("not a process on its own thread: {other:?}"),
    }
}

pub(super) fn exit(code: i32) -> Finished {
    Finished {
        outcome: Outcome::Exited { code },
        ..exited()
    }
}

/// The one result of a part, with how each of its processes ended.
pub(super) fn part_result(board: &mut Board) -> (TaskResult, Vec<ProcessEnd>) {
    let report = board.take_report();
    let [result] = report.results.as_slice() else {
        panic!("one result: {:?}", report.results);
    };
    let ResultBody::Part { ends, .. } = &result.body else {
        panic!("a part's result: {result:?}");
    };
    (result.clone(), ends.clone())
}

#[test]
fn a_part_holds_its_resources_and_runs_its_ranks_ahead_of_queued_tasks() {
    let mut board = board(4);
    board.queue.extend([queued(1, 1)]);
    // One rank per node by default: member 1 runs rank 1, holding both cores.
    take(&mut board, gang_job(5, 2, None), 5, member(1, 2), at(0));
    let first: [Effect; 1] = effects(&mut board).try_into().unwrap();
    let [Effect::WriteHostfile { plan }] = first else {
        panic!("a hostfile first: {first:?}");
    };
    assert_eq!((plan.hpc.ranks, plan.gang.member), (2, 1));
    assert!(!plan.shared_machine);
    assert_eq!(board.free.core_count(), 2, "held from its arrival");
    let started = board.take_report().started;
    assert_eq!(
        (started[0].attempt, started[0].executor),
        (AttemptId(50), u32::MAX)
    );
    let rank = start(&mut board, 0, at(1)).unwrap();
    assert_eq!(
        process_of(&rank),
        &PartProcess {
            attempt: AttemptId(50),
            number: 0,
            kind: ProcessKind::Rank { rank: 1, local: 0 }
        }
    );
    assert_eq!(task_of(&start(&mut board, 1, at(1)).unwrap()), task(1, 1));
    assert_eq!(board.free.core_count(), 1, "the rank holds nothing more");
    assert!(finish(&mut board, 0, 0, AttemptId(50), exit(0), at(2)).is_none());
    assert_eq!(
        effects(&mut board),
        [Effect::PartEnded {
            attempt: AttemptId(50)
        }]
    );
    let (result, ends) = part_result(&mut board);
    assert_eq!(result.outcome, Outcome::Exited { code: 0 });
    assert_eq!(
        (result.start_unix_us, result.end_unix_us),
        (at(0).unix_us, at(2).unix_us)
    );
    assert_eq!(ends.len(), 1);
    assert_eq!(board.free.core_count(), 3, "its cores are back");
}

#[test]
fn the_first_failed_rank_stops_the_others_and_fails_the_part() {
    let mut board = board(4);
    take(
        &mut board,
        gang_job(5, 3, Some(hpc(3, 3, MpiKind::None))),
        5,
        member(0, 1),
        at(0),
    );
    effects(&mut board);
    let first = start(&mut board, 0, at(1)).unwrap();
    let second = start(&mut board, 1, at(1)).unwrap();
    assert_eq!(
        (process_of(&first).number, process_of(&second).number),
        (0, 1)
    );
    // Rank 1 fails: rank 0 is stopped, rank 2 never starts.
    assert!(finish(&mut board, 1, 0, AttemptId(50), exit(3), at(2)).is_none());
    assert_eq!(
        effects(&mut board),
        [Effect::Cancel {
            slot: 0,
            attempt: AttemptId(50)
        }]
    );
    assert!(board.take_report().results.is_empty(), "rank 0 still runs");
    let killed = Finished {
        outcome: Outcome::Cancelled,
        ..exited()
    };
    finish(&mut board, 0, 0, AttemptId(50), killed, at(3));
    let (result, ends) = part_result(&mut board);
    assert_eq!(
        result.outcome,
        Outcome::Exited { code: 3 },
        "the first failure"
    );
    let ranks: Vec<u32> = ends.iter().map(|end| end.rank).collect();
    assert_eq!(ranks, [1, 0]);
}

#[test]
fn a_leader_of_an_mpi_gang_opens_its_endpoint_and_ends_with_its_launcher() {
    let mut board = board(2);
    take(
        &mut board,
        gang_job(5, 2, Some(hpc(4, 2, MpiKind::Openmpi))),
        5,
        member(0, 2),
        at(0),
    );
    let effects = effects(&mut board);
    assert_eq!(
        effects[1],
        Effect::OpenEndpoint {
            attempt: AttemptId(50),
            members: 2
        }
    );
    // The launcher waits on its daemons: on a thread of its own, never on a slot.
    assert_eq!(own_process(&effects[0]).kind, ProcessKind::Launcher);
    assert!(board.has_part(AttemptId(50)));
    assert!(start(&mut board, 0, at(1)).is_none(), "no slot taken");
    board.handle_own_ended(AttemptId(50), 0, exit(0), at(2));
    assert!(!board.has_part(AttemptId(50)));
    assert_eq!(
        part_result(&mut board).0.outcome,
        Outcome::Exited { code: 0 }
    );
}

/// A leader whose endpoint cannot be opened fails its part, as its own failure, once
/// its launcher is stopped.
#[test]
fn a_leader_without_its_endpoint_fails_its_part() {
    let mut board = board(2);
    take(
        &mut board,
        gang_job(5, 2, Some(hpc(4, 2, MpiKind::Mpich))),
        5,
        member(0, 2),
        at(0),
    );
    effects(&mut board);
    board.handle_part_failed(AttemptId(50), "cannot open it".into(), at(1));
    assert_eq!(
        effects(&mut board),
        [Effect::StopOwn {
            attempt: AttemptId(50)
        }]
    );
    board.handle_own_ended(AttemptId(50), 0, exit(137), at(2));
    assert_eq!(
        part_result(&mut board).0.outcome,
        Outcome::SpawnFailed {
            reason: "cannot open it".into()
        }
    );
}

#[test]
fn a_member_runs_the_daemons_its_leader_asks_for_and_reports_their_ends() {
    let mut board = board(2);
    take(
        &mut board,
        gang_job(5, 2, Some(hpc(4, 2, MpiKind::Openmpi))),
        5,
        member(1, 2),
        at(0),
    );
    assert!(effects(&mut board).is_empty(), "no endpoint, no hostfile");
    assert!(start(&mut board, 0, at(0)).is_none(), "nothing to run yet");
    board.handle_gang_launch(GangLaunch {
        attempt: AttemptId(50),
        member: 1,
        launch: 1,
        command: "orted --x".into(),
        ranks: None,
    });
    let daemon = start(&mut board, 0, at(1)).unwrap();
    assert_eq!(
        process_of(&daemon).kind,
        ProcessKind::Daemon {
            command: "orted --x".into()
        }
    );
    finish(&mut board, 0, 0, AttemptId(50), exit(0), at(2));
    // The daemon's end goes to the leader; the part lasts until the root stops it.
    let messages = report_at(&mut board, at(2));
    let FromAgent::GangLaunchEnded(ended) = &messages[0] else {
        panic!("{messages:?}");
    };
    assert_eq!(
        (ended.attempt, ended.launch, ended.code),
        (AttemptId(50), 1, 0)
    );
    assert!(board.has_part(AttemptId(50)));
    board.handle_cancel(AttemptId(50), at(3));
    assert_eq!(
        effects(&mut board),
        [Effect::PartEnded {
            attempt: AttemptId(50)
        }]
    );
    assert_eq!(part_result(&mut board).0.outcome, Outcome::Cancelled);
    // A launch for the ended part is answered at once, failed.
    board.handle_gang_launch(GangLaunch {
        attempt: AttemptId(50),
        member: 1,
        launch: 2,
        command: "orted".into(),
        ranks: None,
    });
    assert_eq!(board.parts.launch_ends[0].code, 255);
}

#[test]
fn a_part_that_does_not_fit_is_lost_and_one_with_no_rank_here_ends_at_once() {
    let mut board = board(2);
    take(&mut board, gang_job(5, 3, None), 5, member(0, 2), at(0));
    let (lost, _) = part_result(&mut board);
    assert!(
        matches!(&lost.outcome, Outcome::Lost { reason } if reason.starts_with("gang part needs")),
        "{lost:?}"
    );
    assert_eq!(board.free.core_count(), 2);
    // Two ranks on three nodes, one per node: member 2 has none.
    take(
        &mut board,
        gang_job(6, 1, Some(hpc(2, 1, MpiKind::None))),
        6,
        member(2, 3),
        at(1),
    );
    let (done, ends) = part_result(&mut board);
    assert_eq!(
        (done.attempt, done.outcome),
        (AttemptId(60), Outcome::Exited { code: 0 })
    );
    assert!(ends.is_empty());
    assert_eq!(board.free.core_count(), 2);
}

#[test]
fn stopping_everything_cancels_every_part_in_order() {
    let mut board = board(4);
    take(&mut board, gang_job(6, 1, None), 6, member(1, 2), at(0));
    take(&mut board, gang_job(5, 1, None), 5, member(1, 2), at(0));
    let running = start(&mut board, 0, at(1)).unwrap();
    assert_eq!(running.attempt, AttemptId(60), "in arrival order");
    effects(&mut board);
    board.handle_stop_all(at(2));
    assert_eq!(
        effects(&mut board),
        [
            Effect::PartEnded {
                attempt: AttemptId(50)
            },
            Effect::Cancel {
                slot: 0,
                attempt: AttemptId(60)
            },
        ],
        "the queued part ends at once; the running one when its rank has"
    );
    finish(&mut board, 0, 0, AttemptId(60), exit(137), at(3));
    let results: Vec<(AttemptId, Outcome)> = board
        .take_report()
        .results
        .into_iter()
        .map(|r| (r.attempt, r.outcome))
        .collect();
    assert_eq!(
        results,
        [
            (AttemptId(50), Outcome::Cancelled),
            (AttemptId(60), Outcome::Cancelled)
        ]
    );
}

/// A part's process that its slot's thread could not take (the thread failed) ends
/// lost, and its part with it: it never turns into a task of its own.
#[test]
fn a_part_process_its_slot_could_not_take_ends_lost() {
    let mut board = board(2);
    take(&mut board, gang_job(5, 1, None), 5, member(0, 1), at(0));
    effects(&mut board);
    start(&mut board, 0, at(1)).unwrap();
    board.handle_unstart(0, at(1));
    assert!(board.queue.is_empty());
    let (result, _) = part_result(&mut board);
    assert!(
        matches!(&result.outcome, Outcome::Lost { reason } if reason.contains("slot 0 failed")),
        "{result:?}"
    );
}

/// While no root hears the node, a gang's part runs on and is listed in the next hello
/// with its gang, running and then ended; its launch requests and daemon ends wait for
/// the next root, and the part is forgotten once its result is durable.
#[test]
fn a_part_runs_on_while_away_and_the_next_hello_lists_it_with_its_gang() {
    let mut board = board(2);
    take(
        &mut board,
        gang_job(5, 2, Some(hpc(4, 2, MpiKind::Openmpi))),
        5,
        member(0, 2),
        at(0),
    );
    let launcher = effects(&mut board);
    assert_eq!(own_process(&launcher[0]).kind, ProcessKind::Launcher);
    board.take_report();

    board.handle_parent_lost();
    assert_eq!(effects(&mut board), [], "nothing of the part is stopped");
    assert!(board.has_part(AttemptId(50)));
    let launch = GangLaunch {
        attempt: AttemptId(50),
        member: 1,
        launch: 1,
        command: "orted".to_owned(),
        ranks: None,
    };
    board.hold_launch(launch.clone());
    let listed = |ended| Held {
        attempt: AttemptId(50),
        task: TaskId(5),
        started_unix_us: at(0).unix_us,
        ended,
        gang: Some(member(0, 2)),
    };
    assert_eq!(board.held(), [listed(false)]);
    assert!(report_at(&mut board, at(2)).is_empty(), "nothing goes up");

    board.handle_own_ended(AttemptId(50), 0, exit(0), at(3));
    assert!(!board.has_part(AttemptId(50)));
    assert_eq!(board.held(), [listed(true)], "ended, still with its gang");

    board.handle_new_life();
    let sent = report_at(&mut board, at(4));
    assert_eq!(sent[0], FromAgent::GangLaunch(launch), "{sent:?}");
    let Some(FromAgent::Report(report)) = sent.last() else {
        panic!("a report last: {sent:?}");
    };
    assert_eq!(report.results[0].attempt, AttemptId(50));
    board.handle_sent(report.clone());
    board.handle_durable(report.seq);
    assert!(board.parts.ended.is_empty(), "forgotten once durable");
}

/// A part whose job reads an item: nothing of it starts, not even a daemon its leader
/// asks for, until the item is here; then all does. One whose item cannot be had
/// fails, naming it.
#[test]
fn a_part_starts_nothing_until_the_items_its_job_reads_are_here() {
    let mut board = board(2);
    let mut def = (*gang_job(5, 2, Some(hpc(4, 2, MpiKind::Openmpi)))).clone();
    def.reads = vec!["table".into()];
    take(&mut board, Arc::new(def), 5, member(1, 2), at(0));
    let first: [Effect; 1] = effects(&mut board).try_into().unwrap();
    let [Effect::CheckPartItems { plan }] = first else {
        panic!("the part asks what it lacks first");
    };
    assert_eq!(plan.assignment.attempt, AttemptId(50));
    board.handle_gang_launch(GangLaunch {
        attempt: AttemptId(50),
        member: 1,
        launch: 1,
        command: "orted".into(),
        ranks: None,
    });
    assert!(start(&mut board, 0, at(1)).is_none(), "held back");
    board.handle_part_items_checked(AttemptId(50), Some("table".into()));
    assert_eq!(board.fetches.outbox.len(), 1, "the item is asked for");
    assert!(start(&mut board, 0, at(1)).is_none(), "still held back");
    let data = saker_wire::ItemData {
        item: "table".into(),
        reader: NodeId(1),
        request: 1,
        offset: 0,
        total: 3,
        data: vec![1, 2, 3],
        error: None,
    };
    assert!(board.handle_item_data(&data, at(2)));
    board.handle_item_written("table", 3, Ok(()), at(2));
    assert!(matches!(
        effects(&mut board).as_slice(),
        [Effect::KeepItem { .. }]
    ));
    board.handle_item_kept("table", Ok(()), at(2));
    let again: [Effect; 1] = effects(&mut board).try_into().unwrap();
    let [Effect::CheckPartItems { .. }] = again else {
        panic!("the part looks again at what it reads");
    };
    board.handle_part_items_checked(AttemptId(50), None);
    let daemon = start(&mut board, 0, at(3)).unwrap();
    assert_eq!(
        process_of(&daemon).kind,
        ProcessKind::Daemon {
            command: "orted".into()
        }
    );

    // Ranks of another job wait for an item no node has: the part fails.
    let mut board = super::board(2);
    let mut def = (*gang_job(6, 2, None)).clone();
    def.reads = vec!["ghost".into()];
    take(&mut board, Arc::new(def), 6, member(1, 2), at(0));
    effects(&mut board);
    board.handle_part_items_checked(AttemptId(60), Some("ghost".into()));
    let nobody = saker_wire::ItemData {
        error: Some("no live node holds it".into()),
        ..data
    };
    let nobody = saker_wire::ItemData {
        item: "ghost".into(),
        data: Vec::new(),
        total: 0,
        ..nobody
    };
    board.handle_item_data(&nobody, at(2));
    assert!(start(&mut board, 0, at(2)).is_none(), "no rank starts");
    let (result, ends) = part_result(&mut board);
    let Outcome::SpawnFailed { reason } = &result.outcome else {
        panic!("{result:?}");
    };
    assert!(
        reason.contains("ghost") && reason.contains("no live node holds it"),
        "{reason}"
    );
    assert!(ends.is_empty());
    assert_eq!(board.free.core_count(), 2, "its cores are back");
}
