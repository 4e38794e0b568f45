//! The actor layer of an agent process: the agent (a supervisor per node), its
//! executors (one per slot), links to parent and children, and the process runner.
//!
//! Start reading at [`agent`]: its loop receives a message, updates its small state
//! and acts; the scheduling decisions live in the root's pure core, not here.
//!
//! This crate must never block a tokio worker (network I/O is async; task processes
//! run on each slot's own thread) and never trusts a peer's frame: every received
//! payload is validated by `saker-wire` before use.
//!
//! Design choice: supervision is ractor's (an executor panic reaches its agent as a
//! typed event, the agent restarts it with a bounded restart intensity), but links are
//! plain tokio tasks around a channel. A link's job is to coalesce many small frames
//! into one write, which needs "drain everything queued" — something an actor mailbox
//! cannot express — and a link has no state worth supervising: when it dies, its owner
//! is told and handles the loss (the subtree behind it is reported lost).

pub mod agent;
pub mod board;
pub mod executor;
pub mod launch;
pub mod link;
pub mod liveness;
pub mod node;
pub mod process;
pub mod reaper;
pub mod spawn;
