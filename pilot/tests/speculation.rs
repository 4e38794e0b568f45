//! Stragglers of idempotent jobs get a speculative copy on an idle slot elsewhere: the
//! first result wins and the straggling attempt is stopped.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{results, run, saker};

#[test]
fn a_straggler_is_copied_elsewhere_and_the_first_result_wins() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let mark = dir.path().join("straggled");
    let pid_file = dir.path().join("straggler.pid");
    // Index 7's first attempt hangs for a minute; any later attempt, and every other
    // index, takes 0.2 s.
    let script = format!(
        "if [ {{index}} = 7 ] && mkdir {mark} 2>/dev/null; then echo $$ > {pid}; sleep 60; fi; sleep 0.2",
        mark = mark.display(),
        pid = pid_file.display()
    );
    let started = Instant::now();
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--idempotent"])
        .args(["--agents", "2", "--slots", "4", "--array", "1-20", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    let took = started.elapsed();
    assert!(output.status.success());
    assert!(
        took < Duration::from_secs(30),
        "the copy finished long before the straggler would have ({took:?})"
    );
    let records = results(&pilot);
    assert_eq!(records.len(), 20);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let straggler = records.iter().find(|r| r["index"] == 7).unwrap();
    assert_eq!(straggler["attempts"], 2, "the original and its copy");
    // The losing attempt was stopped, not left running.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let alive = Command::new("kill")
        .args(["-0", pid.trim()])
        .status()
        .unwrap()
        .success();
    assert!(!alive, "the straggling attempt was killed");
}

#[test]
fn without_idempotent_no_copy_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let mark = dir.path().join("straggled");
    // The straggler takes 3 s, far past the others' estimate, but may not run twice.
    let script = format!(
        "if [ {{index}} = 7 ] && mkdir {mark} 2>/dev/null; then sleep 3; fi; sleep 0.1",
        mark = mark.display()
    );
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync"])
        .args(["--agents", "2", "--slots", "4", "--array", "1-20", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    let straggler = results(&pilot)
        .into_iter()
        .find(|r| r["index"] == 7)
        .unwrap();
    assert_eq!(straggler["attempts"], 1);
}
