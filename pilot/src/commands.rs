//! The client-side commands: `submit`, `wait`, `status`, `cancel`, `results`,
//! `shutdown`. Each connects to a running pilot through its directory.

use std::io::Write;
use std::process::ExitCode;

use std::fmt::Write as _;

use anyhow::{Context, Result};

use crate::cli::{
    CancelArgs, DirArgs, ResultsArgs, ResultsFormat, StatusArgs, SubmitArgs, UpdateArgs, WaitArgs,
};
use crate::submission::{Part, requests_from};
use saker_client::results::{CsvWriter, JobId, ResultRecord, TableWriter, Timestamp, write_jsonl};
use saker_client::spec::JobRef;
use saker_client::{Client, JobUpdate, StatusReport, WaitReport};
use saker_root::pilot::JOURNAL_DIR;
use saker_root::records::Record;

pub(crate) const CLIENT_NAME: &str = concat!("saker-cli/", env!("CARGO_PKG_VERSION"));

pub(crate) async fn connect(dir: &DirArgs) -> Result<Client> {
    Client::connect(&dir.dir, CLIENT_NAME)
        .await
        .with_context(|| format!("connecting to the pilot in {}", dir.dir.display()))
}

fn exit_for(report: &WaitReport) -> ExitCode {
    if report.failed == 0 && report.cancelled == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub async fn submit(args: SubmitArgs) -> Result<ExitCode> {
    let not_before = match (&args.at, &args.in_) {
        (Some(at), _) => Some(
            at.parse::<Timestamp>()
                .with_context(|| format!("--at {at:?}"))?,
        ),
        (None, Some(delay)) => {
            let delay = saker_client::spec::parse_duration(delay)
                .with_context(|| format!("--in {delay:?}"))?;
            Some(Timestamp::from_unix_micros(
                Timestamp::now().unix_micros() + delay.as_micros() as u64,
            ))
        }
        (None, None) => None,
    };
    let every = match &args.every {
        Some(every) => Some(
            saker_client::spec::parse_duration(every)
                .with_context(|| format!("--every {every:?}"))?,
        ),
        None => None,
    };
    let until = match &args.until {
        Some(until) => Some(
            until
                .parse::<Timestamp>()
                .with_context(|| format!("--until {until:?}"))?,
        ),
        None => None,
    };
    let edit = |spec: &mut saker_client::spec::TaskSpec| {
        if not_before.is_some() {
            spec.not_before = not_before;
        }
        if every.is_some() {
            spec.every = every;
            spec.until = until;
            spec.count = args.count;
        }
        spec.after
            .extend(args.after.iter().map(|job| JobRef::Id(*job)));
        spec.after_any
            .extend(args.after_any.iter().map(|job| JobRef::Id(*job)));
    };
    // A task file's plain lines go as `submit_lines` batches: one set of options,
    // a few bytes per line.
    let parts = match crate::submission::parts_from(&args.task, args.inline_output, edit)? {
        Some(parts) => parts,
        None => {
            let mut requests = requests_from(&args.task, args.inline_output)?;
            for request in &mut requests {
                edit(&mut request.spec);
            }
            vec![Part::Jobs(requests)]
        }
    };
    let client = connect(&args.dir).await?;
    let mut jobs = Vec::new();
    for part in parts {
        match part {
            Part::Lines(lines) => jobs.extend(client.submit_lines(&lines).await?.jobs()),
            Part::Jobs(requests) => {
                // Names are resolved within one request: a file that uses them goes whole.
                let named = requests.iter().any(|request| {
                    request.spec.name.is_some()
                        || request
                            .spec
                            .after
                            .iter()
                            .chain(&request.spec.after_any)
                            .any(|r| matches!(r, JobRef::Name(_)))
                });
                let batch = if named { requests.len().max(1) } else { 10_000 };
                for batch in requests.chunks(batch) {
                    jobs.extend(client.submit(batch.to_vec()).await?);
                }
            }
        }
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for job in &jobs {
        writeln!(
            out,
            "job {} tasks {} first_task {}",
            job.job, job.count, job.first_task
        )?;
    }
    out.flush()?;
    drop(out);
    if args.wait {
        let report = client
            .wait(Some(jobs.iter().map(|j| j.job).collect()))
            .await?;
        print_wait(&report);
        return Ok(exit_for(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_wait(report: &WaitReport) {
    println!(
        "succeeded {} failed {} cancelled {}",
        report.succeeded, report.failed, report.cancelled
    );
}

pub async fn wait(args: WaitArgs) -> Result<ExitCode> {
    let patience = saker_client::spec::parse_duration(&args.reconnect_for)
        .with_context(|| format!("--reconnect-for {:?}", args.reconnect_for))?;
    let jobs: Option<Vec<JobId>> =
        (!args.jobs.is_empty()).then(|| args.jobs.iter().map(|j| JobId(*j)).collect());
    // Waiting is idempotent: a wait cut off by a root that died is asked again of
    // the standby that takes over.
    let watch = tokio::spawn(warn_while_agentless(args.dir.dir.clone()));
    let _stop_watching = AbortOnDrop(watch);
    let mut lost_since: Option<std::time::Instant> = None;
    let report = loop {
        let asked = async {
            let client = Client::connect(&args.dir.dir, CLIENT_NAME).await?;
            client.wait(jobs.clone()).await
        };
        match asked.await {
            Ok(report) => break report,
            Err(error) if error.is_connection_lost() => {
                let since = *lost_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= patience {
                    return Err(anyhow::Error::new(error).context(format!(
                        "waiting on the pilot in {}: unreachable for {patience:?}",
                        args.dir.dir.display()
                    )));
                }
                tracing::info!(error = %saker_actors::error_chain(&error), "pilot unreachable; reconnecting");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(error) => {
                return Err(anyhow::Error::new(error).context(format!(
                    "waiting on the pilot in {}",
                    args.dir.dir.display()
                )));
            }
        }
    };
    print_wait(&report);
    Ok(exit_for(&report))
}

/// How often `wait` looks whether the pilot has agents, and how long none may have
/// been connected, with work queued, before it says so.
const AGENTLESS_POLL: std::time::Duration = std::time::Duration::from_secs(1);
const AGENTLESS_WARN_SECONDS: u64 = 5;

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Work queued and no agent to run it: what `status` says, as one line (`None` when
/// agents are connected or nothing waits for one).
fn agentless(status: &StatusReport, dir: &std::path::Path) -> Option<String> {
    let ready = status.queued.saturating_sub(status.waiting);
    let seconds = status.agentless_seconds?;
    if status.agents > 0 || ready == 0 {
        return None;
    }
    let why = if !status.allocations.is_empty() {
        "the pilot's allocations are listed below"
    } else {
        "the agents' logs are in DIR/logs; `saker agent --dir DIR --node N` starts one"
    };
    Some(format!(
        "no agent connected for {seconds} s: {ready} queued tasks wait for one ({})",
        why.replace("DIR", &dir.display().to_string())
    ))
}

/// For `wait`: says once, on stderr, when no agent has been connected for a while
/// and work waits for one (again after agents came and went); never ends by itself.
async fn warn_while_agentless(dir: std::path::PathBuf) {
    let mut warned = false;
    loop {
        tokio::time::sleep(AGENTLESS_POLL).await;
        let Ok(client) = Client::connect(&dir, CLIENT_NAME).await else {
            continue;
        };
        let Ok(status) = client.status().await else {
            continue;
        };
        let line = agentless(&status, &dir)
            .filter(|_| status.agentless_seconds >= Some(AGENTLESS_WARN_SECONDS));
        match line {
            Some(line) if !warned => {
                eprintln!("saker wait: {line}; still waiting");
                warned = true;
            }
            Some(_) => {}
            None => warned = false,
        }
    }
}

pub async fn status(args: StatusArgs) -> Result<ExitCode> {
    let client = connect(&args.dir).await?;
    let status = client.status().await?;
    if args.json {
        let mut out = serde_json::to_string(&status)?;
        out.push('\n');
        std::io::stdout().write_all(out.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Written at once: a closed pipe (`saker status | head`) is an error to return,
    // not a panic.
    let mut out = String::new();
    writeln!(out, "pilot     {}", status.pilot_id)?;
    if let Some(root) = &status.root {
        let since = root
            .started
            .map(|at| format!(", since {at}"))
            .unwrap_or_default();
        let how = if root.took_over {
            " (a standby that took over from a root that died)"
        } else {
            ""
        };
        writeln!(out, "root      {} pid {}{since}{how}", root.host, root.pid)?;
    }
    if let Some(adoption) = &status.adoption {
        write!(
            out,
            "adopted   {} running, {} ended while away; {} stopped, {} nodes missing; \
             dispatch waited {} ms",
            adoption.adopted,
            adoption.ended_away,
            adoption.refused,
            adoption.missing_nodes,
            adoption.waited_ms
        )?;
        if adoption.delivered > 0 {
            write!(
                out,
                "; {} results already accepted were sent again",
                adoption.delivered
            )?;
        }
        writeln!(out)?;
    }
    let standbys = saker_client::standbys::waiting(&args.dir.dir);
    if !standbys.is_empty() {
        let listed: Vec<String> = standbys
            .iter()
            .map(|s| format!("{} pid {}", s.host, s.pid))
            .collect();
        writeln!(out, "standbys  {}: {}", standbys.len(), listed.join(", "))?;
    }
    writeln!(
        out,
        "agents    {} ({} slots, {} busy)",
        status.agents, status.slots, status.busy_slots
    )?;
    if let Some(line) = agentless(&status, &args.dir.dir) {
        writeln!(out, "          {line}")?;
    }
    if status.disk_full {
        writeln!(
            out,
            "journal   DISK FULL: submissions refused, no task starts, results of running ones held until there is space"
        )?;
    }
    writeln!(out, "jobs      {}", status.jobs)?;
    writeln!(
        out,
        "tasks     queued {}  running {}  succeeded {}  failed {}  cancelled {}",
        status.queued, status.running, status.succeeded, status.failed, status.cancelled
    )?;
    if status.waiting > 0 {
        writeln!(
            out,
            "          of the queued, {} wait for other jobs to end or for their time",
            status.waiting
        )?;
    }
    writeln!(
        out,
        "rate      {:.1} tasks/s now, {:.1} over the last minute",
        status.rate, status.rate_minute
    )?;
    if status.items > 0 || status.data_moved_bytes > 0 {
        writeln!(
            out,
            "data      {} items held, {} bytes moved between nodes ({} through the root, {} relayed), {} bytes held, {} recomputed",
            status.items,
            status.data_moved_bytes,
            status.data_root_bytes,
            status.data_relayed_bytes,
            status.data_held_bytes,
            status.data_recomputes
        )?;
    }
    if status.data_memory_bound > 0 {
        writeln!(
            out,
            "objects   {} of {} bytes in memory, {} moved to scratch ({} bytes), {} copies dropped ({} bytes)",
            status.data_memory_bytes,
            status.data_memory_bound,
            status.data_spills,
            status.data_spilled_bytes,
            status.data_drops,
            status.data_dropped_bytes
        )?;
    }
    if status.periodic > 0 {
        writeln!(out, "periodic  {} jobs going on", status.periodic)?;
    }
    if status.actors > 0 {
        writeln!(out, "actors    {} placed", status.actors)?;
    }
    let hpc = &status.hpc;
    if hpc.running + hpc.waiting > 0 {
        let held = match (hpc.reserved_for, hpc.reserved_seconds) {
            (Some(job), Some(seconds)) => format!(
                "  nodes {} held for job {job}, free in {seconds:.1} s by time limits",
                hpc.reserved_nodes.join(",")
            ),
            (Some(job), None) => format!(
                "  nodes {} held for job {job} (work without a time limit runs there)",
                hpc.reserved_nodes.join(",")
            ),
            _ => String::new(),
        };
        writeln!(
            out,
            "hpc jobs  running {}  waiting {}{held}",
            hpc.running, hpc.waiting
        )?;
    }
    writeln!(
        out,
        "attempts  retried {}  replayed {}  speculative copies {}  duplicates dropped {}",
        status.retries, status.replays, status.speculated, status.duplicates
    )?;
    if !status.stages.is_empty() {
        let mut row = |cells: [&str; 6]| {
            let [stage, tasks, p50, p90, p99, max] = cells;
            writeln!(
                out,
                "{stage:<9} {tasks:>9} {p50:>9} {p90:>9} {p99:>9} {max:>9}"
            )
        };
        row(["STAGE", "TASKS", "P50", "P90", "P99", "MAX"])?;
        for stage in &status.stages {
            let times = [stage.p50_us, stage.p90_us, stage.p99_us, stage.max_us].map(micros);
            let [p50, p90, p99, max] = &times;
            row([&stage.stage, &stage.count.to_string(), p50, p90, p99, max])?;
        }
    }
    if let Some(allocation) = &status.allocation {
        let left = match allocation.seconds_left {
            Some(seconds) => format!("{} left", clock(seconds)),
            None => "end time unknown".to_string(),
        };
        writeln!(
            out,
            "slurm     job {} on {} nodes ({}), {left}",
            allocation.job_id, allocation.nodes, allocation.node_list
        )?;
    }
    out.push_str(&allocation_table(&status));
    if !status.nodes.is_empty() {
        writeln!(
            out,
            "{:<6} {:<20} {:>5} {:>5} {:>4} {:>9}  RESOURCES",
            "NODE", "HOST", "CORES", "BUSY", "GPUS", "MEMORY"
        )?;
        for node in &status.nodes {
            let resources: Vec<String> = node
                .resources
                .iter()
                .map(|(name, amount)| format!("{name}={amount}"))
                .collect();
            writeln!(
                out,
                "{:<6} {:<20} {:>5} {:>5} {:>4} {:>9}  {}",
                node.node,
                node.hostname,
                node.cores,
                node.busy,
                node.gpus,
                format!("{}M", node.memory_mib),
                resources.join(",")
            )?;
        }
    }
    std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Seconds as `H:MM:SS` (a time left, as Slurm prints its limits).
pub(crate) fn clock(seconds: u64) -> String {
    format!(
        "{}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

pub(crate) use saker_client::spec::format_micros as micros;

pub async fn cancel(args: CancelArgs) -> Result<ExitCode> {
    let client = connect(&args.dir).await?;
    let report = client
        .cancel(args.jobs.iter().map(|j| JobId(*j)).collect())
        .await?;
    println!("cancelled {} tasks", report.cancelled);
    Ok(ExitCode::SUCCESS)
}

pub async fn update(args: UpdateArgs) -> Result<ExitCode> {
    let update = job_update(&args)?;
    let client = connect(&args.dir).await?;
    let report = client
        .update(args.jobs.iter().map(|j| JobId(*j)).collect(), update)
        .await?;
    println!("updated {} jobs", report.updated);
    Ok(ExitCode::SUCCESS)
}

/// What `saker update`'s flags change; `none` clears a time or a limit.
fn job_update(args: &UpdateArgs) -> Result<JobUpdate> {
    let not_before = match (args.at.as_deref(), &args.in_) {
        (Some("none"), _) => Some(None),
        (Some(at), _) => Some(Some(
            at.parse::<Timestamp>()
                .with_context(|| format!("--at {at:?}"))?,
        )),
        (None, Some(delay)) => {
            let delay = saker_client::spec::parse_duration(delay)
                .with_context(|| format!("--in {delay:?}"))?;
            Some(Some(Timestamp::from_unix_micros(
                Timestamp::now().unix_micros() + delay.as_micros() as u64,
            )))
        }
        (None, None) => None,
    };
    let time_limit = match args.time_limit.as_deref() {
        None => None,
        Some("none") => Some(None),
        Some(limit) => Some(Some(
            saker_client::spec::parse_duration(limit)
                .with_context(|| format!("--time-limit {limit:?}"))?,
        )),
    };
    let update = JobUpdate {
        priority: args.priority,
        not_before,
        time_limit,
    };
    update.validate()?;
    Ok(update)
}

pub async fn shutdown(args: DirArgs) -> Result<ExitCode> {
    let client = connect(&args).await?;
    client.shutdown(true).await?;
    Ok(ExitCode::SUCCESS)
}

/// Results from the live pilot if one answers, else from the journal it left.
pub async fn results(args: ResultsArgs) -> Result<ExitCode> {
    let mut sink = ResultsSink::new(args.format);
    if args.follow {
        follow(&args, &mut sink).await?;
        sink.finish()?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut missing = 0;
    match Client::connect(&args.dir.dir, CLIENT_NAME).await {
        Ok(client) if !args.tasks.is_empty() => {
            for &task in &args.tasks {
                match client.result(task).await {
                    Ok(record) => sink.write(&record)?,
                    // The pilot's own words name the task and say why (no result yet,
                    // or compacted away under --keep-results).
                    Err(saker_client::ClientError::Server(error)) => {
                        eprintln!("saker: {}", error.message);
                        missing += 1;
                    }
                    Err(error) => {
                        eprintln!("saker: task {task}: {error}");
                        missing += 1;
                    }
                }
            }
        }
        Ok(client) => {
            let mut stream = client.results(1, args.follow).await?;
            while let Some(record) = stream.next().await? {
                sink.write(&record)?;
            }
            if let Some(end) = stream.end()
                && end.compacted > 0
            {
                eprintln!(
                    "saker: {} earlier results were compacted away (the pilot's --keep-results)",
                    end.compacted
                );
            }
        }
        Err(live_error) => {
            let journal = args.dir.dir.join(JOURNAL_DIR);
            if !journal.is_dir() {
                return Err(anyhow::Error::new(live_error).context(format!(
                    "{} has no live pilot and no journal",
                    args.dir.dir.display()
                )));
            }
            // Read as a stream: a journal of millions of results never sits in memory.
            let reading = || format!("reading the journal in {}", journal.display());
            let mut wanted: std::collections::BTreeSet<u64> = args.tasks.iter().copied().collect();
            let all = wanted.is_empty();
            let mut compaction = OfflineCompaction::default();
            for record in
                saker_journal::JournalReader::<Record>::open(&journal).with_context(reading)?
            {
                match record.with_context(reading)? {
                    Record::Result(result) if all || wanted.remove(&result.task.0) => {
                        sink.write(&result)?;
                    }
                    record => compaction.note(&record),
                }
            }
            if all && compaction.compacted > 0 {
                eprintln!(
                    "saker: {} earlier results were compacted away (--keep-results {})",
                    compaction.compacted, compaction.keep
                );
            }
            for task in wanted {
                if compaction.finished(task) {
                    eprintln!(
                        "saker: task {task}'s result was compacted away (--keep-results {})",
                        compaction.keep
                    );
                } else {
                    eprintln!("saker: task {task} has no result in the journal");
                }
                missing += 1;
            }
        }
    }
    sink.finish()?;
    Ok(if missing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What a journal's compactions dropped, as `saker results` reads it without a pilot.
#[derive(Debug, Default)]
struct OfflineCompaction {
    compacted: u64,
    keep: String,
    /// First task and task count of each job, by job.
    jobs: std::collections::HashMap<u32, (u64, u64)>,
    /// Task ranges of jobs a compaction recorded as finished.
    finished: Vec<(u64, u64)>,
}

impl OfflineCompaction {
    fn note(&mut self, record: &Record) {
        match record {
            Record::Compaction {
                compacted, keep, ..
            } => {
                self.compacted = *compacted;
                self.keep = keep.clone();
            }
            Record::Submit {
                job,
                first_task,
                count,
                ..
            } => {
                self.jobs.insert(job.0, (first_task.0, u64::from(*count)));
            }
            Record::Finished { job, .. } => {
                if let Some(&(first, count)) = self.jobs.get(&job.0) {
                    self.finished.push((first, first + count));
                }
            }
            _ => {}
        }
    }

    /// Whether `task` finished in a job whose results a compaction may have dropped.
    fn finished(&self, task: u64) -> bool {
        self.finished
            .iter()
            .any(|&(first, end)| (first..end).contains(&task))
    }
}

/// Streams results as they are accepted, reconnecting with `from = last seq + 1`
/// when the pilot goes away, until a pilot ends the stream (shutdown) or none is
/// reachable for `--reconnect-for`.
async fn follow(args: &ResultsArgs, sink: &mut ResultsSink) -> Result<()> {
    let patience = saker_client::spec::parse_duration(&args.reconnect_for)
        .with_context(|| format!("--reconnect-for {:?}", args.reconnect_for))?;
    let mut next = 1;
    let mut unreachable_since: Option<std::time::Instant> = None;
    loop {
        let outcome = async {
            let client = Client::connect(&args.dir.dir, CLIENT_NAME).await?;
            let mut stream = client.results(next, true).await?;
            while let Some(record) = stream.next().await? {
                next = record.seq + 1;
                unreachable_since = None;
                sink.write(&record)?;
                sink.flush()?;
            }
            anyhow::Ok(())
        }
        .await;
        match outcome {
            // The pilot ended the stream: it is shutting down on purpose.
            Ok(()) => return Ok(()),
            Err(error) if is_broken_pipe(&error) => return Err(error),
            Err(error) => {
                let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= patience {
                    return Err(error.context(format!(
                        "no pilot reachable in {} for {:?}",
                        args.dir.dir.display(),
                        patience
                    )));
                }
                tracing::info!(error = %format!("{error:#}"), next, "pilot unreachable; reconnecting");
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
}

/// A closed pipe (`saker results | head`) is the reader's choice, not an error.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

enum ResultsSink {
    Jsonl(std::io::BufWriter<std::io::Stdout>),
    Table(TableWriter<std::io::BufWriter<std::io::Stdout>>),
    Csv(Box<CsvWriter<std::io::Stdout>>),
}

impl ResultsSink {
    fn new(format: ResultsFormat) -> Self {
        let out = std::io::BufWriter::new(std::io::stdout());
        match format {
            ResultsFormat::Jsonl => ResultsSink::Jsonl(out),
            ResultsFormat::Table => ResultsSink::Table(TableWriter::new(out)),
            // The CSV writer buffers on its own.
            ResultsFormat::Csv => ResultsSink::Csv(Box::new(CsvWriter::new(std::io::stdout()))),
        }
    }

    fn write(&mut self, record: &ResultRecord) -> std::io::Result<()> {
        match self {
            ResultsSink::Jsonl(out) => write_jsonl(out, record),
            ResultsSink::Table(table) => table.write(record),
            ResultsSink::Csv(csv) => csv.write(record),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            ResultsSink::Jsonl(out) => out.flush(),
            ResultsSink::Table(table) => table.flush(),
            ResultsSink::Csv(csv) => csv.flush(),
        }
    }

    fn finish(self) -> std::io::Result<()> {
        match self {
            ResultsSink::Jsonl(mut out) => out.flush(),
            ResultsSink::Table(table) => table.into_inner().flush(),
            ResultsSink::Csv(csv) => csv.into_inner().map(drop),
        }
    }
}

/// Prints a batch script; `SAKER` defaults to this binary, absolute, so the script
/// runs the same saker on every node.
pub fn template(args: crate::cli::TemplateArgs) -> Result<ExitCode> {
    let absolute = |path: std::path::PathBuf| std::path::absolute(&path).unwrap_or(path);
    let settings = crate::template::Settings {
        nodes: args.nodes,
        time: args.time,
        account: args.account,
        partition: args.partition,
        tasks: args.tasks.map(absolute),
        dir: args.dir.map(absolute),
        saker: std::env::current_exe().ok(),
        script: args.script.map(absolute),
        python: args.python,
        snakemake: args.snakemake,
    };
    print!("{}", crate::template::render(args.kind, &settings));
    Ok(ExitCode::SUCCESS)
}

/// The allocations as `status` and `alloc list` print them; empty without any.
pub(crate) fn allocation_table(status: &StatusReport) -> String {
    let mut out = String::new();
    if status.allocations.is_empty() && !status.provisioning_paused {
        return out;
    }
    if status.provisioning_paused {
        out.push_str("provisioning paused (saker alloc resume)\n");
    }
    if status.allocations.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:<6} {:>9} {:<10} {:<11} {:>5} {:>7} {:>9}  WHY",
        "ALLOC", "JOB", "STATE", "SLURM", "NODES", "FIRST", "LEFT"
    );
    for a in &status.allocations {
        let left = a.seconds_left.map_or_else(|| "-".to_owned(), clock);
        let _ = writeln!(
            out,
            "{:<6} {:>9} {:<10} {:<11} {:>5} {:>7} {:>9}  {}",
            a.allocation,
            a.job_id.map_or_else(|| "-".to_owned(), |j| j.to_string()),
            a.state,
            if a.slurm_state.is_empty() {
                "-"
            } else {
                &a.slurm_state
            },
            a.nodes,
            a.first_node,
            left,
            a.reason
        );
    }
    out
}
