//! `saker update` of queued jobs with real processes: a job moved later does not start
//! before its new time, one given a short time limit is killed by it, one moved to a
//! time past runs at once, and updates stay in force across a root SIGKILL and resume.

mod common;

use std::str::FromStr;
use std::time::Duration;

use common::{Service, results, run, saker, wait_for};
use saker_client::results::Timestamp;
use serde_json::Value;

/// Microseconds since the epoch of a result's time field.
fn micros(record: &Value, key: &str) -> u64 {
    Timestamp::from_str(record[key].as_str().expect("a time"))
        .expect("RFC 3339")
        .unix_micros()
}

fn now() -> u64 {
    Timestamp::now().unix_micros()
}

fn submit(pilot: &std::path::Path, args: &[&str]) {
    let output = run(saker().arg("submit").arg("--dir").arg(pilot).args(args));
    assert!(output.status.success(), "submit {args:?}");
}

fn update(pilot: &std::path::Path, args: &[&str]) -> std::process::Output {
    run(saker().arg("update").arg("--dir").arg(pilot).args(args))
}

/// A job's only result, once there.
fn result_of(pilot: &std::path::Path, job: u64, timeout: Duration) -> Value {
    let mut found = None;
    wait_for(&format!("job {job}'s result"), timeout, || {
        found = results(pilot).into_iter().find(|r| r["job"] == job);
        found.is_some()
    });
    found.expect("found")
}

/// A command that runs until `marker` exists.
fn blocker(marker: &std::path::Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.05; done", marker.display())
}

/// Job 2 waits behind job 1 on the only slot (or in the agent's prefetch window, from
/// where it is asked back); moved 3 s later, it does not start before then although
/// the slot frees at once.
#[test]
fn update_in_holds_a_queued_job_until_its_new_time() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 1);
    let pilot = service.pilot.clone();
    let marker = dir.path().join("go");
    submit(&pilot, &["--", "sh", "-c", &blocker(&marker)]);
    submit(&pilot, &["--", "echo", "moved"]);
    let before = now();
    let updated = update(&pilot, &["2", "--in", "3s"]);
    assert!(updated.status.success());
    assert!(String::from_utf8_lossy(&updated.stdout).contains("updated 1 jobs"));
    std::fs::write(&marker, b"").unwrap();
    let blocker_end = micros(&result_of(&pilot, 1, Duration::from_secs(30)), "end_time");
    let moved = result_of(&pilot, 2, Duration::from_secs(30));
    assert_eq!(moved["state"], "succeeded");
    let start = micros(&moved, "start_time");
    assert!(
        blocker_end < before + 2_000_000,
        "the slot was free long before the new time"
    );
    assert!(
        start >= before + 3_000_000,
        "started {} ms after the update, before its new time",
        (start - before) / 1_000
    );
    drop(service);
}

/// A queued `sleep 30` given `--time-limit 1s` before it starts is killed by the new
/// limit; `--time-limit none` on another job lets it run past its old limit.
#[test]
fn update_time_limit_applies_to_a_queued_job() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 1);
    let pilot = service.pilot.clone();
    let marker = dir.path().join("go");
    submit(&pilot, &["--", "sh", "-c", &blocker(&marker)]);
    submit(&pilot, &["--", "sleep", "30"]);
    submit(&pilot, &["--time-limit", "1s", "--", "sleep", "2"]);
    assert!(
        update(&pilot, &["2", "--time-limit", "1s"])
            .status
            .success()
    );
    assert!(
        update(&pilot, &["3", "--time-limit", "none"])
            .status
            .success()
    );
    std::fs::write(&marker, b"").unwrap();
    let limited = result_of(&pilot, 2, Duration::from_secs(20));
    assert_eq!(limited["state"], "failed", "{limited}");
    assert_eq!(limited["reason"], "time limit exceeded", "{limited}");
    let ran = micros(&limited, "end_time") - micros(&limited, "start_time");
    assert!(
        (900_000..10_000_000).contains(&ran),
        "killed after {} ms",
        ran / 1_000
    );
    let unlimited = result_of(&pilot, 3, Duration::from_secs(20));
    assert_eq!(unlimited["state"], "succeeded", "{unlimited}");
    drop(service);
}

/// A job waiting for a time an hour ahead, moved to a time past, runs at once; bad
/// input (a malformed time, an unknown job, an ended job, nothing to change) is
/// refused and changes nothing.
#[test]
fn update_at_a_past_time_runs_a_waiting_job_at_once_and_bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    submit(&pilot, &["--in", "1h", "--", "echo", "later"]);
    submit(&pilot, &["--", "echo", "done"]);
    result_of(&pilot, 2, Duration::from_secs(20));
    let refusals = [
        (vec!["1", "--at", "tomorrow"], "--at"),
        (vec!["1", "--time-limit", "90"], "--time-limit"),
        (vec!["1", "9", "--in", "1s"], "unknown job 9"),
        (vec!["1", "2", "--at", "none"], "job 2 has ended"),
        (vec!["1"], "required"),
    ];
    for (args, expected) in refusals {
        let refused = update(&pilot, &args);
        assert!(!refused.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(results(&pilot).len(), 1, "job 1 still waits");
    let before = now();
    assert!(
        update(&pilot, &["1", "--at", "2020-01-01T00:00Z"])
            .status
            .success()
    );
    let moved = result_of(&pilot, 1, Duration::from_secs(20));
    let waited = micros(&moved, "start_time").saturating_sub(before);
    assert!(waited < 5_000_000, "started {} ms after", waited / 1_000);
    drop(service);
}

/// Updates answered before the root is SIGKILLed are in force after `saker pilot
/// --resume`: a job moved from an hour ahead to 3 s ahead runs then (not in an hour),
/// and a job given a 1 s limit while it waited is killed by it.
#[test]
fn updates_are_in_force_after_a_root_is_killed_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let first = Service::start(dir.path(), 2);
    let pilot = first.pilot.clone();
    submit(&pilot, &["--in", "1h", "--", "echo", "moved"]);
    submit(&pilot, &["--in", "2s", "--", "sleep", "30"]);
    let before = now();
    assert!(update(&pilot, &["1", "--in", "3s"]).status.success());
    assert!(
        update(&pilot, &["2", "--time-limit", "1s"])
            .status
            .success()
    );
    first.kill_root();
    let second = Service::start_with(dir.path(), 2, true);
    let moved = result_of(&pilot, 1, Duration::from_secs(30));
    let start = micros(&moved, "start_time");
    assert!(
        (before + 3_000_000..before + 30_000_000).contains(&start),
        "started {} ms after the update",
        start.saturating_sub(before) / 1_000
    );
    let limited = result_of(&pilot, 2, Duration::from_secs(30));
    assert_eq!(limited["reason"], "time limit exceeded", "{limited}");
    drop(second);
}
