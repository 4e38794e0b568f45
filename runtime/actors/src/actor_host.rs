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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::oneshot;

use saker_wire::messages::{
    ActorAnswer, ActorCall, ActorEvent, ActorFault, ActorReply, ActorSpawn, ActorStatus, FromAgent,
    ToAgent,
};

use crate::link::{FrameBuf, LinkTx, WeakLinkTx};

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
    /// Every actor's life running here, by actor id: listed in the hello to a root
    /// that took over, which adopts them.
    fn lives(&self) -> Vec<(u64, u32)>;
}

static HOST: OnceLock<Arc<dyn ActorHost>> = OnceLock::new();
static PILOT_DIR: OnceLock<PathBuf> = OnceLock::new();
/// This process's agent's way up, once it started.
static UPLINK: OnceLock<HostUplink> = OnceLock::new();
/// Calls made from this node and not answered yet, by this node's number for them.
static CALLS: Mutex<Calls> = Mutex::new(Calls {
    next: 0,
    waiting: None,
});

struct Calls {
    next: u64,
    waiting: Option<HashMap<u64, oneshot::Sender<ActorAnswer>>>,
}

fn calls() -> std::sync::MutexGuard<'static, Calls> {
    CALLS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The way up of this process's agent: code on the node calls actors through it.
pub fn uplink() -> Option<&'static HostUplink> {
    UPLINK.get()
}

pub(crate) fn set_uplink(uplink: &HostUplink) {
    let _ = UPLINK.set(uplink.clone());
}

/// Fails every call this node made that is still unanswered: the node lost its
/// parent, and the root may have declared it lost (then no answer comes).
pub(crate) fn fail_outgoing(reason: &str) {
    let waiting = calls().waiting.take().unwrap_or_default();
    for (_, waiter) in waiting {
        let _ = waiter.send(ActorAnswer::Failed {
            fault: ActorFault::Lost,
            message: reason.to_owned(),
        });
    }
}

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

/// Where an actor host sends its frames: the agent's queue to its parent. It does
/// not keep that queue open (statics hold it): once the agent is gone, sends fail.
#[derive(Debug, Clone)]
pub struct HostUplink {
    parent: WeakLinkTx,
    node: u32,
}

impl HostUplink {
    pub(crate) fn new(parent: &LinkTx, node: u32) -> HostUplink {
        HostUplink {
            parent: parent.downgrade(),
            node,
        }
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

    /// Calls `actor` through the tree (the root routes it by the actor's node); with
    /// `cast`, sends it and answers at once. Messages sent through one uplink reach an
    /// actor in the order they were sent.
    pub async fn call(&self, actor: u64, data: Vec<u8>, cast: bool) -> ActorAnswer {
        let (call, answer) = if cast {
            (0, None)
        } else {
            let (sender, answer) = oneshot::channel();
            let mut calls = calls();
            calls.next += 1;
            let call = calls.next;
            calls
                .waiting
                .get_or_insert_with(HashMap::new)
                .insert(call, sender);
            (call, Some(answer))
        };
        let message = FromAgent::ActorCall(ActorCall {
            actor,
            life: 0,
            call,
            data,
        });
        if !self.send(&message) {
            if let Some(waiting) = calls().waiting.as_mut() {
                waiting.remove(&call);
            }
            return ActorAnswer::Failed {
                fault: ActorFault::Lost,
                message: "this node's link to the pilot is closed".to_owned(),
            };
        }
        match answer {
            None => ActorAnswer::Reply(Vec::new()),
            Some(answer) => answer.await.unwrap_or_else(|_| ActorAnswer::Failed {
                fault: ActorFault::Lost,
                message: "this node's agent stopped".to_owned(),
            }),
        }
    }

    /// Tells the root what became of one life of an actor.
    pub fn event(&self, actor: u64, life: u32, status: ActorStatus) {
        self.send(&FromAgent::ActorEvent(ActorEvent {
            actor,
            life,
            status,
        }));
    }

    /// Whether the frame was queued.
    fn send(&self, message: &FromAgent) -> bool {
        match saker_wire::frame::encode(self.node, message) {
            Ok(frame) => {
                let frame: FrameBuf = frame;
                let sent = self.parent.send(frame).is_ok();
                if !sent {
                    tracing::debug!("the link to the parent is closed; an actor frame is dropped");
                }
                sent
            }
            Err(error) => {
                tracing::error!(%error, "cannot encode an actor frame");
                false
            }
        }
    }
}

/// Hands an actor frame straight to the installed host, from the task that read it
/// off the parent link: one hop fewer than through the agent actor, in the order
/// the frames arrived (spawns, calls and stops alike). Any other frame, or any
/// frame when no host is installed (the agent refuses those), comes back.
pub(crate) fn deliver(message: ToAgent) -> Option<ToAgent> {
    if let ToAgent::ActorAnswer(answer) = message {
        let waiter = calls()
            .waiting
            .as_mut()
            .and_then(|waiting| waiting.remove(&answer.call));
        // None: failed already (the parent was lost meanwhile), at most once.
        if let Some(waiter) = waiter {
            let _ = waiter.send(answer.answer);
        }
        return None;
    }
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
