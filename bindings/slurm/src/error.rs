//! The crate's error types.

use std::io;
use std::path::PathBuf;

use crate::SlurmJobId;
use crate::hostlist::HostlistSyntaxError;

/// Everything that can go wrong talking to Slurm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SlurmError {
    /// This build has no libslurm (`slurm/slurm.h` was missing when `saker-slurm-sys`
    /// was built, or `SAKER_LIBSLURM=0`), and Slurm's commands that stand in for it
    /// ([`crate::commands`]) are not on `PATH`. Hostlists and
    /// [`crate::JobInfo::from_env`] still work.
    #[error(
        "libslurm is not available: this build has none (and squeue, sbatch and scancel, \
         which stand in for it, are not on PATH)"
    )]
    Unavailable,

    /// libslurm would find no configuration, and `slurm_init` would then end the whole
    /// process (`fatal()`); we refuse before calling it.
    #[error(
        "no slurm configuration: set SLURM_CONF (or SLURM_CONF_SERVER), or provide \
         /etc/slurm/slurm.conf or /run/slurm/conf/slurm.conf"
    )]
    NoConfig,

    /// `SLURM_CONF` names a file that cannot be read (libslurm would end the process).
    #[error("cannot read the slurm configuration {path} named by SLURM_CONF")]
    UnreadableConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The process is not inside a Slurm job: `SLURM_JOB_ID` is unset.
    #[error("not inside a slurm job: SLURM_JOB_ID is not set")]
    NotInJob,

    /// Slurm does not know the job (never existed, or purged after `MinJobAge`).
    #[error("slurm does not know job {job_id}")]
    UnknownJob { job_id: SlurmJobId },

    /// The job has already finished, so it cannot be signalled.
    #[error("job {job_id} has already finished")]
    JobFinished { job_id: SlurmJobId },

    /// The pure-Rust parser rejected a hostlist expression.
    #[error("invalid hostlist expression {expression:?}")]
    InvalidHostlist {
        expression: String,
        #[source]
        source: HostlistSyntaxError,
    },

    /// libslurm rejected a hostlist expression (it logs the reason to stderr itself).
    #[error("libslurm rejected the hostlist expression {expression:?}")]
    HostlistRejected { expression: String },

    /// A Slurm environment variable has a value we cannot read.
    #[error("environment variable {variable} has an invalid value {value:?}")]
    InvalidEnvironment {
        variable: &'static str,
        value: String,
        #[source]
        source: EnvValueError,
    },

    /// A string passed to libslurm contains a NUL byte, which C cannot represent.
    #[error("{field} contains a NUL byte")]
    InteriorNul { field: &'static str },

    /// A request field is out of the range Slurm accepts.
    #[error("invalid {field}: {reason}")]
    InvalidRequest {
        field: &'static str,
        reason: &'static str,
    },

    /// A Slurm command run in place of libslurm ([`crate::commands`]) failed;
    /// `message` is what it printed on stderr.
    #[error("{command} failed: {message}")]
    Command {
        command: &'static str,
        message: String,
    },

    /// A libslurm call failed; the cause carries Slurm's errno and message.
    #[error("{call} failed")]
    Call {
        call: &'static str,
        #[source]
        source: SlurmErrno,
    },
}

/// Slurm's error number (`slurm_get_errno`) and its message (`slurm_strerror`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("slurm error {code}: {message}")]
pub struct SlurmErrno {
    /// A Slurm error code (`slurm_errno.h`, e.g. 2017 for an invalid job id) or an
    /// operating-system errno.
    pub code: i32,
    pub message: String,
}

/// Why a Slurm environment variable could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvValueError {
    #[error("not a number")]
    Number(#[source] std::num::ParseIntError),
    #[error("malformed CPU count {item:?} (expected N or N(xM))")]
    CpuCount { item: String },
    #[error("describes {counts} nodes but the node list has {nodes}")]
    CountMismatch { counts: usize, nodes: usize },
    #[error("describes more than {limit} nodes")]
    TooManyNodes { limit: usize },
    #[error("not a hostlist")]
    Hostlist(#[source] HostlistSyntaxError),
}
