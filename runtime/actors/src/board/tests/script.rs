//! Parts of jobs of launcher script: the leader's script off the slots, and the
//! ranks of each `saker mpiexec` it runs.

use saker_wire::messages::{
    EnvVar, GangLaunch, GangLaunchEnded, LaunchRanks, LauncherKind, MpiKind,
};

use super::gang::{exit, gang_job, hpc, member, own_process, part_result, process_of, take};
use super::*;

fn script_job() -> Arc<JobDef> {
    let mut layout = hpc(4, 2, MpiKind::Pmi);
    layout.launcher = LauncherKind::Script;
    gang_job(5, 2, Some(layout))
}

/// Launch `launch` of world `world`: `ranks` ranks, `per_node` on each member.
fn launch(launch: u32, world: u32, ranks: u32, per_node: u32) -> GangLaunch {
    GangLaunch {
        attempt: AttemptId(50),
        member: 0,
        launch,
        command: "./ring".into(),
        ranks: Some(LaunchRanks {
            world,
            ranks,
            ranks_per_node: per_node,
            cwd: "/work".into(),
            env: vec![EnvVar {
                key: "OMP_PLACES".into(),
                value: "cores".into(),
            }],
        }),
    }
}

fn said(stdout: &str) -> Finished {
    Finished {
        stdout: Output {
            inline: stdout.as_bytes().to_vec(),
            total_bytes: stdout.len() as u64,
            spill_path: None,
        },
        ..exited()
    }
}

fn launch_ends(board: &mut Board) -> Vec<GangLaunchEnded> {
    std::mem::take(&mut board.parts.launch_ends)
}

#[test]
fn a_script_runs_off_the_slots_and_each_launch_starts_its_ranks_on_them() {
    let mut board = board(2);
    take(&mut board, script_job(), 5, member(0, 2), at(0));
    let effects_now = effects(&mut board);
    // The script waits on the ranks: never on a slot, which they need.
    assert_eq!(own_process(&effects_now[0]).kind, ProcessKind::Script);
    assert_eq!(
        effects_now[1],
        Effect::OpenEndpoint {
            attempt: AttemptId(50),
            members: 2
        }
    );
    assert!(
        start(&mut board, 0, at(1)).is_none(),
        "nothing on a slot yet"
    );

    board.handle_gang_launch(launch(1, 1, 4, 2));
    let opened = effects(&mut board);
    let [
        Effect::OpenPmi {
            launch: Some(plan), ..
        },
    ] = opened.as_slice()
    else {
        panic!("the launch's PMI service first: {opened:?}");
    };
    assert_eq!((plan.number, plan.ranks.world), (1, 1));
    let first = start(&mut board, 0, at(2)).unwrap();
    let second = start(&mut board, 1, at(2)).unwrap();
    let ranks: Vec<_> = [&first, &second]
        .map(|s| match &process_of(s).kind {
            ProcessKind::LaunchRank { rank, local, .. } => (*rank, *local),
            other => panic!("a launch's rank: {other:?}"),
        })
        .into();
    assert_eq!(ranks, [(0, 0), (1, 1)]);

    // A second `saker mpiexec` meanwhile is refused, with why.
    board.handle_gang_launch(launch(2, 2, 4, 2));
    let [refused] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!((refused.launch, refused.code), (2, 255));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("one at a time"));

    // Their outputs go back in rank order, once both have ended.
    finish(&mut board, 1, 0, AttemptId(50), said("r1\n"), at(3));
    assert!(launch_ends(&mut board).is_empty(), "rank 0 runs on");
    finish(&mut board, 0, 0, AttemptId(50), said("r0"), at(4));
    let [ended] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!((ended.launch, ended.code), (1, 0));
    assert_eq!(ended.stdout, b"r0r1\n");
    assert!(board.has_part(AttemptId(50)), "the script runs on");

    board.handle_own_ended(AttemptId(50), 0, said("done\n"), at(5));
    let (result, ends) = part_result(&mut board);
    assert_eq!(result.outcome, Outcome::Exited { code: 0 });
    let ranks: Vec<u32> = ends.iter().map(|end| end.rank).collect();
    assert_eq!(
        ranks,
        [1, 0, 0],
        "the ranks as the world's, then the script"
    );
}

#[test]
fn a_member_refuses_what_its_cores_cannot_hold_and_a_failed_rank_fails_its_part() {
    let mut board = board(2);
    take(&mut board, script_job(), 5, member(1, 2), at(0));
    assert!(
        effects(&mut board).is_empty(),
        "no script, no endpoint here"
    );

    board.handle_gang_launch(launch(1, 1, 6, 3));
    let [refused] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!(refused.code, 255);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds cores for 2"));

    // Two ranks, one a node: this member runs rank 1 alone.
    board.handle_gang_launch(launch(2, 2, 2, 1));
    effects(&mut board);
    let rank = start(&mut board, 0, at(1)).unwrap();
    assert!(matches!(
        process_of(&rank).kind,
        ProcessKind::LaunchRank {
            rank: 1,
            local: 0,
            ..
        }
    ));
    assert!(start(&mut board, 1, at(1)).is_none());
    finish(&mut board, 0, 0, AttemptId(50), exit(3), at(2));
    let [ended] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!((ended.launch, ended.code), (2, 3));
    let (result, ends) = part_result(&mut board);
    assert_eq!(result.outcome, Outcome::Exited { code: 3 });
    assert_eq!(ends[0].rank, 1);
}

#[test]
fn a_script_part_refuses_a_remote_shells_daemon() {
    let mut board = board(2);
    take(&mut board, script_job(), 5, member(1, 2), at(0));
    board.handle_gang_launch(GangLaunch {
        ranks: None,
        ..launch(3, 0, 0, 0)
    });
    let [refused] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!((refused.launch, refused.code), (3, 255));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a remote shell"));
    assert!(start(&mut board, 0, at(1)).is_none(), "nothing started");
}

#[test]
fn a_launch_asks_nothing_of_a_member_past_its_ranks() {
    let mut board = board(2);
    take(&mut board, script_job(), 5, member(1, 2), at(0));
    board.handle_gang_launch(launch(1, 1, 2, 2));
    let [ended] = launch_ends(&mut board).try_into().unwrap();
    assert_eq!((ended.launch, ended.code), (1, 0));
    assert!(effects(&mut board).is_empty(), "no PMI service opened");
}
