//! Standby roots of `saker pilot --standby N`, the command line's part: how a standby
//! and a kept root are started. Both are this program again with the same arguments,
//! plus `--take-over` (a standby: it waits for the root's lock on the pilot
//! directory) or `--kept` (the root, as a child of the batch script's process, which
//! holds the allocation through a takeover). The policy (how many, where, when they
//! stop, fencing, keeping) is the root library's: `saker_root::standbys`.
//!
//! With `--app`, the program is started by the process that outlives the roots (the
//! keeper, [`keep_with_app`]), not by a root: it drives the pilot through a takeover
//! like any client, and the pilot stops when it exits.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use saker_root::standbys::Kept;
use saker_root::{AgentCommand, StandbyOptions};

/// Arguments this program adds for its own children, never copied to another.
const OWN_FLAGS: [&str; 2] = ["--take-over", "--kept"];

/// `count` standbys, each this program again with `--take-over`.
pub fn options(count: u32) -> Result<Option<StandbyOptions>> {
    if count == 0 {
        return Ok(None);
    }
    Ok(Some(StandbyOptions {
        count,
        command: again_with("--take-over").context("finding this executable for the standbys")?,
    }))
}

/// The root of a kept pilot: this program again with `--kept`.
pub fn kept_root() -> Result<AgentCommand> {
    again_with("--kept").context("finding this executable for the root")
}

/// This program with its own arguments (without those it adds for its children)
/// and `flag`.
fn again_with(flag: &str) -> std::io::Result<AgentCommand> {
    let program = std::env::current_exe()?;
    let args = with_flag(std::env::args_os().skip(1).collect(), flag);
    Ok(AgentCommand {
        program,
        args,
        env: Vec::new(),
    })
}

/// `args` without this program's own flags, with `flag` before an `--app` program's
/// arguments (after `--`), which stay as they are.
fn with_flag(args: Vec<std::ffi::OsString>, flag: &str) -> Vec<std::ffi::OsString> {
    let split = args
        .iter()
        .position(|arg| arg == "--")
        .unwrap_or(args.len());
    let (own, app) = args.split_at(split);
    let mut args: Vec<std::ffi::OsString> = own
        .iter()
        .filter(|arg| !OWN_FLAGS.iter().any(|flag| *arg == flag))
        .cloned()
        .collect();
    args.push(flag.into());
    args.extend(app.iter().cloned());
    args
}

/// How often the keeper looks whether the kept root serves clients yet.
const SERVING_EVERY: Duration = Duration::from_millis(50);

/// Keeps the pilot's root (`keep`, the kept root's life and any takeover) and runs
/// the `--app` program `app` once the root serves clients: the pilot lives as long as
/// the program, whichever root serves it, and the program's exit code is the pilot's.
/// If the pilot ends first (it failed with no standby left, or was stopped), the
/// program is stopped.
pub async fn keep_with_app(
    keep: impl Future<Output = Result<Kept, saker_root::standbys::KeepError>>,
    app: &Path,
    app_args: &[String],
    dir: &Path,
) -> Result<ExitCode> {
    let mut keep = std::pin::pin!(keep);
    let serving = async {
        loop {
            if saker_client::Client::connect(dir, "saker --app keeper")
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(SERVING_EVERY).await;
        }
    };
    let kept = tokio::select! {
        kept = &mut keep => Some(kept),
        () = serving => None,
    };
    if let Some(kept) = kept {
        return Ok(kept_code(kept?));
    }
    let mut child = crate::app::spawn(app, app_args, dir)?;
    tokio::select! {
        kept = &mut keep => {
            let _ = child.kill().await;
            Ok(kept_code(kept?))
        }
        status = child.wait() => {
            let code = status.map_or(ExitCode::FAILURE, crate::app::exit_code);
            // The pilot lives as long as the program that drives it.
            match saker_client::Client::connect(dir, "saker --app keeper").await {
                Ok(client) => {
                    if let Err(error) = client.shutdown(false).await {
                        eprintln!("saker: stopping the pilot after --app: {error}");
                    }
                }
                Err(error) => eprintln!("saker: stopping the pilot after --app: {error}"),
            }
            keep.await?;
            Ok(code)
        }
    }
}

fn kept_code(kept: Kept) -> ExitCode {
    match kept {
        Kept::Root(status) => crate::app::exit_code(status),
        Kept::Stopped => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::with_flag;

    #[test]
    fn a_childs_flag_goes_before_the_programs_arguments() {
        let args = |list: &[&str]| -> Vec<std::ffi::OsString> {
            list.iter().map(std::ffi::OsString::from).collect()
        };
        assert_eq!(
            with_flag(
                args(&["pilot", "--kept", "--app", "x", "--", "serve", "--kept"]),
                "--take-over"
            ),
            args(&[
                "pilot",
                "--app",
                "x",
                "--take-over",
                "--",
                "serve",
                "--kept"
            ])
        );
        assert_eq!(
            with_flag(args(&["pilot", "--standby", "1"]), "--kept"),
            args(&["pilot", "--standby", "1", "--kept"])
        );
    }
}
