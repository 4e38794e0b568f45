//! Standby roots: processes that wait on a pilot directory, each ready to take the
//! pilot over if its root dies (`saker pilot --standby N`, or any application that
//! sets [`PilotOptions::standbys`](crate::PilotOptions::standbys)).
//!
//! **Owns:** the policy. A root with standbys starts them when it starts ([`spawn`]:
//! `count` of them, or one after a takeover, to replace the standby that became this
//! root), logs each to `DIR/logs/standby-N.log`, places them on other nodes of an
//! allocation through one-task `srun` steps ([`place`]: a standby on the root's node
//! dies with it), and stops them when it stops on purpose ([`StartedStandbys::stop`]).
//! A waiting standby fences a root that answers nothing ([`fence_when_silent`]). In
//! an allocation the root runs as a child of the batch script's process, which holds
//! the allocation through a takeover ([`keep`]).
//!
//! **Must never:** decide how a standby is started: the caller's
//! [`StandbyOptions::command`] says (for the CLI, this `saker pilot` again with
//! `--take-over`), as [`AgentCommand`] says how agents start. Nor print: what a person
//! should see is a [`Notice`](crate::notice::Notice).
//!
//! The listing of waiting standbys (`DIR/standby/`) is `saker_client::standbys`,
//! re-exported here, since clients read it too.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Child;

use crate::local::AgentCommand;

mod fence;
mod keeper;

pub use fence::fence_when_silent;
pub use keeper::{KeepError, Kept, TAKEOVER_GRACE, keep, keeper_needed};
pub use saker_client::standbys::{Listed, STANDBY_DIR, Standby, list_self, waiting};

/// The `saker agent` flag that lets agents adopt a new root: a pilot with standbys
/// gives it to every agent.
pub const ANY_ROOT_FLAG: &str = "--any-root";

/// How long a stopping root waits for each standby to end after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The standby roots a pilot keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandbyOptions {
    /// How many wait at any time.
    pub count: u32,
    /// Starts one: a program that starts this pilot with
    /// [`take_over`](crate::PilotOptions::take_over) on the same directory, and the
    /// same standby options (it starts one standby when it takes over). Its
    /// arguments are complete; the root adds none.
    pub command: AgentCommand,
}

impl StandbyOptions {
    /// How many a root starts: all of them, or, for a standby that took over, one
    /// to replace itself (the others still wait).
    fn to_start(&self, took_over: bool) -> u32 {
        if took_over {
            self.count.min(1)
        } else {
            self.count
        }
    }
}

/// Why standbys could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StandbyError {
    #[error("creating {}", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("starting a standby root")]
    Start(#[source] io::Error),
}

/// The standbys this root started, killed if dropped (a root that stops on purpose
/// stops them first: [`StartedStandbys::stop`]).
#[derive(Debug, Default)]
pub struct StartedStandbys {
    children: Vec<Child>,
}

/// Starts the standbys `options` asks of the root of `dir`: this process, which
/// `took_over` from another root or not.
pub fn spawn(
    options: &StandbyOptions,
    took_over: bool,
    dir: &Path,
) -> Result<StartedStandbys, StandbyError> {
    let count = options.to_start(took_over) as usize;
    if count == 0 {
        return Ok(StartedStandbys::default());
    }
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|source| StandbyError::Log {
        path: logs.clone(),
        source,
    })?;
    let nodes = nodes_for(count, dir);
    let command = &options.command;
    let children = (0..count)
        .map(|index| {
            let (log, file) = new_log(&logs)?;
            let mut process = match nodes.get(index) {
                Some(node) => {
                    tracing::info!(log = %log.display(), %node, "starting a standby root");
                    let mut srun = crate::slurm::srun_one("saker-standby");
                    srun.arg(format!("--nodelist={node}")).arg(&command.program);
                    srun
                }
                None => {
                    tracing::info!(log = %log.display(), "starting a standby root");
                    tokio::process::Command::new(&command.program)
                }
            };
            process
                .args(&command.args)
                .envs(command.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(file)
                // Killed with this root when it stops on purpose; a root that dies
                // leaves them running, which is their point.
                .kill_on_drop(true)
                .spawn()
                .map_err(StandbyError::Start)
        })
        .collect::<Result<_, _>>()?;
    Ok(StartedStandbys { children })
}

impl StartedStandbys {
    /// Stops these standbys, as the root of `dir` stops on purpose. SIGTERM first: an
    /// `srun` passes it on to its standby on the other node, where a SIGKILL of
    /// `srun` would leave it. (Others, started by a root before a takeover, find the
    /// pilot stopped when they get its lock.)
    pub async fn stop(&mut self, dir: &Path) {
        if self.children.is_empty() {
            return;
        }
        for standby in &self.children {
            if let Some(pid) = standby.id() {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM);
            }
        }
        for mut standby in self.children.drain(..) {
            if tokio::time::timeout(STOP_GRACE, standby.wait())
                .await
                .is_err()
            {
                let _ = standby.kill().await;
            }
        }
        // Killed, they could not take themselves off the list: listing drops them.
        waiting(dir);
    }
}

/// The nodes of this allocation for `count` standbys; none (so: this machine) outside
/// one or in an allocation of one node.
fn nodes_for(count: usize, dir: &Path) -> Vec<String> {
    let Some(allocation) = crate::slurm::Allocation::detect(|name| std::env::var(name).ok()) else {
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
    let taken: Vec<String> = waiting(dir)
        .into_iter()
        .map(|standby| standby.node)
        .collect();
    place(&nodes, &crate::lock::this_node(), &taken, count)
}

/// `standby-N.log` of the first N not taken: a standby that took over still writes
/// its own.
fn new_log(logs: &Path) -> Result<(PathBuf, std::fs::File), StandbyError> {
    for number in 0.. {
        let log = logs.join(format!("standby-{number}.log"));
        match std::fs::File::create_new(&log) {
            Ok(file) => return Ok((log, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(StandbyError::Log { path: log, source }),
        }
    }
    unreachable!("some number is free")
}

/// The nodes of an allocation (`nodes`, in order) for `count` new standbys of a root on
/// `this`: never its own node (a standby there dies with it), and first the nodes
/// no standby waits on (`taken`). None when the allocation has no other node.
pub fn place(nodes: &[String], this: &str, taken: &[String], count: usize) -> Vec<String> {
    let others: Vec<&String> = nodes.iter().filter(|node| *node != this).collect();
    if others.is_empty() {
        return Vec::new();
    }
    let mut load: Vec<(usize, &String)> = others
        .iter()
        .map(|node| (taken.iter().filter(|t| t == node).count(), *node))
        .collect();
    (0..count)
        .map(|_| {
            // The least loaded, the first in allocation order among equals.
            let (load, node) = load
                .iter_mut()
                .min_by_key(|(load, _)| *load)
                .expect("some other node");
            *load += 1;
            (*node).clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standbys_go_to_other_nodes_the_least_used_first() {
        let nodes: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        assert_eq!(place(&nodes, "n1", &[], 1), ["n2"]);
        assert_eq!(place(&nodes, "n1", &[], 3), ["n2", "n3", "n2"]);
        // After a takeover on n2: n3 already has one.
        assert_eq!(place(&nodes, "n2", &["n3".into()], 1), ["n1"]);
        assert!(place(&["n1".into()], "n1", &[], 2).is_empty());
    }

    #[test]
    fn a_root_that_took_over_starts_one_standby_to_replace_itself() {
        let options = |count| StandbyOptions {
            count,
            command: AgentCommand {
                program: "saker".into(),
                args: Vec::new(),
                env: Vec::new(),
            },
        };
        assert_eq!(options(3).to_start(false), 3);
        assert_eq!(options(3).to_start(true), 1);
        assert_eq!(options(0).to_start(true), 0);
    }

    /// Each standby runs the caller's command as it is, logs to a file of its own,
    /// and goes when the root stops on purpose.
    #[tokio::test]
    async fn standbys_run_the_given_command_with_a_log_each_and_stop_with_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let options = StandbyOptions {
            count: 2,
            command: AgentCommand {
                program: "sh".into(),
                args: vec!["-c".into(), "echo standby $WHO >&2; exec sleep 60".into()],
                env: vec![("WHO".into(), "here".into())],
            },
        };
        let mut started = spawn(&options, false, dir.path()).unwrap();
        assert_eq!(started.children.len(), 2);
        let logs = dir.path().join("logs");
        let wrote = |n: u32| {
            std::fs::read_to_string(logs.join(format!("standby-{n}.log"))).unwrap_or_default()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !(wrote(0).contains("standby here") && wrote(1).contains("standby here")) {
            assert!(std::time::Instant::now() < deadline, "both logs written");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.stop(dir.path()).await;
        assert!(started.children.is_empty());

        let replacing = spawn(&options, true, dir.path()).unwrap();
        assert_eq!(
            replacing.children.len(),
            1,
            "one, to replace the one that took over"
        );
        assert!(logs.join("standby-2.log").exists(), "a log of its own");
    }
}
