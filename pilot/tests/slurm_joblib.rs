//! scikit-learn on the real Slurm cluster through the joblib backend (`saker.joblib`):
//! a service pilot spans three nodes, and a driver outside the allocation (as on a
//! login node) runs a `GridSearchCV(n_jobs=-1)` whose fits run on every node.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use common::run;
use common::slurm::{
    allocated_nodes, cluster, repo, sbatch, shut_down_and_complete, template, venv_python,
    wait_for_agents,
};

/// The same search under joblib's own backend (loky, here) and under Saker's; each
/// fit's scorer notes the node it ran on.
const SEARCH: &str = r#"
import os
import joblib
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC
import saker.joblib

NODES_OUT = os.environ["NODES_OUT"]  # sent with the function: workers lack the variable

def scored_where(estimator, features, labels):
    with open(NODES_OUT, "a") as out:
        out.write(os.environ.get("SLURMD_NODENAME", "?") + "\n")
    return estimator.score(features, labels)

features, labels = load_digits(return_X_y=True)
features, labels = features[:600], labels[:600]
grid = {"C": [0.5, 1.0, 5.0, 10.0], "gamma": [0.0005, 0.001, 0.002, "scale"]}

def search():
    return GridSearchCV(SVC(), grid, cv=3, n_jobs=-1, scoring=scored_where).fit(features, labels)

local = search()
open(NODES_OUT, "w").close()
with joblib.parallel_config(backend="saker", pilot_dir=os.environ["SAKER_PILOT_DIR"]):
    ours = search()
assert list(ours.cv_results_["mean_test_score"]) == list(local.cv_results_["mean_test_score"]), (
    ours.cv_results_["mean_test_score"], local.cv_results_["mean_test_score"])
assert ours.best_params_ == local.best_params_
print("best", ours.best_params_, round(ours.best_score_, 4))
"#;

#[test]
fn a_grid_search_runs_its_fits_on_every_node_of_a_service_pilot() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("search.py");
    std::fs::write(&script, SEARCH).unwrap();
    let nodes_out = dir.path().join("nodes.txt");
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("job.log");
    let python = venv_python();
    let pythonpath: PathBuf = repo().join("python");
    let job = sbatch(
        &template("service.sbatch"),
        3,
        &[
            ("PILOT", &pilot),
            ("PYTHON", &python),
            ("PYTHONPATH", &pythonpath),
        ],
        &log,
    );
    wait_for_agents(&pilot, 3, &log);
    let search = run(Command::new(&python)
        .arg(&script)
        .env("SAKER_PILOT_DIR", &pilot)
        .env("PYTHONPATH", &pythonpath)
        .env("NODES_OUT", &nodes_out));
    assert!(
        search.status.success(),
        "the search failed:\n{}{}",
        String::from_utf8_lossy(&search.stdout),
        String::from_utf8_lossy(&search.stderr)
    );
    // 16 settings x 3 folds, each scored once on a node of the allocation.
    let scored: Vec<String> = std::fs::read_to_string(&nodes_out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(scored.len(), 48, "{scored:?}");
    let nodes: BTreeSet<String> = scored.into_iter().collect();
    let allocated: BTreeSet<String> = allocated_nodes(&job).into_iter().collect();
    assert_eq!(allocated.len(), 3);
    assert_eq!(nodes, allocated, "fits ran on every node");

    shut_down_and_complete(&pilot, &job, &log);
}
