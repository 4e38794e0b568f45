//! `saker results`: every result, or one task's (`--task`), from a live pilot (which
//! reads them back from its journal) and from a stopped pilot's journal.

mod common;

use common::{Service, run, saker};
use serde_json::Value;

fn lines(output: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a json line"))
        .collect()
}

fn results(pilot: &std::path::Path, tasks: &[&str]) -> std::process::Output {
    let mut command = saker();
    command
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(pilot);
    for task in tasks {
        command.args(["--task", task]);
    }
    run(&mut command)
}

/// `saker submit --wait ARGS` to the pilot in `pilot`.
fn submit_wait(pilot: &std::path::Path, args: &[&str]) -> std::process::Output {
    run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(pilot)
        .args(args))
}

#[test]
fn one_tasks_result_is_found_live_and_after_the_pilot_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    let output = submit_wait(&pilot, &["--array", "1-20", "--", "echo", "line-{index}"]);
    assert!(output.status.success());

    let check = |live: bool| {
        let all = results(&pilot, &[]);
        assert!(all.status.success());
        let all = lines(&all);
        assert_eq!(all.len(), 20, "live: {live}");
        let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in seq order");
        let one = results(&pilot, &["7", "3"]);
        assert!(one.status.success(), "live: {live}");
        let found: Vec<(u64, String)> = lines(&one)
            .iter()
            .map(|r| {
                (
                    r["task"].as_u64().unwrap(),
                    r["stdout"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let mut expected = vec![(7, "line-7\n".to_owned()), (3, "line-3\n".to_owned())];
        if !live {
            expected.reverse(); // a stopped pilot's results come in journal order
        }
        assert_eq!(found, expected, "live: {live}");
        let missing = results(&pilot, &["999", "7"]);
        assert_eq!(missing.status.code(), Some(1), "live: {live}");
        assert!(String::from_utf8_lossy(&missing.stderr).contains("999"));
        assert_eq!(lines(&missing).len(), 1, "what was found is still shown");
    };
    check(true);
    drop(service);
    check(false);
}

#[test]
fn csv_has_a_row_per_result_matching_the_jsonl_and_quotes_awkward_output() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    // Output with a comma, quotes and a newline, and a failure with its reason.
    let output = submit_wait(
        &pilot,
        &[
            "--array",
            "1-5",
            "--",
            "sh",
            "-c",
            r#"printf 'a,"b"\nline %s\n' {index}; test {index} -ne 4"#,
        ],
    );
    assert!(!output.status.success(), "task 4 fails");

    let jsonl = lines(&results(&pilot, &[]));
    let csv_output = run(saker()
        .args(["results", "--format", "csv", "--dir"])
        .arg(&pilot));
    assert!(csv_output.status.success());
    let mut reader = csv::Reader::from_reader(csv_output.stdout.as_slice());
    let header: Vec<String> = reader
        .headers()
        .unwrap()
        .iter()
        .map(str::to_owned)
        .collect();
    let column = |name: &str| header.iter().position(|c| c == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 5);
    for (row, json) in rows.iter().zip(&jsonl) {
        assert_eq!(row[column("task")], json["task"].to_string());
        assert_eq!(row[column("state")], *json["state"].as_str().unwrap());
        assert_eq!(row[column("exit_code")], json["exit_code"].to_string());
        assert_eq!(row[column("stdout")], *json["stdout"].as_str().unwrap());
        assert_eq!(row[column("end_time")], *json["end_time"].as_str().unwrap());
        let run: f64 = row[column("run_seconds")].parse().unwrap();
        assert!((0.0..60.0).contains(&run), "{run}");
    }
    let index = |row: &csv::StringRecord| row[column("index")].to_owned();
    let failed: Vec<String> = rows
        .iter()
        .filter(|row| &row[column("state")] == "failed")
        .map(index)
        .collect();
    assert_eq!(failed, ["4"]);
    let fourth = rows.iter().find(|row| index(row) == "4").unwrap();
    assert_eq!(&fourth[column("stdout")], "a,\"b\"\nline 4\n");
}

#[test]
fn status_shows_where_the_tasks_time_went_stage_by_stage() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    // Eight tasks of 0.2 s on 2 slots: four waves, so waits reach 0.6 s.
    let output = submit_wait(&pilot, &["--array", "1-8", "--", "sleep", "0.2"]);
    assert!(output.status.success());

    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    assert!(status.status.success());
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    let stage = |name: &str| -> Vec<String> {
        text.lines()
            .find(|line| line.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row in:\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    for name in ["wait", "queue", "launch", "run", "deliver", "total"] {
        assert_eq!(stage(name)[1], "8", "{name} counts every task:\n{text}");
    }
    // Shown as e.g. `850µs`, `201.3ms`, `1.20s`: every run took its 0.2 s and not
    // much more.
    let millis = |cell: &str| -> f64 {
        if let Some(us) = cell.strip_suffix("µs") {
            us.parse::<f64>().unwrap() / 1e3
        } else if let Some(ms) = cell.strip_suffix("ms") {
            ms.parse().unwrap()
        } else {
            cell.strip_suffix('s').unwrap().parse::<f64>().unwrap() * 1e3
        }
    };
    let run_p50 = millis(&stage("run")[2]);
    assert!(
        (200.0..400.0).contains(&run_p50),
        "run p50 {run_p50} ms:\n{text}"
    );
    let wait_max = millis(&stage("wait")[5]);
    assert!(
        wait_max >= 550.0,
        "the last wave waited three runs:\n{text}"
    );
    // The wait's two parts (queue: to the root's dispatch; launch: on to the start)
    // are each at most the whole, at every percentile shown.
    for column in 2..=5 {
        let whole = millis(&stage("wait")[column]);
        for part in ["queue", "launch"] {
            let value = millis(&stage(part)[column]);
            assert!(value <= whole * 1.02 + 0.1, "{part} beyond wait:\n{text}");
        }
    }
    assert!(text.contains("over the last minute"), "{text}");
}
