//! Turning CLI task options (a command, an array, or a task file) into job requests.

use anyhow::{Context, Result, bail};

use crate::cli::TaskArgs;
use saker_root::spec::{
    ArraySpec, HpcOptions, JobRequest, LauncherKind, MpiKind, SpecDefaults, parse_duration,
    parse_memory_mib,
};
use saker_root::taskfile::TaskFile;

/// The defaults the CLI options give every task of the submission.
pub fn defaults_from(args: &TaskArgs) -> Result<SpecDefaults> {
    let mut defaults = SpecDefaults {
        cores: args.cores,
        gpus: args.gpus,
        memory_mib: match &args.mem {
            Some(text) => parse_memory_mib(text).with_context(|| format!("--mem {text:?}"))?,
            None => 0,
        },
        resources: crate::nodes::named_amounts(&args.resources, "--resource")?,
        reads: args.reads.clone(),
        writes: args.writes.clone(),
        priority: args.priority,
        max_retries: args.retries,
        max_replays: args.max_replays,
        cwd: args.cwd.clone(),
        tags: args.tags.clone(),
        idempotent: args.idempotent,
        node: args.node,
        hpc: HpcOptions {
            nodes: args.hpc.nodes,
            ranks_per_node: args.hpc.ranks_per_node,
            ranks: args.hpc.ranks,
            cores_per_rank: args.hpc.cores_per_rank,
            exclusive: args.hpc.exclusive,
            mpi: match &args.hpc.mpi {
                Some(name) => Some(name.parse::<MpiKind>().context("--mpi")?),
                None => None,
            },
            launcher: match &args.hpc.launcher {
                Some(name) => Some(name.parse::<LauncherKind>().context("--launcher")?),
                None => None,
            },
        },
        ..SpecDefaults::default()
    };
    if let Some(limit) = &args.time_limit {
        defaults.time_limit =
            Some(parse_duration(limit).with_context(|| format!("--time-limit {limit:?}"))?);
    }
    for assignment in &args.env {
        defaults
            .add_env_assignment(assignment)
            .with_context(|| format!("--env {assignment:?}"))?;
    }
    Ok(defaults)
}

/// The job requests described by `args`: one job for a command (an array job with
/// `--array`), or one job per line of a task file.
pub fn requests_from(args: &TaskArgs, inline_output: u32) -> Result<Vec<JobRequest>> {
    let defaults = defaults_from(args)?;
    let mut requests = Vec::new();
    match (&args.file, args.command.is_empty()) {
        (Some(_), false) => bail!("give either a task FILE or a command after `--`, not both"),
        (None, true) => bail!("nothing to run: give a command after `--` or a task FILE"),
        (Some(path), true) => {
            if args.array.is_some() {
                bail!("--array applies to a command after `--`, not to a task file");
            }
            for line in TaskFile::open(path, defaults)? {
                let line = line?;
                requests.push(JobRequest {
                    spec: line.spec,
                    array: None,
                    inline_output: Some(inline_output),
                });
            }
            if requests.is_empty() {
                bail!("{} holds no tasks", path.display());
            }
        }
        (None, false) => {
            let mut spec = defaults.to_spec(args.command.clone());
            spec.shell = args.shell;
            spec.validate().context("the command")?;
            let array = match &args.array {
                Some(text) => Some(
                    text.parse::<ArraySpec>()
                        .with_context(|| format!("--array {text:?}"))?,
                ),
                None => None,
            };
            requests.push(JobRequest {
                spec,
                array,
                inline_output: Some(inline_output),
            });
        }
    }
    Ok(requests)
}
