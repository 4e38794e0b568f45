//! The `saker` command line as a library: parses the command line, wires logging, runs the command, maps the exit
//! code. The library crates do the work: `saker-root` (the root, clients, starting a
//! pilot) and `saker-actors` (the agent).
//!
//! The modules here turn flags into library options and results into output for
//! people: [`cli`] (the flags), [`run`] (`saker run` and `saker pilot`), [`commands`]
//! (the client commands), [`agent`] (`saker agent`), [`app`] (`--app`), [`chain`] (continuation jobs),
//! [`progress`], [`submission`] (flags and task files into job requests),
//! [`template`] (batch scripts).

mod agent;
mod alloc;
mod app;
mod chain;
mod cli;
mod commands;
mod elastic;
mod metrics;
mod nodes;
mod progress;
pub mod report;
mod run;
mod submission;
mod template;
mod top;

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};

/// Runs the `saker` command line `args` (`args[0]` is the program name) and
/// returns its exit code. The `saker` binary calls it with its own arguments; an
/// application built on the `saker` API crate calls it for its hidden `__saker` role,
/// so the application's one binary can also serve as agent, reaper and remote shell.
pub fn main_with(args: Vec<std::ffi::OsString>) -> ExitCode {
    // The remote shell of an HPC job's MPI launcher takes ssh's arguments, which are
    // not this CLI's: served before parsing (see saker_actors::gang::endpoint).
    if args.get(1).is_some_and(|command| command == "rsh-agent") {
        let rest: Vec<String> = args[2..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let code = saker_actors::gang::endpoint::rsh_agent_main(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(255));
    }
    // A memory-limited task's first step: join its cgroup, become the task.
    if args
        .get(1)
        .is_some_and(|command| command == saker_actors::resources::cgroup::EXEC_SUBCOMMAND)
    {
        let code = saker_actors::resources::cgroup::exec_main(&args[2..]);
        return ExitCode::from(u8::try_from(code).unwrap_or(255));
    }
    let cli = Cli::parse_from(args);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Agents log to files under the pilot directory: no colour codes there.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Before the async runtime starts any thread: the reaper blocks signals in its
    // only thread.
    if let Command::Reaper = cli.command {
        return match saker_actors::reaper::serve_stdin() {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("saker reaper: error: {error}");
                ExitCode::from(2)
            }
        };
    }
    // One worker thread by default: the root and the agent each handle their messages
    // one at a time, task processes start on the slots' own threads, and a second
    // worker mostly woke up to steal a task the first would have run next (about nine
    // context switches more per task; see docs/performance.md). Not current-thread: the
    // command's own future keeps the main thread, so a blocking step there stalls no
    // message. TOKIO_WORKER_THREADS sets another count.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
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
            Command::Template(args) => commands::template(args),
            Command::Agent(args) => agent::agent(args).await,
            Command::Reaper => unreachable!("served above"),
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

/// Worker threads of the command's async runtime: `TOKIO_WORKER_THREADS` when set to
/// a positive number, else one.
fn worker_threads() -> usize {
    std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|value| value.trim().parse::<usize>().ok())
        .filter(|&threads| threads > 0)
        .unwrap_or(1)
}
