//! Placed actors on an agent: the seam between the agent and the application that
//! hosts them.
//!
//! An application built on the `saker` API crate is its own agent (`myapp __saker
//! agent …`), and before the agent starts it installs an [`ActorHost`]: the code that
//! knows the application's actor types. The agent hands it the actor frames the root
//! routes to this node ([`ToAgent::ActorSpawn`], [`ToAgent::ActorCall`],
//! [`ToAgent::ActorStop`]) and the host answers up the agent's own link. An agent
//! that is plain `saker` has no host: it says so in its hello (the root places no
//! actor on it) and answers any actor frame with [`ActorFault::NoHost`].
//!
//! Why in the agent's process and not in a worker process of its own: a call is one
//! QUIC hop from the root and a channel send, not a hop plus a pipe round trip and a
//! second process to supervise. The task that reads the parent link hands actor
//! frames to the host itself (not through the agent actor), and actors run on the
//! agent's runtime, so a message wakes its actor on the thread that read it. The
//! price: a handler that blocks holds one of the agent's threads (handlers must
//! `spawn_blocking` long computations), and an actor that aborts the process takes
//! the agent with it, which the root handles as a node loss.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use saker_wire::messages::{
    ActorAnswer, ActorCall, ActorEvent, ActorFault, ActorReply, ActorSpawn, ActorStatus, FromAgent,
    ToAgent,
};

use crate::link::{FrameBuf, LinkTx};

/// What hosts the actors of this process's agent.
pub trait ActorHost: Send + Sync + 'static {
    /// Called once, when the agent starts: where answers and events go.
    fn attach(&self, uplink: HostUplink);
    /// Starts one life of an actor; answered with an [`ActorEvent`].
    fn spawn(&self, spawn: ActorSpawn);
    /// Delivers a message; answered with an [`ActorReply`] unless `call.call == 0`.
    fn call(&self, call: ActorCall);
    /// Stops one life of an actor (running its `on_stop`).
    fn stop(&self, actor: u64, life: u32);
    /// Ends every actor at once, without `on_stop` and without events: the root
    /// counts this node lost and starts the actors again elsewhere.
    fn stop_all(&self);
}

static HOST: OnceLock<Arc<dyn ActorHost>> = OnceLock::new();
static PILOT_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Installs this process's actor host; `false` if one was installed already.
pub fn install(host: Arc<dyn ActorHost>) -> bool {
    HOST.set(host).is_ok()
}

/// The installed actor host, if any.
pub fn installed() -> Option<&'static Arc<dyn ActorHost>> {
    HOST.get()
}

/// Records the pilot directory this process's agent serves: actors and the workers
/// the agent starts reach the pilot's client socket through it.
pub fn set_pilot_dir(dir: &Path) {
    let _ = PILOT_DIR.set(dir.to_owned());
}

/// The pilot directory of this process's agent, once it started.
pub fn pilot_dir() -> Option<&'static Path> {
    PILOT_DIR.get().map(PathBuf::as_path)
}

/// Where an actor host sends its frames: the agent's queue to its parent.
#[derive(Debug, Clone)]
pub struct HostUplink {
    parent: LinkTx,
    node: u32,
}

impl HostUplink {
    pub(crate) fn new(parent: LinkTx, node: u32) -> HostUplink {
        HostUplink { parent, node }
    }

    /// The node this host's agent is.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// Sends the answer to `call`. A closed link drops it: the root counts the node
    /// lost and fails the call itself.
    pub fn reply(&self, call: u64, answer: ActorAnswer) {
        self.send(&FromAgent::ActorReply(ActorReply { call, answer }));
    }

    /// Tells the root what became of one life of an actor.
    pub fn event(&self, actor: u64, life: u32, status: ActorStatus) {
        self.send(&FromAgent::ActorEvent(ActorEvent {
            actor,
            life,
            status,
        }));
    }

    fn send(&self, message: &FromAgent) {
        match saker_wire::frame::encode(self.node, message) {
            Ok(frame) => {
                let frame: FrameBuf = frame;
                if self.parent.send(frame).is_err() {
                    tracing::debug!("the link to the parent is closed; an actor frame is dropped");
                }
            }
            Err(error) => tracing::error!(%error, "cannot encode an actor frame"),
        }
    }
}

/// Hands an actor frame straight to the installed host, from the task that read it
/// off the parent link: one hop fewer than through the agent actor, in the order
/// the frames arrived (spawns, calls and stops alike). Any other frame, or any
/// frame when no host is installed (the agent refuses those), comes back.
pub(crate) fn deliver(message: ToAgent) -> Option<ToAgent> {
    let Some(host) = installed() else {
        return Some(message);
    };
    match message {
        ToAgent::ActorSpawn(spawn) => host.spawn(spawn),
        ToAgent::ActorCall(call) => host.call(call),
        ToAgent::ActorStop { actor, life } => host.stop(actor, life),
        other => return Some(other),
    }
    None
}

/// Answers actor frames on an agent that hosts no actors.
pub(crate) fn refuse(uplink: &HostUplink, frame: Refused) {
    let message = "this node's agent hosts no actors: it is not the application's binary \
                   (start the pilot with --app, or let the application start it)"
        .to_owned();
    match frame {
        Refused::Spawn { actor, life } => uplink.event(
            actor,
            life,
            ActorStatus::Failed {
                fault: ActorFault::NoHost,
                message,
            },
        ),
        Refused::Call { call } if call != 0 => uplink.reply(
            call,
            ActorAnswer::Failed {
                fault: ActorFault::NoHost,
                message,
            },
        ),
        Refused::Call { .. } => {}
    }
}

/// An actor frame an agent without a host cannot serve.
pub(crate) enum Refused {
    Spawn { actor: u64, life: u32 },
    Call { call: u64 },
}
