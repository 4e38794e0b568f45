//! `saker agent`: one agent process (started by the pilot).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use saker_actors::agent::{AgentConfig, AgentExit};
use saker_actors::node::{AgentOptions, run_agent};
use saker_transport::pilot_dir::PilotDir;

use crate::cli::AgentArgs;

pub async fn agent(args: AgentArgs) -> Result<ExitCode> {
    let dir = PilotDir::open(&args.dir)
        .with_context(|| format!("opening pilot directory {}", args.dir.display()))?;
    let hostname = match args.hostname {
        Some(name) => name,
        None => nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".to_string()),
    };
    let options = AgentOptions {
        config: AgentConfig {
            node: args.node,
            hostname,
            cores: args.cores.max(1),
            prefetch: args.cores.max(1),
            pilot_id: dir.pilot_id().to_string(),
            spill_dir: dir.path().join("output"),
            max_restarts: 10,
            restart_window: Duration::from_secs(10),
        },
        pilot_dir: args.dir.clone(),
        fanout: args.fanout,
        bind: args.bind,
        parent_wait: Duration::from_secs(60),
    };
    match run_agent(options).await? {
        AgentExit::Shutdown => Ok(ExitCode::SUCCESS),
        AgentExit::ParentLost(reason) | AgentExit::Failed(reason) => {
            tracing::error!(%reason, "agent stopped");
            Ok(ExitCode::from(3))
        }
    }
}
