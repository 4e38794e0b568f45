//! The agent role: one agent process, started by the pilot — as a child process on a
//! single machine, or by one `srun` step across the nodes of a Slurm allocation.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use saker_actors::agent::{AgentConfig, ObjectMemory};
use saker_actors::node::{AgentOptions, run_agent};
use saker_actors::resources::{SystemProbe, discover};
use saker_actors::supervision::RestartPolicy;
use saker_transport::pilot_dir::PilotDir;

use crate::error::{Error, FlagError};
use crate::flags::AgentArgs;

/// Where nodes keep objects in memory (`--object-memory`) unless told
/// (`--object-memory-dir`): a shared-memory filesystem on every Linux node, counted
/// against the job's memory by Slurm's cgroup.
const OBJECT_MEMORY_ROOT: &str = "/dev/shm";

/// Where this agent sits and what it offers, from flags or from Slurm's step
/// environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSite {
    pub node: u32,
    pub cores: u32,
    pub hostname: String,
    pub bind: SocketAddr,
    pub in_slurm: bool,
}

impl AgentSite {
    /// The site `args` ask for; what they leave out inside a Slurm step comes
    /// from the step's variables, read with `env`.
    pub fn resolve(
        args: &AgentArgs,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<AgentSite, FlagError> {
        let in_slurm = env("SLURM_STEP_ID").is_some() && env("SLURM_NODEID").is_some();
        let from_env = |variable: &'static str| -> Result<Option<u32>, FlagError> {
            env(variable)
                .map(|value| {
                    value
                        .trim()
                        .parse::<u32>()
                        .map_err(|error| FlagError::Environment {
                            variable,
                            reason: error.to_string(),
                            value,
                        })
                })
                .transpose()
        };
        let unset = |flag, variable| FlagError::NotInSlurm { flag, variable };
        let node = match args.node {
            Some(node) => node,
            None => from_env("SLURM_NODEID")?
                .ok_or(unset("--node", "SLURM_NODEID"))?
                .checked_add(args.subtree_base.unwrap_or(0))
                .ok_or(FlagError::SubtreeOverflow)?,
        };
        if let Some(base) = args.subtree_base
            && node < base
        {
            return Err(FlagError::BelowSubtree { node, base });
        }
        let cores = match args.cores {
            Some(cores) => cores,
            None => {
                from_env("SLURM_CPUS_ON_NODE")?.ok_or(unset("--cores", "SLURM_CPUS_ON_NODE"))?
            }
        };
        if cores == 0 {
            return Err(FlagError::NoCores);
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
        Ok(AgentSite {
            node,
            cores,
            hostname,
            bind,
            in_slurm,
        })
    }
}

/// Runs one agent until it is asked to stop (exit code 0) or stops with an error
/// (3), with this process's environment as Slurm's step; an error before it runs is
/// returned.
pub async fn run(args: AgentArgs) -> Result<ExitCode, Error> {
    let dir = PilotDir::open(&args.dir).map_err(|source| Error::PilotDir {
        path: args.dir.clone(),
        source,
    })?;
    let site = AgentSite::resolve(&args, |name| std::env::var(name).ok())?;
    let advertise = match args.advertise {
        Some(ip) => Some(ip),
        None if site.bind.ip().is_unspecified() => {
            Some(crate::address::host_address(&site.hostname).await?)
        }
        None => None,
    };
    let declared = args.offer.declared(args.gpu_ids.as_deref())?;
    // Node-local, per pilot: what tasks of this node write as data items.
    let pilot_scratch = args
        .offer
        .scratch
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("saker-{}", dir.pilot_id()));
    let scratch = pilot_scratch.join(format!("node-{}", site.node));
    let pilot_memory = args
        .offer
        .object_memory_dir
        .clone()
        .unwrap_or_else(|| OBJECT_MEMORY_ROOT.into())
        .join(format!("saker-{}", dir.pilot_id()));
    let object_memory = args.offer.object_memory_mib()?.map(|mib| ObjectMemory {
        dir: pilot_memory.join(format!("node-{}", site.node)),
        bound: mib << 20,
    });
    let resources = discover(site.cores, &declared, &SystemProbe);
    tracing::info!(?resources, "this node offers");
    let options = AgentOptions {
        config: AgentConfig {
            node: site.node,
            hostname: site.hostname.clone(),
            resources,
            limit_memory: !args.offer.no_memory_limits,
            prefetch: site.cores,
            pilot_id: dir.pilot_id().to_string(),
            spill_dir: dir.path().join("output"),
            scratch: scratch.clone(),
            shared_scratch: args.offer.shared_scratch,
            object_memory: object_memory.clone(),
            restarts: RestartPolicy::default(),
        },
        pilot_dir: args.dir.clone(),
        fanout: args.fanout,
        subtree_base: args.subtree_base,
        any_root: args.any_root,
        bind: site.bind,
        advertise,
        parent_wait: Duration::from_secs(120),
        liveness: args.liveness,
        reattach_wait: args.reattach_for,
    };
    start_reaper();
    match run_agent(options).await?.error() {
        None => {
            // Asked to stop: the pilot is done with this node's data items. (After a
            // crash they stay, for a resumed pilot.)
            let _ = std::fs::remove_dir_all(&scratch);
            remove_links_to(&pilot_scratch, &scratch);
            let _ = std::fs::remove_dir(&pilot_scratch);
            if let Some(memory) = &object_memory {
                let _ = std::fs::remove_dir_all(&memory.dir);
                let _ = std::fs::remove_dir(&pilot_memory);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(error) => {
            tracing::error!(error, "agent stopped");
            Ok(ExitCode::from(3))
        }
    }
}

/// Removes the links in `dir` to `target` (an MPI job's leader's scratch path, linked
/// on a member's host to the member's directory).
fn remove_links_to(dir: &Path, target: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if std::fs::read_link(&path).is_ok_and(|to| to == target) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Starts this agent's reaper (the `reaper` role of this same binary), which kills
/// the agent's running tasks if the agent dies without stopping them. Without it the
/// agent still works: its tasks just lose that protection.
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
    use crate::flags::{Parsed, parse_agent};

    fn args(extra: &[&str]) -> AgentArgs {
        let mut argv = vec!["--dir", "/tmp/x", "--fanout", "4"];
        argv.extend_from_slice(extra);
        match parse_agent(argv.into_iter().map(Into::into), |_| None).unwrap() {
            Parsed::Run(args) => *args,
            Parsed::Help => panic!("parsed help"),
        }
    }

    #[test]
    fn inside_a_slurm_step_the_site_comes_from_the_environment() {
        let env = |name: &str| match name {
            "SLURM_STEP_ID" => Some("0".to_string()),
            "SLURM_NODEID" => Some("2".to_string()),
            "SLURM_CPUS_ON_NODE" => Some("8".to_string()),
            "SLURMD_NODENAME" => Some("n3".to_string()),
            _ => None,
        };
        let site = AgentSite::resolve(&args(&[]), env).unwrap();
        assert_eq!(site.node, 2);
        assert_eq!(site.cores, 8);
        assert_eq!(site.hostname, "n3");
        assert!(site.in_slurm);
        assert!(site.bind.ip().is_unspecified(), "other nodes must reach it");
        // An elastic pilot's allocation numbers its agents from its subtree's base.
        let site = AgentSite::resolve(&args(&["--subtree-base", "40"]), env).unwrap();
        assert_eq!(site.node, 42);
        let error =
            AgentSite::resolve(&args(&["--subtree-base", "40", "--node", "3"]), env).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--node 3 is below --subtree-base 40: it would not be in its subtree"
        );
        let error = AgentSite::resolve(&args(&["--subtree-base", "4294967295"]), env).unwrap_err();
        assert!(matches!(error, FlagError::SubtreeOverflow), "{error}");
    }

    #[test]
    fn flags_win_over_the_slurm_step_environment() {
        let env = |name: &str| match name {
            "SLURM_STEP_ID" => Some("0".to_string()),
            "SLURM_NODEID" => Some("2".to_string()),
            "SLURM_CPUS_ON_NODE" => Some("8".to_string()),
            "SLURMD_NODENAME" => Some("n3".to_string()),
            _ => None,
        };
        let given = args(&[
            "--node",
            "5",
            "--cores",
            "1",
            "--hostname",
            "h",
            "--bind",
            "10.0.0.1:7000",
        ]);
        let site = AgentSite::resolve(&given, env).unwrap();
        assert_eq!(site.node, 5);
        assert_eq!(site.cores, 1);
        assert_eq!(site.hostname, "h");
        assert_eq!(site.bind, SocketAddr::from(([10, 0, 0, 1], 7000)));
    }

    #[test]
    fn outside_slurm_node_and_cores_are_required() {
        let none = |_: &str| None;
        let site = AgentSite::resolve(&args(&["--node", "1", "--cores", "3"]), none).unwrap();
        assert_eq!((site.node, site.cores), (1, 3));
        assert!(!site.in_slurm);
        assert!(site.bind.ip().is_loopback());
        let error = AgentSite::resolve(&args(&[]), none).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--node is required outside a Slurm step (SLURM_NODEID is unset)"
        );
        let error = AgentSite::resolve(&args(&["--node", "1"]), none).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--cores is required outside a Slurm step (SLURM_CPUS_ON_NODE is unset)"
        );
        let error = AgentSite::resolve(&args(&["--node", "1", "--cores", "0"]), none).unwrap_err();
        assert!(matches!(error, FlagError::NoCores), "{error}");
    }

    #[test]
    fn a_slurm_variable_that_is_no_number_is_an_error() {
        let env = |name: &str| match name {
            "SLURM_STEP_ID" => Some("0".to_string()),
            "SLURM_NODEID" => Some("two".to_string()),
            _ => None,
        };
        let error = AgentSite::resolve(&args(&["--cores", "1"]), env).unwrap_err();
        assert!(
            error.to_string().starts_with("SLURM_NODEID=\"two\": "),
            "{error}"
        );
    }
}
