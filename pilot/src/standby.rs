//! Standby roots of `saker pilot --standby N`, the command line's part: how a standby
//! and a kept root are started. Both are this program again with the same arguments,
//! plus `--take-over` (a standby: it waits for the root's lock on the pilot
//! directory) or `--kept` (the root, as a child of the batch script's process, which
//! holds the allocation through a takeover). The policy (how many, where, when they
//! stop, fencing, keeping) is the root library's: `saker_root::standbys`.

use anyhow::{Context, Result};
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
    let mut args: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| !OWN_FLAGS.iter().any(|own| arg == own))
        .collect();
    args.push(flag.into());
    Ok(AgentCommand {
        program,
        args,
        env: Vec::new(),
    })
}
