//! `saker pilot` as a service, driven by separate client processes through the pilot
//! directory: submit, wait, status, cancel, results, shutdown.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{results, run, saker, wait_for};

struct PilotProcess(std::process::Child);

impl Drop for PilotProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn clients_submit_wait_cancel_and_read_results_from_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    let pilot_dir = dir.path().join("pilot");
    let mut pilot = PilotProcess(
        saker()
            .args([
                "pilot", "--agents", "3", "--slots", "6", "--fanout", "2", "--dir",
            ])
            .arg(&pilot_dir)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the client endpoint", Duration::from_secs(30), || {
        pilot_dir.join("client.json").exists()
    });
    wait_for("three agents", Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&pilot_dir));
        String::from_utf8_lossy(&status.stdout).contains("agents    3")
    });

    let submitted = run(saker()
        .args(["submit", "--array", "1-50", "--dir"])
        .arg(&pilot_dir)
        .args(["--", "sh", "-c", "echo task {index}"]));
    assert!(submitted.status.success());
    assert_eq!(
        String::from_utf8_lossy(&submitted.stdout),
        "job 1 tasks 50 first_task 1\n"
    );

    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot_dir));
    assert!(waited.status.success());
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout),
        "succeeded 50 failed 0 cancelled 0\n"
    );

    let long = run(saker()
        .args(["submit", "--dir"])
        .arg(&pilot_dir)
        .args(["--", "sleep", "60"]));
    assert!(long.status.success());
    wait_for("the long task to run", Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&pilot_dir));
        String::from_utf8_lossy(&status.stdout).contains("running 1 ")
    });
    let cancelled = run(saker().args(["cancel", "--dir"]).arg(&pilot_dir).arg("2"));
    assert!(cancelled.status.success());
    let waited = run(saker()
        .args(["wait", "--job", "2", "--dir"])
        .arg(&pilot_dir));
    assert_eq!(
        waited.status.code(),
        Some(1),
        "a cancelled job is not a success"
    );
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout),
        "succeeded 0 failed 0 cancelled 1\n"
    );

    let unknown = run(saker().args(["cancel", "--dir"]).arg(&pilot_dir).arg("99"));
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown job 99"));

    let live = results(&pilot_dir);
    assert_eq!(live.len(), 51);
    let seqs: Vec<u64> = live.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=51).collect::<Vec<_>>(),
        "results stream in journal order"
    );

    let stopped = run(saker().args(["shutdown", "--dir"]).arg(&pilot_dir));
    assert!(stopped.status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = pilot.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the pilot did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());

    // With the pilot gone, results come from its journal, identical.
    let from_journal = results(&pilot_dir);
    assert_eq!(from_journal, live);
}

#[test]
fn shutdown_is_acknowledged_cleanly_even_by_a_pilot_without_agents() {
    // The acknowledgement used to race the pilot's exit; a few rounds catch it.
    for agents in ["0", "0", "0", "0", "0", "1"] {
        let dir = tempfile::tempdir().unwrap();
        let pilot_dir = dir.path().join("pilot");
        let mut pilot = PilotProcess(
            saker()
                .args(["pilot", "--agents", agents, "--dir"])
                .arg(&pilot_dir)
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for("the client endpoint", Duration::from_secs(30), || {
            pilot_dir.join("client.json").exists()
        });
        let stopped = run(saker().args(["shutdown", "--dir"]).arg(&pilot_dir));
        let stderr = String::from_utf8_lossy(&stopped.stderr);
        assert!(stopped.status.success(), "--agents {agents}: {stderr}");
        assert!(stderr.is_empty(), "--agents {agents}: {stderr}");
        wait_for("the pilot to exit", Duration::from_secs(15), || {
            matches!(pilot.0.try_wait(), Ok(Some(_)))
        });
        assert!(!pilot_dir.join("client.json").exists());
    }
}
