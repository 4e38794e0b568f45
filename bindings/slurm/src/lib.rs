//! Safe access to Slurm for Saker: hostlist expansion, what a job is (its nodes, CPUs
//! and end time), batch submission and cancellation, through libslurm.
//!
//! **Owns**: every call into libslurm (`saker-slurm-sys`), their memory rules and
//! error numbers, the pure-Rust hostlist parser, the reading of a job's `SLURM_*`
//! environment, and [`commands`]: `squeue`/`sbatch`/`scancel` in place of libslurm
//! in a build without it.
//!
//! **Must never**: let libslurm end the process (its `fatal()` on a missing
//! configuration is checked for before `slurm_init`; see `config.rs`), spawn Slurm's
//! command-line tools in a build that has libslurm, or require Slurm to build or to
//! start. Without `slurm/slurm.h` at build time (or with `SAKER_LIBSLURM=0`: the
//! wheel's binary, which must start where libslurm is not installed) job info,
//! submission and cancel run Slurm's commands ([`commands`]), and return
//! [`SlurmError::Unavailable`] where those are not on `PATH` either, while
//! [`hostlist::expand`] and [`JobInfo::from_env`] keep working, so local mode runs.
//!
//! **Start reading** at [`job_info`] and [`JobInfo`], then [`submit_batch`] and
//! [`cancel`]; `libslurm.rs` holds all the `unsafe` code (the only module allowed
//! it), each block with its SAFETY reasoning; `hostlist.rs` documents Slurm's hostlist
//! grammar as libslurm 22.05 really parses it. `tests/cluster.rs` checks everything
//! against `scontrol` on a real cluster (`scripts/slurm-cluster/up.sh`).
//!
//! **Key decision: libslurm, not `scontrol`/`sbatch` output.** A pilot needs its
//! allocation's exact node list and end time, and to submit a continuation job, at
//! start-up and again while draining. Parsing command output would tie us to text
//! formats meant for people (and to a fork per query); libslurm gives typed fields, the
//! exact Unix end time, and Slurm's own errno (`2017` = unknown job) rather than
//! scraped messages. The cost is FFI against a library without a stable ABI, which is
//! why the bindings are generated from the installed header at build time, and why
//! the environment fallback exists for machines where that is impossible. A binary
//! built once for many sites (a wheel) cannot link a library without a stable ABI (a
//! new soname every Slurm release): it runs the commands instead (`commands.rs`),
//! reading only their script-oriented output (`--parsable`, `--format`, Unix times).

pub mod commands;
mod config;
mod error;
pub mod hostlist;
mod job;
#[cfg(saker_slurm)]
#[allow(unsafe_code)] // FFI; every block has a SAFETY comment.
mod libslurm;
mod submit;

pub use error::{EnvValueError, SlurmErrno, SlurmError};
pub use hostlist::{HostlistSyntaxError, expand_hostlist, expand_hostlist_fallback};
pub use job::{JobInfo, SlurmJobId, current_job, job_info, user_jobs};
pub use submit::{BatchRequest, cancel, submit_batch};

/// `true` if this build links libslurm (Slurm's headers were found when
/// `saker-slurm-sys` was built). Says nothing about whether a cluster is reachable.
pub fn available() -> bool {
    cfg!(saker_slurm)
}
