//! Typed errors: how a task can fail ([`TaskError`]) and how the driver's use of the
//! pilot can fail ([`Error`]).

use std::path::PathBuf;

/// Why a task gave no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The task's code panicked (on its last attempt, when it had retries).
    #[error("the task panicked: {message}")]
    Panicked { message: String },
    /// The worker that ran it has no task of this name: the pilot's workers run
    /// another program than the driver.
    #[error("{message}")]
    UnknownTask { message: String },
    /// The driver and the worker were built from different versions of the program
    /// and disagree on the task's types.
    #[error("{message}")]
    TypeMismatch { message: String },
    /// The input or the output did not validate (a corrupted or foreign archive).
    #[error("invalid data: {message}")]
    InvalidData { message: String },
    /// The pilot ended the task without an answer: time limit, lost too many times,
    /// its worker could not start. `reason` is the pilot's own words.
    #[error("the task failed: {reason}")]
    Failed { reason: String },
    /// Cancelled before it finished.
    #[error("the task was cancelled")]
    Cancelled,
    /// The driver lost the pilot before the task's result came.
    #[error("the pilot is gone: {reason}")]
    PilotGone { reason: String },
}

/// Why an actor call, cast, spawn or stop gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActorError {
    /// The actor's node was lost while the call was in flight, or no node runs it
    /// now. The call may or may not have been handled (at most once).
    #[error("the actor was lost: {message}")]
    Lost { message: String },
    /// This call's handler panicked (that life of the actor ended), or `on_start`
    /// panicked at the spawn. Later calls do not answer this: see `Unknown`.
    #[error("the actor panicked: {message}")]
    Panicked { message: String },
    /// No such actor, or it has ended for good: no restart was left after a panic
    /// or the loss of its node (the message says how it ended). The call was not
    /// handled, and will never be: spawn a new actor.
    #[error("{message}")]
    Unknown { message: String },
    /// The node's program has another type under the actor's name (another build),
    /// or none.
    #[error("{message}")]
    TypeMismatch { message: String },
    /// A message, reply or the spawn arguments did not validate as their type.
    #[error("invalid data: {message}")]
    InvalidData { message: String },
    /// No node of the pilot can host actors: its agents are not this program. The
    /// message says what to do: start the pilot with `--app <your binary>`.
    #[error("{message}")]
    NoHost { message: String },
    /// The actor was stopped (by [`crate::RemoteRef::stop`]) before it answered this
    /// call.
    #[error("the actor was stopped: {message}")]
    Stopped { message: String },
    /// The pilot refused the request (a bad placement, shutting down).
    #[error("the pilot refused: {message}")]
    Refused { message: String },
    /// The pilot could not be reached.
    #[error("the pilot is gone: {reason}")]
    PilotGone { reason: String },
}

impl ActorError {
    /// The typed error for a node's answer that a call failed.
    pub(crate) fn from_fault(
        fault: saker_wire::messages::ActorFault,
        message: String,
    ) -> ActorError {
        use saker_wire::messages::ActorFault;
        match fault {
            ActorFault::Unknown => ActorError::Unknown { message },
            ActorFault::Lost => ActorError::Lost { message },
            ActorFault::Panicked => ActorError::Panicked { message },
            ActorFault::TypeMismatch => ActorError::TypeMismatch { message },
            ActorFault::InvalidData => ActorError::InvalidData { message },
            ActorFault::NoHost => ActorError::NoHost { message },
            ActorFault::Stopped => ActorError::Stopped { message },
        }
    }

    /// The typed error for a pilot's refusal of an actor request.
    pub(crate) fn from_request(error: saker_client::RequestError) -> ActorError {
        use saker_client::ErrorKind;
        let message = error.message;
        match error.kind {
            ErrorKind::ActorLost => ActorError::Lost { message },
            ErrorKind::ActorPanicked => ActorError::Panicked { message },
            ErrorKind::UnknownActor => ActorError::Unknown { message },
            ErrorKind::ActorTypeMismatch => ActorError::TypeMismatch { message },
            ErrorKind::ActorInvalidData => ActorError::InvalidData { message },
            ErrorKind::NoActorHost => ActorError::NoHost { message },
            ErrorKind::ActorStopped => ActorError::Stopped { message },
            ErrorKind::Unavailable => ActorError::PilotGone { reason: message },
            _ => ActorError::Refused { message },
        }
    }
}

/// Why a driver could not start, reach or use its pilot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start the embedded pilot in {dir}")]
    Start {
        dir: PathBuf,
        #[source]
        source: Box<saker_root::PilotError>,
    },
    #[error("cannot reach the pilot in {dir}")]
    Connect {
        dir: PathBuf,
        #[source]
        source: Box<saker_client::ClientError>,
    },
    #[error("the pilot refused the request: {message}")]
    Refused { message: String },
    #[error("the pilot is gone: {reason}")]
    PilotGone { reason: String },
    /// The connection broke (the pilot's root died, a standby took over) after the
    /// request was sent and before its answer: it may or may not have been taken,
    /// and sending it again could run it twice. Later requests go to the new root.
    #[error(
        "the pilot's root changed before it answered ({reason}): the request may or may not have been taken"
    )]
    Unanswered { reason: String },
    #[error("cannot create a directory for the embedded pilot")]
    TempDir(#[source] std::io::Error),
    #[error("cannot find this program's own path")]
    CurrentExe(#[source] std::io::Error),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("invalid embedded pilot shape: {0}")]
    Shape(String),
}
