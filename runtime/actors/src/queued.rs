//! An attempt assigned to this node and not started yet, with when it arrived: the
//! result says how long it waited here (the `received_time` of its record).

use saker_wire::messages::Assignment;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    pub assignment: Assignment,
    /// When this agent read the dispatch that carried it (unix µs, its clock).
    pub received_us: u64,
}

impl Queued {
    pub fn new(assignment: Assignment, received_us: u64) -> Queued {
        Queued {
            assignment,
            received_us,
        }
    }
}

impl std::ops::Deref for Queued {
    type Target = Assignment;

    fn deref(&self) -> &Assignment {
        &self.assignment
    }
}
