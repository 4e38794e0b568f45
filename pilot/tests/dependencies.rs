//! Dependencies between jobs with real processes: a task file that is a whole DAG,
//! `saker submit --after`, cycles refused with their path, and a root killed mid-DAG
//! that resumes it from the journal without running anything early or twice.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use common::{Service, results, run, saker};
use serde_json::Value;

/// Results by job name, given that each task echoes its name.
fn by_name(records: &[Value]) -> HashMap<String, Value> {
    records
        .iter()
        .map(|r| {
            let name = r["stdout"].as_str().unwrap_or_default().trim().to_owned();
            let name = if name.is_empty() {
                format!("job{}", r["job"])
            } else {
                name
            };
            (name, r.clone())
        })
        .collect()
}

fn time(record: &Value, key: &str) -> String {
    record[key].as_str().unwrap_or_default().to_owned()
}

/// A four-level DAG in one task file, written bottom-up (names point forward): the
/// failing middle task cancels its subtree with the reason, the `after_any` cleanup
/// runs anyway, and nothing starts before what it waits for has ended.
#[test]
fn a_task_file_dag_runs_in_order_and_a_failure_cancels_its_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("dag.jsonl");
    let line = |name: &str, script: &str, after: &[&str], after_any: &[&str]| {
        serde_json::json!({
            "argv": ["sh", "-c", script], "name": name, "after": after, "after_any": after_any
        })
        .to_string()
    };
    let lines = [
        line("report", "echo report", &["merge"], &[]),
        line("cleanup", "echo cleanup", &[], &["bad"]),
        line("merge", "echo merge", &["left", "right"], &[]),
        line("after-bad", "echo after-bad", &["bad"], &[]),
        line("deep", "echo deep", &["after-bad"], &[]),
        line("left", "sleep 0.1; echo left", &["prepare"], &[]),
        line("right", "echo right", &["prepare"], &[]),
        line("bad", "echo bad; exit 3", &["prepare"], &[]),
        line("prepare", "sleep 0.1; echo prepare", &[], &[]),
    ];
    std::fs::write(&tasks, lines.join("\n")).unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--slots", "4", "--dir"])
        .arg(&pilot)
        .arg(&tasks));
    assert_eq!(output.status.code(), Some(1), "a task failed");
    let records = results(&pilot);
    assert_eq!(records.len(), 9, "one result per job");
    let named = by_name(&records);
    for done in ["prepare", "left", "right", "merge", "report", "cleanup"] {
        assert_eq!(named[done]["state"], "succeeded", "{done}: {}", named[done]);
    }
    assert_eq!(named["bad"]["state"], "failed");
    // Cancelled jobs print nothing: find them by their reason.
    let cancelled: Vec<&Value> = records
        .iter()
        .filter(|r| r["state"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 2, "after-bad and deep: {records:?}");
    let bad_job = named["bad"]["job"].as_u64().unwrap();
    let reasons: Vec<&str> = cancelled
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(
        reasons.contains(&format!("dependency {bad_job} failed").as_str()),
        "{reasons:?}"
    );
    assert!(
        cancelled.iter().all(|r| r["start_time"].is_null()),
        "never ran"
    );
    // Nothing started before what it waited for ended.
    for (job, waits_for) in [
        ("left", "prepare"),
        ("right", "prepare"),
        ("bad", "prepare"),
        ("merge", "left"),
        ("merge", "right"),
        ("report", "merge"),
        ("cleanup", "bad"),
    ] {
        assert!(
            time(&named[job], "start_time") >= time(&named[waits_for], "end_time"),
            "{job} started before {waits_for} ended"
        );
    }
}

#[test]
fn a_cycle_or_an_unknown_name_is_refused_with_its_path_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("cycle.jsonl");
    std::fs::write(
        &tasks,
        concat!(
            r#"{"argv": ["true"], "name": "a", "after": ["c"]}"#,
            "\n",
            r#"{"argv": ["true"], "name": "b", "after": ["a"]}"#,
            "\n",
            r#"{"argv": ["true"], "name": "c", "after": ["b"]}"#,
            "\n",
        ),
    )
    .unwrap();
    let output = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(dir.path().join("pilot"))
        .arg(&tasks));
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cycle"), "{stderr}");
    assert!(
        stderr.contains("\"a\" →") && stderr.contains("\"c\""),
        "{stderr}"
    );

    std::fs::write(&tasks, r#"{"argv": ["true"], "after": ["nobody"]}"#).unwrap();
    let output = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(dir.path().join("pilot2"))
        .arg(&tasks));
    assert_ne!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"nobody\""));
}

/// `saker submit --after` against a service pilot, and `status` while it waits.
#[test]
fn submit_after_waits_for_jobs_of_earlier_submissions() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    let marker = dir.path().join("go");
    let first = run(saker()
        .args(["submit", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.05; done",
            marker.display()
        )));
    assert!(first.status.success());
    let second = run(saker()
        .args(["submit", "--after", "1", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "second"]));
    assert!(second.status.success());
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("1 wait for other jobs"), "{status}");
    let refused = run(saker()
        .args(["submit", "--after", "9", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("job 9"));
    std::fs::write(&marker, b"").unwrap();
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success());
    let records = results(&pilot);
    let first_end = time(&records[0], "end_time");
    let second = records.iter().find(|r| r["job"] == 2).unwrap();
    assert!(time(second, "start_time") >= first_end);
    drop(service);
}

/// A chain of ten jobs; the root is SIGKILLed after a few: the resumed root runs the
/// rest, each after the one before it, and none twice.
#[test]
fn a_root_killed_mid_chain_resumes_it_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("order.log");
    let tasks = dir.path().join("chain.jsonl");
    let lines: Vec<String> = (0..10)
        .map(|i| {
            let after: Vec<String> = if i == 0 {
                Vec::new()
            } else {
                vec![format!("step{}", i - 1)]
            };
            serde_json::json!({
                "argv": ["sh", "-c", format!("sleep 0.2; echo {i} >> {}", log.display())],
                "name": format!("step{i}"),
                "after": after,
            })
            .to_string()
        })
        .collect();
    std::fs::write(&tasks, lines.join("\n")).unwrap();
    let mut first = saker()
        .args(["run", "--progress", "none", "--slots", "4", "--dir"])
        .arg(&pilot)
        .arg(&tasks)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&log).map_or(0, |l| l.lines().count()) < 3 {
        assert!(Instant::now() < deadline, "the chain made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("agent --dir {}", pilot.display())])
        .status();
    let resumed = run(saker()
        .args(["run", "--resume", "--progress", "none", "--dir"])
        .arg(&pilot));
    assert!(resumed.status.success());
    let records = results(&pilot);
    assert_eq!(records.len(), 10);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    // In order; a step may run twice only if it was in flight at the kill.
    let order: Vec<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let mut seen = 0;
    for step in &order {
        assert!(
            *step <= seen,
            "step {step} ran before step {seen} ended: {order:?}"
        );
        if *step == seen {
            seen += 1;
        }
    }
    assert_eq!(seen, 10, "{order:?}");
    assert!(
        order.len() <= 11,
        "at most the step in flight ran twice: {order:?}"
    );
}

/// `--in` holds a job until its time (its task starts no sooner), `--at` with a time
/// past runs at once, and a malformed time is refused before anything is sent.
#[test]
fn submit_in_and_at_hold_a_job_until_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    let later = run(saker()
        .args(["submit", "--in", "1500ms", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "later"]));
    assert!(later.status.success());
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    assert!(
        String::from_utf8_lossy(&status.stdout)
            .contains("1 wait for other jobs to end or for their time"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let past = run(saker()
        .args(["submit", "--at", "2020-01-01T00:00Z", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "now"]));
    assert!(past.status.success());
    let bad = run(saker()
        .args(["submit", "--at", "tomorrow", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--at"));
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success());
    let records = results(&pilot);
    assert_eq!(records.len(), 2);
    let micros = |record: &Value, key: &str| -> i64 {
        saker_client::results::Timestamp::from_str(record[key].as_str().unwrap())
            .unwrap()
            .unix_micros() as i64
    };
    let held = records.iter().find(|r| r["job"] == 1).unwrap();
    let waited_for = micros(held, "start_time") - micros(held, "submit_time");
    assert!(
        waited_for >= 1_400_000,
        "started {waited_for} µs after submission"
    );
    let prompt = records.iter().find(|r| r["job"] == 2).unwrap();
    assert!(
        micros(prompt, "start_time") < micros(held, "start_time"),
        "the past time ran first"
    );
    drop(service);
}

/// `saker update --priority` moves a queued job ahead of the queue (of what the root
/// still holds: a task already in an agent's prefetch window keeps its place); an
/// unknown job is refused.
#[test]
fn update_moves_a_queued_job_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 1);
    let pilot = service.pilot.clone();
    let marker = dir.path().join("go");
    let submit = |args: &[&str]| {
        let output = run(saker().arg("submit").arg("--dir").arg(&pilot).args(args));
        assert!(output.status.success());
    };
    submit(&[
        "--",
        "sh",
        "-c",
        &format!("while [ ! -e {} ]; do sleep 0.05; done", marker.display()),
    ]);
    // Jobs 2-6; the first of them may already sit in the agent's prefetch window.
    for _ in 0..5 {
        submit(&["--", "echo", "plain"]);
    }
    submit(&["--", "echo", "urgent"]);
    let updated = run(saker()
        .args(["update", "--priority", "5", "--dir"])
        .arg(&pilot)
        .arg("7"));
    assert!(updated.status.success());
    assert!(String::from_utf8_lossy(&updated.stdout).contains("updated 1 jobs"));
    let unknown = run(saker()
        .args(["update", "--priority", "-1", "--dir"])
        .arg(&pilot)
        .arg("9"));
    assert!(!unknown.status.success());
    std::fs::write(&marker, b"").unwrap();
    assert!(
        run(saker().args(["wait", "--dir"]).arg(&pilot))
            .status
            .success()
    );
    let records = results(&pilot);
    let start = |job: u64| {
        time(
            records.iter().find(|r| r["job"] == job).expect("a result"),
            "start_time",
        )
    };
    assert!(
        start(7) < start(3),
        "the urgent job went ahead: {records:?}"
    );
    drop(service);
}

/// `saker submit --every 1s --count 3`: three jobs, each with its own result, started
/// a period apart; then the schedule is over.
#[test]
fn a_periodic_job_runs_once_per_period_up_to_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    let submitted = run(saker()
        .args(["submit", "--every", "1s", "--count", "3", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "tick"]));
    assert!(submitted.status.success());
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    assert!(String::from_utf8_lossy(&status.stdout).contains("periodic  1 jobs going on"));
    assert!(
        run(saker().args(["wait", "--dir"]).arg(&pilot))
            .status
            .success()
    );
    let records = results(&pilot);
    assert_eq!(records.len(), 3, "{records:?}");
    let starts: Vec<i64> = records
        .iter()
        .map(|r| {
            saker_client::results::Timestamp::from_str(r["start_time"].as_str().unwrap())
                .unwrap()
                .unix_micros() as i64
        })
        .collect();
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (900_000..2_000_000).contains(&gap),
            "started {gap} µs apart"
        );
    }
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    assert!(!String::from_utf8_lossy(&status.stdout).contains("periodic"));
    drop(service);
}

/// The root of a pilot with a periodic job is SIGKILLed and resumed: the schedule goes
/// on from its journal (the pending occurrence runs, late if its time passed; wholly
/// missed ones are skipped), no occurrence runs twice, and it still ends at its count.
#[test]
fn a_periodic_job_goes_on_after_a_root_is_killed_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Service::start(dir.path(), 2);
    let pilot = first.pilot.clone();
    let submitted = run(saker()
        .args(["submit", "--every", "1s", "--count", "5", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "tick"]));
    assert!(submitted.status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while results(&pilot).len() < 2 {
        assert!(Instant::now() < deadline, "no occurrence ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    drop(first); // its shutdown finds nobody to ask
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("agent --dir {}", pilot.display())])
        .status();
    let _ = std::fs::remove_file(pilot.join("client.json"));
    let second = Service::start_with(dir.path(), 2, true);
    assert!(
        run(saker().args(["wait", "--dir"]).arg(&pilot))
            .status
            .success()
    );
    let records = results(&pilot);
    assert!(records.len() >= 3 && records.len() <= 5, "{records:?}");
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let mut jobs: Vec<u64> = records.iter().map(|r| r["job"].as_u64().unwrap()).collect();
    jobs.dedup();
    assert_eq!(jobs.len(), records.len(), "no occurrence twice");
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    assert!(!String::from_utf8_lossy(&status.stdout).contains("periodic"));
    drop(second);
}
