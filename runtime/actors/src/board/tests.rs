use super::*;
use crate::process::Stop;
use crate::resources::NodeResources;
use saker_wire::messages::{Command, EnvVar, Payload, Placement, TaskId};

fn board(cores: u32) -> Board {
    let mut board = Board::new(
        7,
        &NodeResources::of_cores(cores),
        cores,
        PathBuf::from("/tmp"),
        0,
    );
    for (job, cores) in [(JobId(1), 1), (JobId(2), 2)] {
        board.jobs.insert(
            job,
            Arc::new(JobDef {
                job,
                payload: Payload::Command(Command {
                    argv: vec!["true".into()],
                    env: vec![EnvVar {
                        key: "K".into(),
                        value: "V".into(),
                    }],
                    cwd: None,
                }),
                resources: Resources::cores(cores),
                placement: Placement::Single,
                hpc: None,
                time_limit_ms: 0,
                inline_output_bytes: 0,
                is_array: false,
                reads: Vec::new(),
                writes: Vec::new(),
            }),
        );
    }
    board
}

/// Task `task` of job `job`, as attempt `task * 10`. (Agent tests use it too.)
pub(crate) fn task(task: u64, job: u32) -> Assignment {
    Assignment {
        task: TaskId(task),
        attempt: AttemptId(task * 10),
        job: JobId(job),
        index: 0,
    }
}

/// [`task`] as queued on the board, received at time 0.
fn queued(task_id: u64, job: u32) -> Queued {
    Queued::new(task(task_id, job), 0)
}

fn exited() -> Finished {
    Finished {
        outcome: Outcome::Exited { code: 0 },
        start_unix_us: 1,
        end_unix_us: 2,
        stdout: Output::default(),
        stderr: Output::default(),
        body: None,
    }
}

#[test]
fn a_finished_slot_starts_the_next_queued_attempt_itself() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    let first = board.start_on(0).expect("a free core");
    assert_eq!(first.attempt, AttemptId(10));
    assert!(board.start_on(0).is_none(), "the slot is busy");
    let second = board
        .finish(0, 0, AttemptId(10), exited())
        .expect("the next one");
    assert_eq!(second.attempt, AttemptId(20));
    let Work::Command(launch) = &second.work else {
        panic!("a command");
    };
    assert!(launch.env_strs().contains(&"SAKER_NODE=7"));
    assert!(
        board.finish(0, 0, AttemptId(20), exited()).is_none(),
        "queue empty"
    );
    let report = board.take_report();
    assert_eq!(report.credit.core_count(), 2);
    assert_eq!(report.started.len(), 2);
    assert_eq!(report.results.len(), 2);
    assert_eq!(board.free.core_count(), 1);
    assert!(!board.has_news());
}

#[test]
fn a_task_needing_what_the_node_does_not_offer_fails_and_blocks_nothing() {
    let mut board = board(2);
    let mut gpu_job = JobDef::clone(&board.jobs[&JobId(1)]);
    gpu_job.job = JobId(3);
    gpu_job.resources = Resources::cores(1).with(ResourceKind::GPUS, 1);
    board.jobs.insert(JobId(3), Arc::new(gpu_job));
    board.queue.extend([queued(1, 3), queued(2, 1)]);
    let started = board.start_on(0).expect("the next task starts");
    assert_eq!(started.attempt, AttemptId(20));
    let report = board.take_report();
    let [failed] = report.results.as_slice() else {
        panic!("one result: {:?}", report.results);
    };
    assert_eq!(failed.task, TaskId(1));
    assert!(
        matches!(&failed.outcome, Outcome::SpawnFailed { reason } if reason.contains("1 GPU")),
        "{:?}",
        failed.outcome
    );
    assert_eq!(
        board.free,
        Resources::cores(1),
        "only the started task holds"
    );
}

#[test]
fn one_slot_at_a_time_keeps_the_report_clock() {
    let gap = std::time::Duration::from_millis(20);
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1), queued(4, 1)]);
    board.start_on(0).unwrap();
    board.start_on(1).unwrap();
    let now = board.last_report;
    // Slot 0's attempt ends within the gap, with work still queued: not due, and
    // slot 0 keeps the clock for the end of the gap.
    board.finish(0, 0, AttemptId(10), exited()).unwrap();
    assert!(!board.report_from_slot(gap, now));
    assert_eq!(board.keep_report_clock(0, 0, gap), Some(now + gap));
    // Slot 1 has news too, but the clock is kept already: no second wake-up.
    board.finish(1, 0, AttemptId(20), exited()).unwrap();
    assert_eq!(board.keep_report_clock(1, 0, gap), None);
    // At the end of the gap the keeper's report is due; once it is sent, nothing
    // is left and the clock is free for whichever slot has news next.
    assert!(board.report_from_slot(gap, now + gap));
    board.take_report();
    assert_eq!(board.keep_report_clock(0, 0, gap), None);
    board.finish(1, 0, AttemptId(40), exited());
    assert_eq!(board.keep_report_clock(1, 0, gap), Some(now + gap));
    // A stale thread (its executor was replaced) keeps nothing; losing the keeper's
    // slot frees the clock.
    assert_eq!(board.keep_report_clock(0, 7, gap), None);
    board.lose_slot(1, "slot failed".into());
    assert_eq!(board.keep_report_clock(0, 0, gap), Some(now + gap));
    // After the goodbye nothing is reported, so nobody keeps the clock.
    board.closed = true;
    assert!(!board.report_from_slot(gap, now + gap));
    assert_eq!(board.keep_report_clock(0, 0, gap), None);
}

#[test]
fn work_that_does_not_fit_waits_and_unknown_jobs_are_lost() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 9), queued(2, 1), queued(3, 2)]);
    // Task 1's job is unknown: lost at once (replayed by the root); task 2 starts.
    assert_eq!(board.start_on(0).unwrap().attempt, AttemptId(20));
    let report = board.take_report();
    assert!(
        matches!(&report.results[0].outcome, Outcome::Lost { reason } if reason == "unknown job 9 on this agent")
    );
    // Task 3 needs both cores: it waits for task 2.
    assert!(board.start_on(1).is_none());
    assert_eq!(
        board.finish(0, 0, AttemptId(20), exited()).unwrap().attempt,
        AttemptId(30)
    );
    assert_eq!(board.free.core_count(), 0);
}

#[test]
fn cancels_answer_queued_work_and_stop_running_work() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    let running = board.start_on(0).unwrap();
    board.cancel(AttemptId(20));
    let report = board.take_report();
    assert_eq!(report.results[0].outcome, Outcome::Cancelled);
    assert_eq!(report.credit.core_count(), 1);
    board.cancel(AttemptId(10));
    assert_eq!(running.control.stopped(), Some(Stop::Cancelled));
    // A stopped attempt still reports; nothing is left to start.
    assert!(board.finish(0, 0, AttemptId(10), exited()).is_none());
}

#[test]
fn a_lost_slot_reports_its_attempt_and_ignores_the_old_runner() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    let running = board.start_on(0).unwrap();
    board.lose_slot(0, "slot failed".into());
    assert_eq!(
        running.control.stopped(),
        Some(Stop::Detached),
        "the handle is gone: killed"
    );
    let report = board.take_report();
    assert!(
        matches!(&report.results[0].outcome, Outcome::Lost { reason } if reason == "slot failed")
    );
    // The old runner's report is dropped and starts nothing.
    assert!(board.finish(0, 0, AttemptId(10), exited()).is_none());
    assert!(board.take_report().results.is_empty());
    // The slot is down until a fresh thread (generation 1) runs it.
    assert!(board.start_on(0).is_none());
    assert_eq!(board.idle_slots().count(), 0);
    board.slot_up(0);
    let next = board.start_on(0).unwrap();
    assert_eq!(next.attempt, AttemptId(20));
    assert!(board.finish(0, 1, AttemptId(20), exited()).is_none());
}

#[test]
fn a_given_up_slot_takes_no_work_and_the_last_one_counts_out() {
    let mut board = board(2);
    board
        .queue
        .extend([queued(1, 1), queued(2, 1), queued(3, 1)]);
    board.lose_slot(0, "slot 0 failed".into());
    assert_eq!(board.give_up_slot(0), 1, "slot 1 is left");
    board.slot_up(0);
    assert_eq!(board.idle_slots().collect::<Vec<_>>(), [1], "not revived");
    assert!(board.start_on(0).is_none());
    assert_eq!(board.start_on(1).unwrap().attempt, AttemptId(10));
    assert!(!board.wants_agent(), "no idle slot for the queued work");
    board.lose_slot(1, "slot 1 failed".into());
    assert_eq!(board.give_up_slot(1), 0);
    assert!(
        matches!(&board.take_report().results[0].outcome, Outcome::Lost { reason } if reason == "slot 1 failed")
    );
}

fn ran_for(micros: u64) -> Finished {
    Finished {
        start_unix_us: 1_000,
        end_unix_us: 1_000 + micros,
        ..exited()
    }
}

#[test]
fn the_prefetch_covers_the_pace_of_recent_attempts_within_bounds() {
    let cover = std::time::Duration::from_millis(10);
    let mut board = board(4);
    assert_eq!(
        board.prefetch(4, 4, cover),
        4,
        "nothing known yet: the floor"
    );
    board.note_run_time(&ran_for(100));
    assert_eq!(
        board.prefetch(4, 4, cover),
        4 * PREFETCH_ROUNDS,
        "0.1 ms tasks: capped"
    );
    board.mean_run_us = Some(5_000.0);
    assert_eq!(board.prefetch(4, 4, cover), 8, "4 cores × 10 ms / 5 ms");
    board.mean_run_us = Some(3_600_000_000.0);
    assert_eq!(board.prefetch(4, 4, cover), 4, "long tasks: the floor");
    // The mean follows new attempts by an eighth of the difference; failures to
    // start and stopped attempts say nothing about the work and are left out.
    board.mean_run_us = Some(8_000.0);
    board.note_run_time(&ran_for(16_000));
    assert_eq!(board.mean_run_us, Some(9_000.0));
    board.note_run_time(&Finished {
        outcome: Outcome::Cancelled,
        ..ran_for(1)
    });
    assert_eq!(board.mean_run_us, Some(9_000.0));
}

#[test]
fn a_resized_window_grants_growth_and_takes_shrinks_out_of_returns() {
    let mut board = board(2);
    board.credit = Resources::ZERO;
    board.window = 4;
    board.resize_window(10);
    assert_eq!(
        board.take_report().credit.core_count(),
        6,
        "growth is granted at once"
    );
    board.resize_window(5);
    board.give_back(Resources::cores(2));
    assert_eq!(
        board.take_report().credit.core_count(),
        0,
        "2 of the 5 owed kept back"
    );
    board.resize_window(7);
    assert_eq!(
        board.take_report().credit.core_count(),
        0,
        "growth first forgives what is owed"
    );
    board.give_back(Resources::cores(3));
    assert_eq!(board.take_report().credit.core_count(), 2, "1 still owed");
    board.reset_credit(2, 2);
    assert_eq!(
        board.take_report().credit.core_count(),
        4,
        "a new life: free cores + prefetch"
    );
    board.give_back(Resources::cores(1));
    assert_eq!(
        board.take_report().credit.core_count(),
        1,
        "and nothing owed"
    );
}

#[test]
fn a_stopping_board_starts_nothing_and_unstart_puts_work_back() {
    let mut board = board(1);
    board.queue.extend([queued(1, 1), queued(2, 1)]);
    board.start_on(0).unwrap();
    board.unstart(0);
    assert_eq!(board.queue.len(), 2);
    assert!(board.take_report().started.is_empty());
    assert_eq!(board.free.core_count(), 1);
    board.start_on(0).unwrap();
    board.accepting = false;
    assert!(board.finish(0, 0, AttemptId(10), exited()).is_none());
    board.stop_all();
    assert!(board.queue.is_empty());
}

/// Function outputs past the frame budget go up in several reports, none lost, each
/// within the budget unless one output alone exceeds it.
#[test]
fn large_outputs_are_split_across_reports() {
    use saker_wire::messages::FRAME_DATA_BUDGET;
    let mut board = Board::new(1, &NodeResources::of_cores(4), 4, PathBuf::from("/tmp"), 4);
    let sizes = [3 << 20, 3 << 20, 3 << 20, FRAME_DATA_BUDGET + 1, 10, 10];
    for (i, size) in sizes.iter().enumerate() {
        board.pending.results.push(TaskResult {
            task: TaskId(i as u64),
            attempt: AttemptId(i as u64),
            executor: 0,
            outcome: Outcome::Exited { code: 0 },
            received_unix_us: 0,
            start_unix_us: 0,
            end_unix_us: 0,
            body: ResultBody::Function {
                output: Some(vec![0; *size]),
            },
        });
    }
    let mut reports = Vec::new();
    while board.has_news() {
        reports.push(board.take_report());
    }
    let tasks: Vec<Vec<u64>> = reports
        .iter()
        .map(|r| r.results.iter().map(|t| t.task.0).collect())
        .collect();
    assert_eq!(tasks, [vec![0, 1], vec![2], vec![3], vec![4, 5]]);
}

/// Only cores are prefetched: GPUs, memory and named resources are granted as far as
/// the node has them free, and come back when the attempt holding them ends; a named
/// resource is granted once the root's welcome numbers it. A GPU task sees its GPU.
#[test]
fn credit_beyond_cores_is_granted_only_as_far_as_the_node_has_it_free() {
    let resources = NodeResources {
        cores: 4,
        cpus: Vec::new(),
        gpus: vec!["7".into(), "9".into()],
        memory_mib: 1000,
        custom: vec![("licence".into(), 3)],
    };
    let mut board = Board::new(1, &resources, 4, PathBuf::from("/tmp"), 4);
    let credit = board.take_report().credit;
    assert_eq!(
        (credit.core_count(), credit.gpu_count(), credit.memory_mib()),
        (4, 2, 1000)
    );
    let licence = ResourceKind::custom(0).unwrap();
    let numbered = board.capacity().with(licence, 3);
    board.welcomed(numbered);
    assert_eq!(board.take_report().credit, Resources::ZERO.with(licence, 3));
    assert_eq!(board.capacity(), numbered);

    let mut gpu_job = JobDef::clone(&board_job());
    gpu_job.job = JobId(3);
    gpu_job.resources = Resources::cores(1)
        .with(ResourceKind::GPUS, 1)
        .with(ResourceKind::MEMORY_MIB, 300)
        .with(licence, 1);
    board.jobs.insert(JobId(3), Arc::new(gpu_job));
    board.queue.extend([queued(1, 3)]);
    let started = board.start_on(1).expect("it fits");
    let Work::Command(launch) = &started.work else {
        panic!("a command");
    };
    assert!(launch.env_strs().contains(&"CUDA_VISIBLE_DEVICES=7"));
    assert!(launch.env_strs().contains(&"OMP_NUM_THREADS=1"));
    assert_eq!(started.binding.memory_mib, 300);
    board.reset_credit(4, 4);
    let credit = board.take_report().credit;
    assert_eq!(
        (credit.core_count(), credit.gpu_count(), credit.memory_mib()),
        (3 + 4, 1, 700),
        "a new life: free cores plus prefetch, and only the free GPU and memory"
    );
    assert_eq!(credit.get(licence), 2);
    board.finish(1, 0, AttemptId(10), exited());
    let back = board.take_report().credit;
    assert_eq!(
        (
            back.core_count(),
            back.gpu_count(),
            back.memory_mib(),
            back.get(licence)
        ),
        (1, 1, 300, 1)
    );
}

fn board_job() -> JobDef {
    JobDef::clone(&board(1).jobs[&JobId(1)])
}
