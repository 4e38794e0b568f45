//! What the HPC tests share: a 3-agent local pilot, its one result, and the
//! probe's world as every rank saw it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{field, probe_lines, results, run, saker};

/// `saker run` on 3 agents of 2 slots each, plus `args`.
pub fn run_on_three(pilot: &Path, args: &[&str]) -> std::process::Output {
    run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--agents", "3"])
        .args(["--slots", "6", "--dir"])
        .arg(pilot)
        .args(args))
}

pub fn only_result(pilot: &Path) -> Value {
    let records = results(pilot);
    assert_eq!(records.len(), 1, "one result for the whole job");
    records.into_iter().next().unwrap()
}

/// Every rank of a 3 × 2 probe saw the whole world: 6 ranks, the right sum, the ring
/// closed, and two ranks on each of three agents (when `nodes_visible`).
pub fn check_probe_world(stdout: &str, nodes_visible: bool) {
    let lines = probe_lines(stdout);
    assert_eq!(lines.len(), 6, "{stdout}");
    let ranks: BTreeSet<&str> = lines.iter().map(|line| field(line, "rank")).collect();
    assert_eq!(ranks, ["0", "1", "2", "3", "4", "5"].into_iter().collect());
    for line in &lines {
        assert_eq!(field(line, "size"), "6", "{line}");
        assert_eq!(field(line, "sum"), "21", "{line}");
    }
    let root = lines
        .iter()
        .find(|line| field(line, "rank") == "0")
        .unwrap();
    assert_eq!(field(root, "ring"), "5");
    if nodes_visible {
        let mut per_node = std::collections::BTreeMap::new();
        for line in &lines {
            *per_node.entry(field(line, "saker_node")).or_insert(0) += 1;
        }
        assert_eq!(per_node.len(), 3, "three agents: {per_node:?}");
        assert!(per_node.values().all(|&ranks| ranks == 2), "{per_node:?}");
    }
    assert!(stdout.contains("probe done"));
}

/// Every rank's stdout: rank 0's inline in the result, the others' in their files.
pub fn every_ranks_stdout(pilot: &Path, result: &Value, ranks: u32) -> String {
    let mut stdout = result["stdout"].as_str().unwrap().to_owned();
    let files: Vec<PathBuf> = std::fs::read_dir(pilot.join("output"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    for rank in 1..ranks {
        let suffix = format!(".r{rank}.stdout");
        let file = files
            .iter()
            .find(|file| file.to_string_lossy().ends_with(&suffix))
            .unwrap_or_else(|| panic!("rank {rank}'s output file in {files:?}"));
        stdout.push_str(&std::fs::read_to_string(file).unwrap());
    }
    stdout
}
