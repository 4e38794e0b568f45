//! A Parsl workflow on the real Slurm cluster: `sbatch-templates/parsl.sbatch` starts
//! a pilot across three nodes and runs the workflow script in the batch job; its
//! `python_app`s run on Saker's Python workers on every node. And the same workflow
//! against an elastic pilot, which asks Slurm for the nodes its apps need.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::slurm::{
    allocated_nodes, allocation_records, cluster, elastic_args, job_fields, repo, sbatch, template,
    venv_python, wait_for_state,
};
use common::{Service, run, wait_for};

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

/// Parsl's apps sent to an elastic pilot that has no node (its root runs here, as on
/// a login node): it asks Slurm for two one-node allocations, the apps run on their
/// nodes in Python workers the allocations' agents start, and once idle the
/// allocations are released (COMPLETED, nothing left in the queue).
#[test]
fn a_parsl_workflow_grows_an_elastic_pilot_from_nothing() {
    if !cluster() {
        return;
    }
    let python = venv_python();
    let pythonpath = repo().join("python");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("workflow.py");
    std::fs::write(&script, WORKFLOW).unwrap();
    let nodes_out = dir.path().join("nodes.txt");
    let worker = format!(
        "python=env PYTHONPATH={} {} -m saker.worker",
        pythonpath.display(),
        python.display()
    );
    let service = Service::start_args(
        dir.path(),
        &elastic_args("2", "all", &["--worker", &worker]),
    );
    let pilot = service.pilot.clone();
    let workflow = run(std::process::Command::new(&python)
        .arg(&script)
        .env("SAKER_PILOT_DIR", &pilot)
        .env("PYTHONPATH", &pythonpath)
        .env("NODES_OUT", &nodes_out));
    assert!(
        workflow.status.success(),
        "the workflow failed:\n{}",
        String::from_utf8_lossy(&workflow.stderr)
    );
    let nodes: BTreeSet<String> = std::fs::read_to_string(&nodes_out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(
        !nodes.is_empty() && nodes.iter().all(|node| node.starts_with('n')),
        "every app ran on a Slurm node of an allocation: {nodes:?}"
    );
    // Idle: the allocations are released and their jobs end COMPLETED.
    wait_for("the allocations to end", Duration::from_secs(90), || {
        let records = allocation_records(&pilot);
        let asked = records.iter().filter(|r| !r.ended).count();
        asked > 0 && records.iter().filter(|r| r.ended).count() == asked
    });
    drop(service);
    for record in allocation_records(&pilot) {
        if record.ended {
            continue;
        }
        let job = record.job_id;
        let state = job_fields(&job.to_string())
            .get("JobState")
            .cloned()
            .unwrap_or_default();
        assert_eq!(state, "COMPLETED", "job {job}");
    }
}

#[test]
fn a_parsl_workflow_runs_its_apps_on_every_node_of_the_allocation() {
    if !cluster() {
        return;
    }
    let python = venv_python();
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
