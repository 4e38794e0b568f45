//! The keeper of a root with standbys inside an allocation. The batch script's
//! process must outlive a root that dies, or Slurm would end the job and every
//! standby with it: so the root runs as its child, and it holds the allocation until
//! the pilot stops on purpose (`root.stopped` written and the lock free).

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::signal::unix::SignalKind;

use crate::local::AgentCommand;
use crate::lock::{self, LockError};
use crate::notice::{Notice, Notices};

/// How long the keeper of a dead root waits for a standby to take the lock.
pub const TAKEOVER_GRACE: Duration = Duration::from_secs(30);

/// How often the keeper looks at the lock while a standby runs the pilot.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Whether a root with `standbys` needs a keeper: in an allocation, yes (for a root
/// that is not itself a standby or kept already; the caller knows that).
pub fn keeper_needed(standbys: u32) -> bool {
    standbys > 0 && crate::slurm::Allocation::detect(|name| std::env::var(name).ok()).is_some()
}

/// How a kept pilot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The root ended, and no standby took over: it stopped on purpose, or failed
    /// with none to replace it. Its exit status is the pilot's.
    Root(ExitStatus),
    /// A standby took over from the root, and the pilot has since stopped on purpose.
    Stopped,
}

/// Why a keeper could not keep its root.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error("starting the root")]
    StartRoot(#[source] io::Error),
    #[error("installing a {signal} handler")]
    Signal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("waiting for the root")]
    Wait(#[source] io::Error),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(
        "the root of {} died and no standby took over within {grace:?}; continue it with \
         `saker pilot --resume`",
        dir.display()
    )]
    NoTakeover { dir: PathBuf, grace: Duration },
}

/// Runs `root` (the program that runs the pilot's root, with standbys, on `dir`) as a
/// child of this process, passing SIGTERM and SIGINT on to it. When it dies and a
/// standby takes over, holds on until the pilot stops on purpose; `notices` hears
/// of it.
pub async fn keep(root: &AgentCommand, dir: &Path, notices: &Notices) -> Result<Kept, KeepError> {
    // A root already running here refuses the child: nothing of ours to keep.
    let another_root = lock::held(dir).unwrap_or(false);
    let mut child = tokio::process::Command::new(&root.program)
        .args(&root.args)
        .envs(root.env.iter().map(|(k, v)| (k, v)))
        .spawn()
        .map_err(KeepError::StartRoot)?;
    // Just spawned and not yet waited for: tokio knows its pid.
    let pid = child.id().expect("a running child has a pid");
    let handler = |kind, signal: &'static str| {
        tokio::signal::unix::signal(kind).map_err(|source| KeepError::Signal { signal, source })
    };
    let mut terminate = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = handler(SignalKind::interrupt(), "SIGINT")?;
    let forward = |signal| {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(KeepError::Wait)?,
            _ = terminate.recv() => forward(Signal::SIGTERM),
            _ = interrupt.recv() => forward(Signal::SIGINT),
        }
    };
    // A standby may have taken the lock already, or be about to.
    let taken_over = lock::held(dir).unwrap_or(false) || !super::waiting(dir).is_empty();
    if another_root || status.success() || lock::stopped(dir) || !taken_over {
        return Ok(Kept::Root(status));
    }
    notices.tell(Notice::RootEnded { pid, status });
    let mut free_since: Option<Instant> = None;
    loop {
        // Slurm's signals reach the root that took over too: it stops on purpose.
        tokio::select! {
            () = tokio::time::sleep(LOOK_EVERY) => {}
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        if lock::held(dir)? {
            free_since = None;
            continue;
        }
        if lock::stopped(dir) {
            return Ok(Kept::Stopped);
        }
        if free_since.get_or_insert_with(Instant::now).elapsed() > TAKEOVER_GRACE {
            return Err(KeepError::NoTakeover {
                dir: dir.to_path_buf(),
                grace: TAKEOVER_GRACE,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> AgentCommand {
        AgentCommand {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
        }
    }

    /// A root that ends with no standby to take over ends the keeper with its status.
    #[tokio::test]
    async fn a_root_with_none_to_replace_it_ends_the_keeper_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let kept = keep(&shell("exit 3"), dir.path(), &Notices::default())
            .await
            .unwrap();
        let Kept::Root(status) = kept else {
            panic!("{kept:?}")
        };
        assert_eq!(status.code(), Some(3));
    }
}
