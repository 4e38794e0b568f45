//! Local mode: the agents of an embedded pilot are child processes of this one,
//! linked to the root over QUIC on loopback exactly as they would be across nodes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use saker_actors::liveness::Liveness;
/// The heartbeat flags are `saker-node`'s, beside the parser that reads them.
pub use saker_node::offer::liveness_arguments;

mod supervise;
pub(crate) use supervise::Start;
pub use supervise::{FIRST_BACKOFF, MAX_BACKOFF, MAX_RESTARTS};

/// How many agents, with how many slots each, in a tree of what fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub slots_per_agent: Vec<u32>,
    pub fanout: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShapeError {
    #[error("--agents must be at least 1")]
    NoAgents,
    #[error("--slots {slots} is fewer than --agents {agents}: every agent needs a slot")]
    TooFewSlots { slots: u32, agents: u32 },
    #[error("--fanout must be at least 1")]
    NoFanout,
}

/// What a shape is built from; `None` takes the machine's defaults (one agent, one
/// slot per core).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeRequest {
    pub agents: Option<u32>,
    pub slots: Option<u32>,
    pub fanout: u32,
    /// Zero agents is allowed: a root that only queues (agents may join later, or the
    /// pilot is measured without any).
    pub allow_none: bool,
}

impl Shape {
    /// The shape `request` asks for, with defaults from the machine.
    pub fn new(request: ShapeRequest) -> Result<Self, ShapeError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let agents = request.agents.unwrap_or(1);
        if agents == 0 {
            if request.allow_none {
                return Ok(Shape {
                    slots_per_agent: Vec::new(),
                    fanout: request.fanout.max(1),
                });
            }
            return Err(ShapeError::NoAgents);
        }
        if request.fanout == 0 {
            return Err(ShapeError::NoFanout);
        }
        let slots = request.slots.unwrap_or_else(|| cores.max(agents));
        if slots < agents {
            return Err(ShapeError::TooFewSlots { slots, agents });
        }
        let base = slots / agents;
        let extra = slots % agents;
        Ok(Shape {
            slots_per_agent: (0..agents).map(|i| base + u32::from(i < extra)).collect(),
            fanout: request.fanout,
        })
    }

    pub fn agents(&self) -> u32 {
        self.slots_per_agent.len() as u32
    }

    pub fn slots(&self) -> u32 {
        self.slots_per_agent.iter().sum()
    }
}

/// The agent processes of a pilot: a local pilot's, supervised, or the `srun` step
/// that runs an allocation's.
#[derive(Debug)]
pub struct AgentProcesses {
    children: Vec<tokio::process::Child>,
    supervisor: Option<supervise::Supervisor>,
}

/// The program that runs an agent: `program args… --dir DIR --node N …`. For the
/// `saker` CLI that is `saker agent`; an application that embeds the root names its
/// own binary and the subcommand that calls into the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub program: PathBuf,
    /// Arguments before the agent's own flags (a subcommand, say).
    pub args: Vec<OsString>,
    /// Variables set for the agents on top of the pilot's environment (worker
    /// commands, `SAKER_WORKER_<KIND>`, say). An `srun` step passes them on.
    pub env: Vec<(OsString, OsString)>,
}

impl AgentCommand {
    /// This very executable with `subcommand` (`saker agent`).
    pub fn current_exe(subcommand: &str) -> std::io::Result<AgentCommand> {
        // An application that embeds the command line reaches it behind its prefix.
        let mut args: Vec<OsString> = saker_actors::self_exe::prefix()
            .iter()
            .map(OsString::from)
            .collect();
        args.push(subcommand.into());
        Ok(AgentCommand {
            program: std::env::current_exe()?,
            args,
            env: Vec::new(),
        })
    }
}

/// Starts one agent process per agent of `shape`, and keeps them running (see
/// `local/supervise.rs`) until `stopping` is set. Their diagnostics go to
/// `DIR/logs/agent-N.log` so they never garble a progress bar. `resources[i]` are
/// agent `i`'s flags for what it offers beyond cores (none if missing). With
/// `adopting` (a resumed pilot), a node whose agent still lives
/// ([`saker_actors::node_lock::held`]) gets none while it does: that one joins the new
/// root, with what it runs.
pub fn spawn_agents(
    command: &AgentCommand,
    dir: &Path,
    shape: &Shape,
    resources: &[Vec<String>],
    liveness: &Liveness,
    adopting: bool,
    stopping: Arc<AtomicBool>,
) -> std::io::Result<AgentProcesses> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let start = starter(command, dir, shape, resources, liveness);
    let mut ours = Vec::with_capacity(shape.slots_per_agent.len());
    let mut theirs = Vec::new();
    for node in 0..shape.slots_per_agent.len() as u32 {
        if adopting && saker_actors::node_lock::held(dir, node)? {
            tracing::info!(
                node,
                "the agent of this node still runs; it joins this root"
            );
            theirs.push(node);
            continue;
        }
        ours.push((node, start(node)?));
    }
    let supervisor = supervise::Supervisor::start(start, dir.to_path_buf(), ours, theirs, stopping);
    Ok(AgentProcesses {
        children: Vec::new(),
        supervisor: Some(supervisor),
    })
}

/// What starts node `node`'s agent of `shape`.
fn starter(
    command: &AgentCommand,
    dir: &Path,
    shape: &Shape,
    resources: &[Vec<String>],
    liveness: &Liveness,
) -> supervise::Start {
    let command = command.clone();
    let dir = dir.to_path_buf();
    let shape = shape.clone();
    let resources = resources.to_vec();
    let liveness = liveness_arguments(liveness);
    Box::new(move |node| {
        let index = node as usize;
        let slots = shape.slots_per_agent.get(index).copied().unwrap_or(1);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("logs").join(format!("agent-{node}.log")))?;
        tokio::process::Command::new(&command.program)
            .args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .arg("--dir")
            .arg(&dir)
            .args(["--node", &node.to_string()])
            .args(["--fanout", &shape.fanout.to_string()])
            .args(["--cores", &slots.to_string()])
            .args(&liveness)
            .args(resources.get(index).into_iter().flatten())
            // A later root of the pilot (a standby, a resumed root) adopts it.
            .arg(crate::standbys::ANY_ROOT_FLAG)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
    })
}

impl AgentProcesses {
    /// Agent processes started some other way (e.g. one `srun` step for all nodes).
    pub fn from_children(children: Vec<tokio::process::Child>) -> Self {
        AgentProcesses {
            children,
            supervisor: None,
        }
    }

    /// The agents' step of an allocation (none for a standby that took over: the
    /// agents are the previous root's), and a supervisor that starts a node's agent
    /// again in a step of its own when the step's ends (`start`), while the pilot runs.
    pub fn supervised_step(
        step: Option<tokio::process::Child>,
        start: Start,
        dir: &Path,
        nodes: u32,
        stopping: Arc<AtomicBool>,
    ) -> Self {
        let supervisor = supervise::Supervisor::start_expecting(
            start,
            dir.to_path_buf(),
            (0..nodes).collect(),
            crate::slurm::AGENT_START_GRACE,
            &std::env::var("SLURM_JOB_ID").unwrap_or_default(),
            stopping,
        );
        AgentProcesses {
            children: step.into_iter().collect(),
            supervisor: Some(supervisor),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty() && self.supervisor.is_none()
    }

    /// Whether any agent process (or the step that runs them) is still running, or a
    /// node's agent will be started again.
    pub fn any_running(&mut self) -> bool {
        let step = self
            .children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)));
        step || self
            .supervisor
            .as_ref()
            .is_some_and(supervise::Supervisor::any_running)
    }

    /// Waits for every agent to exit (after a shutdown), killing stragglers.
    pub async fn wait(mut self, grace: Duration) {
        if let Some(supervisor) = self.supervisor.take() {
            self.children.extend(supervisor.stop().await);
        }
        for child in &mut self.children {
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }

    /// Process ids, for tests that kill agents.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.children.iter().filter_map(|c| c.id()).collect();
        if let Some(supervisor) = &self.supervisor {
            pids.extend(supervisor.pids());
        }
        pids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(agents: Option<u32>, slots: Option<u32>, fanout: u32) -> ShapeRequest {
        ShapeRequest {
            agents,
            slots,
            fanout,
            allow_none: false,
        }
    }

    #[test]
    fn slots_are_spread_evenly_with_the_remainder_first() {
        let shape = Shape::new(args(Some(3), Some(8), 4)).unwrap();
        assert_eq!(shape.slots_per_agent, vec![3, 3, 2]);
        assert_eq!(shape.slots(), 8);
    }

    #[test]
    fn bad_shapes_are_refused_with_the_reason() {
        assert_eq!(
            Shape::new(args(Some(0), None, 4)),
            Err(ShapeError::NoAgents)
        );
        assert_eq!(
            Shape::new(args(Some(4), Some(2), 4)),
            Err(ShapeError::TooFewSlots {
                slots: 2,
                agents: 4
            })
        );
        assert_eq!(Shape::new(args(None, None, 0)), Err(ShapeError::NoFanout));
    }
}
