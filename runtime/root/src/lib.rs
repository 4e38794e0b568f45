//! The root of a Saker pilot, as a library: the root actor that drives the pure
//! scheduling core, the agent registry, client sessions and their protocol, the
//! journal's records, walltime, and starting a whole pilot (pilot directory,
//! credentials, QUIC endpoint, client socket, agent processes).
//!
//! **Owns:** everything the pilot process does above the transport: turning client
//! requests into core inputs, core outputs into frames, journal records and replies;
//! the job specification format (`spec`, task files); result records.
//!
//! **Must never:** parse command lines or print for people (the `saker` binary in
//! `pilot/` does that), exit the process, or block a tokio worker. Errors are typed
//! ([`PilotError`], [`client::ClientError`], [`spec::SpecError`], …), never `anyhow`.
//!
//! **Start reading** at [`actor`]: the root actor's loop feeds `saker-core` and
//! drains its outputs. [`pilot::Pilot::start`] assembles a pilot around it; the
//! `saker` CLI and applications that embed a pilot both go through it. [`client`] is
//! the client protocol (server and Rust client).
//!
//! **Key decision: clients speak newline-delimited JSON over TLS, not the agents'
//! rkyv frames.** Clients are Python, Parsl and shell scripts; JSON is what they can
//! speak with their standard library, and the client boundary is not the hot path (a
//! million-task array is one request, results stream in batches). Inside the tree,
//! where every task crosses several hops, the compact validated binary frames pay.

pub mod actor;
pub mod attempts;
pub mod client;
mod error;
pub mod local;
pub mod pilot;
pub mod records;
pub mod results;
pub mod slurm;
pub mod spec;
pub mod taskfile;

pub use error::PilotError;
pub use local::AgentCommand;
pub use pilot::{Agents, Pilot, PilotOptions};
