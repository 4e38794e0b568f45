//! Saker's Rust API: typed tasks and placed actors on a Saker pilot, from one binary
//! that is the driver, the pilot's agents (which host its actors) and its workers.
//!
//! ```toml
//! [dependencies]
//! saker = { path = "../saker/api" }   # or: saker = { git = "<URL of the Saker repository>" }
//! ```
//!
//! An application implements [`Task`] for each kind of work (input → output, both
//! rkyv types), registers them on an [`App`], and runs its driver code with a
//! [`Pilot`]: `submit` returns a [`TaskHandle`], a future of the output; `map`
//! returns a [`MapStream`] of outputs in input order (or, unordered, as they come).
//!
//! It implements [`Actor`] for state that lives on one node and answers messages one
//! at a time; [`Pilot::spawn`] places one ([`Placement`], [`Restart`]) and gives a
//! [`RemoteRef`], a typed handle to `call`, `cast` and `stop` it from anywhere, which
//! itself travels inside messages and task inputs.
//!
//! ```no_run
//! use saker::{App, Task, TaskError};
//!
//! struct Square;
//!
//! impl Task for Square {
//!     const NAME: &'static str = "square";
//!     type Input = u64;
//!     type Output = u64;
//!
//!     async fn run(x: u64) -> u64 {
//!         x * x
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     App::new().task::<Square>().run(|pilot| async move {
//!         println!("{}", pilot.submit::<Square>(7).await?);
//!         let mut squares = pilot.map::<Square, _>(0..1000u64);
//!         let mut sum = 0;
//!         while let Some((_, square)) = squares.next().await {
//!             sum += square?;
//!         }
//!         println!("{sum}");
//!         Ok::<_, TaskError>(())
//!     })
//! }
//! ```
//!
//! Run as it is, the program starts an embedded pilot on this machine (its agents
//! and workers are processes of the same binary). Under `saker run --app ./myapp` or
//! `saker pilot --app ./myapp` (inside `sbatch`), it drives that pilot instead, and
//! its tasks run on the allocation's nodes and its actors in their agents;
//! `--pilot-dir DIR` attaches to any pilot whose agents are the app or were given
//! `--worker rust=./myapp` (tasks only).
//!
//! **Owns:** the typed layer: encoding calls and answers (validated rkyv), the
//! worker loop, batching submissions, routing results to their waiters, the actor
//! host an agent of the app runs. **Must never:** bypass the pilot's scheduling,
//! journal or client protocol; everything a typed task does, a function task of kind
//! `rust` does for any client, and every actor request a driver makes is one of
//! the client protocol's (`docs/protocol.md`).
//! `docs/rust-api.md` is the guide.

mod actor;
mod app;
mod command;
mod context;
mod error;
mod host;
mod link;
mod objects;
mod options;
mod pilot;
mod remote;
mod submit;
mod task;
mod worker;

pub use actor::{Actor, ActorId, MAX_ACTOR_NAME_LEN, Placement, RemoteRef, Restart, Spawn, spawn};
pub use app::{App, CLI_ARGUMENT, DEFAULT_KIND, PILOT_DIR_VAR};
pub use command::{Command, CommandOutput, Launcher, Mpi};
pub use error::{ActorError, Error, TaskError};
pub use host::node;
pub use objects::{Mapped, ObjectError, Ref};
pub use options::TaskOptions;
pub use pilot::Pilot;
/// The pilot's id of a job: what [`TaskHandle::job`] gives and
/// [`TaskOptions::after`] takes.
pub use saker_client::results::JobId;
pub use submit::{MapStream, Submitter, TaskHandle};
pub use task::{CodecError, Data, Task};

/// The rkyv this crate archives with: derive `Archive`, `Serialize` and `Deserialize`
/// from it for task inputs and outputs.
pub use rkyv;
