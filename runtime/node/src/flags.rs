//! The roles' flags, parsed with lexopt: `agent`'s (the names, defaults and Slurm
//! fallbacks `saker agent` has always had; the root's `saker_root::local` and
//! `saker_root::slurm` write them) and `reaper`'s `--log`.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use lexopt::prelude::*;
use saker_actors::liveness::Liveness;

use crate::error::FlagError;
use crate::offer::{self, NodeOffer};

/// The log filter unless `--log` or `SAKER_LOG` gives one.
pub const DEFAULT_LOG: &str = "warn";
/// The variable that gives the log filter when `--log` does not.
pub const LOG_VARIABLE: &str = "SAKER_LOG";

/// The first line of `agent`'s usage, also shown after an error.
pub const AGENT_SYNOPSIS: &str = "Usage: saker agent --dir DIR --fanout N [OPTIONS]\n";

/// `agent --help`.
pub const AGENT_USAGE: &str = "\
Internal: one agent process of a pilot (started by the pilot, not by users).

Usage: saker agent --dir DIR --fanout N [OPTIONS]

Options:
      --dir DIR                  The pilot directory
      --node ID                  This agent's node id (0-based; its place in the tree).
                                 Inside a Slurm step: SLURM_NODEID (plus
                                 --subtree-base) by default
      --fanout N                 Children per node of the agent tree
      --subtree-base NODE        Agents from this node id on form a subtree of their
                                 own under the root (one per batch allocation of an
                                 elastic pilot): this id links to the root, the others
                                 below it. Without it, all agents form one tree
      --cores N                  Executor slots (one core each) on this agent. Inside a
                                 Slurm step: the CPUs allocated on this node
                                 (SLURM_CPUS_ON_NODE) by default
      --bind ADDR                Address to accept child agents on [default: loopback
                                 on a single machine, all interfaces inside a Slurm step]
      --advertise IP             Address other nodes reach this one at [default: this
                                 host name's address]
      --hostname NAME            Hostname to report [default: SLURMD_NODENAME inside
                                 a Slurm step, else this machine's]
      --gpu-ids IDS              Exactly these GPU ids (`none` for none): a local
                                 pilot's share for this agent
      --heartbeat-interval DURATION
                                 How often an idle link sends a heartbeat [default: 1s]
      --heartbeat-timeout DURATION
                                 How long a silent link lives: a dead or hung agent's
                                 work is replayed on other agents after this (at least
                                 twice the interval) [default: 5s]
      --reattach-for DURATION    How long an agent whose parent is gone looks for a
                                 live ancestor before it exits [default: 30s]
      --any-root                 After losing the root, join whichever root of this
                                 pilot runs next (a standby's: `saker pilot
                                 --standby`), not only the one it started under
      --log FILTER               Log filter for diagnostics on stderr (e.g. `info`,
                                 `saker=debug`) [env: SAKER_LOG] [default: warn]
  -h, --help                     Print this help

What each node offers:
      --gpus-per-node N          GPUs this node offers: ids 0..N, or the first N its
                                 environment lists [default: those in
                                 CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or Slurm's
                                 GPU list, else one per GPU nvidia-smi lists]
      --mem-per-node SIZE        Memory this node offers (`64G`, `512M`; a bare number
                                 is MiB) [default: Slurm's memory per node or per CPU,
                                 else the machine's, or its cgroup's limit]
      --node-resource NAME=N     A named resource this node offers (licences, local
                                 disks, ...); repeatable
      --pin-cpus auto|off|CPUS   Pin each task to its cores: `auto` (when every slot
                                 has a CPU of its own), `off`, or the CPUs to use, one
                                 per slot (`0-3,8-11`) [default: auto]
      --no-memory-limits         Account each task's memory but never limit it (no
                                 cgroups)
      --scratch DIR              Where this node keeps its data items: a node-local
                                 directory (it uses DIR/saker-PILOT/node-N) [default:
                                 $TMPDIR, else /tmp]
      --shared-scratch           --scratch is on a filesystem every node sees: a reader
                                 links an item from its writer's directory instead of
                                 copying it through the tree
      --object-memory SIZE       Keep up to SIZE of objects in shared memory (`4G`,
                                 `512M`; a bare number is MiB), in
                                 /dev/shm/saker-PILOT/node-N; the least recently used
                                 move to the scratch directory past it [default: none:
                                 objects are files in the scratch directory]
      --object-memory-dir DIR    The shared-memory filesystem for --object-memory (each
                                 node uses DIR/saker-PILOT/node-N): a tmpfs mounted
                                 with huge pages maps objects faster [default: /dev/shm]
";

/// `agent`'s flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArgs {
    pub dir: PathBuf,
    /// `None`: `SLURM_NODEID` (plus `subtree_base`) inside a Slurm step.
    pub node: Option<u32>,
    pub fanout: u32,
    pub subtree_base: Option<u32>,
    /// `None`: `SLURM_CPUS_ON_NODE` inside a Slurm step.
    pub cores: Option<u32>,
    pub bind: Option<SocketAddr>,
    pub advertise: Option<IpAddr>,
    pub hostname: Option<String>,
    pub offer: NodeOffer,
    pub gpu_ids: Option<String>,
    pub liveness: Liveness,
    pub reattach_for: Duration,
    /// Join any later root of the pilot after losing the root (`--any-root`).
    pub any_root: bool,
    /// The log filter: `--log`, else `SAKER_LOG`, else [`DEFAULT_LOG`].
    pub log: String,
}

/// What a command line asks of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// `-h` or `--help`.
    Help,
    Run(Box<AgentArgs>),
}

/// Parses `agent`'s flags (`args` without the role's name); `env` reads a variable.
pub fn parse_agent(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Parsed, FlagError> {
    let mut parser = lexopt::Parser::from_args(args);
    let (mut dir, mut fanout) = (None, None);
    let (mut node, mut subtree_base, mut cores) = (None, None, None);
    let (mut bind, mut advertise, mut hostname, mut gpu_ids) = (None, None, None, None);
    let mut offer = NodeOffer::default();
    let mut heartbeat_interval = "1s".to_owned();
    let mut heartbeat_timeout = "5s".to_owned();
    let mut reattach_for = "30s".to_owned();
    let mut log = None;
    let mut any_root = false;
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Parsed::Help),
            Long("dir") => dir = Some(PathBuf::from(parser.value()?)),
            Long("node") => node = Some(value(&mut parser, "--node")?),
            Long("fanout") => fanout = Some(value(&mut parser, "--fanout")?),
            Long("subtree-base") => subtree_base = Some(value(&mut parser, "--subtree-base")?),
            Long("cores") => cores = Some(value(&mut parser, "--cores")?),
            Long("bind") => bind = Some(value(&mut parser, "--bind")?),
            Long("advertise") => advertise = Some(value(&mut parser, "--advertise")?),
            Long("hostname") => hostname = Some(text(&mut parser, "--hostname")?),
            Long("gpu-ids") => gpu_ids = Some(text(&mut parser, "--gpu-ids")?),
            Long("heartbeat-interval") => {
                heartbeat_interval = text(&mut parser, "--heartbeat-interval")?;
            }
            Long("heartbeat-timeout") => {
                heartbeat_timeout = text(&mut parser, "--heartbeat-timeout")?;
            }
            Long("reattach-for") => reattach_for = text(&mut parser, "--reattach-for")?,
            Long("log") => log = Some(text(&mut parser, "--log")?),
            Long("any-root") => any_root = true,
            Long("gpus-per-node") => {
                offer.gpus_per_node = Some(value(&mut parser, "--gpus-per-node")?);
            }
            Long("mem-per-node") => {
                offer.mem_per_node = Some(text(&mut parser, "--mem-per-node")?);
            }
            Long("node-resource") => {
                let resource = text(&mut parser, "--node-resource")?;
                offer.node_resources.push(resource);
            }
            Long("pin-cpus") => offer.pin_cpus = text(&mut parser, "--pin-cpus")?,
            Long("no-memory-limits") => offer.no_memory_limits = true,
            Long("scratch") => offer.scratch = Some(PathBuf::from(parser.value()?)),
            Long("shared-scratch") => offer.shared_scratch = true,
            Long("object-memory") => {
                offer.object_memory = Some(text(&mut parser, "--object-memory")?);
            }
            Long("object-memory-dir") => {
                offer.object_memory_dir = Some(PathBuf::from(parser.value()?));
            }
            _ => return Err(arg.unexpected().into()),
        }
    }
    if offer.shared_scratch && offer.scratch.is_none() {
        return Err(FlagError::Requires {
            flag: "--shared-scratch",
            required: "--scratch",
        });
    }
    Ok(Parsed::Run(Box::new(AgentArgs {
        dir: dir.ok_or(FlagError::Missing { flag: "--dir" })?,
        node,
        fanout: fanout.ok_or(FlagError::Missing { flag: "--fanout" })?,
        subtree_base,
        cores,
        bind,
        advertise,
        hostname,
        offer,
        gpu_ids,
        liveness: offer::liveness(&heartbeat_interval, &heartbeat_timeout)?,
        reattach_for: offer::duration("--reattach-for", &reattach_for)?,
        any_root,
        log: log_filter(log, env),
    })))
}

/// Parses `reaper`'s flags (only `--log`) into its log filter.
pub fn parse_reaper(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, FlagError> {
    let mut parser = lexopt::Parser::from_args(args);
    let mut log = None;
    while let Some(arg) = parser.next()? {
        match arg {
            Long("log") => log = Some(text(&mut parser, "--log")?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(log_filter(log, env))
}

fn log_filter(given: Option<String>, env: impl Fn(&str) -> Option<String>) -> String {
    given
        .or_else(|| env(LOG_VARIABLE).filter(|filter| !filter.is_empty()))
        .unwrap_or_else(|| DEFAULT_LOG.to_owned())
}

/// The next value, as text.
fn text(parser: &mut lexopt::Parser, flag: &'static str) -> Result<String, FlagError> {
    parser
        .value()?
        .into_string()
        .map_err(|value| FlagError::Invalid {
            flag,
            value: value.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".to_owned(),
        })
}

/// The next value, parsed.
fn value<T>(parser: &mut lexopt::Parser, flag: &'static str) -> Result<T, FlagError>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let given = text(parser, flag)?;
    given.parse().map_err(|error: T::Err| FlagError::Invalid {
        flag,
        reason: error.to_string(),
        value: given,
    })
}

#[cfg(test)]
mod tests;
