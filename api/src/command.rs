//! Command jobs from the Rust API: a program run as it is (not a typed task), on one
//! node or, as an HPC job, on several at once. An MPI program's ranks are started by
//! the agents and served PMI (`Mpi::Pmi`, MPICH and Open MPI alike): no `mpirun`.
//!
//! ```no_run
//! # async fn run(pilot: saker::Pilot) -> Result<(), saker::TaskError> {
//! use saker::{Command, Mpi};
//! let solver = Command::new("./solver").arg("input.h5").nodes(2).ranks_per_node(4).mpi(Mpi::Pmi);
//! let output = pilot.command(solver).await?;
//! assert!(output.success(), "{}", output.reason.unwrap_or_default());
//! println!("rank 0 said: {}", output.stdout);
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use saker_client::results::{ResultRecord, TerminalState};
use saker_client::spec::{JobRequest, TaskSpec};
use tokio::sync::oneshot;

pub use saker_client::spec::LauncherKind as Launcher;
pub use saker_client::spec::MpiKind as Mpi;

use crate::error::TaskError;
use crate::pilot::{JobCell, Waiter};
use crate::submit::{Submitter, TaskHandle};

/// A program to run, its arguments, environment and layout. Built like
/// `std::process::Command`; the task options (cores, time limit, retries, …) are the
/// [`Submitter`]'s it goes through.
#[derive(Debug, Clone)]
pub struct Command {
    argv: Vec<String>,
    shell: bool,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    nodes: u32,
    ranks_per_node: Option<u32>,
    mpi: Option<Mpi>,
    launcher: Option<Launcher>,
}

impl Command {
    /// `program`, run directly (no shell).
    pub fn new(program: impl Into<String>) -> Command {
        Command {
            argv: vec![program.into()],
            shell: false,
            env: Vec::new(),
            cwd: None,
            nodes: 1,
            ranks_per_node: None,
            mpi: None,
            launcher: None,
        }
    }

    /// `script`, run by `/bin/sh -c`.
    pub fn shell(script: impl Into<String>) -> Command {
        Command {
            shell: true,
            ..Command::new(script)
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Command {
        self.argv.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// A variable on top of the environment the agent inherited.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Command {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The working directory (default: the agent's).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Command {
        self.cwd = Some(dir.into());
        self
    }

    /// Nodes the job spans at once (an HPC job when more than one).
    pub fn nodes(mut self, nodes: u32) -> Command {
        self.nodes = nodes;
        self
    }

    /// Ranks on each node (an HPC job): each is a process of its own, with
    /// `RANK`, `WORLD_SIZE`, … set, and PMI's variables with [`Mpi::Pmi`].
    pub fn ranks_per_node(mut self, ranks: u32) -> Command {
        self.ranks_per_node = Some(ranks);
        self
    }

    /// What starts the ranks: [`Mpi::Pmi`] (the agents, serving PMI), an MPI's
    /// own launcher through the agents ([`Mpi::Openmpi`], [`Mpi::Mpich`]), or
    /// [`Mpi::None`] (the agents, with rendezvous variables only).
    pub fn mpi(mut self, mpi: Mpi) -> Command {
        self.mpi = Some(mpi);
        self
    }

    /// Who starts the ranks: the agents (the default), one `srun` step
    /// ([`Launcher::Srun`]), or, with [`Mpi::Pmi`], the command itself, run once on
    /// the first node, through `$SAKER_MPIEXEC` ([`Launcher::Script`]; each run's
    /// ranks are started by the agents, its output written to the command's).
    pub fn launcher(mut self, launcher: Launcher) -> Command {
        self.launcher = Some(launcher);
        self
    }

    /// The job's spec: the options' (`template`) with this command in it.
    fn spec(self, template: &TaskSpec) -> TaskSpec {
        TaskSpec {
            argv: self.argv,
            shell: self.shell,
            env: template.env.clone().into_iter().chain(self.env).collect(),
            cwd: self.cwd,
            nodes: self.nodes,
            ranks_per_node: self.ranks_per_node,
            mpi: self.mpi,
            launcher: self.launcher,
            ..template.clone()
        }
    }
}

/// How a command ended: as `std::process::Output`, plus the pilot's words.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// The exit code (of rank 0, or of the rank that failed first, for an HPC job);
    /// `None` when the process was ended by a signal or never ran to an end.
    pub exit_code: Option<i32>,
    /// Its standard output as far as kept inline (rank 0's for an HPC job: the
    /// others' are in the pilot's `output/` files the record names).
    pub stdout: String,
    pub stderr: String,
    /// Why it failed, as the pilot says it (`rank 3: exit 3 (on n2)`).
    pub reason: Option<String>,
    /// The whole result: timings, node, every rank's exit (`gang`).
    pub record: Arc<ResultRecord>,
}

impl CommandOutput {
    /// It ran and succeeded (exit 0 on every rank).
    pub fn success(&self) -> bool {
        self.record.state == TerminalState::Succeeded
    }
}

impl Submitter {
    /// Runs `command` with these options. The handle's output says how it ended,
    /// success or not; its error means it never ran to an end of its own (cancelled,
    /// refused, lost more often than the pilot replays, or the pilot gone).
    pub fn command(&self, command: Command) -> TaskHandle<CommandOutput> {
        let (sender, receiver) = oneshot::channel();
        let spec = command.spec(&self.options.spec);
        let waiter: Waiter = Box::new(move |record| {
            let _ = sender.send(record.and_then(output));
        });
        let job = Arc::new(JobCell::default());
        self.pilot
            .send(JobRequest::single(spec), waiter, Some(job.clone()));
        TaskHandle::new(receiver, Some(job))
    }
}

/// A command's result as its output, or the error of one that never ended itself.
fn output(record: Arc<ResultRecord>) -> Result<CommandOutput, TaskError> {
    match record.state {
        TerminalState::Cancelled => return Err(TaskError::Cancelled),
        TerminalState::Failed if record.exit_code.is_none() && record.signal.is_none() => {
            return Err(TaskError::Failed {
                reason: record.reason.clone().unwrap_or_default(),
            });
        }
        _ => {}
    }
    Ok(CommandOutput {
        exit_code: record.exit_code,
        stdout: record.stdout.clone(),
        stderr: record.stderr.clone(),
        reason: record.reason.clone(),
        record,
    })
}
