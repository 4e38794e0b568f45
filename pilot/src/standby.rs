//! Standby roots of `saker pilot --standby N`: this program again, with the same
//! arguments and `--take-over`, waiting for the root's lock on the pilot directory
//! (`saker_root::lock`). Their logs go to `DIR/logs/standby-N.log`.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result};
use tokio::process::Child;

/// Starts `count` standbys of the root running in `dir` (this process, or, after a
/// takeover, this one again: a standby that took over starts one to replace itself).
pub fn spawn(count: u32, dir: &Path) -> Result<Vec<Child>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let program = std::env::current_exe().context("finding this executable for the standbys")?;
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    (0..count)
        .map(|_| {
            let (log, file) = new_log(&logs)?;
            tracing::info!(log = %log.display(), "starting a standby root");
            tokio::process::Command::new(&program)
                .args(
                    std::env::args_os()
                        .skip(1)
                        .filter(|arg| arg != "--take-over"),
                )
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

/// Stops the standbys this root started, as it stops on purpose. (Others, started by
/// a root before a takeover, find the pilot stopped when they get its lock.)
pub async fn stop(standbys: &mut Vec<Child>, dir: &Path) {
    if standbys.is_empty() {
        return;
    }
    for mut standby in standbys.drain(..) {
        let _ = standby.kill().await;
    }
    // Killed, they could not take themselves off the list: listing drops them.
    saker_root::standbys::waiting(dir);
}
