//! The node side of actors: the application's [`ActorHost`], installed in its agent
//! process (`myapp __saker agent …`). Each actor is a task with a mailbox on the
//! agent's tokio runtime; a handler that panics ends that life (the root restarts it
//! per its policy), not the agent.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::FutureExt;
use saker_actors::actor_host::{ActorHost, HostUplink};
use saker_wire::messages::{
    ActorAnswer, ActorCall, ActorFault, ActorSpawn, ActorStatus, MAX_FUNCTION_BYTES,
};
use tokio::sync::mpsc;

use crate::actor::{Actor, archive, decode, fingerprint};
use crate::worker::panic_message;

/// The node of this process's agent, once it started.
static NODE: OnceLock<u32> = OnceLock::new();

/// The node this code runs on: `Some(n)` in an actor (its agent's node) or a task
/// (its worker's node, from `SAKER_NODE`); `None` in the driver, which runs on no
/// node of the pilot.
///
/// Nodes are numbered from 0, as `saker status` lists them, as an agent's `--node`,
/// [`crate::TaskOptions::node`] and [`crate::Placement::Node`] take them: a pilot of
/// `n` local agents has nodes `0..n`; in an allocation a node is its `SLURM_NODEID`
/// (plus the allocation's first node id in an elastic pilot).
pub fn node() -> Option<u32> {
    NODE.get()
        .copied()
        .or_else(|| std::env::var("SAKER_NODE").ok()?.parse().ok())
}

type ActorLoop = Pin<Box<dyn Future<Output = ()> + Send>>;
type Factory =
    Box<dyn Fn(Life, Vec<u8>, mpsc::UnboundedReceiver<Envelope>) -> ActorLoop + Send + Sync>;

/// The actor types an application registered, by name.
#[derive(Default)]
pub(crate) struct ActorTypes {
    factories: HashMap<&'static str, (u64, Factory)>,
}

impl std::fmt::Debug for ActorTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.factories.keys()).finish()
    }
}

impl ActorTypes {
    /// Adds `A`. Its name is checked as the program is built (see [`Actor::NAME`]);
    /// a second type of the same name is a programming error.
    pub(crate) fn add<A: Actor>(&mut self) {
        let factory: Factory =
            Box::new(|life, args, inbox| Box::pin(run_actor::<A>(life, args, inbox)));
        let previous = self
            .factories
            .insert(crate::actor::name::<A>(), (fingerprint::<A>(), factory));
        assert!(
            previous.is_none(),
            "two actor types are named {:?}: each needs a NAME of its own",
            A::NAME
        );
    }

    fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.factories.keys().copied().collect();
        names.sort_unstable();
        names
    }
}

enum Envelope {
    Call { call: u64, data: Vec<u8> },
    Stop,
}

/// One life of one actor, and where it reports.
struct Life {
    actor: u64,
    life: u32,
    uplink: HostUplink,
    host: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    mailboxes: Mutex<HashMap<u64, Mailbox>>,
}

struct Mailbox {
    life: u32,
    inbox: mpsc::UnboundedSender<Envelope>,
    task: tokio::task::AbortHandle,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Mailbox>> {
        self.mailboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes this life's mailbox away (the life ended), keeping a newer life's.
    fn remove(&self, actor: u64, life: u32) {
        let mut mailboxes = self.lock();
        if mailboxes.get(&actor).is_some_and(|m| m.life == life) {
            mailboxes.remove(&actor);
        }
    }
}

/// The application's actor host.
pub(crate) struct Host {
    types: ActorTypes,
    shared: Arc<Shared>,
    uplink: OnceLock<HostUplink>,
    /// The agent's runtime, where actors run (see `ActorHost::attach`).
    runtime: OnceLock<tokio::runtime::Handle>,
}

impl Host {
    pub(crate) fn new(types: ActorTypes) -> Host {
        Host {
            types,
            shared: Arc::default(),
            uplink: OnceLock::new(),
            runtime: OnceLock::new(),
        }
    }
}

impl ActorHost for Host {
    fn attach(&self, uplink: HostUplink) {
        let _ = NODE.set(uplink.node());
        let _ = self.uplink.set(uplink);
        // The agent's own runtime: a message read off the link wakes its actor on the
        // same thread, where a runtime of the actors' own would cost a thread wake
        // each way (about a third of a call's round trip on a 2-core machine).
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let _ = self.runtime.set(handle);
        }
    }

    fn spawn(&self, spawn: ActorSpawn) {
        let (Some(uplink), Some(runtime)) = (self.uplink.get(), self.runtime.get()) else {
            return;
        };
        let refuse = |message: String| {
            let status = ActorStatus::Failed {
                fault: ActorFault::TypeMismatch,
                message,
            };
            uplink.event(spawn.actor, spawn.life, status);
        };
        let Some((fingerprint, factory)) = self.types.factories.get(spawn.name.as_str()) else {
            return refuse(format!(
                "node {} has no actor type named {:?} (its program registers {:?}): is the \
                 pilot's agent another program than the driver?",
                uplink.node(),
                spawn.name,
                self.types.names()
            ));
        };
        if *fingerprint != spawn.fingerprint {
            return refuse(format!(
                "actor type {:?}: the caller and node {} disagree on its types (fingerprint \
                 {:016x} sent, {:016x} here): they were built from different versions of the \
                 program",
                spawn.name,
                uplink.node(),
                spawn.fingerprint,
                fingerprint
            ));
        }
        let (inbox, mailbox) = mpsc::unbounded_channel();
        let life = Life {
            actor: spawn.actor,
            life: spawn.life,
            uplink: uplink.clone(),
            host: Arc::clone(&self.shared),
        };
        // Registered before the task runs, so calls right behind the spawn queue up.
        let mut mailboxes = self.shared.lock();
        let task = runtime.spawn(factory(life, spawn.args, mailbox));
        let previous = mailboxes.insert(
            spawn.actor,
            Mailbox {
                life: spawn.life,
                inbox,
                task: task.abort_handle(),
            },
        );
        if let Some(previous) = previous {
            previous.task.abort();
        }
    }

    fn call(&self, call: ActorCall) {
        let delivered = {
            let mailboxes = self.shared.lock();
            match mailboxes.get(&call.actor) {
                Some(mailbox) if mailbox.life == call.life => mailbox
                    .inbox
                    .send(Envelope::Call {
                        call: call.call,
                        data: call.data,
                    })
                    .is_ok(),
                _ => false,
            }
        };
        if !delivered
            && call.call != 0
            && let Some(uplink) = self.uplink.get()
        {
            let answer = ActorAnswer::Failed {
                fault: ActorFault::Unknown,
                message: format!(
                    "actor {} (life {}) does not run here",
                    call.actor, call.life
                ),
            };
            uplink.reply(call.call, answer);
        }
    }

    fn stop(&self, actor: u64, life: u32) {
        let mailboxes = self.shared.lock();
        if let Some(mailbox) = mailboxes.get(&actor)
            && mailbox.life == life
        {
            let _ = mailbox.inbox.send(Envelope::Stop);
        }
    }

    fn stop_all(&self) {
        for (_, mailbox) in self.shared.lock().drain() {
            mailbox.task.abort();
        }
    }

    fn lives(&self) -> Vec<(u64, u32)> {
        let mut lives: Vec<(u64, u32)> = self
            .shared
            .lock()
            .iter()
            .map(|(&actor, mailbox)| (actor, mailbox.life))
            .collect();
        lives.sort_unstable();
        lives
    }
}

/// One life of an actor: start, answer messages in order, stop.
async fn run_actor<A: Actor>(
    life: Life,
    args: Vec<u8>,
    mut inbox: mpsc::UnboundedReceiver<Envelope>,
) {
    let ended = |status: ActorStatus| {
        life.host.remove(life.actor, life.life);
        life.uplink.event(life.actor, life.life, status);
    };
    let args = match decode::<A::Args>(&args, "the spawn arguments") {
        Ok(args) => args,
        Err(error) => {
            ended(failed(ActorFault::InvalidData, error.to_string()));
            return refuse_rest(&life, &mut inbox, ActorFault::Lost);
        }
    };
    let mut actor = match AssertUnwindSafe(A::on_start(args)).catch_unwind().await {
        Ok(actor) => actor,
        Err(panic) => {
            ended(failed(ActorFault::Panicked, panic_message(&*panic)));
            return refuse_rest(&life, &mut inbox, ActorFault::Lost);
        }
    };
    life.uplink
        .event(life.actor, life.life, ActorStatus::Started);
    let own = fingerprint::<A>().to_le_bytes();
    while let Some(envelope) = inbox.recv().await {
        let (call, data) = match envelope {
            Envelope::Call { call, data } => (call, data),
            Envelope::Stop => {
                if let Err(panic) = AssertUnwindSafe(actor.on_stop()).catch_unwind().await {
                    tracing::warn!(actor = life.actor, panic = %panic_message(&*panic), "on_stop panicked");
                }
                ended(ActorStatus::Stopped);
                return refuse_rest(&life, &mut inbox, ActorFault::Stopped);
            }
        };
        let answer = |answer: ActorAnswer| {
            if call != 0 {
                life.uplink.reply(call, answer);
            }
        };
        if data.get(..8) != Some(&own[..]) {
            answer(ActorAnswer::Failed {
                fault: ActorFault::TypeMismatch,
                message: format!("a message for actor type {:?} of another build", A::NAME),
            });
            continue;
        }
        let message = match decode::<A::Msg>(&data[8..], "the message") {
            Ok(message) => message,
            Err(error) => {
                answer(ActorAnswer::Failed {
                    fault: ActorFault::InvalidData,
                    message: error.to_string(),
                });
                continue;
            }
        };
        match AssertUnwindSafe(actor.handle(message)).catch_unwind().await {
            Ok(reply) => match archive(&reply, "the reply") {
                Ok(bytes) if bytes.len() > MAX_FUNCTION_BYTES => answer(ActorAnswer::Failed {
                    fault: ActorFault::InvalidData,
                    message: format!(
                        "a reply of {} bytes exceeds the limit of {MAX_FUNCTION_BYTES}",
                        bytes.len()
                    ),
                }),
                Ok(bytes) => answer(ActorAnswer::Reply(bytes.to_vec())),
                Err(error) => answer(ActorAnswer::Failed {
                    fault: ActorFault::InvalidData,
                    message: error.to_string(),
                }),
            },
            Err(panic) => {
                let message = panic_message(&*panic);
                answer(ActorAnswer::Failed {
                    fault: ActorFault::Panicked,
                    message: message.clone(),
                });
                ended(failed(ActorFault::Panicked, message));
                return refuse_rest(&life, &mut inbox, ActorFault::Lost);
            }
        }
    }
}

fn failed(fault: ActorFault, message: String) -> ActorStatus {
    ActorStatus::Failed { fault, message }
}

/// Answers what is still queued for an ended life.
fn refuse_rest(life: &Life, inbox: &mut mpsc::UnboundedReceiver<Envelope>, fault: ActorFault) {
    inbox.close();
    while let Ok(envelope) = inbox.try_recv() {
        if let Envelope::Call { call, .. } = envelope
            && call != 0
        {
            let answer = ActorAnswer::Failed {
                fault,
                message: format!("actor {} ended before this message was handled", life.actor),
            };
            life.uplink.reply(call, answer);
        }
    }
}
