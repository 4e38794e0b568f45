//! Jobs of launcher script (`--mpi pmi --launcher script`): the job's command runs
//! once, on its first node, and each `saker mpiexec` in it has the agents start the
//! ranks and serve them PMI, as often as the script likes, with no MPI launcher.

mod common;

use std::time::{Duration, Instant};

use common::hpc::{check_probe_world, only_result, run_on_three};
use common::mpi_probe as probe;

const LAYOUT: [&str; 8] = [
    "--nodes",
    "3",
    "--ranks-per-node",
    "2",
    "--mpi",
    "pmi",
    "--launcher",
    "script",
];

#[test]
fn a_script_starts_mpi_ranks_through_the_agents_as_often_as_it_likes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("mpich", dir.path()) else {
        return;
    };
    let probe = probe.display();
    // Three launches: the job's whole layout, a smaller one, and one that cannot fit;
    // a variable that is not UTF-8 in the script's environment stays behind.
    let script = format!(
        "export NOT_UTF8=$(printf '\\377'); \
         echo script node=$SAKER_NODE; $SAKER_MPIEXEC {probe}; echo first=$?; \
         $SAKER_MPIEXEC -n 2 -ppn 1 sh -c 'echo small rank=$PMI_RANK size=$PMI_SIZE'; \
         echo second=$?; $SAKER_MPIEXEC -n 7 true; echo third=$?"
    );
    let pilot = dir.path().join("pilot");
    let output = run_on_three(&pilot, &[&LAYOUT[..], &["--shell", "--", &script]].concat());
    let result = only_result(&pilot);
    assert!(output.status.success(), "{result}");
    let stdout = result["stdout"].as_str().unwrap();
    // The script ran once; every rank's output came back to its `saker mpiexec`.
    assert_eq!(stdout.matches("script node=").count(), 1, "{stdout}");
    check_probe_world(stdout, true);
    assert!(stdout.contains("first=0"), "{stdout}");
    let small: Vec<&str> = stdout.lines().filter(|l| l.starts_with("small")).collect();
    assert_eq!(
        small,
        ["small rank=0 size=2", "small rank=1 size=2"],
        "{stdout}"
    );
    assert!(stdout.contains("second=0"), "{stdout}");
    assert!(stdout.contains("third=255"), "{stdout}");
    let stderr = result["stderr"].as_str().unwrap();
    assert!(stderr.contains("7 ranks do not fit"), "{stderr}");
}

/// Open MPI through Saker's PMI library, twice in one job: each run is a job of its
/// own to Open MPI (its own `FLUX_JOB_ID` and PMI world).
#[test]
fn a_script_runs_open_mpi_worlds_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("openmpi", dir.path()) else {
        return;
    };
    let probe = probe.display();
    let script = format!(
        "$SAKER_MPIEXEC sh -c 'echo job=$FLUX_JOB_ID' | sort -u; $SAKER_MPIEXEC {probe} && \
         $SAKER_MPIEXEC sh -c 'echo job=$FLUX_JOB_ID' | sort -u; $SAKER_MPIEXEC {probe}"
    );
    let pilot = dir.path().join("pilot");
    // Open MPI's TCP BTL race (see slurm_hpc.rs) gets the retry a user would give it.
    let retry = ["--retries", "1", "--shell", "--", &script];
    let output = run_on_three(&pilot, &[&LAYOUT[..], &retry].concat());
    let result = only_result(&pilot);
    assert!(output.status.success(), "{result}");
    let stdout = result["stdout"].as_str().unwrap();
    let jobs: Vec<&str> = stdout.lines().filter(|l| l.starts_with("job=")).collect();
    assert_eq!(jobs.len(), 2, "one job id per run: {stdout}");
    assert_ne!(jobs[0], jobs[1], "{stdout}");
    assert_eq!(stdout.matches("probe done").count(), 2, "{stdout}");
    assert_eq!(stdout.matches(" sum=21 ").count(), 12, "{stdout}");
}

#[test]
fn a_failed_rank_of_a_script_ends_the_job_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("mpich", dir.path()) else {
        return;
    };
    let script = format!("$SAKER_MPIEXEC {} fail=3; sleep 60", probe.display());
    let pilot = dir.path().join("pilot");
    let started = Instant::now();
    let output = run_on_three(&pilot, &[&LAYOUT[..], &["--shell", "--", &script]].concat());
    let result = only_result(&pilot);
    assert!(!output.status.success(), "{result}");
    assert_eq!(result["state"], "failed", "{result}");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "not at once: {result}"
    );
}
