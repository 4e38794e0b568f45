//! The `saker` command: the pilot process (root), local mode, the client socket and
//! its commands, and the journal's record types.
//!
//! Start reading at [`root`]: the root actor drives the pure scheduling core
//! (`saker-core`) from messages — agent frames, client requests, journal
//! acknowledgements, timers — and turns its outputs into frames, journal records and
//! replies. [`pilot`] starts it with its endpoint, socket and agents; [`run`] is
//! `saker run` on top of that.
//!
//! Design choice: clients speak newline-delimited JSON over TLS, not the agents' rkyv
//! frames. Clients are Python, Parsl and shell scripts; JSON is what they can speak
//! with their standard library, and the client boundary is not the hot path (a
//! million-task array is one request, results stream in batches). Inside the tree,
//! where every task crosses several hops, the compact validated binary frames pay.

pub mod agent;
pub mod attempts;
pub mod chain;
pub mod cli;
pub mod client;
pub mod commands;
pub mod local;
pub mod pilot;
pub mod progress;
pub mod records;
pub mod results;
pub mod root;
pub mod run;
pub mod slurm;
pub mod spec;
pub mod submission;
pub mod taskfile;
pub mod template;
