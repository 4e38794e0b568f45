//! The root's side effects and its clock, behind two small traits so that the root's
//! logic ([`RootState`](super::RootState)) runs in unit tests without sockets, disks,
//! timers or a real clock (`tests.rs` drives it through a recording port).
//!
//! In a pilot, [`ActorPort`](super::shell::ActorPort) sends frames over the agents'
//! links and arms actor timers; [`SystemClock`] reads the machine's clocks. The
//! journal has a trait of its own ([`super::journal::Journal`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use saker_actors::link::{LinkId, LinkTx};
use saker_core::{NodeId, Time};
use saker_wire::messages::ToAgent;

/// Everything the root does to the world outside its own state.
pub trait Port: std::fmt::Debug + Send + 'static {
    /// A link to a child agent came up: messages for the nodes behind it go there.
    fn link_up(&mut self, link: LinkId, tx: LinkTx);
    /// The link is gone; messages for it are dropped from now on.
    fn link_down(&mut self, link: LinkId);
    /// Tells the agent at the other end of `link` that a newer agent linked as its
    /// node `node`: it must stop.
    fn supersede(&mut self, link: LinkId, node: NodeId);
    /// Sends `message` to agent `node` over `link`. A link that is gone is reported
    /// by its reader, and the core then replays what was sent here, so a send that
    /// cannot be delivered is dropped.
    fn send(&mut self, link: LinkId, node: NodeId, message: &ToAgent);
    /// Hands the root `wake` after `delay`.
    fn wake_after(&mut self, delay: Duration, wake: Wake);
    /// A shutdown was requested: the process that runs the pilot may wind down.
    fn shutdown_requested(&mut self);
    /// Gives memory the process freed back to the system (the pilot went idle after
    /// a large batch).
    fn release_memory(&mut self) {}
    /// Carries an elastic pilot's batch work out (libslurm, off the actor); the
    /// outcome comes back as [`RootMsg::Batch`](super::message::RootMsg::Batch).
    fn batch(&mut self, _work: BatchWork) {}
}

/// One allocation to submit.
#[derive(Debug, Clone)]
pub struct BatchSubmit {
    pub allocation: u64,
    pub request: saker_slurm::BatchRequest,
}

/// A round's calls to the batch system.
#[derive(Debug, Clone, Default)]
pub struct BatchWork {
    pub submits: Vec<BatchSubmit>,
    pub cancels: Vec<saker_slurm::SlurmJobId>,
    /// (allocation, job) whose state to read.
    pub queries: Vec<(u64, saker_slurm::SlurmJobId)>,
    /// List this user's jobs whose names start with this (a resumed pilot's own).
    pub find_named: Option<String>,
}

/// A job's state word and end (unix µs), or why it could not be read.
pub type JobState = Result<(String, Option<u64>), Arc<saker_slurm::SlurmError>>;

/// What the batch system answered, by allocation: each submission's job id (or why
/// not), each queried job's state.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    pub submitted: Vec<(
        u64,
        Result<saker_slurm::SlurmJobId, Arc<saker_slurm::SlurmError>>,
    )>,
    pub states: Vec<(u64, JobState)>,
    /// For [`BatchWork::find_named`]: (job, name, state word) of each job found.
    pub found: Vec<(saker_slurm::SlurmJobId, String, String)>,
}

/// The root's one source of time.
pub trait Clock: std::fmt::Debug + Send + 'static {
    /// The monotonic clock the core runs on.
    fn now(&self) -> Time;
    /// Wall-clock time, in microseconds since the Unix epoch, for records people read.
    fn unix_micros(&self) -> u64;
}

/// What the root asked to be woken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The core's next timeout ([`saker_core::Core::poll_timeout`]).
    Timer,
    /// The walltime deadline.
    Walltime,
    /// An elastic pilot's next provisioning round.
    Provision,
    /// A look whether the journal has space again (dispatch waits for it).
    Space,
}

/// The machine's clocks; the monotonic one counts from the root's start.
#[derive(Debug)]
pub struct SystemClock {
    epoch: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            epoch: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Time {
        Time::from_micros(u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    fn unix_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}
