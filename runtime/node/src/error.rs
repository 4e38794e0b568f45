//! What can go wrong serving a role: a command line the role cannot take
//! ([`FlagError`]), or a role that could not start or keep running ([`Error`]).

use std::path::PathBuf;

/// A flag, or the Slurm variable that stands in for it, that a role cannot take.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error("unknown flag '{flag}'")]
    Unknown { flag: String },
    #[error("{flag} needs a value")]
    NoValue { flag: String },
    /// Anything else lexopt refuses (a value where none is taken), in its words.
    #[error("{0}")]
    Syntax(lexopt::Error),
    #[error("{flag} is required")]
    Missing { flag: &'static str },
    #[error("{flag} {value:?}: {reason}")]
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("{flag} requires {required}")]
    Requires {
        flag: &'static str,
        required: &'static str,
    },
    #[error("{flag}: {name:?} is given twice")]
    Twice { flag: &'static str, name: String },
    #[error("{flag} is required outside a Slurm step ({variable} is unset)")]
    NotInSlurm {
        flag: &'static str,
        variable: &'static str,
    },
    #[error("{variable}={value:?}: {reason}")]
    Environment {
        variable: &'static str,
        value: String,
        reason: String,
    },
    #[error("--subtree-base plus SLURM_NODEID is beyond the node ids")]
    SubtreeOverflow,
    #[error("--node {node} is below --subtree-base {base}: it would not be in its subtree")]
    BelowSubtree { node: u32, base: u32 },
    #[error("an agent needs at least one core")]
    NoCores,
    #[error(transparent)]
    Liveness(#[from] saker_actors::liveness::LivenessError),
}

impl From<lexopt::Error> for FlagError {
    fn from(error: lexopt::Error) -> Self {
        match error {
            lexopt::Error::UnexpectedOption(flag) => FlagError::Unknown { flag },
            lexopt::Error::MissingValue { option: Some(flag) } => FlagError::NoValue { flag },
            other => FlagError::Syntax(other),
        }
    }
}

/// Why a role could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Flags(#[from] FlagError),
    #[error("opening pilot directory {}", path.display())]
    PilotDir {
        path: PathBuf,
        #[source]
        source: saker_transport::pilot_dir::DirError,
    },
    /// The address other nodes would reach this one at.
    #[error(transparent)]
    Address(#[from] crate::address::AddressError),
    #[error(transparent)]
    Agent(#[from] saker_actors::node::NodeError),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
}
