//! Helpers for tests on the real Slurm cluster (scripts/slurm-cluster/up.sh).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether the cluster is up; without one, the test passes after saying it did not
/// run, unless `SAKER_REQUIRE_SLURM=1` (set by scripts/test.sh), where it fails.
pub fn cluster() -> bool {
    if std::env::var_os("SLURM_CONF").is_some() {
        return true;
    }
    assert!(
        std::env::var("SAKER_REQUIRE_SLURM").as_deref() != Ok("1"),
        "SAKER_REQUIRE_SLURM=1 but SLURM_CONF is unset: start scripts/slurm-cluster/up.sh"
    );
    eprintln!("skipped: no Slurm cluster (start scripts/slurm-cluster/up.sh)");
    false
}

pub fn saker_bin() -> PathBuf {
    std::env::var_os("SAKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_saker")))
}

/// The repository's top directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The test venv's Python (with Parsl and Snakemake), or `SAKER_PYTHON`.
pub fn venv_python() -> PathBuf {
    let python = std::env::var_os("SAKER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh makes the venv with Parsl and Snakemake",
        python.display()
    );
    python
}

/// Waits until the pilot in `pilot` counts `count` agents; returns its status text.
/// Panics with the batch job's log after two minutes.
pub fn wait_for_agents(pilot: &Path, count: usize, log: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    let want = format!("agents    {count}");
    loop {
        let status = Command::new(saker_bin())
            .args(["status", "--dir"])
            .arg(pilot)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&status.stdout).into_owned();
        if text.contains(&want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the pilot never had {count} agents; job log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn template(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sbatch-templates")
        .join(name)
}

/// A submitted batch job: its id, and `scancel` when a failing test drops it, so a
/// failed test leaves no job holding nodes that later cluster tests wait behind.
pub struct Job(String);

impl std::ops::Deref for Job {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new("scancel").arg(&self.0).status();
        }
    }
}

/// Submits a template; returns the job, cancelled if the test fails.
pub fn sbatch(template: &Path, nodes: u32, env: &[(&str, &Path)], log: &Path) -> Job {
    let mut command = Command::new("sbatch");
    command
        .arg("--parsable")
        .arg(format!("--nodes={nodes}"))
        .arg(format!("--output={}", log.display()))
        .arg(template)
        .env("SAKER", saker_bin());
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("sbatch runs");
    assert!(
        output.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Job(String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string())
}

/// `scontrol show job` fields of a job.
pub fn job_fields(job: &str) -> BTreeMap<String, String> {
    let output = Command::new("scontrol")
        .args(["show", "job", "--oneliner", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn wait_for_state(job: &str, timeout: Duration, log: &Path) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let state = job_fields(job).get("JobState").cloned().unwrap_or_default();
        if [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
        ]
        .contains(&state.as_str())
        {
            return state;
        }
        if Instant::now() > deadline {
            let _ = Command::new("scancel").arg(job).status();
            panic!(
                "job {job} still {state} after {timeout:?}; its output:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The nodes of a job's allocation, in order.
pub fn allocated_nodes(job: &str) -> Vec<String> {
    let list = job_fields(job).get("NodeList").cloned().unwrap_or_default();
    let expanded = Command::new("scontrol")
        .args(["show", "hostnames", &list])
        .output()
        .unwrap();
    String::from_utf8_lossy(&expanded.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The agent of the pilot in `pilot` that runs on Slurm node `node`: its command line
/// is `saker agent --dir <pilot> …` and its environment names the node. Returns its
/// pid and `SLURM_NODEID`.
pub fn slurm_agent_on(pilot: &Path, node: &str) -> Option<(u32, String)> {
    let pilot = pilot.display().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect();
        // Not srun, whose command line carries the agent's after its own options; the
        // agent's own options may come before `--dir` (`--any-root` with standbys).
        let in_pilot = argv
            .windows(2)
            .any(|pair| pair[0] == "--dir" && pair[1] == pilot);
        if argv.len() < 4 || argv[1] != "agent" || !in_pilot {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let environ: BTreeMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|v| {
                let v = String::from_utf8_lossy(v);
                v.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        if environ.get("SLURMD_NODENAME").map(String::as_str) == Some(node) {
            return Some((
                pid,
                environ.get("SLURM_NODEID").cloned().unwrap_or_default(),
            ));
        }
    }
    None
}

/// `saker pilot` flags of an elastic test pilot: up to `max_nodes` one-node
/// allocations under `policy`, decisions every second, release after 5 s idle, fast
/// heartbeats, and `extra` (flag-value pairs; a flag given there replaces its default).
pub fn elastic_args<'a>(max_nodes: &'a str, policy: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--elastic",
        "--max-nodes",
        max_nodes,
        "--max-pending",
        max_nodes,
        "--policy",
        policy,
        "--time",
        "10m",
        "--grow-after",
        "5s",
        "--idle-release",
        "5s",
        "--cores-per-node",
        "4",
        "--provision-interval",
        "1s",
        "--heartbeat-interval",
        "300ms",
        "--heartbeat-timeout",
        "2s",
    ];
    // `extra` is flag-value pairs; a flag given here replaces the one above.
    for pair in extra.chunks(2) {
        match args.iter().position(|flag| *flag == pair[0]) {
            Some(at) => args[at + 1] = pair[1],
            None => args.extend_from_slice(pair),
        }
    }
    args
}

/// One allocation record of an elastic pilot's journal.
#[derive(Debug, Clone)]
pub struct AllocationRecord {
    pub allocation: u64,
    pub job_id: u32,
    /// The record of its end (else of its submission).
    pub ended: bool,
    pub reason: String,
    pub unix_us: u64,
}

/// The allocation records of the journal of the pilot in `pilot`, in order.
pub fn allocation_records(pilot: &Path) -> Vec<AllocationRecord> {
    use saker_root::records::Record;
    saker_journal::JournalReader::<Record>::open(&pilot.join("journal"))
        .unwrap()
        .filter_map(|record| match record.unwrap() {
            Record::Allocation {
                allocation,
                job_id,
                ended,
                reason,
                unix_us,
                ..
            } => Some(AllocationRecord {
                allocation,
                job_id,
                ended,
                reason,
                unix_us,
            }),
            _ => None,
        })
        .collect()
}

/// Shuts the service pilot in `pilot` down and waits for its batch `job` to end
/// COMPLETED (its log in the failure).
pub fn shut_down_and_complete(pilot: &Path, job: &str, log: &Path) {
    let shutdown = Command::new(saker_bin())
        .args(["shutdown", "--dir"])
        .arg(pilot)
        .status()
        .unwrap();
    assert!(shutdown.success());
    let state = wait_for_state(job, Duration::from_secs(60), log);
    assert_eq!(
        state,
        "COMPLETED",
        "job log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}
