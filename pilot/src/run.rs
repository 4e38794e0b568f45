//! `saker run`: an embedded pilot on this machine that runs the given tasks and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use tokio::sync::{mpsc, oneshot};

use saker_client::results::TerminalState;
use saker_client::{StatusReport, WaitReport};
use saker_root::client::{ClientRequest, ResultsItem};
use saker_root::pilot::{Pilot, PilotOptions};

use crate::cli::{JournalArgs, RunArgs, ShapeArgs, WalltimeArgs};
use crate::progress::Progress;
use crate::submission::requests_from;

/// Jobs per submit request when a task file holds many lines.
const SUBMIT_BATCH: usize = 10_000;

/// The options of a pilot started by `saker run` or `saker pilot`.
struct PilotSettings<'a> {
    dir: PathBuf,
    shape: &'a ShapeArgs,
    walltime: &'a WalltimeArgs,
    journal: &'a JournalArgs,
    sync: bool,
    resume: bool,
    /// `--agents 0` is allowed (a pilot that only queues until agents join).
    allow_no_agents: bool,
}

impl PilotSettings<'_> {
    fn options(self) -> Result<PilotOptions> {
        let agents = self.shape.agents(self.allow_no_agents)?;
        Ok(PilotOptions {
            dir: self.dir,
            deadline_unix_us: self.walltime.deadline(&agents)?,
            agents,
            agent_command: saker_root::AgentCommand {
                env: self.shape.worker_env()?,
                ..match &self.shape.app {
                    Some(app) => crate::app::agent_command(app)?,
                    None => saker_root::AgentCommand::current_exe("agent")
                        .context("finding this executable to start agents from")?,
                }
            },
            sync: self.sync,
            resume: self.resume,
            take_over: false,
            liveness: self.shape.liveness.parse()?,
            core: self.shape.stragglers.core_config()?,
            nodes: self.shape.nodes.options()?,
            journal: self.journal.options(),
            elastic: None,
            standbys: None,
            notices: notices(),
        })
    }
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let options = PilotSettings {
        dir: PathBuf::new(),
        shape: &args.shape,
        walltime: &args.walltime,
        journal: &args.journal,
        sync: !args.no_sync,
        resume: args.resume,
        allow_no_agents: false,
    }
    .options()?;
    let requests = if args.shape.app.is_some() {
        if args.task.file.is_some() || args.task.array.is_some() {
            anyhow::bail!("--app takes the program's arguments after `--`, not tasks");
        }
        if let Some(flag) = task_flag_given(&args.task) {
            anyhow::bail!(
                "{flag} does not apply to an --app program's tasks: set it in the program (TaskOptions)"
            );
        }
        Vec::new()
    } else if args.resume && args.task.file.is_none() && args.task.command.is_empty() {
        Vec::new()
    } else {
        requests_from(&args.task, args.inline_output)?
    };
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (temporary_dir(), true),
    };
    let started = Instant::now();
    let mut pilot = Pilot::start(PilotOptions {
        dir: dir.clone(),
        ..options
    })
    .await
    .map_err(crate::cli::with_flags)?;

    if let Some(app) = &args.shape.app {
        let exit = drive_app(&pilot, app, &args.task.command).await;
        pilot.shutdown().await?;
        if temporary {
            let _ = std::fs::remove_dir_all(&dir);
        }
        return exit;
    }
    let outcome = drive(&mut pilot, requests, &args, started).await;
    pilot.shutdown().await?;
    match outcome? {
        RunEnd::Finished(report) => {
            if temporary {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(if report.failed == 0 && report.cancelled == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        RunEnd::Walltime(status) => {
            report_unstarted(&status, &dir, temporary);
            if let Some(script) = &args.chain {
                crate::chain::submit_continuation(script, &args)?;
            }
            Ok(ExitCode::from(EXIT_WALLTIME))
        }
    }
}

/// What the pilot tells people, on stderr as every line of ours.
fn notices() -> saker_root::Notices {
    saker_root::Notices::to(|notice| eprintln!("saker: {notice}"))
}

/// Exit code of a run stopped by its walltime with tasks left (resume to finish).
pub const EXIT_WALLTIME: u8 = 3;

/// How a run ended.
#[derive(Debug)]
enum RunEnd {
    Finished(WaitReport),
    /// Stopped by the walltime deadline with tasks left.
    Walltime(Box<StatusReport>),
}

fn report_unstarted(status: &StatusReport, dir: &std::path::Path, temporary: bool) {
    // Attempts stopped at the deadline may still be on their way back as lost.
    let left = status.queued + status.running;
    let mut never: Vec<String> = status
        .unstarted
        .iter()
        .take(5)
        .map(|j| format!("job {}: {}", j.job, j.tasks))
        .collect();
    if status.unstarted.len() > 5 {
        never.push(format!("… {} more jobs", status.unstarted.len() - 5));
    }
    eprintln!(
        "saker: walltime reached: {left} tasks did not finish ({} stopped at the deadline, \
         never started: {}); {} succeeded, {} failed",
        status.running,
        if never.is_empty() {
            "none".to_string()
        } else {
            never.join(", ")
        },
        status.succeeded,
        status.failed
    );
    if temporary {
        eprintln!(
            "saker: the pilot directory {} is kept so the run can resume",
            dir.display()
        );
    }
    eprintln!(
        "saker: to finish them: saker run --resume --dir {}",
        dir.display()
    );
}

async fn drive(
    pilot: &mut Pilot,
    requests: Vec<saker_client::spec::JobRequest>,
    args: &RunArgs,
    started: Instant,
) -> Result<RunEnd> {
    let total: u64 = requests.iter().map(|r| r.task_count()).sum();
    let mut batches = requests.into_iter().peekable();
    while batches.peek().is_some() {
        let batch: Vec<_> = batches.by_ref().take(SUBMIT_BATCH).collect();
        let (reply, answer) = oneshot::channel();
        pilot.request(ClientRequest::Submit {
            jobs: batch,
            wait: None,
            reply,
        })?;
        answer
            .await
            .context("the root dropped a submission")?
            .context("submission refused")?;
    }

    // After a resume the pilot holds more than this submission.
    let snapshot = status(pilot).await?;
    let total = total.max(
        snapshot.queued
            + snapshot.running
            + snapshot.succeeded
            + snapshot.failed
            + snapshot.cancelled,
    );
    let mut progress = Progress::new(args.progress, total);
    let (reply, mut waiting) = oneshot::channel();
    pilot.request(ClientRequest::Wait { jobs: None, reply })?;
    let report = loop {
        let stopped = pilot.stopped();
        tokio::select! {
            answer = &mut waiting => break answer.context("the root stopped")??,
            () = stopped => {
                let final_status = status(pilot).await?;
                progress.finish(&final_status);
                if final_status.walltime_reached {
                    return Ok(RunEnd::Walltime(Box::new(final_status)));
                }
                anyhow::bail!("the pilot was shut down before its tasks finished");
            }
            () = tokio::time::sleep(progress.interval()) => {
                progress.update(&status(pilot).await?);
                if !pilot.agents_running() {
                    anyhow::bail!(
                        "every agent has exited with work left; see {}",
                        pilot.path().join("logs").display()
                    );
                }
            }
        }
    };
    let final_status = status(pilot).await?;
    progress.finish(&final_status);
    let elapsed = started.elapsed();
    eprintln!(
        "saker: {total} tasks on {} slots: {} succeeded, {} failed, {} cancelled in {:.2?} ({:.0} tasks/s)",
        final_status.slots,
        report.succeeded,
        report.failed,
        report.cancelled,
        elapsed,
        total as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    if report.failed > 0 {
        print_failures(pilot, 10).await?;
    }
    if let Some(dir) = &args.dir {
        eprintln!("saker: results: saker results --dir {}", dir.display());
    }
    Ok(RunEnd::Finished(report))
}

async fn status(pilot: &Pilot) -> Result<StatusReport> {
    let (reply, answer) = oneshot::channel();
    pilot.request(ClientRequest::Status { jobs: None, reply })?;
    Ok(answer.await.context("the root stopped")??)
}

/// Prints the first `limit` failed tasks with their reason.
async fn print_failures(pilot: &Pilot, limit: usize) -> Result<()> {
    let (sink, mut items) = mpsc::channel(1024);
    pilot.request(ClientRequest::Results {
        from: 1,
        follow: false,
        sink,
    })?;
    let mut shown = 0;
    while let Some(item) = items.recv().await {
        let ResultsItem::Record(record) = item else {
            break;
        };
        if record.state != TerminalState::Failed {
            continue;
        }
        if shown < limit {
            let what = match (record.exit_code, record.signal, &record.reason) {
                (_, _, Some(reason)) => reason.clone(),
                (Some(code), _, None) => format!("exit code {code}"),
                (None, Some(signal), None) => format!("signal {signal}"),
                (None, None, None) => "failed".to_string(),
            };
            let index = record
                .index
                .map(|i| format!(" (index {i})"))
                .unwrap_or_default();
            let stderr = record.stderr.lines().last().unwrap_or("");
            eprintln!(
                "saker: task {}{index} failed: {what}{}",
                record.task,
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {stderr}")
                }
            );
        }
        shown += 1;
    }
    if shown > limit {
        eprintln!("saker: … and {} more failed tasks", shown - limit);
    }
    Ok(())
}

fn temporary_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!("saker-run-{}-{nanos}", std::process::id()))
}

/// The first task flag given, if any: with `--app` they would be silently ignored.
fn task_flag_given(task: &crate::cli::TaskArgs) -> Option<&'static str> {
    let hpc = &task.hpc;
    [
        (task.cores != 1, "--cores"),
        (task.gpus != 0, "--gpus"),
        (task.mem.is_some(), "--mem"),
        (!task.resources.is_empty(), "--resource"),
        (!task.reads.is_empty(), "--reads"),
        (!task.writes.is_empty(), "--writes"),
        (task.priority != 0, "--priority"),
        (task.retries != 0, "--retries"),
        (task.max_replays.is_some(), "--max-replays"),
        (task.time_limit.is_some(), "--time-limit"),
        (!task.env.is_empty(), "--env"),
        (task.cwd.is_some(), "--cwd"),
        (!task.tags.is_empty(), "--tag"),
        (task.shell, "--shell"),
        (task.idempotent, "--idempotent"),
        (task.node.is_some(), "--node"),
        (hpc.nodes != 1, "--nodes"),
        (hpc.ranks_per_node.is_some(), "--ranks-per-node"),
        (hpc.ranks.is_some(), "--ranks"),
        (hpc.cores_per_rank.is_some(), "--cores-per-rank"),
        (hpc.exclusive, "--exclusive"),
        (hpc.mpi.is_some(), "--mpi"),
        (hpc.launcher.is_some(), "--launcher"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// Runs an `--app` program against the pilot until it exits (or the pilot stops).
async fn drive_app(pilot: &Pilot, app: &std::path::Path, args: &[String]) -> Result<ExitCode> {
    let mut child = crate::app::spawn(app, args, pilot.path())?;
    let stopped = pilot.stopped();
    tokio::select! {
        status = child.wait() => Ok(crate::app::exit_code(status.context("waiting for --app")?)),
        () = stopped => {
            let _ = child.kill().await;
            anyhow::bail!("the pilot stopped before --app {} finished", app.display())
        }
    }
}

/// `saker pilot`: a long-lived local pilot serving clients until `saker shutdown`
/// or a signal.
pub async fn pilot(args: crate::cli::PilotArgs) -> Result<ExitCode> {
    if !args.app_args.is_empty() && args.shape.app.is_none() {
        anyhow::bail!("arguments after `--` are for an --app program, and there is none");
    }
    // A program that drives the pilot must outlive a root that dies, as must a batch
    // step: the root then runs as a child of this process, which keeps it.
    let app_with_standbys = args.standby > 0 && args.shape.app.is_some();
    let keeper = saker_root::standbys::keeper_needed(args.standby) || app_with_standbys;
    if keeper && !args.take_over && !args.kept {
        let root = crate::standby::kept_root()?;
        let notices = notices();
        let keep = saker_root::standbys::keep(&root, &args.dir, &notices);
        if let Some(app) = &args.shape.app {
            return crate::standby::keep_with_app(keep, app, &args.app_args, &args.dir).await;
        }
        return Ok(match keep.await? {
            saker_root::standbys::Kept::Root(status) => crate::app::exit_code(status),
            saker_root::standbys::Kept::Stopped => ExitCode::SUCCESS,
        });
    }
    let options = PilotSettings {
        dir: args.dir.clone(),
        shape: &args.shape,
        walltime: &args.walltime,
        journal: &args.journal,
        sync: !args.no_sync,
        resume: args.resume,
        allow_no_agents: true,
    }
    .options()?;
    let mut options = options;
    options.elastic = args.elastic.options(args.shape.fanout)?;
    options.take_over = args.take_over;
    options.resume |= args.take_over;
    options.standbys = crate::standby::options(args.standby)?;
    if options.elastic.is_some() {
        // The root alone runs here; agents come with the allocations.
        let shape = saker_root::local::ShapeRequest {
            agents: Some(0),
            slots: None,
            fanout: args.shape.fanout,
            allow_none: true,
        };
        options.agents = saker_root::Agents::Local(
            saker_root::local::Shape::new(shape).map_err(anyhow::Error::msg)?,
        );
    }
    let metrics = match &args.metrics {
        Some(addr) => Some(crate::metrics::bind(addr).await?),
        None => None,
    };
    let mut pilot = match Pilot::start(options).await {
        Ok(pilot) => pilot,
        // A standby whose root stopped on purpose: done.
        Err(saker_root::PilotError::Ended) if args.take_over => {
            eprintln!("saker: the pilot stopped on purpose; this standby has nothing to take over");
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => return Err(crate::cli::with_flags(error)),
    };
    eprintln!("saker: pilot running in {}", args.dir.display());
    if let Some(listener) = metrics {
        let connected = async {
            crate::metrics::publish(&listener, &args.dir)?;
            // A client session of its own, like any monitor's.
            saker_client::Client::connect(&args.dir, "saker metrics")
                .await
                .context("connecting the metrics endpoint to the pilot")
        };
        match connected.await {
            Ok(client) => {
                tokio::spawn(crate::metrics::serve(listener, client));
            }
            Err(error) => {
                pilot.request_shutdown();
                pilot.wait_stopped().await?;
                return Err(error);
            }
        }
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    // A kept root and a standby serve the program; their keeper runs it.
    let mut app = match &args.shape.app {
        Some(path) if !args.kept && !args.take_over => {
            Some(crate::app::spawn(path, &args.app_args, &args.dir)?)
        }
        _ => None,
    };
    let app_exit = async {
        match app.as_mut() {
            Some(child) => child.wait().await.ok(),
            None => std::future::pending().await,
        }
    };
    let stopped = pilot.stopped();
    let owner_gone = async {
        match args.owner {
            Some(owner) => owner_ended(owner).await,
            None => std::future::pending().await,
        }
    };
    let mut code = ExitCode::SUCCESS;
    tokio::select! {
        () = stopped => {}
        _ = tokio::signal::ctrl_c() => pilot.request_shutdown(),
        _ = terminate.recv() => pilot.request_shutdown(),
        () = owner_gone => {
            eprintln!("saker: process {} that owns this pilot has ended; stopping",
                args.owner.unwrap_or_default());
            pilot.request_shutdown();
        }
        status = app_exit => {
            // The pilot lives as long as the program that drives it.
            code = status.map_or(ExitCode::FAILURE, crate::app::exit_code);
            pilot.request_shutdown();
        }
    }
    // A root that stops on purpose takes its standbys with it, before its lock goes.
    let stopped = pilot.wait_stopped().await;
    if let Some(dir) = &args.remove_when_done
        && let Err(error) = std::fs::remove_dir_all(dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("saker: cannot remove {}: {error}", dir.display());
    }
    stopped?;
    Ok(code)
}

/// Returns once process `pid` has ended (or never existed). Checked every half
/// second: a signal 0 finds it while it lives (or is a zombie its parent has not
/// reaped yet).
async fn owner_ended(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    let pid = nix::unistd::Pid::from_raw(pid);
    loop {
        match nix::sys::signal::kill(pid, None) {
            // Alive, or alive under another user (not ours to signal).
            Ok(()) | Err(nix::errno::Errno::EPERM) => {}
            Err(_) => return,
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
