//! The actor layer of an agent process: the agent (an actor per node, supervisor of
//! the node's slots), the slots' executors (a thread each), links to parent and
//! children, and the process runner.
//!
//! Start reading at [`board`], the agent's pure core: what this node runs where, the
//! credit it grants, what it reports and when, its gang parts and item fetches, as a
//! state machine over messages and a clock it is given. Then [`agent`], its thin
//! shell: an actor whose loop receives a message, hands it to the board and carries
//! out what the board decided. Which task goes to which node is the root's pure core,
//! not here.
//!
//! This crate must never block a tokio worker (network I/O is async; task processes
//! run on each slot's own thread) and never trusts a peer's frame: every received
//! payload is validated by `saker-wire` before use.
//!
//! Design choice: the agent is a ractor actor, but neither its slots nor its links
//! are. A slot's work is blocking and lives on a thread of its own, where its faults
//! happen too, so the thread itself is supervised: it ends on a fault and tells the
//! agent, typed, and the agent restarts it under a bounded restart strategy (see
//! [`executor`] for why no actor wraps it). Links are plain tokio tasks around a
//! channel: a link's job is to coalesce many small frames into one write, which needs
//! "drain everything queued" — something an actor mailbox cannot express — and a
//! link has no state worth supervising: when it dies, its owner is told and handles
//! the loss (the subtree behind it is reported lost).
//!
//! Supervision, fault by fault (the tests that show it are named):
//! - A task's own failure to start (its program missing or not executable, its
//!   working directory missing) is its attempt's outcome, `SpawnFailed`; the slot
//!   runs on. (`a_missing_program_is_the_tasks_failure_not_the_slots`.)
//! - A spawn this node cannot make (`EMFILE`, `ENFILE`, `EAGAIN`, `ENOMEM` from `pipe`
//!   or `posix_spawn`) ends the slot's thread: the attempt is reported `Lost` (the
//!   root replays it) and the slot restarts after a backoff.
//!   (`a_node_out_of_descriptors_starts_nothing_but_a_missing_program_is_the_tasks_fault`,
//!   `a_slot_out_of_file_descriptors_loses_its_attempt_and_restarts_after_the_backoff`.)
//! - A panic on a slot's thread ends it the same way; the attempt's process group is
//!   killed as the panic unwinds. (`a_panic_on_a_slot_thread_kills_its_attempt_and_reaches_the_supervisor`.)
//! - A fresh thread that cannot be started counts as the slot's next failure.
//! - Past the restart intensity ([`supervision::RestartPolicy`]) the slot is given up;
//!   with none left the agent says goodbye with the reason and exits with
//!   [`agent::AgentFailure::NoSlotLeft`].
//!   (`a_slot_that_keeps_failing_is_given_up_and_its_agent_says_goodbye`,
//!   `restarts_back_off_doubling_up_to_the_most_then_give_up`.)

pub mod actor_host;
pub mod agent;
pub mod attempt;
pub mod board;
pub mod executor;
pub mod gang;
pub mod items;
pub mod launch;
pub mod link;
pub mod liveness;
pub mod node;
pub mod node_lock;
pub mod pmi;
pub mod process;
pub mod reaper;
pub mod resources;
pub mod self_exe;
pub mod spawn;
pub mod supervision;
#[cfg(test)]
mod test_support;
pub mod transfer;
pub mod tree;
pub mod worker;

/// `error` and its sources, joined by ": ": for reasons that travel as text (a lost
/// attempt's, a goodbye's, a closed link's).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
