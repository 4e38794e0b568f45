//! Typed actors placed on the pilot's nodes: the [`Actor`] trait, [`RemoteRef`] (a
//! typed handle that can travel inside messages and task inputs), where an actor
//! runs ([`Placement`]) and what happens when its life ends ([`Restart`]).
//! `Placement` and `Restart` are the client protocol's own types
//! (`ActorPlacement`, `ActorRestart`), so what a spawn asks is what the pilot gets.
//!
//! A message travels as the actor type's fingerprint (8 bytes) and an rkyv archive
//! of the message; a reply as an archive. The node checks the fingerprint against
//! its own type of that name and validates every archive before reading it, so two
//! builds that disagree on a type meet a [`ActorError::TypeMismatch`], never
//! undefined behaviour.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;

use rkyv::rancor;
use rkyv::util::AlignedVec;
pub use saker_client::actors::{
    ActorId, ActorPlacement as Placement, ActorRestart as Restart, MAX_ACTOR_NAME_LEN,
};
use saker_client::actors::{ActorSpawnRequest, valid_actor_name};
use saker_wire::messages::MAX_FUNCTION_BYTES;

use crate::context;
use crate::error::ActorError;
use crate::task::{CodecError, Data, type_fingerprint, type_shape};

/// A kind of actor: state on one node, changed only by its own messages, handled one
/// at a time in the order they arrive.
///
/// ```
/// use saker::Actor;
///
/// struct Counter(u64);
///
/// impl Actor for Counter {
///     const NAME: &'static str = "counter";
///     type Args = u64;
///     type Msg = u64;
///     type Reply = u64;
///
///     async fn on_start(start: u64) -> Counter {
///         Counter(start)
///     }
///
///     async fn handle(&mut self, add: u64) -> u64 {
///         self.0 += add;
///         self.0
///     }
/// }
/// ```
///
/// A handler runs on the node's actor runtime, beside other actors: one that
/// computes for long should do it in `tokio::task::spawn_blocking`. An actor that
/// calls another actor which calls it back deadlocks, as in every actor system whose
/// handlers run one at a time.
pub trait Actor: Sized + Send + 'static {
    /// Unique among the application's actor types: how a node finds the code. 1 to
    /// [`MAX_ACTOR_NAME_LEN`] (64) ASCII letters, digits, `_` and `-`: checked when the
    /// program is built, wherever the type is registered or spawned. A name that
    /// breaks the rule fails the build (error E0080, "an actor's NAME must be …",
    /// while instantiating `App::actor::<YourActor>`):
    ///
    /// ```compile_fail,E0080
    /// struct Model;
    /// impl saker::Actor for Model {
    ///     const NAME: &'static str = "my model"; // a space
    ///     type Args = u32;
    ///     type Msg = u32;
    ///     type Reply = u32;
    ///     async fn on_start(_: u32) -> Model { Model }
    ///     async fn handle(&mut self, m: u32) -> u32 { m }
    /// }
    ///
    /// fn main() {
    ///     let _app = saker::App::new().actor::<Model>();
    /// }
    /// ```
    ///
    /// The same program with `"my-model"` builds:
    ///
    /// ```
    /// struct Model;
    /// impl saker::Actor for Model {
    ///     const NAME: &'static str = "my-model";
    ///     type Args = u32;
    ///     type Msg = u32;
    ///     type Reply = u32;
    ///     async fn on_start(_: u32) -> Model { Model }
    ///     async fn handle(&mut self, m: u32) -> u32 { m }
    /// }
    ///
    /// fn main() {
    ///     let _app = saker::App::new().actor::<Model>();
    /// }
    /// ```
    const NAME: &'static str;
    /// Raise it when the meaning of a type changes without its name or size changing.
    const VERSION: u32 = 0;
    /// What it starts from (kept by the pilot, to start it again after a loss).
    type Args: Data;
    type Msg: Data;
    type Reply: Data;

    fn on_start(args: Self::Args) -> impl Future<Output = Self> + Send;
    fn handle(&mut self, message: Self::Msg) -> impl Future<Output = Self::Reply> + Send;
    /// Runs when the actor is stopped on purpose (not when its node is lost).
    fn on_stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// `A::NAME`, checked while the program is built: a name the pilot would refuse
/// fails the build where the type is used, rather than every spawn at run time.
pub(crate) fn name<A: Actor>() -> &'static str {
    const {
        assert!(
            valid_actor_name(A::NAME),
            "an actor's NAME must be 1 to 64 ASCII letters, digits, '_' or '-'"
        )
    };
    A::NAME
}

/// The identity of an actor type's types (see `task::fingerprint`).
pub(crate) fn fingerprint<A: Actor>() -> u64 {
    type_fingerprint(
        &[b"actor", name::<A>().as_bytes(), &A::VERSION.to_le_bytes()],
        &[
            type_shape::<A::Args>(),
            type_shape::<A::Msg>(),
            type_shape::<A::Reply>(),
        ],
    )
}

/// Beside `other`, on its node.
impl<A> From<&RemoteRef<A>> for Placement {
    fn from(other: &RemoteRef<A>) -> Placement {
        Placement::With(other.id)
    }
}

/// A typed handle on a placed actor. Cheap to copy, and [`Data`] itself: put it in a
/// message or a task's input, and the receiver calls the same actor.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct RemoteRef<A> {
    id: ActorId,
    /// The type's fingerprint where the handle was made: a receiver built from
    /// another version of the program sees the mismatch before sending anything.
    fingerprint: u64,
    #[rkyv(with = rkyv::with::Skip)]
    _actor: PhantomData<fn() -> A>,
}

impl<A> Clone for RemoteRef<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for RemoteRef<A> {}

impl<A> PartialEq for RemoteRef<A> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<A> Eq for RemoteRef<A> {}

impl<A> fmt::Debug for RemoteRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteRef")
            .field("id", &self.id.0)
            .field("type", &std::any::type_name::<A>())
            .finish()
    }
}

impl<A: Actor> RemoteRef<A> {
    pub(crate) fn new(id: ActorId) -> RemoteRef<A> {
        RemoteRef {
            id,
            fingerprint: fingerprint::<A>(),
            _actor: PhantomData,
        }
    }

    pub fn id(&self) -> ActorId {
        self.id
    }

    /// Sends `message` and waits for the reply. At most once: a call that fails with
    /// [`ActorError::Lost`] may or may not have been handled.
    pub async fn call(&self, message: A::Msg) -> Result<A::Reply, ActorError> {
        let data = self.encode(&message)?;
        let reply = context::call(self.id.0, data, false).await?;
        decode::<A::Reply>(&reply, "the actor's reply").map_err(invalid)
    }

    /// Sends `message` without waiting for a reply (returns once the pilot routed
    /// it). Messages from one sender reach the actor in the order they were sent.
    pub async fn cast(&self, message: A::Msg) -> Result<(), ActorError> {
        let data = self.encode(&message)?;
        context::call(self.id.0, data, true).await.map(drop)
    }

    /// Stops the actor (its `on_stop` runs); returns once it has stopped. Later
    /// calls fail with [`ActorError::Stopped`].
    pub async fn stop(&self) -> Result<(), ActorError> {
        context::link().await?.actor_stop(self.id.0).await
    }

    fn encode(&self, message: &A::Msg) -> Result<Vec<u8>, ActorError> {
        if self.fingerprint != fingerprint::<A>() {
            return Err(ActorError::TypeMismatch {
                message: format!(
                    "{} was made by another version of the program: actor type {:?} differs",
                    self.id,
                    A::NAME
                ),
            });
        }
        let archive = archive(message, "the message").map_err(invalid)?;
        if archive.len() > MAX_FUNCTION_BYTES - 8 {
            return Err(ActorError::InvalidData {
                message: format!(
                    "a message of {} bytes exceeds the limit of {MAX_FUNCTION_BYTES}",
                    archive.len() + 8
                ),
            });
        }
        let mut data = Vec::with_capacity(8 + archive.len());
        data.extend_from_slice(&self.fingerprint.to_le_bytes());
        data.extend_from_slice(&archive);
        Ok(data)
    }
}

fn invalid(error: CodecError) -> ActorError {
    ActorError::InvalidData {
        message: error.to_string(),
    }
}

pub(crate) fn archive<T: Data>(value: &T, what: &'static str) -> Result<AlignedVec, CodecError> {
    rkyv::to_bytes::<rancor::Error>(value).map_err(|error| CodecError::Archive {
        what,
        message: error.to_string(),
    })
}

/// Validates and reads one archived value.
pub(crate) fn decode<T: Data>(bytes: &[u8], what: &'static str) -> Result<T, CodecError> {
    // Archives are read in place and must be aligned; bytes arrive at any address.
    let mut aligned = AlignedVec::<16>::with_capacity(bytes.len());
    aligned.extend_from_slice(bytes);
    rkyv::from_bytes::<T, rancor::Error>(&aligned).map_err(|error| CodecError::Invalid {
        what,
        message: error.to_string(),
    })
}

/// A spawn on its way: set where and how it restarts, then `.await` it.
///
/// ```no_run
/// # use saker::{Actor, Placement, Restart};
/// # struct Model;
/// # impl Actor for Model {
/// #     const NAME: &'static str = "model";
/// #     type Args = u32; type Msg = u32; type Reply = u32;
/// #     async fn on_start(_: u32) -> Model { Model }
/// #     async fn handle(&mut self, m: u32) -> u32 { m }
/// # }
/// # async fn f(pilot: saker::Pilot) -> Result<(), saker::ActorError> {
/// let model = pilot
///     .spawn::<Model>(10)
///     .on(Placement::Node(1))
///     .restart(Restart::OnNodeLoss { max_restarts: 3 })
///     .await?;
/// let reply = model.call(5).await?;
/// # Ok(()) }
/// ```
#[must_use = "a spawn does nothing until it is awaited"]
pub struct Spawn<A: Actor> {
    args: A::Args,
    placement: Placement,
    restart: Restart,
}

impl<A: Actor> fmt::Debug for Spawn<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawn")
            .field("actor", &A::NAME)
            .field("placement", &self.placement)
            .field("restart", &self.restart)
            .finish_non_exhaustive()
    }
}

impl<A: Actor> Spawn<A> {
    pub(crate) fn new(args: A::Args) -> Spawn<A> {
        Spawn {
            args,
            placement: Placement::Any,
            restart: Restart::Never,
        }
    }

    /// Where its first life runs (default [`Placement::Any`]).
    pub fn on(mut self, placement: impl Into<Placement>) -> Spawn<A> {
        self.placement = placement.into();
        self
    }

    /// What happens when a life ends (default [`Restart::Never`]).
    pub fn restart(mut self, restart: Restart) -> Spawn<A> {
        self.restart = restart;
        self
    }

    async fn run(self) -> Result<RemoteRef<A>, ActorError> {
        let args = archive(&self.args, "the spawn arguments").map_err(invalid)?;
        if args.len() > MAX_FUNCTION_BYTES {
            return Err(ActorError::InvalidData {
                message: format!(
                    "spawn arguments of {} bytes exceed the limit of {MAX_FUNCTION_BYTES}",
                    args.len()
                ),
            });
        }
        let request = ActorSpawnRequest {
            name: name::<A>().to_owned(),
            fingerprint: fingerprint::<A>(),
            args: args.to_vec(),
            placement: self.placement,
            restart: self.restart,
        };
        let link = context::link().await?;
        let actor = link.actor_spawn(request).await?;
        Ok(RemoteRef::new(ActorId(actor)))
    }
}

impl<A: Actor> IntoFuture for Spawn<A> {
    type Output = Result<RemoteRef<A>, ActorError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// Starts an actor from anywhere in the application: the driver, a task, or another
/// actor (which reaches the pilot through its client socket).
pub fn spawn<A: Actor>(args: A::Args) -> Spawn<A> {
    Spawn::new(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(u64);
    impl Actor for Counter {
        const NAME: &'static str = "counter";
        type Args = u64;
        type Msg = u64;
        type Reply = u64;
        async fn on_start(start: u64) -> Counter {
            Counter(start)
        }
        async fn handle(&mut self, add: u64) -> u64 {
            self.0 += add;
            self.0
        }
    }

    struct Named;
    impl Actor for Named {
        const NAME: &'static str = "counter";
        type Args = u64;
        type Msg = String;
        type Reply = u64;
        async fn on_start(_: u64) -> Named {
            Named
        }
        async fn handle(&mut self, text: String) -> u64 {
            text.len() as u64
        }
    }

    #[test]
    fn actor_types_that_differ_have_different_fingerprints() {
        assert_ne!(fingerprint::<Counter>(), fingerprint::<Named>());
        assert_eq!(fingerprint::<Counter>(), fingerprint::<Counter>());
    }

    #[test]
    fn a_remote_ref_travels_inside_data() {
        let counter = RemoteRef::<Counter>::new(ActorId(42));
        let bytes = archive(&(counter, 7u32), "a message").unwrap();
        let (back, seven): (RemoteRef<Counter>, u32) = decode(&bytes, "a message").unwrap();
        assert_eq!(back, counter);
        assert_eq!(back.id(), ActorId(42));
        assert_eq!(Placement::from(&back), Placement::With(ActorId(42)));
        assert_eq!(seven, 7);
        assert!(back.encode(&3).is_ok());
    }

    #[test]
    fn restart_is_the_protocols_own_type_and_keeps_its_variants() {
        // One type: a `Restart` is what the spawn request carries, unconverted.
        let spawn = Spawn::<Counter>::new(1).restart(Restart::OnNodeLoss { max_restarts: 3 });
        let protocol: saker_client::actors::ActorRestart = spawn.restart;
        assert_eq!(protocol, Restart::OnNodeLoss { max_restarts: 3 });
        assert_eq!(Restart::default(), Restart::Never);
        // The variants a program names (source-compatible with the former enum).
        for restart in [
            Restart::Never,
            Restart::OnNodeLoss { max_restarts: 1 },
            Restart::Always { max_restarts: 2 },
        ] {
            let copied = restart;
            assert_eq!(format!("{copied:?}"), format!("{restart:?}"));
        }
        assert_eq!(name::<Counter>(), "counter");
    }

    #[test]
    fn a_message_carries_its_fingerprint_and_garbage_is_refused() {
        let counter = RemoteRef::<Counter>::new(ActorId(1));
        let data = counter.encode(&5).unwrap();
        assert_eq!(data[..8], fingerprint::<Counter>().to_le_bytes());
        assert_eq!(decode::<u64>(&data[8..], "m").unwrap(), 5);
        assert!(decode::<String>(&[0xff; 3], "m").is_err());
    }
}
