//! `--app PATH` on `saker run` and `saker pilot`: a program built on the `saker`
//! crate drives the pilot. Its binary is also the pilot's agents (which host its
//! actors) and its worker of its kind, and it runs as a child once the pilot is up,
//! told where the pilot is by `SAKER_PILOT_DIR`; the pilot lives as long as it does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

/// The `--worker KIND=PATH` that runs the app's tasks: the app's absolute path, so
/// agents started elsewhere (another working directory, `srun`) find it.
pub fn worker_flag(path: &Path, kind: &str) -> Result<String> {
    let absolute = absolute(path)?;
    let quoted = shell_words::quote(&absolute.to_string_lossy()).into_owned();
    Ok(format!("{kind}={quoted}"))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    let absolute = std::path::absolute(path)
        .with_context(|| format!("--app {}: cannot make the path absolute", path.display()))?;
    let metadata =
        std::fs::metadata(&absolute).with_context(|| format!("--app {}", absolute.display()))?;
    if !metadata.is_file() {
        bail!("--app {}: not a file", absolute.display());
    }
    Ok(absolute)
}

/// The app's own binary as the pilot's agents (`APP __saker agent`): they host its
/// actors, and its tasks' workers are the same program.
pub fn agent_command(path: &Path) -> Result<saker_root::AgentCommand> {
    Ok(saker_root::AgentCommand {
        program: absolute(path)?,
        args: vec![saker_actors::self_exe::APP_PREFIX.into(), "agent".into()],
        env: Vec::new(),
    })
}

/// Starts the app as the pilot's driver.
pub fn spawn(path: &Path, args: &[String], pilot_dir: &Path) -> Result<tokio::process::Child> {
    let program = absolute(path)?;
    tokio::process::Command::new(&program)
        .args(args)
        .env(saker_client::PILOT_DIR_VAR, pilot_dir)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting --app {}", program.display()))
}

/// The exit code for the app's exit status: its own, or 128 + the signal that
/// killed it, as a shell reports it.
pub fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(255)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(255)),
        (None, None) => ExitCode::FAILURE,
    }
}
