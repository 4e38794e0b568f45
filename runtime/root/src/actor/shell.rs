//! The root's side effects in a pilot: [`ActorPort`] sends frames over the agents'
//! links, arms the actor's timers and runs work off the actor (trimming the heap, an
//! elastic pilot's calls to the batch system). The journal's side is
//! [`ActorJournal`](super::journal::ActorJournal). Unit tests use a recording port
//! instead (`tests.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use saker_actors::link::{LinkId, LinkTx};
use saker_core::NodeId;
use saker_wire::messages::ToAgent;

use super::message::RootMsg;
use super::port::{BatchOutcome, BatchWork, Port, Wake};

/// The pilot's port: the agents' links, actor timers, work off the actor.
#[derive(Debug)]
pub struct ActorPort {
    myself: ActorRef<RootMsg>,
    links: HashMap<LinkId, LinkTx>,
    shutdown: Arc<tokio::sync::Notify>,
    /// Set with the shutdown: the local agents' supervisor restarts none from then on.
    stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl ActorPort {
    pub fn new(
        myself: ActorRef<RootMsg>,
        shutdown: Arc<tokio::sync::Notify>,
        stopping: Arc<std::sync::atomic::AtomicBool>,
    ) -> ActorPort {
        ActorPort {
            myself,
            links: HashMap::new(),
            shutdown,
            stopping,
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

    fn wake_after(&mut self, delay: Duration, wake: Wake) {
        self.myself.send_after(delay, move || RootMsg::from(wake));
    }

    fn shutdown_requested(&mut self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shutdown.notify_one();
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
}

/// Returns glibc's free heap pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // The project's one FFI call without a safe wrapper in a crate.
fn trim_heap() {
    // SAFETY: malloc_trim takes no pointers and works under the allocator's own locks;
    // glibc documents it as callable from any thread at any time.
    unsafe { libc::malloc_trim(0) };
}

/// The batch system's side of a round, run off the root's thread ([`Port::batch`]).
impl BatchWork {
    /// Runs the calls (blocking: libslurm talks to the controller).
    pub fn run(self) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        for submit in self.submits {
            let result = saker_slurm::submit_batch(&submit.request).map_err(Arc::new);
            outcome.submitted.push((submit.allocation, result));
        }
        for job in self.cancels {
            if let Err(error) = saker_slurm::cancel(job, None) {
                tracing::warn!(%job, %error, "cancelling an allocation failed");
            }
        }
        for (allocation, job) in self.queries {
            let state = saker_slurm::job_info(job)
                .map(|info| {
                    let end = info.end_time.and_then(|end| {
                        end.duration_since(std::time::UNIX_EPOCH)
                            .ok()
                            .map(|d| d.as_micros() as u64)
                    });
                    (info.state, end)
                })
                .map_err(Arc::new);
            outcome.states.push((allocation, state));
        }
        if let Some(prefix) = self.find_named {
            match saker_slurm::user_jobs() {
                Ok(jobs) => outcome.found.extend(
                    jobs.into_iter()
                        .filter(|info| info.name.starts_with(&prefix))
                        .map(|info| (info.job_id, info.name, info.state)),
                ),
                Err(error) => tracing::warn!(%error, "listing the pilot's own jobs failed"),
            }
        }
        outcome
    }
}
