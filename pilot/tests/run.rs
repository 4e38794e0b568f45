//! `saker run` end to end: real agent processes linked over QUIC, real tasks.

mod common;

use std::collections::BTreeSet;

use common::{assert_one_result_per_task, results, run, saker};

#[test]
fn sixteen_agents_at_fanout_four_run_20000_tasks_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("executions.log");
    // Every execution appends its index (O_APPEND writes this small are atomic), so
    // the log shows how many times each task really ran.
    let script = format!("echo {{index}} >> {}", log.display());
    let output = run(saker()
        .args(["run", "--agents", "16", "--slots", "32", "--fanout", "4"])
        .args([
            "--progress",
            "none",
            "--no-sync",
            "--array",
            "1-20000",
            "--dir",
        ])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());

    let executed: Vec<u32> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(executed.len(), 20_000, "each task ran exactly once");
    let distinct: BTreeSet<u32> = executed.iter().copied().collect();
    assert_eq!(distinct, (1..=20_000).collect());

    let records = results(&pilot);
    assert_eq!(records.len(), 20_000, "one result per task");
    assert_one_result_per_task(&records, 20_000);
    let indices: BTreeSet<u64> = records
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices, (1..=20_000).collect());
    assert!(
        records
            .iter()
            .all(|r| r["state"] == "succeeded" && r["attempts"] == 1)
    );
    // Work reached agents deep in the tree, not only the root's children.
    let agent_logs = std::fs::read_dir(pilot.join("logs")).unwrap().count();
    assert_eq!(agent_logs, 16);
}

#[test]
fn failures_are_reported_and_make_the_exit_code_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.txt");
    std::fs::write(
        &tasks,
        "echo fine\n# a comment\n\n/no/such/program --flag\nsh -c 'echo bad >&2; exit 3'\n\
         {\"argv\": [\"sh\", \"-c\", \"echo $GREETING\"], \"env\": {\"GREETING\": \"hello\"}}\n",
    )
    .unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(&pilot)
        .arg(&tasks));
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("program not found: /no/such/program"),
        "{stderr}"
    );

    let records = results(&pilot);
    assert_eq!(records.len(), 4);
    let by_stdout = |text: &str| {
        records
            .iter()
            .find(|r| r["stdout"] == text)
            .unwrap()
            .clone()
    };
    assert_eq!(by_stdout("fine\n")["exit_code"], 0);
    assert_eq!(by_stdout("hello\n")["state"], "succeeded");
    let exit3 = records.iter().find(|r| r["exit_code"] == 3).unwrap();
    assert_eq!(exit3["state"], "failed");
    assert_eq!(exit3["stderr"], "bad\n");
    let missing = records.iter().find(|r| r["exit_code"].is_null()).unwrap();
    assert_eq!(missing["state"], "failed");
    for record in &records {
        for key in [
            "task",
            "node",
            "node_id",
            "executor",
            "submit_time",
            "start_time",
            "end_time",
            "attempts",
        ] {
            assert!(
                !record[key].is_null() || key == "executor",
                "{key} missing in {record}"
            );
        }
    }
}

#[test]
fn a_bad_task_file_line_names_file_and_line_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("bad.txt");
    std::fs::write(&tasks, "echo ok\necho \"unterminated\n").unwrap();
    let output = run(saker().args(["run", "--progress", "none"]).arg(&tasks));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:2:", tasks.display())),
        "{stderr}"
    );
}

#[test]
fn retries_rerun_a_failing_task_until_it_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("seen");
    let pilot = dir.path().join("pilot");
    // Fails the first time (no marker yet), succeeds the second.
    let script = format!(
        "test -e {m} || {{ touch {m}; exit 1; }}",
        m = marker.display()
    );
    let output = run(saker()
        .args(["run", "--progress", "none", "--retries", "2", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    let records = results(&pilot);
    assert_eq!(records[0]["attempts"], 2);
    assert_eq!(records[0]["state"], "succeeded");
    // The first attempt's end is kept, and the table says it too.
    let history = records[0]["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["end"], "failed");
    assert_eq!(history[0]["exit_code"], 1);
    assert_eq!(history[0]["reason"], "exit 1");
    assert_ne!(history[0]["attempt"], serde_json::Value::Null);
    let table = run(saker().args(["results", "--dir"]).arg(&pilot));
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("earlier: exit 1"), "{table}");
}

#[test]
fn a_time_limit_stops_the_task_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args([
            "run",
            "--progress",
            "none",
            "--time-limit",
            "300ms",
            "--dir",
        ])
        .arg(&pilot)
        .args(["--", "sleep", "30"]));
    assert_eq!(output.status.code(), Some(1));
    let records = results(&pilot);
    assert_eq!(records[0]["state"], "failed");
    assert_eq!(records[0]["reason"], "time limit exceeded");
    let run_time =
        records[0]["end_time"].as_str().unwrap() > records[0]["start_time"].as_str().unwrap();
    assert!(run_time);
}

#[test]
fn large_output_is_kept_inline_in_part_and_spilled_whole_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--dir"])
        .arg(&pilot)
        .args(["--", "seq", "1", "100000"]));
    assert!(output.status.success());
    let records = results(&pilot);
    let record = &records[0];
    let path = record["stdout_path"].as_str().expect("spilled");
    assert!(path.starts_with(pilot.to_str().unwrap()), "{path}");
    let whole = std::fs::read_to_string(path).unwrap();
    assert_eq!(whole.lines().count(), 100_000);
    let inline = record["stdout"].as_str().unwrap();
    assert_eq!(inline.len(), 4096);
    assert!(whole.starts_with(inline));
    assert!(record["stderr_path"].is_null());
}

#[test]
fn a_wrong_dir_says_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(saker().args(["status", "--dir"]).arg(dir.path()));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not a saker pilot directory"),
        "{stderr}"
    );
}

/// A task file makes one job per line. Each agent must drop a job's definition once the
/// job is finished, or a million-line file would keep a million definitions in every
/// agent: the root tells it with later dispatches.
#[test]
fn agents_forget_finished_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let file = dir.path().join("tasks.txt");
    let jobs = 1500;
    std::fs::write(&file, "true\n".repeat(jobs)).unwrap();
    let output = run(saker()
        .env("SAKER_LOG", "warn,saker_actors::agent=debug")
        .args(["run", "--progress", "none", "--agents", "1", "--slots", "2"])
        .arg("--dir")
        .arg(&pilot)
        .arg(&file));
    assert!(output.status.success());
    let log = std::fs::read_to_string(pilot.join("logs").join("agent-0.log")).unwrap();
    let forgotten: usize = log
        .lines()
        .filter(|line| line.contains("forgetting finished jobs"))
        .filter_map(|line| {
            line.split("jobs=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    // All but the jobs that finished after the last dispatch: at most the agent's
    // credit window, its 2 cores plus a prefetch of up to PREFETCH_ROUNDS rounds.
    let window = 2 + 2 * saker_actors::board::PREFETCH_ROUNDS as usize;
    assert!(
        (jobs - window..jobs).contains(&forgotten),
        "{forgotten} of {jobs} jobs forgotten"
    );
}
