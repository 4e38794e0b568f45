//! Standby roots of `saker pilot --standby N`: this program again, with the same
//! arguments and `--take-over`, waiting for the root's lock on the pilot directory
//! (`saker_root::lock`). Their logs go to `DIR/logs/standby-N.log`.
//!
//! Inside an allocation each standby runs as a one-task `srun` step on another node
//! (one on the root's node would die with it), and the root is not the batch
//! script's own process but a child of it ([`keep`]): the batch step must outlive a
//! root that dies, or Slurm would end the job and every standby with it.

use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::Signal;
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};

/// Arguments this program adds for its own children, never copied to another.
const OWN_FLAGS: [&str; 2] = ["--take-over", "--kept"];

/// How long the keeper of a dead root waits for a standby to take the lock.
const TAKEOVER_GRACE: Duration = Duration::from_secs(30);

/// Starts `count` standbys of the root running in `dir` (this process, or, after a
/// takeover, this one again: a standby that took over starts one to replace itself).
pub fn spawn(count: u32, dir: &Path) -> Result<Vec<Child>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let program = std::env::current_exe().context("finding this executable for the standbys")?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let nodes = nodes_for(count as usize, dir);
    (0..count as usize)
        .map(|index| {
            let (log, file) = new_log(&logs)?;
            let mut command = match nodes.get(index) {
                Some(node) => {
                    tracing::info!(log = %log.display(), %node, "starting a standby root");
                    let mut srun = saker_root::slurm::srun_one("saker-standby");
                    srun.arg(format!("--nodelist={node}")).arg(&program);
                    srun
                }
                None => {
                    tracing::info!(log = %log.display(), "starting a standby root");
                    tokio::process::Command::new(&program)
                }
            };
            command
                .args(own_arguments())
                .arg("--take-over")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(file)
                // Killed with this root when it stops on purpose; a root that dies
                // leaves them running, which is their point.
                .kill_on_drop(true)
                .spawn()
                .context("starting a standby root")
        })
        .collect()
}

/// This program's arguments, without those it adds for its children.
fn own_arguments() -> impl Iterator<Item = std::ffi::OsString> {
    std::env::args_os()
        .skip(1)
        .filter(|arg| !OWN_FLAGS.iter().any(|flag| arg == flag))
}

/// The nodes of this allocation for `count` standbys; none (so: this machine) outside
/// one or in an allocation of one node.
fn nodes_for(count: usize, dir: &Path) -> Vec<String> {
    let Some(allocation) = saker_root::slurm::Allocation::detect(|name| std::env::var(name).ok())
    else {
        return Vec::new();
    };
    let nodes = match saker_slurm::hostlist::expand(&allocation.node_list) {
        Ok(nodes) => nodes,
        Err(error) => {
            tracing::warn!(%error, list = %allocation.node_list,
                "cannot read the allocation's nodes; standbys start on this node");
            return Vec::new();
        }
    };
    let taken: Vec<String> = saker_client::standbys::waiting(dir)
        .into_iter()
        .map(|standby| standby.node)
        .collect();
    let this = saker_root::lock::this_node();
    saker_root::standbys::place(&nodes, &this, &taken, count)
}

/// `standby-N.log` of the first N not taken: a standby that took over still writes
/// its own.
fn new_log(logs: &Path) -> Result<(std::path::PathBuf, std::fs::File)> {
    for number in 0.. {
        let log = logs.join(format!("standby-{number}.log"));
        match std::fs::File::create_new(&log) {
            Ok(file) => return Ok((log, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error).with_context(|| format!("creating {}", log.display())),
        }
    }
    unreachable!("some number is free")
}

/// Stops the standbys this root started, as it stops on purpose. SIGTERM first: an
/// `srun` passes it on to its standby on the other node, where a SIGKILL of `srun`
/// would leave it. (Others, started by a root before a takeover, find the pilot
/// stopped when they get its lock.)
pub async fn stop(standbys: &mut Vec<Child>, dir: &Path) {
    if standbys.is_empty() {
        return;
    }
    for standby in standbys.iter() {
        if let Some(pid) = standby.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for mut standby in standbys.drain(..) {
        if tokio::time::timeout(Duration::from_secs(5), standby.wait())
            .await
            .is_err()
        {
            let _ = standby.kill().await;
        }
    }
    // Killed, they could not take themselves off the list: listing drops them.
    saker_client::standbys::waiting(dir);
}

/// Runs the root of a pilot with standbys inside an allocation as a child of this
/// process, the batch script's: when the root dies, a standby on another node takes
/// over, and this process holds the allocation until the pilot stops on purpose
/// (`root.stopped` written and the lock free). Returns the root's exit code when it
/// stopped on purpose, or no standby is there to take over.
pub async fn keep(dir: &Path) -> Result<ExitCode> {
    // A root already running here refuses the child: nothing of ours to keep.
    let another_root = saker_root::lock::held(dir).unwrap_or(false);
    let program = std::env::current_exe().context("finding this executable for the root")?;
    let mut root = tokio::process::Command::new(program)
        .args(own_arguments())
        .arg("--kept")
        .spawn()
        .context("starting the root")?;
    let pid = root.id().context("the root's pid")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    let forward = |signal| {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    };
    let status = loop {
        tokio::select! {
            status = root.wait() => break status.context("waiting for the root")?,
            _ = terminate.recv() => forward(Signal::SIGTERM),
            _ = interrupt.recv() => forward(Signal::SIGINT),
        }
    };
    // A standby may have taken the lock already, or be about to.
    let taken_over = saker_root::lock::held(dir).unwrap_or(false)
        || !saker_client::standbys::waiting(dir).is_empty();
    if another_root || status.success() || saker_root::lock::stopped(dir) || !taken_over {
        return Ok(crate::app::exit_code(status));
    }
    eprintln!(
        "saker: the root (pid {pid}) ended ({status}); a standby takes over, and this \
         process holds the allocation until the pilot stops"
    );
    let mut free_since: Option<Instant> = None;
    loop {
        // Slurm's signals reach the root that took over too: it stops on purpose.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        if saker_root::lock::held(dir)? {
            free_since = None;
            continue;
        }
        if saker_root::lock::stopped(dir) {
            return Ok(ExitCode::SUCCESS);
        }
        if free_since.get_or_insert_with(Instant::now).elapsed() > TAKEOVER_GRACE {
            anyhow::bail!(
                "the root of {} died and no standby took over within {TAKEOVER_GRACE:?}; \
                 continue it with `saker pilot --resume`",
                dir.display()
            );
        }
    }
}
