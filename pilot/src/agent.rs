//! `saker agent`: one agent process, started by the pilot — as a child process on a
//! single machine, or by one `srun` step across the nodes of a Slurm allocation.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use saker_actors::agent::AgentConfig;
use saker_actors::node::{AgentOptions, run_agent};
use saker_actors::resources::{SystemProbe, discover};
use saker_actors::supervision::RestartPolicy;
use saker_transport::pilot_dir::PilotDir;

use crate::cli::AgentArgs;

/// Where this agent sits and what it offers, from flags or from Slurm's step
/// environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: u32,
    pub cores: u32,
    pub hostname: String,
    pub bind: SocketAddr,
    pub in_slurm: bool,
}

impl Placement {
    pub fn resolve(args: &AgentArgs, env: impl Fn(&str) -> Option<String>) -> Result<Placement> {
        let in_slurm = env("SLURM_STEP_ID").is_some() && env("SLURM_NODEID").is_some();
        let from_env = |name: &str| -> Result<Option<u32>> {
            env(name)
                .map(|v| {
                    v.trim()
                        .parse::<u32>()
                        .with_context(|| format!("{name}={v:?}"))
                })
                .transpose()
        };
        let node = match args.node {
            Some(node) => node,
            None => {
                let in_step: u32 = from_env("SLURM_NODEID")?
                    .context("--node is required outside a Slurm step (SLURM_NODEID is unset)")?;
                in_step
                    .checked_add(args.subtree_base.unwrap_or(0))
                    .context("--subtree-base plus SLURM_NODEID is beyond the node ids")?
            }
        };
        if let Some(base) = args.subtree_base
            && node < base
        {
            bail!("--node {node} is below --subtree-base {base}: it would not be in its subtree");
        }
        let cores = match args.cores {
            Some(cores) => cores,
            None => from_env("SLURM_CPUS_ON_NODE")?.context(
                "--cores is required outside a Slurm step (SLURM_CPUS_ON_NODE is unset)",
            )?,
        };
        if cores == 0 {
            bail!("an agent needs at least one core");
        }
        let hostname = args
            .hostname
            .clone()
            .or_else(|| env("SLURMD_NODENAME"))
            .or_else(|| {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
            })
            .unwrap_or_else(|| "localhost".to_string());
        let default_ip = if in_slurm {
            Ipv4Addr::UNSPECIFIED
        } else {
            Ipv4Addr::LOCALHOST
        };
        let bind = args
            .bind
            .unwrap_or(SocketAddr::new(IpAddr::V4(default_ip), 0));
        Ok(Placement {
            node,
            cores,
            hostname,
            bind,
            in_slurm,
        })
    }
}

pub async fn agent(args: AgentArgs) -> Result<ExitCode> {
    let dir = PilotDir::open(&args.dir)
        .with_context(|| format!("opening pilot directory {}", args.dir.display()))?;
    let placement = Placement::resolve(&args, |name| std::env::var(name).ok())?;
    let advertise = match args.advertise {
        Some(ip) => Some(ip),
        None if placement.bind.ip().is_unspecified() => {
            Some(saker_root::pilot::host_address(&placement.hostname).await?)
        }
        None => None,
    };
    let declared = args.nodes.declared(args.gpu_ids.as_deref())?;
    // Node-local, per pilot: what tasks of this node write as data items.
    let pilot_scratch = args
        .nodes
        .scratch
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("saker-{}", dir.pilot_id()));
    let scratch = pilot_scratch.join(format!("node-{}", placement.node));
    let resources = discover(placement.cores, &declared, &SystemProbe);
    tracing::info!(?resources, "this node offers");
    let options = AgentOptions {
        config: AgentConfig {
            node: placement.node,
            hostname: placement.hostname.clone(),
            resources,
            limit_memory: !args.nodes.no_memory_limits,
            prefetch: placement.cores,
            pilot_id: dir.pilot_id().to_string(),
            spill_dir: dir.path().join("output"),
            scratch: scratch.clone(),
            shared_scratch: args.nodes.shared_scratch,
            restarts: RestartPolicy::default(),
        },
        pilot_dir: args.dir.clone(),
        fanout: args.fanout,
        subtree_base: args.subtree_base,
        bind: placement.bind,
        advertise,
        parent_wait: Duration::from_secs(120),
        liveness: args.liveness.parse()?,
        reattach_wait: saker_root::spec::parse_duration(&args.reattach_for)
            .with_context(|| format!("--reattach-for {:?}", args.reattach_for))?,
    };
    start_reaper();
    match run_agent(options).await?.error() {
        None => {
            // Asked to stop: the pilot is done with this node's data items. (After a
            // crash they stay, for a resumed pilot.)
            let _ = std::fs::remove_dir_all(&scratch);
            let _ = std::fs::remove_dir(&pilot_scratch);
            Ok(ExitCode::SUCCESS)
        }
        Some(error) => {
            tracing::error!(error, "agent stopped");
            Ok(ExitCode::from(3))
        }
    }
}

/// Starts this agent's reaper (`saker reaper`), which kills the agent's running tasks
/// if the agent dies without stopping them. Without it the agent still works: its
/// tasks just lose that protection.
fn start_reaper() {
    use saker_actors::reaper::{self, Reaper, SUBCOMMAND};
    // /proc/self/exe runs this very binary even if its file was replaced or deleted
    // since this process started (a rebuild, an upgrade).
    let self_exe = Path::new("/proc/self/exe");
    let current = std::env::current_exe();
    let mut command = if self_exe.exists() {
        let mut command = std::process::Command::new(self_exe);
        if let Ok(path) = &current {
            command.arg0(path);
        }
        command
    } else {
        match current {
            Ok(path) => std::process::Command::new(path),
            Err(error) => {
                tracing::warn!(%error, "could not find this binary to start the reaper");
                return;
            }
        }
    };
    command
        .args(saker_actors::self_exe::prefix())
        .arg(SUBCOMMAND);
    match Reaper::start(command) {
        Ok(handle) => {
            tracing::debug!(pid = ?handle.pid(), "reaper started");
            reaper::install(handle);
        }
        Err(error) => tracing::warn!(
            %error,
            "could not start the reaper; this agent's tasks would outlive it if it died"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> AgentArgs {
        let mut argv = vec!["saker", "agent", "--dir", "/tmp/x", "--fanout", "4"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Agent(args) => args,
            other => panic!("parsed {other:?}"),
        }
    }

    #[test]
    fn inside_a_slurm_step_placement_comes_from_the_environment() {
        let env = |name: &str| match name {
            "SLURM_STEP_ID" => Some("0".to_string()),
            "SLURM_NODEID" => Some("2".to_string()),
            "SLURM_CPUS_ON_NODE" => Some("8".to_string()),
            "SLURMD_NODENAME" => Some("n3".to_string()),
            _ => None,
        };
        let placement = Placement::resolve(&args(&[]), env).unwrap();
        assert_eq!(placement.node, 2);
        assert_eq!(placement.cores, 8);
        assert_eq!(placement.hostname, "n3");
        assert!(placement.in_slurm);
        assert!(
            placement.bind.ip().is_unspecified(),
            "other nodes must reach it"
        );
        // An elastic pilot's allocation numbers its agents from its subtree's base.
        let placement = Placement::resolve(&args(&["--subtree-base", "40"]), env).unwrap();
        assert_eq!(placement.node, 42);
        let error =
            Placement::resolve(&args(&["--subtree-base", "40", "--node", "3"]), env).unwrap_err();
        assert!(
            format!("{error:#}").contains("below --subtree-base 40"),
            "{error:#}"
        );
    }

    #[test]
    fn flags_win_and_outside_slurm_they_are_required() {
        let none = |_: &str| None;
        let placement = Placement::resolve(&args(&["--node", "1", "--cores", "3"]), none).unwrap();
        assert_eq!((placement.node, placement.cores), (1, 3));
        assert!(placement.bind.ip().is_loopback());
        let error = Placement::resolve(&args(&[]), none).unwrap_err();
        assert!(
            format!("{error:#}").contains("--node is required"),
            "{error:#}"
        );
    }
}
