//! The roles a node's process plays, as a library: the **agent** (`agent`), its
//! watchdog (`reaper`), the remote shell of an HPC job's MPI launcher (`rsh-agent`),
//! a script job's launcher of ranks (`mpiexec`), and the first step of a
//! memory-limited task (`cgroup-exec`). [`serve`] takes a
//! command line whose first argument names one of them.
//!
//! It exists so that two binaries can serve these roles without either carrying the
//! other: the `saker` command line (`saker agent …`, crate `saker-pilot`) and every
//! application built on the `saker` API crate, whose own binary is its pilot's agents
//! (`myapp __saker agent …`). The agent's flags are defined here once, for both, and
//! written here for the root that starts agents ([`offer::agent_arguments`]), so a
//! writer and its reader cannot drift apart.
//!
//! It must never depend on the root (the root depends on it, for those flags and for
//! [`address::host_address`]; an agent links the vocabulary, `saker-client`, not the
//! root's journal, libslurm and actor) nor on the command-line crate, nor pull in
//! clap, ratatui, plotters, hyper, prometheus-client or indicatif: an application
//! links this crate, and the API crate's tests fail if its dependency tree holds any
//! of them. Its flags are parsed with `lexopt`, which has no dependencies. It prints
//! for people only what a role must (usage, a fatal error) and returns typed errors
//! ([`Error`]).

pub mod address;
pub mod agent;
mod error;
pub mod flags;
pub mod offer;

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::process::ExitCode;

pub use error::{Error, FlagError};
pub use flags::{AgentArgs, Parsed};

/// The remote shell an HPC job's MPI launcher runs (`saker_actors::gang::endpoint`).
pub const REMOTE_SHELL: &str = "rsh-agent";

/// A role a node's process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// One agent of a pilot's tree.
    Agent,
    /// The agent's watchdog, which kills its running tasks if it dies.
    Reaper,
    /// The remote shell of an HPC job's MPI launcher.
    RemoteShell,
    /// A memory-limited task's first step: join its cgroup, become the task.
    CgroupExec,
    /// `saker mpiexec`: a script job's ranks, started by the agents.
    Mpiexec,
}

impl Role {
    /// Every role, in the order usage lists them.
    pub const ALL: [Role; 5] = [
        Role::Agent,
        Role::Reaper,
        Role::RemoteShell,
        Role::CgroupExec,
        Role::Mpiexec,
    ];

    /// The argument that names this role.
    pub fn argument(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Reaper => saker_actors::reaper::SUBCOMMAND,
            Role::RemoteShell => REMOTE_SHELL,
            Role::CgroupExec => saker_actors::resources::cgroup::EXEC_SUBCOMMAND,
            Role::Mpiexec => "mpiexec",
        }
    }

    /// The role `argument` names, if any.
    pub fn named(argument: &OsStr) -> Option<Role> {
        Role::ALL
            .into_iter()
            .find(|role| argument == role.argument())
    }
}

/// Serves the role the first of `args` names (the command line after the program's
/// name: `["agent", "--dir", …]`) and returns its exit code when it ends; `None`, doing
/// nothing, when the first argument names no role.
pub fn serve(args: Vec<OsString>) -> Option<ExitCode> {
    let (first, rest) = args.split_first()?;
    let code = match Role::named(first)? {
        Role::Agent => serve_agent(rest.to_vec()),
        Role::Reaper => serve_reaper(rest.to_vec()),
        // ssh's arguments, not flags of ours (see saker_actors::gang::endpoint).
        Role::RemoteShell => exit_code(saker_actors::gang::endpoint::rsh_agent_main(&lossy(rest))),
        Role::CgroupExec => exit_code(saker_actors::resources::cgroup::exec_main(rest)),
        // An MPI launcher's arguments, not flags of ours.
        Role::Mpiexec => exit_code(saker_actors::gang::mpiexec::mpiexec_main(&lossy(rest))),
    };
    Some(code)
}

/// Arguments as text, for roles that take another program's (not flags of ours).
fn lossy(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect()
}

fn serve_agent(args: Vec<OsString>) -> ExitCode {
    let args = match flags::parse_agent(args, |name| std::env::var(name).ok()) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            print!("{}", flags::AGENT_USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!(
                "saker agent: error: {error}\n\n{}\nFor more information, try '--help'.",
                flags::AGENT_SYNOPSIS
            );
            return ExitCode::from(2);
        }
    };
    init_logging(&args.log);
    // One worker thread by default: the agent handles its messages one at a time and
    // task processes start on the slots' own threads; a second worker mostly woke up
    // to steal what the first would have run next (docs/performance.md).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&Error::Runtime(error)),
    };
    match runtime.block_on(agent::run(*args)) {
        Ok(code) => code,
        Err(error) => fail(&error),
    }
}

fn serve_reaper(args: Vec<OsString>) -> ExitCode {
    let log = match flags::parse_reaper(args, |name| std::env::var(name).ok()) {
        Ok(log) => log,
        Err(error) => {
            eprintln!("saker reaper: error: {error}");
            return ExitCode::from(2);
        }
    };
    init_logging(&log);
    // On this thread, with no other: the reaper blocks signals in its only thread.
    match saker_actors::reaper::serve_stdin() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("saker reaper: error: {error}");
            ExitCode::from(2)
        }
    }
}

fn fail(error: &Error) -> ExitCode {
    eprintln!("saker: error: {}", saker_actors::error_chain(error));
    ExitCode::from(2)
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(255))
}

/// Diagnostics on stderr, filtered by `filter` (`warn` if it does not parse). Agents
/// log to files under the pilot directory: colour codes only on a terminal. A no-op
/// if the process already has a subscriber (an application may set its own).
///
/// A line that cannot be written is dropped: an agent logs to a file in the pilot
/// directory, and a full disk there must not end it (the subscriber's default
/// reports its own write errors with `eprintln!`, which panics when stderr fails).
pub fn init_logging(filter: &str) {
    let _ = tracing_subscriber::fmt()
        .log_internal_errors(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Worker threads of a command's async runtime: `TOKIO_WORKER_THREADS` when set to a
/// positive number, else one.
pub fn worker_threads() -> usize {
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|value| value.trim().parse::<usize>().ok())
        .filter(|&threads| threads > 0)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_is_named_by_its_argument_and_nothing_else_is_a_role() {
        for role in Role::ALL {
            assert_eq!(Role::named(OsStr::new(role.argument())), Some(role));
        }
        assert_eq!(Role::named(OsStr::new("run")), None);
        assert!(serve(vec!["run".into()]).is_none());
        assert!(serve(Vec::new()).is_none());
    }
}
