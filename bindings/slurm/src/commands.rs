//! Slurm's own commands (`squeue`, `sbatch`, `scancel`) in place of libslurm: what a
//! build without libslurm (the wheel's binary: see `scripts/wheel.sh`) uses for
//! [`crate::job_info`], [`crate::user_jobs`], [`crate::submit_batch`] and
//! [`crate::cancel`]. Public so that the cluster tests run it in every build, beside
//! libslurm.
//!
//! * Only what the commands print for scripts: `squeue --noheader --format` with
//!   `SLURM_TIME_FORMAT=%s` (times as Unix seconds, no time zone to guess),
//!   `sbatch --parsable`, `scancel --verbose` (it reports an unknown or finished job
//!   only then, and still exits 0).
//! * A command that is not on `PATH` is [`SlurmError::Unavailable`], as libslurm's
//!   absence is: local mode and [`crate::JobInfo::from_env`] do not need Slurm.
//! * A command that fails is [`SlurmError::Command`] with what it printed on stderr,
//!   except an unknown job ([`SlurmError::UnknownJob`]) and, for `scancel`, a finished
//!   one ([`SlurmError::JobFinished`]).
//!
//! Differences from libslurm: [`JobInfo::cpus_per_node`] is empty (squeue has no such
//! field), [`JobInfo::batch_host`] is the batch host only when it is one of the job's
//! nodes (squeue prints the submitting host of an `salloc` there); `sbatch` reads the
//! script's `#SBATCH` lines for the options a [`BatchRequest`] leaves unset, and one
//! fork per call.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::error::SlurmError;
use crate::hostlist;
use crate::submit::{BatchRequest, inherited_variable};
use crate::{JobInfo, SlurmJobId};

/// squeue's fields, `|`-separated, the name last (it may hold a `|`): numeric job id,
/// state, partition, node list, batch host, CPUs, start, end, time limit, name.
const SQUEUE_FORMAT: &str = "%A|%T|%P|%N|%B|%C|%S|%e|%l|%j";
const SQUEUE_FIELDS: usize = 10;

/// Information about one job, from `squeue --jobs=ID --states=all`.
pub fn job_info(job_id: SlurmJobId) -> Result<JobInfo, SlurmError> {
    let output = squeue(&[format!("--jobs={job_id}")]).map_err(|error| match error {
        CommandError::Failed(message) if message.contains("Invalid job id") => {
            SlurmError::UnknownJob { job_id }
        }
        error => error.into_slurm("squeue"),
    })?;
    let now = SystemTime::now();
    for line in output.lines().filter(|line| !line.trim().is_empty()) {
        let info = parse_squeue_line(line, now)?;
        if info.job_id == job_id {
            return Ok(info);
        }
    }
    Err(SlurmError::UnknownJob { job_id })
}

/// Every job of this user the controller still knows, from `squeue --me --states=all`.
pub fn user_jobs() -> Result<Vec<JobInfo>, SlurmError> {
    let output = squeue(&["--me".to_owned()]).map_err(|error| error.into_slurm("squeue"))?;
    let now = SystemTime::now();
    output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_squeue_line(line, now))
        .collect()
}

/// Submits a batch job with `sbatch --parsable`, the script on its standard input.
///
/// The job's environment is `sbatch`'s, `--export=ALL`: [`BatchRequest::environment`],
/// or this process's without the current job's `SLURM_*` variables (as libslurm's
/// submission), minus `SBATCH_*` (sbatch would read them as options: the request is
/// what decides). `SLURM_CONF` and `SLURM_CONF_SERVER` of this process are added when
/// the environment given has none, so that `sbatch` finds the cluster.
pub fn submit_batch(request: &BatchRequest) -> Result<SlurmJobId, SlurmError> {
    request.validate()?;
    let program = find_program("sbatch").ok_or(SlurmError::Unavailable)?;
    let mut command = Command::new(program);
    command
        .args(sbatch_arguments(request))
        .env_clear()
        .envs(sbatch_environment(request, std::env::vars_os()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(directory) = &request.working_directory {
        // sbatch resolves a relative --output against its own directory.
        command.current_dir(directory);
    }
    let mut child = command
        .spawn()
        .map_err(|error| CommandError::Spawn(error).into_slurm("sbatch"))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let written = stdin.write_all(request.script.as_bytes());
    drop(stdin);
    let output = child
        .wait_with_output()
        .map_err(|error| CommandError::Spawn(error).into_slurm("sbatch"))?;
    if !output.status.success() {
        return Err(CommandError::Failed(stderr_message(&output.stderr)).into_slurm("sbatch"));
    }
    if let Err(error) = written {
        return Err(CommandError::Spawn(error).into_slurm("sbatch"));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    parse_parsable(&stdout).ok_or_else(|| {
        CommandError::Failed(format!("unexpected output {:?}", stdout.trim())).into_slurm("sbatch")
    })
}

/// Cancels a job (`scancel ID`: the job ends CANCELLED) or sends it `signal`
/// (`scancel --full --signal=N`: the batch script and every step).
pub fn cancel(job_id: SlurmJobId, signal: Option<u16>) -> Result<(), SlurmError> {
    let mut arguments = vec!["--verbose".to_owned()];
    if let Some(signal) = signal {
        arguments.push("--full".to_owned());
        arguments.push(format!("--signal={signal}"));
    }
    arguments.push(job_id.to_string());
    let (success, stderr) = run("scancel", &arguments)?;
    // scancel exits 0 when the controller refuses, and says why on stderr.
    match scancel_refusal(&stderr) {
        Some(Refusal::UnknownJob) => Err(SlurmError::UnknownJob { job_id }),
        Some(Refusal::Finished) => Err(SlurmError::JobFinished { job_id }),
        Some(Refusal::Other(message)) => Err(SlurmError::Command {
            command: "scancel",
            message,
        }),
        None if success => Ok(()),
        None => Err(SlurmError::Command {
            command: "scancel",
            message: stderr_message(stderr.as_bytes()),
        }),
    }
}

// ------------------------------------------------------------------ running

#[derive(Debug)]
enum CommandError {
    /// Not on PATH.
    Missing,
    Spawn(std::io::Error),
    /// Exited non-zero; what it printed on stderr.
    Failed(String),
}

impl CommandError {
    fn into_slurm(self, command: &'static str) -> SlurmError {
        match self {
            CommandError::Missing => SlurmError::Unavailable,
            CommandError::Spawn(error) => SlurmError::Command {
                command,
                message: error.to_string(),
            },
            CommandError::Failed(message) => SlurmError::Command { command, message },
        }
    }
}

/// `squeue --noheader --states=all --format=…` with `extra`, times as Unix seconds.
fn squeue(extra: &[String]) -> Result<String, CommandError> {
    let program = find_program("squeue").ok_or(CommandError::Missing)?;
    let output = Command::new(program)
        .args(["--noheader", "--states=all"])
        .arg(format!("--format={SQUEUE_FORMAT}"))
        .args(extra)
        .env("SLURM_TIME_FORMAT", "%s")
        .stdin(Stdio::null())
        .output()
        .map_err(CommandError::Spawn)?;
    if !output.status.success() {
        return Err(CommandError::Failed(stderr_message(&output.stderr)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `program` with `arguments`: whether it succeeded, and its stderr.
fn run(program: &'static str, arguments: &[String]) -> Result<(bool, String), SlurmError> {
    let path = find_program(program).ok_or(SlurmError::Unavailable)?;
    let output = Command::new(path)
        .args(arguments)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| CommandError::Spawn(error).into_slurm(program))?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// `program`'s path on this process's `PATH` (found before the command's own
/// environment is set: `sbatch`'s may have another `PATH`, or none).
fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|directory| directory.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The lines a command printed on stderr, joined, without its `prog: error: ` prefix.
fn stderr_message(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.split_once(" error: ") {
            Some((_, message)) => message,
            None => line,
        })
        .collect();
    if lines.is_empty() {
        "exited with an error and printed nothing".to_owned()
    } else {
        lines.join("; ")
    }
}

// ------------------------------------------------------------------ parsing

/// One line of [`SQUEUE_FORMAT`] output (times as Unix seconds) as a [`JobInfo`].
pub(crate) fn parse_squeue_line(line: &str, now: SystemTime) -> Result<JobInfo, SlurmError> {
    let unexpected = || SlurmError::Command {
        command: "squeue",
        message: format!("unexpected output {line:?}"),
    };
    let fields: Vec<&str> = line.splitn(SQUEUE_FIELDS, '|').collect();
    let [
        id,
        state,
        partition,
        nodes,
        batch_host,
        cpus,
        start,
        end,
        limit,
        name,
    ] = fields[..]
    else {
        return Err(unexpected());
    };
    let job_id: SlurmJobId = id.parse().map_err(|_| unexpected())?;
    let nodes = match nodes.trim() {
        "" | "(null)" | "n/a" => Vec::new(),
        list => hostlist::expand_pure(list).map_err(|_| unexpected())?,
    };
    let time_limit = parse_time_limit(limit);
    let unlimited = limit.trim() == "UNLIMITED";
    // As libslurm's view (and scontrol): an unlimited job has no end until it ended.
    let end_time = unix_seconds(end).filter(|&end| !unlimited || end <= now);
    let batch_host = Some(batch_host.trim())
        .filter(|host| nodes.iter().any(|node| node == host))
        .map(str::to_owned);
    Ok(JobInfo {
        job_id,
        name: name.to_owned(),
        partition: partition.trim().to_owned(),
        state: state.trim().to_owned(),
        nodes,
        batch_host,
        cpus_per_node: Vec::new(),
        num_cpus: cpus.trim().parse().unwrap_or(0),
        start_time: unix_seconds(start),
        end_time,
        time_limit,
    })
}

/// `SLURM_TIME_FORMAT=%s` output: Unix seconds, or a word (`N/A`, `NONE`, `Unknown`).
fn unix_seconds(text: &str) -> Option<SystemTime> {
    let seconds: u64 = text.trim().parse().ok()?;
    (seconds > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// squeue's time limit: `[days-]hours:minutes:seconds`, `minutes:seconds`, or a word
/// (`UNLIMITED`, `NOT_SET`, `INVALID`) for none.
pub(crate) fn parse_time_limit(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().ok()?, clock),
        None => (0, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|part| part.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let seconds = parts.iter().fold(0, |total, part| total * 60 + part);
    Some(Duration::from_secs(days * 86_400 + seconds))
}

/// `sbatch --parsable` prints `ID` or `ID;cluster`.
fn parse_parsable(stdout: &str) -> Option<SlurmJobId> {
    let first = stdout
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())?;
    first.split(';').next()?.parse().ok()
}

/// sbatch's options for `request` (the script goes to its standard input).
pub(crate) fn sbatch_arguments(request: &BatchRequest) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = vec![
        "--parsable".into(),
        "--export=ALL".into(),
        format!("--nodes={}", request.nodes).into(),
    ];
    let mut option = |name: &str, value: &OsStr| {
        let mut argument = OsString::from(format!("--{name}="));
        argument.push(value);
        arguments.push(argument);
    };
    if let Some(name) = &request.name {
        option("job-name", name.as_ref());
    }
    if let Some(per_node) = request.ntasks_per_node {
        option("ntasks-per-node", per_node.to_string().as_ref());
        let tasks = u64::from(request.nodes) * u64::from(per_node);
        option("ntasks", tasks.to_string().as_ref());
    }
    if let Some(minutes) = request.time_limit_minutes {
        option("time", minutes.to_string().as_ref());
    }
    if let Some(partition) = &request.partition {
        option("partition", partition.as_ref());
    }
    if let Some(account) = &request.account {
        option("account", account.as_ref());
    }
    if let Some(directory) = &request.working_directory {
        option("chdir", directory.as_os_str());
    }
    if let Some(stdout) = &request.stdout {
        option("output", stdout.as_os_str());
    }
    if let Some(stderr) = &request.stderr {
        option("error", stderr.as_os_str());
    }
    if let Some(dependency) = &request.dependency {
        option("dependency", dependency.as_ref());
    }
    if request.exclusive {
        arguments.push("--exclusive".into());
    }
    arguments
}

/// sbatch's environment, which `--export=ALL` gives the job (see [`submit_batch`]).
pub(crate) fn sbatch_environment(
    request: &BatchRequest,
    current: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let current: Vec<(OsString, OsString)> = current.collect();
    let mut environment: Vec<(OsString, OsString)> = match &request.environment {
        Some(pairs) => pairs
            .iter()
            .map(|pair| match pair.split_once('=') {
                Some((name, value)) => (name.into(), value.into()),
                None => (pair.into(), OsString::new()),
            })
            .collect(),
        None => current
            .iter()
            .filter(|(name, _)| inherited_variable(name.as_encoded_bytes()))
            .cloned()
            .collect(),
    };
    environment.retain(|(name, _)| !name.as_encoded_bytes().starts_with(b"SBATCH_"));
    for variable in ["SLURM_CONF", "SLURM_CONF_SERVER"] {
        if environment.iter().any(|(name, _)| name == variable) {
            continue;
        }
        if let Some((name, value)) = current.iter().find(|(name, _)| name == variable) {
            environment.push((name.clone(), value.clone()));
        }
    }
    environment
}

#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    UnknownJob,
    Finished,
    Other(String),
}

/// What `scancel --verbose` reported as refused (it still exits 0 then).
fn scancel_refusal(stderr: &str) -> Option<Refusal> {
    let line = stderr.lines().find(|line| line.contains("error:"))?;
    Some(if line.contains("Invalid job id") {
        Refusal::UnknownJob
    } else if line.contains("already completing or completed") {
        Refusal::Finished
    } else {
        Refusal::Other(stderr_message(line.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_795_851_700;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn at(seconds: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
    }

    // Lines as squeue 22.05 prints them with SQUEUE_FORMAT and SLURM_TIME_FORMAT=%s.
    #[test]
    fn running_pending_unlimited_and_ended_jobs() {
        let running = parse_squeue_line(
            "5|RUNNING|debug|n[1-2]|n1|2|1795851606|1795851906|5:00|my|job name",
            now(),
        )
        .unwrap();
        assert_eq!(running.job_id, SlurmJobId(5));
        assert_eq!(running.name, "my|job name");
        assert_eq!(running.state, "RUNNING");
        assert_eq!(running.partition, "debug");
        assert_eq!(running.nodes, ["n1", "n2"]);
        assert_eq!(running.batch_host.as_deref(), Some("n1"));
        assert_eq!(running.num_cpus, 2);
        assert_eq!(running.start_time, at(1_795_851_606));
        assert_eq!(running.end_time, at(1_795_851_906));
        assert_eq!(running.time_limit, Some(Duration::from_secs(300)));
        assert!(running.cpus_per_node.is_empty());

        let pending = parse_squeue_line("6|PENDING|debug||n/a|4|N/A|N/A|5:00|wrap", now()).unwrap();
        assert!(pending.nodes.is_empty());
        assert_eq!(pending.batch_host, None);
        assert_eq!((pending.start_time, pending.end_time), (None, None));

        let unlimited = parse_squeue_line(
            "7|RUNNING|debug|n1|n1|1|1795851615|NONE|UNLIMITED|wrap",
            now(),
        )
        .unwrap();
        assert_eq!((unlimited.end_time, unlimited.time_limit), (None, None));
        // Slurm's placeholder end (start + one year) is no end.
        let placeholder = parse_squeue_line(
            "7|RUNNING|debug|n1|n1|1|1795851615|1827387615|UNLIMITED|wrap",
            now(),
        )
        .unwrap();
        assert_eq!(placeholder.end_time, None);
        let ended = parse_squeue_line(
            "7|FAILED|debug|n1|n1|1|1795851615|1795851618|UNLIMITED|wrap",
            now(),
        )
        .unwrap();
        assert_eq!(ended.end_time, at(1_795_851_618));

        // An salloc's "batch host" is the host it was started from: not a node of it.
        let salloc =
            parse_squeue_line("8|RUNNING|debug|n1|localhost|1|1|2|1:00|sh", now()).unwrap();
        assert_eq!(salloc.batch_host, None);

        for bad in [
            "",
            "5|RUNNING",
            "x|RUNNING|debug|n1|n1|1|1|2|1:00|a",
            "5|RUNNING|debug|n[1-|n1|1|1|2|1:00|a",
        ] {
            assert!(
                matches!(
                    parse_squeue_line(bad, now()),
                    Err(SlurmError::Command {
                        command: "squeue",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn time_limits_in_squeues_formats() {
        let cases = [
            ("5:00", Some(300)),
            ("1:02:03", Some(3723)),
            ("2-00:00:00", Some(172_800)),
            ("1-1:00:01", Some(90_001)),
            ("45", Some(45)),
            ("UNLIMITED", None),
            ("NOT_SET", None),
            ("INVALID", None),
            ("", None),
            ("1:2:3:4", None),
        ];
        for (text, seconds) in cases {
            assert_eq!(
                parse_time_limit(text),
                seconds.map(Duration::from_secs),
                "{text:?}"
            );
        }
    }

    #[test]
    fn parsable_output_with_and_without_a_cluster() {
        assert_eq!(parse_parsable("123\n"), Some(SlurmJobId(123)));
        assert_eq!(parse_parsable("124;cluster1\n"), Some(SlurmJobId(124)));
        assert_eq!(parse_parsable("Submitted batch job 5\n"), None);
        assert_eq!(parse_parsable(""), None);
    }

    #[test]
    fn every_request_field_becomes_an_sbatch_option() {
        let request = BatchRequest {
            name: Some("saker-abc-1".into()),
            ntasks_per_node: Some(3),
            time_limit_minutes: Some(90),
            partition: Some("batch".into()),
            account: Some("proj".into()),
            working_directory: Some("/work/run".into()),
            stdout: Some("/work/run/out-%j".into()),
            stderr: Some("/work/run/err-%j".into()),
            dependency: Some("afterany:41".into()),
            exclusive: true,
            ..BatchRequest::new("#!/bin/sh\ntrue\n", 2)
        };
        let arguments: Vec<String> = sbatch_arguments(&request)
            .into_iter()
            .map(|argument| argument.into_string().unwrap())
            .collect();
        assert_eq!(
            arguments,
            [
                "--parsable",
                "--export=ALL",
                "--nodes=2",
                "--job-name=saker-abc-1",
                "--ntasks-per-node=3",
                "--ntasks=6",
                "--time=90",
                "--partition=batch",
                "--account=proj",
                "--chdir=/work/run",
                "--output=/work/run/out-%j",
                "--error=/work/run/err-%j",
                "--dependency=afterany:41",
                "--exclusive",
            ]
        );
        let plain: Vec<OsString> = sbatch_arguments(&BatchRequest::new("#!/bin/sh", 1));
        assert_eq!(plain, ["--parsable", "--export=ALL", "--nodes=1"]);
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value)))
            .collect()
    }

    #[test]
    fn the_jobs_environment_drops_the_current_job_and_sbatch_options() {
        let current = pairs(&[
            ("PATH", "/bin"),
            ("SLURM_CONF", "/etc/slurm.conf"),
            ("SLURM_JOB_ID", "41"),
            ("SLURMD_NODENAME", "n1"),
            ("SBATCH_PARTITION", "other"),
            ("OMP_NUM_THREADS", "2"),
        ]);
        let request = BatchRequest::new("#!/bin/sh", 1);
        assert_eq!(
            sbatch_environment(&request, current.clone().into_iter()),
            pairs(&[
                ("PATH", "/bin"),
                ("SLURM_CONF", "/etc/slurm.conf"),
                ("OMP_NUM_THREADS", "2"),
            ])
        );
        // Given explicitly: as given (SBATCH_* aside), and sbatch can still find the
        // cluster.
        let given = BatchRequest {
            environment: Some(vec![
                "A=1".into(),
                "B=x=y".into(),
                "SBATCH_ACCOUNT=p".into(),
            ]),
            ..request
        };
        assert_eq!(
            sbatch_environment(&given, current.into_iter()),
            pairs(&[("A", "1"), ("B", "x=y"), ("SLURM_CONF", "/etc/slurm.conf")])
        );
    }

    #[test]
    fn scancel_refusals_from_its_verbose_output() {
        let unknown = "scancel: Terminating job 99999\n\
                       scancel: error: Kill job error on job id 99999: Invalid job id specified\n";
        assert_eq!(scancel_refusal(unknown), Some(Refusal::UnknownJob));
        let done = "scancel: Terminating job 6\nscancel: error: Kill job error on job id 6: \
                    Job/step already completing or completed\n";
        assert_eq!(scancel_refusal(done), Some(Refusal::Finished));
        let denied = "scancel: error: Kill job error on job id 7: Access/permission denied\n";
        assert_eq!(
            scancel_refusal(denied),
            Some(Refusal::Other(
                "Kill job error on job id 7: Access/permission denied".into()
            ))
        );
        assert_eq!(scancel_refusal("scancel: Terminating job 8\n"), None);
    }

    #[test]
    fn stderr_keeps_slurms_words_without_the_prefix() {
        assert_eq!(
            stderr_message(
                b"sbatch: error: invalid partition specified: nope\n\
                  sbatch: error: Batch job submission failed: Invalid partition name specified\n"
            ),
            "invalid partition specified: nope; Batch job submission failed: Invalid partition \
             name specified"
        );
        assert_eq!(
            stderr_message(b""),
            "exited with an error and printed nothing"
        );
    }
}
