//! A Parsl workflow on the real Slurm cluster: `sbatch-templates/parsl.sbatch` starts
//! a pilot across three nodes and runs the workflow script in the batch job; its
//! `python_app`s run on Saker's Python workers on every node.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::slurm::{allocated_nodes, cluster, sbatch, template, wait_for_state};

const WORKFLOW: &str = r#"
import os, sys, tempfile
import parsl
from parsl.app.app import python_app
from parsl.config import Config
from saker.parsl import SakerExecutor

@python_app
def where(i):
    import os
    return os.environ.get("SLURMD_NODENAME", "?"), i * i

config = Config(
    executors=[SakerExecutor(pilot_dir=os.environ["SAKER_PILOT_DIR"])],
    run_dir=tempfile.mkdtemp(),
)
with parsl.load(config):
    answers = [f.result() for f in [where(i) for i in range(60)]]
assert [square for _, square in answers] == [i * i for i in range(60)], answers
with open(os.environ["NODES_OUT"], "w") as out:
    out.write("\n".join(node for node, _ in answers))
"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn a_parsl_workflow_runs_its_apps_on_every_node_of_the_allocation() {
    if !cluster() {
        return;
    }
    let python = std::env::var_os("SAKER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh makes the venv with Parsl",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("workflow.py");
    std::fs::write(&script, WORKFLOW).unwrap();
    let nodes_out = dir.path().join("nodes.txt");
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    // The package from this repository, on every node (they share this machine).
    let pythonpath = repo().join("python");
    let job = sbatch(
        &template("parsl.sbatch"),
        3,
        &[
            ("SCRIPT", &script),
            ("PYTHON", &python),
            ("PILOT", &pilot),
            ("PYTHONPATH", &pythonpath),
            ("NODES_OUT", &nodes_out),
        ],
        &log,
    );
    let state = wait_for_state(&job, Duration::from_secs(300), &log);
    let job_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "job log:\n{job_log}");
    let nodes: BTreeSet<String> = std::fs::read_to_string(&nodes_out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let allocated: BTreeSet<String> = allocated_nodes(&job).into_iter().collect();
    assert_eq!(allocated.len(), 3);
    assert_eq!(
        nodes, allocated,
        "apps ran on every node; job log:\n{job_log}"
    );
}
