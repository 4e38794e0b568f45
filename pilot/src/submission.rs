//! Turning CLI task options (a command, an array, or a task file) into job requests.

use anyhow::{Context, Result, bail};

use crate::cli::TaskArgs;
use saker_client::spec::{
    ArraySpec, HpcOptions, JobRequest, LauncherKind, MpiKind, SpecDefaults, parse_duration,
    parse_memory_mib,
};
use saker_client::spec::{Commands, JobLines, JobRef, TaskSpec};
use saker_client::taskfile::{TaskFile, TaskItem};

/// The defaults the CLI options give every task of the submission.
pub fn defaults_from(args: &TaskArgs) -> Result<SpecDefaults> {
    let mut defaults = SpecDefaults {
        cores: args.cores,
        gpus: args.gpus,
        memory_mib: match &args.mem {
            Some(text) => parse_memory_mib(text).with_context(|| format!("--mem {text:?}"))?,
            None => 0,
        },
        resources: saker_node::offer::named_amounts(&args.resources, "--resource")?,
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

/// What a task file becomes on the wire, in file order.
#[derive(Debug)]
pub enum Part {
    /// Whole jobs (JSON lines).
    Jobs(Vec<JobRequest>),
    /// Plain lines: one `submit_lines` batch.
    Lines(Box<JobLines>),
}

/// A batch of lines goes out past this many commands or bytes of them, so that no
/// request nears the client protocol's line limit and the root works while the
/// client reads on.
const LINES_PER_BATCH: usize = 250_000;
const LINE_BYTES_PER_BATCH: usize = 16 << 20;

/// The task file of `args` as parts (`None` when `args` is not a task file): runs of
/// plain lines as `submit_lines` batches sharing the CLI options, JSON lines as jobs.
/// `edit` applies to every spec (and the batches' template) before it is sent.
pub fn parts_from(
    args: &TaskArgs,
    inline_output: u32,
    edit: impl Fn(&mut TaskSpec),
) -> Result<Option<Vec<Part>>> {
    let Some(path) = &args.file else {
        return Ok(None);
    };
    if !args.command.is_empty() || args.array.is_some() {
        return Ok(None);
    }
    let defaults = defaults_from(args)?;
    let mut template = defaults.to_spec(Vec::new());
    edit(&mut template);
    // What a batch cannot share (`JobLines::validate`) goes the general way.
    if template.name.is_some()
        || !template.after.is_empty()
        || !template.after_any.is_empty()
        || template.every.is_some()
        || !template.reads.is_empty()
        || !template.writes.is_empty()
    {
        return Ok(None);
    }
    // The options are checked once, with a stand-in command.
    let mut probe = template.clone();
    probe.argv = vec!["x".to_owned()];
    probe.validate().context("the task options")?;
    let mut file = TaskFile::open(path, defaults)?;
    let mut parts = Vec::new();
    let mut commands = Commands::new();
    let mut bytes = 0;
    let flush = |commands: &mut Commands, parts: &mut Vec<Part>| {
        if !commands.is_empty() {
            parts.push(Part::Lines(Box::new(JobLines {
                template: template.clone(),
                inline_output: Some(inline_output),
                commands: std::mem::take(commands),
            })));
        }
    };
    while let Some(item) = file.next_item() {
        let (_, item) = item?;
        match item {
            TaskItem::Command { argv, env } => {
                bytes += argv.iter().map(|arg| arg.len() + 1).sum::<usize>();
                commands.push(argv.iter().map(String::as_str), env)?;
                if commands.len() >= LINES_PER_BATCH || bytes >= LINE_BYTES_PER_BATCH {
                    flush(&mut commands, &mut parts);
                    bytes = 0;
                }
            }
            TaskItem::Spec(mut spec) => {
                // Names are resolved within one request: such a file goes whole.
                if spec.name.is_some()
                    || spec
                        .after
                        .iter()
                        .chain(&spec.after_any)
                        .any(|r| matches!(r, JobRef::Name(_)))
                {
                    return Ok(None);
                }
                flush(&mut commands, &mut parts);
                bytes = 0;
                edit(&mut spec);
                let request = JobRequest {
                    spec: *spec,
                    array: None,
                    inline_output: Some(inline_output),
                };
                match parts.last_mut() {
                    Some(Part::Jobs(jobs)) => jobs.push(request),
                    _ => parts.push(Part::Jobs(vec![request])),
                }
            }
        }
    }
    flush(&mut commands, &mut parts);
    if parts.is_empty() {
        bail!("{} holds no tasks", path.display());
    }
    Ok(Some(parts))
}
