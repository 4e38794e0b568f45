//! The `saker` command line as a library: parses the command line, wires logging, runs the command, maps the exit
//! code. The library crates do the work: `saker-root` (the root, clients, starting a
//! pilot), `saker-actors` (the agent) and `saker-node` (the roles a node's process
//! plays: `saker agent`, `reaper`, `rsh-agent`, `mpiexec`, `cgroup-exec`, with their own flags).
//!
//! The modules here turn flags into library options and results into output for
//! people: [`cli`] (the flags), [`run`] (`saker run` and `saker pilot`), [`commands`]
//! (the client commands), [`app`] (`--app`), [`chain`] (continuation jobs),
//! [`progress`], [`submission`] (flags and task files into job requests),
//! [`template`] (batch scripts).

mod alloc;
mod app;
mod chain;
mod cli;
mod commands;
mod elastic;
mod metrics;
mod nodes;
mod objects;
mod progress;
pub mod report;
mod run;
mod standby;
mod submission;
mod template;
mod top;

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};

/// Runs the `saker` command line `args` (`args[0]` is the program name) and
/// returns its exit code.
pub fn main_with(args: Vec<std::ffi::OsString>) -> ExitCode {
    // A node's roles (`saker agent …`, `reaper`, `rsh-agent`, `mpiexec`, `cgroup-exec`) take
    // saker-node's flags, not clap's: served before parsing.
    if let Some(code) = args
        .get(1..)
        .and_then(|rest| saker_node::serve(rest.to_vec()))
    {
        return code;
    }
    let cli = Cli::parse_from(args);
    // Reached only with a global flag before the role (`saker --log debug agent …`).
    let role = match &cli.command {
        Command::Agent(role) => Some((saker_node::Role::Agent, role)),
        Command::Reaper(role) => Some((saker_node::Role::Reaper, role)),
        _ => None,
    };
    if let Some((role, given)) = role {
        let mut args = vec![role.argument().into(), "--log".into(), cli.log.into()];
        args.extend(given.args.iter().cloned());
        return saker_node::serve(args).unwrap_or(ExitCode::from(2));
    }
    saker_node::init_logging(&cli.log);
    // One worker thread by default: the root handles its messages one at a time, and
    // a second worker mostly woke up to steal a task the first would have run next
    // (about nine context switches more per task; see docs/performance.md). Not
    // current-thread: the command's own future keeps the main thread, so a blocking
    // step there stalls no message. TOKIO_WORKER_THREADS sets another count.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(saker_node::worker_threads())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("saker: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Pilot(args) => run::pilot(*args).await,
            Command::Submit(args) => commands::submit(*args).await,
            Command::Wait(args) => commands::wait(args).await,
            Command::Status(args) => commands::status(args).await,
            Command::Top(args) => top::top(args).await,
            Command::Cancel(args) => commands::cancel(args).await,
            Command::Update(args) => commands::update(args).await,
            Command::Results(args) => commands::results(args).await,
            Command::Report(args) => report::report(args).await,
            Command::Shutdown(args) => commands::shutdown(args).await,
            Command::Alloc(args) => alloc::alloc(args).await,
            Command::Object(args) => objects::object(args).await,
            Command::Template(args) => commands::template(args),
            Command::Agent(_) | Command::Reaper(_) => unreachable!("served above"),
        }
    });
    match outcome {
        Ok(code) => code,
        // A closed pipe (`saker results | head`) is the reader's choice, not an error.
        Err(error) if commands::is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("saker: error: {error:#}");
            ExitCode::from(2)
        }
    }
}
