//! The Rust API inside a real Slurm allocation (the project's cluster,
//! scripts/slurm-cluster/up.sh): `sbatch-templates/app.sbatch` runs the test
//! application as the driver of a pilot on three nodes; its typed tasks run on all
//! three, and the job ends, completed, when the application does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whether the cluster is up; without one the test says it did not run, unless
/// `SAKER_REQUIRE_SLURM=1` (scripts/test.sh), where it fails.
fn cluster() -> bool {
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

fn saker_bin() -> PathBuf {
    std::env::var_os("SAKER_BIN").map_or_else(
        || Path::new(env!("CARGO_BIN_EXE_saker-testapp")).with_file_name("saker"),
        PathBuf::from,
    )
}

fn job_state(job: &str) -> String {
    let output = Command::new("scontrol")
        .args(["show", "job", "--oneliner", job])
        .output()
        .expect("scontrol runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix("JobState="))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn an_app_pilot_spans_the_allocation_and_ends_with_the_app() {
    if !cluster() {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let log = temp.path().join("job.log");
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sbatch-templates/app.sbatch");
    let submitted = Command::new("sbatch")
        .arg("--parsable")
        .arg("--nodes=3")
        .arg(format!("--output={}", log.display()))
        .arg(&template)
        .args(["naps", "24", "300"])
        .env("SAKER", saker_bin())
        .env("APP", env!("CARGO_BIN_EXE_saker-testapp"))
        .env("PILOT", temp.path().join("pilot"))
        .output()
        .expect("sbatch runs");
    assert!(
        submitted.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let job = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(180);
    let state = loop {
        let state = job_state(&job);
        if ["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"].contains(&state.as_str()) {
            break state;
        }
        if Instant::now() > deadline {
            let _ = Command::new("scancel").arg(&job).status();
            panic!(
                "job {job} still {state}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(state, "COMPLETED", "{output}");
    assert!(
        output.contains(r#"ok 24 naps on nodes {"0", "1", "2"}"#),
        "the typed tasks ran on all three nodes: {output}"
    );
}
