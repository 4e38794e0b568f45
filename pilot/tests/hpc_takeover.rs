//! A running MPI job outlives its root: a standby takes over while OpenMPI's and
//! MPICH's ranks run on two agents (under their launchers, or started by the agents
//! and served PMI, or by a script's `saker mpiexec`), adopts the job on both members,
//! and the job ends once, with every rank's output, never started again.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::hpc::every_ranks_stdout;
use common::{Service, field, mpi_probe, probe_lines, results, run, saker, standbys, wait_for};

/// How many processes named `name` run (the probe's ranks).
fn running(name: &str) -> usize {
    let output = Command::new("pgrep").args(["-x", name]).output().unwrap();
    String::from_utf8_lossy(&output.stdout).lines().count()
}

/// One 2 × 2 job of `probe` under `kind` (an MPI's launcher, `pmi`: the agents, or
/// `script`: a script's two runs, 2 × 2 then 2 × 1), its root killed while the (first
/// run's) ranks sleep past `MPI_Init`.
fn survives_a_takeover(dir: &Path, kind: &str, probe: &Path) {
    let mut service = Service::start_args(
        &dir.join(kind),
        &["--agents", "2", "--slots", "4", "--standby", "1"],
    );
    let pilot = service.pilot.clone();
    wait_for("the standby", Duration::from_secs(30), || {
        standbys(&pilot).len() == 1
    });
    let name = probe.file_name().unwrap().to_str().unwrap().to_owned();
    let mut submit = saker();
    submit.args(["submit", "--dir"]).arg(&pilot);
    submit.args(["--nodes", "2", "--ranks-per-node", "2"]);
    if kind == "script" {
        // The second run is asked for through the root that took over.
        let probe = probe.display();
        let script =
            format!("$SAKER_MPIEXEC {probe} sleep=6 && $SAKER_MPIEXEC -n 2 -ppn 1 {probe}");
        submit.args([
            "--mpi",
            "pmi",
            "--launcher",
            "script",
            "--shell",
            "--",
            &script,
        ]);
    } else {
        submit.args(["--mpi", kind, "--"]).arg(probe).arg("sleep=6");
    }
    let submitted = run(&mut submit);
    assert!(submitted.status.success(), "{submitted:?}");
    wait_for("four ranks", Duration::from_secs(60), || {
        running(&name) == 4
    });

    service.kill_for_standby();
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "{kind}: {waited:?}");

    let records = results(&pilot);
    assert_eq!(records.len(), 1, "{kind}: {records:?}");
    let record = &records[0];
    assert_eq!(record["state"], "succeeded", "{kind}: {record}");
    assert_eq!(record["attempts"], 1, "{kind}: started once: {record}");
    // A launcher merges its ranks' output; ranks the agents start keep their own.
    let stdout = match kind {
        "pmi" => every_ranks_stdout(&pilot, record, 4),
        _ => record["stdout"].as_str().unwrap().to_owned(),
    };
    let stdout = stdout.as_str();
    let ranks = probe_lines(stdout);
    let sizes: Vec<&str> = ranks.iter().map(|line| field(line, "size")).collect();
    let expected: &[&str] = match kind {
        "script" => &["4", "4", "4", "4", "2", "2"],
        _ => &["4", "4", "4", "4"],
    };
    assert_eq!(sizes, expected, "{kind}: every rank's line: {stdout}");
    assert!(stdout.contains("probe done"), "{kind}: {stdout}");
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("adopted   1 running, 0 ended while away; 0 stopped, 0 nodes missing"),
        "{kind}: {status}"
    );
    drop(service);
}

#[test]
fn a_running_mpi_job_survives_a_takeover_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    // MPICH's ranks also as the agents start them and serve them PMI: their fences
    // (MPI_Finalize's among them) gather at the job's leader, root or no root.
    for (kind, mpi) in [
        ("openmpi", "openmpi"),
        ("mpich", "mpich"),
        ("pmi", "mpich"),
        ("script", "mpich"),
    ] {
        let Some(built) = mpi_probe(mpi, dir.path()) else {
            continue;
        };
        // A name of its own: ranks of other tests (run beside this one) are not
        // counted as its.
        let probe = dir.path().join(format!("tk-{kind}"));
        std::fs::copy(&built, &probe).unwrap();
        survives_a_takeover(dir.path(), kind, &probe);
    }
}
