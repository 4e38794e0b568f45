//! Running inside a Slurm allocation: one agent per node, all started by a single
//! `srun` step (never one step per task: `srun` launches slowly and loads the
//! controller).

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use saker_actors::liveness::Liveness;

use crate::local::AgentCommand;

/// The allocation this process runs in, from Slurm's batch environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub job_id: String,
    pub nodes: u32,
    pub node_list: String,
    /// When Slurm ends the allocation (unix µs), from libslurm when available.
    pub end_unix_us: Option<u64>,
}

impl Allocation {
    /// The allocation, if this process runs inside one (`SLURM_JOB_ID` and a node
    /// count are set).
    pub fn detect(env: impl Fn(&str) -> Option<String>) -> Option<Allocation> {
        let job_id = env("SLURM_JOB_ID")?;
        let nodes = env("SLURM_JOB_NUM_NODES")
            .or_else(|| env("SLURM_NNODES"))
            .and_then(|n| n.trim().parse().ok())?;
        let node_list = env("SLURM_JOB_NODELIST")
            .or_else(|| env("SLURM_NODELIST"))
            .unwrap_or_default();
        Some(Allocation {
            job_id,
            nodes,
            node_list,
            end_unix_us: None,
        })
    }

    /// The allocation of this process, with its end time from libslurm when that is
    /// available (Slurm's environment does not carry it in 22.05).
    pub fn from_process_env() -> Option<Allocation> {
        let mut allocation = Allocation::detect(|name| std::env::var(name).ok())?;
        match saker_slurm::current_job() {
            Ok(job) => {
                allocation.end_unix_us = job.end_time.and_then(|end| {
                    end.duration_since(std::time::UNIX_EPOCH)
                        .ok()
                        .map(|d| d.as_micros() as u64)
                });
            }
            Err(error) => {
                tracing::warn!(%error, "allocation end time unknown; walltime limits not enforced");
            }
        }
        Some(allocation)
    }
}

/// The `srun` command line that starts one agent on every node of `allocation`.
///
/// `--overlap` lets later steps (e.g. MPI jobs) share the nodes with the agents;
/// `--whole` gives the step every CPU the job holds on each node, so tasks the agent
/// starts are not confined to a share of them; `--mem=0` keeps the step from claiming
/// the node's memory; `--kill-on-bad-exit=0` keeps one agent's failure from killing
/// the others (the root handles a lost node).
pub fn srun_arguments(
    command: &AgentCommand,
    dir: &Path,
    allocation: &Allocation,
    fanout: u32,
    slots_per_node: Option<u32>,
    liveness: &Liveness,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "--overlap".to_string(),
        "--whole".to_string(),
        format!("--nodes={}", allocation.nodes),
        "--ntasks-per-node=1".to_string(),
        "--mem=0".to_string(),
        "--kill-on-bad-exit=0".to_string(),
        "--job-name=saker-agents".to_string(),
        format!(
            "--output={}",
            dir.join("logs").join("agent-%n.log").display()
        ),
    ]
    .map(OsString::from)
    .into();
    args.push(command.program.clone().into());
    args.extend(command.args.iter().cloned());
    args.push("--dir".into());
    args.push(dir.into());
    args.push("--fanout".into());
    args.push(fanout.to_string().into());
    args.extend(crate::local::liveness_arguments(liveness).map(OsString::from));
    if let Some(slots) = slots_per_node {
        args.push("--cores".into());
        args.push(slots.to_string().into());
    }
    args
}

/// The batch script of an elastic pilot's allocation: one `srun` step of one agent
/// per node, numbered from `{first_node}` (filled in per allocation) as a subtree of
/// the root of its own. Its agents look for the root for `reattach_for` when it is
/// gone, so a root restarted within that time adopts them.
pub fn elastic_script(
    command: &AgentCommand,
    dir: &Path,
    fanout: u32,
    liveness: &Liveness,
    reattach_for: &str,
) -> String {
    let quote =
        |word: &std::ffi::OsStr| format!("'{}'", word.to_string_lossy().replace('\'', r"'\''"));
    let mut words: Vec<String> = [
        "srun",
        "--overlap",
        "--whole",
        "--ntasks-per-node=1",
        "--mem=0",
        "--kill-on-bad-exit=0",
        "--job-name=saker-agents",
    ]
    .iter()
    .map(|w| (*w).to_owned())
    .collect();
    words.push("--nodes=\"$SLURM_JOB_NUM_NODES\"".to_owned());
    let output = format!(
        "--output={}",
        dir.join("logs").join("agent-%j-%n.log").display()
    );
    words.push(quote(std::ffi::OsStr::new(&output)));
    words.push(quote(command.program.as_os_str()));
    words.extend(command.args.iter().map(|a| quote(a)));
    words.push("--dir".to_owned());
    words.push(quote(dir.as_os_str()));
    words.push(format!("--fanout {fanout}"));
    words.push("--subtree-base {first_node}".to_owned());
    words.push(format!(
        "--reattach-for {}",
        quote(std::ffi::OsStr::new(reattach_for))
    ));
    words.extend(
        crate::local::liveness_arguments(liveness)
            .iter()
            .map(|a| quote(std::ffi::OsStr::new(a))),
    );
    let mut script =
        String::from("#!/bin/bash\n# An elastic Saker pilot's allocation: one agent per node.\n");
    for (name, value) in &command.env {
        script.push_str(&format!(
            "export {}={}\n",
            name.to_string_lossy(),
            quote(value)
        ));
    }
    script.push_str("exec ");
    script.push_str(&words.join(" "));
    script.push('\n');
    script
}

/// An `srun` of one task on one node of this allocation, beside the agents' step
/// (`--overlap`): the caller names the node (`--nodelist`) and the program.
pub fn srun_one(job_name: &str) -> tokio::process::Command {
    let srun = std::env::var_os("SAKER_SRUN").unwrap_or_else(|| "srun".into());
    let mut command = tokio::process::Command::new(srun);
    command.args([
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--mem=0",
        "--kill-on-bad-exit=0",
        &format!("--job-name={job_name}"),
    ]);
    command
}

/// How long the agents' step has to start each node's agent (it takes its node's
/// lock) before the root starts one there itself.
pub const AGENT_START_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// What starts node `node`'s agent again, in a step of its own on that node, when the
/// agents' step lost it (killed, crashed) while the node lives: `hosts` are the
/// allocation's nodes in the step's order (node `i` runs on `hosts[i]`). Its log is
/// appended to the node's.
pub fn agent_restarter(
    command: &AgentCommand,
    dir: &Path,
    hosts: Vec<String>,
    fanout: u32,
    slots_per_node: Option<u32>,
    liveness: &Liveness,
) -> crate::local::Start {
    let command = command.clone();
    let dir = dir.to_path_buf();
    let liveness = crate::local::liveness_arguments(liveness);
    Box::new(move |node| {
        let host = hosts.get(node as usize).ok_or_else(|| {
            std::io::Error::other(format!("node {node} is not in the allocation"))
        })?;
        let srun = std::env::var_os("SAKER_SRUN").unwrap_or_else(|| "srun".into());
        let mut srun = tokio::process::Command::new(srun);
        srun.envs(command.env.iter().map(|(k, v)| (k, v)))
            .args([
                "--overlap",
                "--whole",
                "--nodes=1",
                "--ntasks=1",
                "--mem=0",
                "--kill-on-bad-exit=0",
                "--job-name=saker-agent",
                "--open-mode=append",
            ])
            .arg(format!("--nodelist={host}"))
            .arg(format!(
                "--output={}",
                dir.join("logs").join(format!("agent-{host}.log")).display()
            ))
            .arg(&command.program)
            .args(&command.args)
            .arg("--dir")
            .arg(&dir)
            .args(["--fanout", &fanout.to_string(), "--node", &node.to_string()])
            .args(&liveness);
        if let Some(slots) = slots_per_node {
            srun.args(["--cores", &slots.to_string()]);
        }
        srun.stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
    })
}

/// Starts the agents' `srun` step.
pub fn srun_agents(
    command: &AgentCommand,
    dir: &Path,
    allocation: &Allocation,
    fanout: u32,
    slots_per_node: Option<u32>,
    liveness: &Liveness,
) -> std::io::Result<tokio::process::Child> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let srun = std::env::var_os("SAKER_SRUN").unwrap_or_else(|| "srun".into());
    tokio::process::Command::new(srun)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .args(srun_arguments(
            command,
            dir,
            allocation,
            fanout,
            slots_per_node,
            liveness,
        ))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocation_is_read_from_the_batch_environment() {
        let env = |name: &str| match name {
            "SLURM_JOB_ID" => Some("42".to_string()),
            "SLURM_JOB_NUM_NODES" => Some("3".to_string()),
            "SLURM_JOB_NODELIST" => Some("n[1-3]".to_string()),
            _ => None,
        };
        let allocation = Allocation::detect(env).unwrap();
        assert_eq!(
            allocation,
            Allocation {
                job_id: "42".into(),
                nodes: 3,
                node_list: "n[1-3]".into(),
                end_unix_us: None,
            }
        );
        assert_eq!(Allocation::detect(|_| None), None);
    }

    #[test]
    fn one_overlapping_step_runs_one_agent_per_node() {
        let allocation = Allocation {
            job_id: "7".into(),
            nodes: 3,
            node_list: "n[1-3]".into(),
            end_unix_us: None,
        };
        let command = AgentCommand {
            program: "/bin/saker".into(),
            args: vec!["agent".into()],
            env: Vec::new(),
        };
        let args = srun_arguments(
            &command,
            Path::new("/p"),
            &allocation,
            4,
            None,
            &Liveness::default(),
        );
        for expected in [
            "--overlap",
            "--nodes=3",
            "--ntasks-per-node=1",
            "--mem=0",
            "agent",
            "--heartbeat-timeout",
            "5000ms",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "{expected} missing from {args:?}"
            );
        }
        assert!(
            !args.iter().any(|a| a == "--cores"),
            "cores come from each node's allocation"
        );
    }

    /// The elastic batch script runs one agent per node as a subtree numbered from
    /// `{first_node}`, quoting what the shell would split, and bash reads it.
    #[test]
    fn an_elastic_allocation_script_starts_a_subtree_of_agents() {
        let command = AgentCommand {
            program: "/opt/it's here/saker".into(),
            args: vec!["agent".into()],
            env: vec![("SAKER_WORKER_PY".into(), "python3 -m w".into())],
        };
        let script = elastic_script(
            &command,
            Path::new("/shared/p 1"),
            8,
            &Liveness::default(),
            "10m",
        );
        assert!(script.starts_with("#!/bin/bash\n"), "{script}");
        for expected in [
            "export SAKER_WORKER_PY='python3 -m w'",
            "exec srun --overlap --whole --ntasks-per-node=1",
            "--nodes=\"$SLURM_JOB_NUM_NODES\"",
            "'/opt/it'\\''s here/saker' 'agent' --dir '/shared/p 1' --fanout 8",
            "--subtree-base {first_node} --reattach-for '10m'",
            "'--heartbeat-timeout' '5000ms'",
        ] {
            assert!(
                script.contains(expected),
                "{expected} missing from {script}"
            );
        }
        let checked = std::process::Command::new("bash")
            .args(["-n", "-c", &script])
            .status()
            .expect("bash runs");
        assert!(checked.success(), "bash -n refused {script}");
    }
}
