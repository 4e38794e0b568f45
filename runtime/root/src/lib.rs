//! The root of a Saker pilot, as a library: the root actor that drives the pure
//! scheduling core, the agent registry, client sessions, the journal's records,
//! walltime, and starting a whole pilot (pilot directory, credentials, QUIC endpoint,
//! client socket, agent processes, standby roots).
//!
//! **Owns:** everything the pilot process does above the transport: turning client
//! requests into core inputs, core outputs into frames, journal records and replies.
//! The vocabulary it speaks with clients (the protocol, specs, task files, result
//! records) is `saker-client`'s, re-exported under [`client`], [`spec`],
//! [`taskfile`], [`results`] and [`attempts`].
//!
//! **Must never:** parse command lines or print for people (the `saker` binary in
//! `pilot/` does that: what a person should see is a [`Notice`] handed to its
//! caller), exit the process, or block a tokio worker. Errors are typed
//! ([`PilotError`], [`saker_client::ClientError`], [`saker_client::spec::SpecError`],
//! …), never `anyhow`.
//!
//! **Start reading** at [`actor`]: the root actor's loop feeds `saker-core` and
//! drains its outputs. [`pilot::Pilot::start`] assembles a pilot around it; the
//! `saker` CLI and applications that embed a pilot both go through it. [`client`] is
//! the client protocol's server.
//!
//! Embedding a pilot: an application starts one, hands the root requests as a client
//! would, and stops it. Agents are processes of a program the application names (here
//! the `saker` binary's `agent` subcommand; an application can serve the same role
//! from its own binary with `saker_actors::node::run_agent`), and so are standby
//! roots, if it asks for them ([`PilotOptions::standbys`], [`standbys`]).
//!
//! ```no_run
//! use saker_client::WaitReport;
//! use saker_client::spec::{JobRequest, TaskSpec};
//! use saker_root::client::ClientRequest;
//! use saker_root::local::{Shape, ShapeRequest};
//! use saker_root::{AgentCommand, Agents, Pilot, PilotOptions};
//! use tokio::sync::oneshot;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let shape = Shape::new(ShapeRequest { agents: Some(2), slots: None, fanout: 16, allow_none: false })?;
//! let pilot = Pilot::start(PilotOptions {
//!     dir: "/tmp/my-pilot".into(),
//!     agents: Agents::Local(shape),
//!     agent_command: AgentCommand {
//!         program: "saker".into(),
//!         args: vec!["agent".into()],
//!         env: Vec::new(),
//!     },
//!     sync: true,
//!     resume: false,
//!     take_over: false,
//!     deadline_unix_us: None,
//!     liveness: Default::default(),
//!     core: Default::default(),
//!     // GPUs, memory and CPUs: what each agent finds on this machine.
//!     nodes: Default::default(),
//!     journal: Default::default(),
//!     elastic: None,
//!     standbys: None,
//!     notices: Default::default(),
//! })
//! .await?;
//! let job = JobRequest::single(TaskSpec::new(vec!["hostname".into()]));
//! let (reply, submitted) = oneshot::channel();
//! pilot.request(ClientRequest::Submit { jobs: vec![job], wait: None, reply })?;
//! println!("{:?}", submitted.await??);
//! let (reply, done) = oneshot::channel();
//! pilot.request(ClientRequest::Wait { jobs: None, reply })?;
//! let report: WaitReport = done.await??;
//! println!("{} succeeded", report.succeeded);
//! pilot.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! **Key decision: clients speak newline-delimited JSON over TLS, not the agents'
//! rkyv frames.** Clients are Python, Parsl and shell scripts; JSON is what they can
//! speak with their standard library, and the client boundary is not the hot path (a
//! million-task array is one request, results stream in batches). Inside the tree,
//! where every task crosses several hops, the compact validated binary frames pay.

pub mod actor;
pub mod client;
pub mod compact;
mod error;
pub mod local;
pub mod lock;
pub mod notice;
pub mod offer;
pub mod pilot;
pub mod records;
pub mod slurm;
pub mod standbys;

pub use error::PilotError;
pub use local::AgentCommand;
pub use notice::{Notice, Notices};
pub use pilot::{Agents, ElasticOptions, Pilot, PilotOptions};
pub use standbys::StandbyOptions;
