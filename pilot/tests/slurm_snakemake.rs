//! Snakemake workflows on the real Slurm cluster through the executor plugin
//! (python/snakemake-executor-plugin-saker): the plugin's fan-out/fan-in workflow (one
//! rule failing once and retried, one two-thread rule) on a 3-node service pilot that
//! Snakemake attaches to from outside the allocation, and through
//! `sbatch-templates/snakemake.sbatch`; the jobs land on all three nodes and the
//! outputs equal those of Snakemake's local executor.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::slurm::{
    allocated_nodes, cluster, repo, saker_bin, sbatch, shut_down_and_complete, template,
    venv_python, wait_for_agents, wait_for_state,
};

fn plugin() -> PathBuf {
    repo().join("python/snakemake-executor-plugin-saker")
}

/// The plugin and the client from this repository (Snakemake finds executor plugins
/// by module name on the path).
fn pythonpath() -> String {
    format!("{}:{}", plugin().display(), repo().join("python").display())
}

/// A fresh copy of the plugin's test workflow.
fn workflow(dir: &Path, label: &str) -> PathBuf {
    let workdir = dir.join(label);
    std::fs::create_dir_all(&workdir).unwrap();
    std::fs::copy(
        plugin().join("tests/workflow/Snakefile"),
        workdir.join("Snakefile"),
    )
    .unwrap();
    workdir
}

/// `python -m snakemake` in `workdir`; panics with its log if it fails.
fn snakemake(workdir: &Path, args: &[&str]) -> String {
    let output = Command::new(venv_python())
        .args(["-m", "snakemake", "--nocolor"])
        .args(args)
        .current_dir(workdir)
        .env("PYTHONPATH", pythonpath())
        .env("SAKER_BIN", saker_bin())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "snakemake {args:?}:\n{log}");
    log
}

/// The outputs of Snakemake's local executor (2 cores) for `config`, to compare with.
fn local_outputs(dir: &Path, config: &[&str]) -> BTreeMap<String, Vec<u8>> {
    let local = workflow(dir, "local");
    snakemake(&local, &[&["--cores", "2"][..], config].concat());
    outputs(&local)
}

/// Every output file of the workflow (data/, work/, result/) and its bytes.
fn outputs(workdir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    for top in ["data", "work", "result"] {
        for entry in std::fs::read_dir(workdir.join(top)).unwrap().flatten() {
            let name = format!("{top}/{}", entry.file_name().to_string_lossy());
            found.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    found
}

/// The Slurm nodes that ran the pilot's tasks, from its results (live or journal).
fn nodes_that_ran(pilot: &Path) -> BTreeSet<String> {
    let output = Command::new(saker_bin())
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(pilot)
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|result| result["node"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn snakemake_runs_a_workflow_on_a_three_node_service_pilot() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = ["--retries", "1", "--config", "instances=1000"];
    let expected = local_outputs(dir.path(), &config);

    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    // Its Python workers run each job's Snakemake: the venv's Python, with the plugin.
    let pythonpath = PathBuf::from(pythonpath());
    let job = sbatch(
        &template("service.sbatch"),
        3,
        &[
            ("PILOT", &pilot),
            ("PYTHON", &venv_python()),
            ("PYTHONPATH", &pythonpath),
        ],
        &log,
    );
    wait_for_agents(&pilot, 3, &log);
    let ours = workflow(dir.path(), "saker");
    let pilot_arg = pilot.display().to_string();
    // The 1,000 `work` instances in group jobs of 50 keep the test's time bounded
    // (perf/ times them one task each).
    let snakemake_log = snakemake(
        &ours,
        &[
            &[
                "--executor",
                "saker",
                "--saker-pilot-dir",
                &pilot_arg,
                "--jobs",
                "100",
                "--group-components",
                "fan=50",
            ][..],
            &config,
        ]
        .concat(),
    );
    assert_eq!(outputs(&ours), expected);
    // The jobs ran on the pilot's Python workers (the plugin's default job path).
    assert!(
        !snakemake_log.contains("takes the command path"),
        "{snakemake_log}"
    );
    assert!(
        snakemake_log.contains("Error in rule flaky")
            && snakemake_log.contains("Trying to restart job"),
        "flaky failed once and was retried:\n{snakemake_log}"
    );
    let allocated: BTreeSet<String> = allocated_nodes(&job).into_iter().collect();
    assert_eq!(allocated.len(), 3);
    assert_eq!(nodes_that_ran(&pilot), allocated, "jobs on every node");

    // Attached, Snakemake left the pilot running: it ends when shut down.
    shut_down_and_complete(&pilot, &job, &log);
}

#[test]
fn the_snakemake_template_runs_a_workflow_across_its_allocation() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One task per rule instance here.
    let config = ["--retries", "1", "--config", "instances=20"];
    let expected = local_outputs(dir.path(), &config);

    let ours = workflow(dir.path(), "saker");
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    let args = format!(
        "--nocolor --directory {} --snakefile {} {}",
        ours.display(),
        ours.join("Snakefile").display(),
        config.join(" ")
    );
    let snakemake_bin = venv_python().with_file_name("snakemake");
    let pythonpath = PathBuf::from(pythonpath());
    let job = sbatch(
        &template("snakemake.sbatch"),
        3,
        &[
            ("PILOT", &pilot),
            ("SNAKEMAKE", &snakemake_bin),
            ("ARGS", Path::new(&args)),
            ("PYTHONPATH", &pythonpath),
        ],
        &log,
    );
    let state = wait_for_state(&job, Duration::from_secs(300), &log);
    let job_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "job log:\n{job_log}");
    assert!(!job_log.contains("takes the command path"), "{job_log}");
    assert_eq!(outputs(&ours), expected);
    let allocated: BTreeSet<String> = allocated_nodes(&job).into_iter().collect();
    assert_eq!(
        nodes_that_ran(&pilot),
        allocated,
        "jobs on every node; job log:\n{job_log}"
    );
}
