//! The root's side effects and its clock, behind two small traits so that the root's
//! logic ([`RootState`](super::RootState)) runs in unit tests without sockets, disks,
//! timers or a real clock (`tests.rs` drives it through a recording port).
//!
//! In a pilot, [`ActorPort`] sends frames over the agents' links, appends to the
//! journal and arms actor timers; [`SystemClock`] reads the machine's clocks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ractor::ActorRef;
use saker_actors::link::{LinkId, LinkTx};
use saker_core::{NodeId, Time};
use saker_journal::{JournalError, JournalWriter, Position};
use saker_wire::messages::ToAgent;

use super::RootMsg;
use crate::client::{
    ErrorKind, Reply, RequestError, SubmitReply, SubmittedJob, SubmittedLines, UpdateReport,
};
use crate::records::Record;
use crate::results::ResultRecord;

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
    /// Appends `records` to the journal; once they are durable (or the journal
    /// failed), `after` is finished ([`AfterJournal::finish`]). When the journal wrote
    /// them at once (it does not sync, and nothing was queued ahead), `after` is
    /// finished before this returns and what the root must then handle is returned,
    /// to be handled in the same turn; otherwise it comes later as a message.
    fn append(&mut self, records: Vec<Record>, after: AfterJournal) -> Option<RootMsg>;
    /// Hands the root `wake` after `delay`.
    fn wake_after(&mut self, delay: Duration, wake: Wake);
    /// A shutdown was requested: the process that runs the pilot may wind down.
    fn shutdown_requested(&mut self);
    /// Flushes and closes the journal (the root is stopping).
    fn close_journal(&mut self);
    /// Where durable results are read back from.
    fn results(&self) -> Arc<dyn super::history::ResultSource>;
    /// Segments the journal writer has started (compaction is due by this count).
    fn journal_segments(&self) -> u64 {
        0
    }
    /// Compacts the journal under `keep` (`compaction.rs`); the outcome comes back as
    /// [`RootMsg::Compacted`].
    fn compact(&mut self, _keep: crate::compact::KeepResults, _now_unix_us: u64) {}
    /// Deletes the journal segments the last compaction superseded.
    fn retire_superseded(&mut self) {}
    /// Gives memory the process freed back to the system (the pilot went idle after
    /// a large batch).
    fn release_memory(&mut self) {}
    /// Carries an elastic pilot's batch work out (libslurm, off the actor); the
    /// outcome comes back as [`RootMsg::Batch`].
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
pub type JobState = Result<(String, Option<u64>), String>;

/// What the batch system answered, by allocation: each submission's job id (or why
/// not), each queried job's state.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    pub submitted: Vec<(u64, Result<saker_slurm::SlurmJobId, String>)>,
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
}

impl Wake {
    pub fn message(self) -> RootMsg {
        match self {
            Wake::Timer => RootMsg::Timer,
            Wake::Walltime => RootMsg::Walltime,
            Wake::Provision => RootMsg::Provision,
        }
    }
}

/// What waits for records to become durable.
#[derive(Debug)]
pub enum AfterJournal {
    /// Nothing (cancellations): a failed append is reported by the next one.
    Nothing,
    /// Accepted results, shown to clients once durable.
    Results(Vec<Arc<ResultRecord>>),
    /// A submission, acknowledged once durable: an acknowledged job survives a crash.
    Acknowledge {
        reply: Reply<SubmitReply>,
        jobs: Vec<SubmittedJob>,
    },
    /// A `submit_lines`, acknowledged once durable.
    AcknowledgeLines {
        reply: Reply<SubmittedLines>,
        submitted: SubmittedLines,
    },
    /// An update, answered once durable: an answered update survives a crash.
    Updated {
        reply: Reply<UpdateReport>,
        report: UpdateReport,
    },
}

impl AfterJournal {
    /// Finishes what waited, given the journal's outcome. Returns what the root must
    /// then handle. Runs on the journal's thread in a pilot, so an acknowledgement goes
    /// to its client without waiting for a turn of the root.
    /// `outcome` says where each of the append's records is.
    pub fn finish(self, outcome: Result<Vec<Position>, JournalError>) -> Option<RootMsg> {
        let outcome = match (self, outcome) {
            (AfterJournal::Results(results), Ok(mut positions)) => {
                // The results are the append's last records.
                let first = positions.len().saturating_sub(results.len());
                let positions = positions.split_off(first);
                return Some(RootMsg::Durable { results, positions });
            }
            (after, outcome) => (after, outcome.map(drop)),
        };
        match outcome {
            (AfterJournal::Nothing, _) => None,
            (AfterJournal::Results(_), Ok(())) => None,
            (AfterJournal::Results(_), Err(error)) => Some(RootMsg::JournalFailed { error }),
            (AfterJournal::Acknowledge { reply, jobs }, outcome) => {
                let answer = outcome
                    .map(|()| SubmitReply::acknowledged(jobs))
                    .map_err(|error| {
                        RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                    });
                let _ = reply.send(answer);
                None
            }
            (AfterJournal::AcknowledgeLines { reply, submitted }, outcome) => {
                let answer = outcome.map(|()| submitted).map_err(|error| {
                    RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                });
                let _ = reply.send(answer);
                None
            }
            (AfterJournal::Updated { reply, report }, outcome) => {
                let answer = outcome.map(|()| report).map_err(|error| {
                    RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                });
                let _ = reply.send(answer);
                None
            }
        }
    }
}

/// The pilot's port: the agents' links, the journal writer, actor timers.
#[derive(Debug)]
pub struct ActorPort {
    myself: ActorRef<RootMsg>,
    links: HashMap<LinkId, LinkTx>,
    journal: Option<JournalWriter<Record>>,
    shutdown: Arc<tokio::sync::Notify>,
    results: Arc<super::history::JournalResults>,
}

impl ActorPort {
    pub fn new(
        myself: ActorRef<RootMsg>,
        journal: JournalWriter<Record>,
        shutdown: Arc<tokio::sync::Notify>,
    ) -> ActorPort {
        ActorPort {
            myself,
            links: HashMap::new(),
            results: Arc::new(super::history::JournalResults {
                directory: journal.directory().to_path_buf(),
            }),
            journal: Some(journal),
            shutdown,
        }
    }
}

impl Port for ActorPort {
    fn link_up(&mut self, link: LinkId, tx: LinkTx) {
        self.links.insert(link, tx);
    }

    fn link_down(&mut self, link: LinkId) {
        self.links.remove(&link);
    }

    fn supersede(&mut self, link: LinkId, node: NodeId) {
        if let Some(tx) = self.links.get(&link) {
            let message = saker_wire::messages::Link::Superseded { node: node.0 };
            let _ = tx.send(saker_actors::liveness::link_frame(&message));
        }
    }

    fn send(&mut self, link: LinkId, node: NodeId, message: &ToAgent) {
        let Some(tx) = self.links.get(&link) else {
            return;
        };
        match saker_wire::frame::encode(node.0, message) {
            Ok(frame) => {
                let _ = tx.send(frame);
            }
            Err(error) => {
                tracing::error!(%error, %node, "could not encode a message for an agent")
            }
        }
    }

    fn append(&mut self, records: Vec<Record>, after: AfterJournal) -> Option<RootMsg> {
        let Some(journal) = &self.journal else {
            return after.finish(Err(JournalError::WriterStopped));
        };
        // Written here when the journal need not sync and waits for nothing: no thread
        // is woken, and the root sees its results durable in the same turn.
        let records = match journal.append_now(records) {
            Ok(outcome) => return after.finish(outcome),
            Err(records) => records,
        };
        let myself = self.myself.clone();
        journal.append_at(records, move |outcome| {
            if let Some(message) = after.finish(outcome) {
                let _ = myself.send_message(message);
            }
        });
        None
    }

    fn wake_after(&mut self, delay: Duration, wake: Wake) {
        self.myself.send_after(delay, move || wake.message());
    }

    fn shutdown_requested(&mut self) {
        self.shutdown.notify_one();
    }

    fn results(&self) -> Arc<dyn super::history::ResultSource> {
        self.results.clone()
    }

    fn journal_segments(&self) -> u64 {
        self.journal
            .as_ref()
            .map_or(0, |journal| journal.stats().segments_created)
    }

    fn compact(&mut self, keep: crate::compact::KeepResults, now_unix_us: u64) {
        let myself = self.myself.clone();
        let Some(journal) = &self.journal else {
            let _ = myself.send_message(RootMsg::Compacted(Err("the journal is closed".into())));
            return;
        };
        let directory = journal.directory().to_path_buf();
        journal.seal(move |sealed| {
            let reply = myself.clone();
            // Off the writer thread: reading and rewriting the history takes a while.
            let spawned = std::thread::Builder::new()
                .name("saker-journal-compact".into())
                .spawn(move || {
                    let outcome = sealed
                        .map_err(|error| saker_actors::error_chain(&error))
                        .and_then(|base| {
                            super::compaction::run_compaction(&directory, base, keep, now_unix_us)
                        });
                    let _ = reply.send_message(RootMsg::Compacted(outcome));
                });
            if let Err(error) = spawned {
                let error = format!("cannot start the compaction thread: {error}");
                let _ = myself.send_message(RootMsg::Compacted(Err(error)));
            }
        });
    }

    fn retire_superseded(&mut self) {
        let directory = self.results.directory.clone();
        let spawned = std::thread::Builder::new()
            .name("saker-journal-retire".into())
            .spawn(move || {
                if let Err(error) = saker_journal::retire_superseded(&directory) {
                    tracing::error!(error = %saker_actors::error_chain(&error),
                        "deleting superseded journal segments failed");
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start a thread to delete superseded journal segments");
        }
    }

    fn release_memory(&mut self) {
        // Off the actor: trimming walks the whole heap. glibc keeps freed memory inside
        // its heap (only the top is returned by itself); `malloc_trim` returns every
        // free page. Other allocators return memory on their own.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        tokio::task::spawn_blocking(trim_heap);
    }

    fn batch(&mut self, work: BatchWork) {
        let myself = self.myself.clone();
        tokio::task::spawn_blocking(move || {
            let _ = myself.send_message(RootMsg::Batch(work.run()));
        });
    }

    fn close_journal(&mut self) {
        if let Some(journal) = self.journal.take()
            && let Err(error) = journal.close()
        {
            tracing::error!(%error, "closing the journal failed");
        }
    }
}

/// Returns glibc's free heap pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // The project's one FFI call without a safe wrapper in a crate.
fn trim_heap() {
    // SAFETY: malloc_trim takes no pointers and works under the allocator's own locks;
    // glibc documents it as callable from any thread at any time.
    unsafe { libc::malloc_trim(0) };
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
