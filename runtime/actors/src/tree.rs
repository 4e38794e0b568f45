//! Where a process sits in the pilot's tree, and why an agent's place in it failed:
//! the errors of finding, keeping and losing a parent. Below both the agent actor
//! (which ends with [`ParentLost`]) and the process that runs it ([`crate::node`]),
//! so neither imports the other for them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use saker_transport::stream::StreamError;

use crate::liveness::ReadError;

/// Where a process sits in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Root,
    Agent(u32),
}

impl Position {
    /// The role whose certificate the process at this position presents.
    pub fn role(self) -> saker_transport::Role {
        match self {
            Position::Root => saker_transport::Role::Root,
            Position::Agent(_) => saker_transport::Role::Agent,
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Root => f.write_str("the root"),
            Position::Agent(n) => write!(f, "agent {n}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("parent address file {path} did not appear within {waited:?}")]
    ParentNotFound { path: PathBuf, waited: Duration },
    #[error("parent address file {path} is not a socket address")]
    BadAddress {
        path: PathBuf,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("could not publish this agent's address in {path}")]
    Publish {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("transport setup failed")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot reach the pilot's tree from here")]
    Unreachable(#[source] DialError),
    #[error("no live ancestor answered within {waited:?}")]
    NoAncestor {
        waited: Duration,
        /// The last ancestor's answer.
        #[source]
        last: DialError,
    },
    #[error("the agent actor could not start")]
    Spawn(#[source] ractor::SpawnErr),
}

/// Why dialing an ancestor failed.
#[derive(Debug, thiserror::Error)]
#[error("dialing {position} failed")]
pub struct DialError {
    pub position: Position,
    #[source]
    pub kind: DialErrorKind,
}

#[derive(Debug, thiserror::Error)]
pub enum DialErrorKind {
    #[error("cannot read its address file {path}")]
    ReadAddress {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("its address file {path} holds no socket address")]
    BadAddress {
        path: PathBuf,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("cannot connect")]
    Connect(#[source] saker_transport::quic::ConnectError),
    #[error("cannot open the link's stream")]
    OpenStream(#[source] quinn::ConnectionError),
    #[error("the link's preamble failed")]
    Preamble(#[source] StreamError),
    #[error("reading its link hello failed")]
    Read(#[source] ReadError),
    #[error("it sent no link hello")]
    NoHello,
    #[error("its address file {path} changed while dialing the address it held")]
    AddressChanged { path: PathBuf },
    #[error("no answer from {address} within {waited:?}")]
    NoAnswer {
        address: SocketAddr,
        waited: Duration,
    },
    /// The address file is stale and its port reused.
    #[error("{address} is position {theirs}, someone else")]
    WrongPosition { address: SocketAddr, theirs: u32 },
    #[error("{address} belongs to another root (session {theirs:x}, not {expected:x})")]
    WrongSession {
        address: SocketAddr,
        theirs: u64,
        expected: u64,
    },
    /// Bound to loopback, this agent cannot send to another host's address.
    #[error(
        "this agent listens on {local} and cannot reach {address}: start it with --bind 0.0.0.0 (and --advertise its address)"
    )]
    LoopbackOnly {
        local: SocketAddr,
        address: SocketAddr,
    },
}

/// Why the link to the parent ended.
#[derive(Debug, thiserror::Error)]
pub enum ParentLinkError {
    #[error("the parent closed the link")]
    Closed,
    #[error("reading from the parent failed")]
    Read(#[source] ReadError),
    #[error("writing to the parent failed")]
    Write(#[source] StreamError),
    #[error("the parent sent an invalid frame")]
    InvalidFrame(#[source] saker_wire::WireError),
    #[error("the agent has stopped")]
    AgentStopped,
    #[error("a newer agent linked as node {node}; this one is a stale copy and stops")]
    Superseded { node: u32 },
    #[error("another root of the pilot took over (a standby)")]
    RootReplaced,
}

/// Why an agent that lost its parent gave up: no ancestor of the same root took it
/// back in time.
#[derive(Debug, thiserror::Error)]
#[error("lost the parent link, and no live ancestor took this agent back")]
pub struct ParentLost {
    /// Why the link to the parent ended.
    pub lost: ParentLinkError,
    /// Why no ancestor took its place.
    #[source]
    pub search: NodeError,
}
