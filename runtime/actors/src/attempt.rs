//! The agent's words for an attempt on its way through a node, shared by its pure core
//! ([`crate::board`]) and the slots' runners: one assigned and not started yet
//! ([`Queued`]), and how one ended ([`Finished`]). Plain values: no handles, no I/O.

use saker_wire::messages::{Assignment, Outcome, Output, ResultBody};

/// An attempt assigned to this node and not started yet, with when it arrived: the
/// result says how long it waited here (the `received_time` of its record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    pub assignment: Assignment,
    /// When this agent read the dispatch that carried it (unix µs, its clock).
    pub received_us: u64,
    /// How long it waited for data items to be fetched so far (µs).
    pub fetch_us: u64,
    /// Since when it waits for one (unix µs), while it does.
    pub staged_us: u64,
}

impl Queued {
    pub fn new(assignment: Assignment, received_us: u64) -> Queued {
        Queued {
            assignment,
            received_us,
            fetch_us: 0,
            staged_us: 0,
        }
    }
}

impl std::ops::Deref for Queued {
    type Target = Assignment;

    fn deref(&self) -> &Assignment {
        &self.assignment
    }
}

/// How an attempt ended, with its captured output.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub outcome: Outcome,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    pub stdout: Output,
    pub stderr: Output,
    /// The result body when it is not a command's output (a function call's answer);
    /// `None` reports `stdout` and `stderr`.
    pub body: Option<ResultBody>,
}
