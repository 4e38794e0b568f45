//! Unit tests of the agent's decisions: a board driven by hand, with a manual clock
//! ([`at`]), no threads and no sockets. The shell's side (launches, stop handles,
//! files) is tested in `agent/desk_tests.rs`.

use std::sync::Arc;
use std::time::Duration;

use saker_wire::messages::{
    Assignment, AttemptId, Command, EnvVar, Held, JobDef, JobId, Outcome, Output, Payload,
    Placement, Resources, TaskId,
};

use super::*;
use crate::attempt::{Finished, Queued};
use crate::resources::NodeResources;

mod away;
mod credit;
mod gang;
mod items;
mod objects;
mod reports;
mod script;
mod slots;

/// The manual clock: `ms` milliseconds after the board was made (at 0).
pub(crate) fn at(ms: u64) -> Moment {
    Moment {
        since_start: Duration::from_millis(ms),
        unix_us: 1_700_000_000_000_000 + ms * 1_000,
    }
}

/// A command job running `true` with one variable of its own, needing `cores`.
pub(crate) fn job_def(job: u32, cores: u32) -> JobDef {
    JobDef {
        job: JobId(job),
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
    }
}

/// A board of node 7 with `cores` cores and slots, granting no credit at first, that
/// knows job 1 (1 core) and job 2 (2 cores).
pub(crate) fn board(cores: u32) -> Board {
    board_of(&NodeResources::of_cores(cores), 0)
}

/// A board of node 7 offering `resources`, granting `credit` cores at first, that
/// knows job 1 (1 core) and job 2 (2 cores).
pub(crate) fn board_of(resources: &NodeResources, credit: u32) -> Board {
    let config = BoardConfig {
        node: 7,
        slots: resources.cores.max(1),
        prefetch: 0,
        credit,
    };
    let mut board = Board::new(&config, resources, at(0));
    for (job, cores) in [(1, 1), (2, 2)] {
        board.jobs.insert(JobId(job), Arc::new(job_def(job, cores)));
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

fn ran_for(micros: u64) -> Finished {
    Finished {
        start_unix_us: 1_000,
        end_unix_us: 1_000 + micros,
        ..exited()
    }
}

/// What idle slot `index` starts at `now`, answering that no item is missing.
pub(crate) fn start(board: &mut Board, index: usize, now: Moment) -> Option<Start> {
    loop {
        match board.poll_start(index, now)? {
            Next::Start(start) => return Some(start),
            Next::CheckItems { attempt, .. } => board.handle_items_checked(attempt, None),
        }
    }
}

/// Attempt `attempt` on slot `index` (of `generation`) ended as `finished`: what the
/// slot starts next, if it was still its business.
fn finish(
    board: &mut Board,
    index: usize,
    generation: u64,
    attempt: AttemptId,
    finished: Finished,
    now: Moment,
) -> Option<Start> {
    if board.handle_attempt_done(index, generation, attempt, finished, None, now) {
        start(board, index, now)
    } else {
        None
    }
}

/// Every effect the board has decided, in order.
fn effects(board: &mut Board) -> Vec<Effect> {
    std::iter::from_fn(|| board.poll_effect()).collect()
}

/// The task a start runs.
fn task_of(start: &Start) -> Assignment {
    match &start.run {
        Run::Task { assignment, .. } => *assignment,
        Run::Part { .. } => panic!("a part's process, not a task: {start:?}"),
    }
}

/// Every message of one report, in order.
fn report_at(board: &mut Board, now: Moment) -> Vec<FromAgent> {
    if !board.start_report(now) {
        return Vec::new();
    }
    std::iter::from_fn(|| board.poll_up()).collect()
}
