//! Function tasks end to end: a task file of Python calls run by `saker run` on the
//! real Python worker (`python3 -m saker.worker` from this repository's `python/`),
//! through the root, the QUIC tree and the agents' persistent workers.

mod common;

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::{results, run, saker, wait_for};
use serde_json::Value;

/// Functions the calls name: pickled by reference, so the workers import this module.
const HELPERS: &str = r#"
import os, time

def square(x):
    return "pid=%d value=%d" % (os.getpid(), x * x)

def fail(message):
    raise ValueError(message)

def crash_once(marker):
    # The first attempt kills its worker; the replay finds the marker and answers.
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    return "pid=%d replayed" % os.getpid()

def hang():
    time.sleep(600)
"#;

/// Writes one JSON spec per call (pickles made by Python, as a client would make them).
const MAKE_TASKS: &str = r#"
import base64, json, pickle, sys
import helpers
def spec(fn, *args, **options):
    payload = b"\x01" + pickle.dumps((fn, args, {}))
    options["function"] = {"kind": "python", "payload": base64.b64encode(payload).decode()}
    return json.dumps(options)
lines = [spec(helpers.square, i) for i in range(12)]
lines.append(spec(helpers.fail, "bad input", max_retries=1))
lines.append(spec(helpers.crash_once, sys.argv[1]))
lines.append(spec(helpers.hang, time_limit="1s"))
print("\n".join(lines))
"#;

fn python_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../python")
}

fn output_text(result: &Value) -> Option<String> {
    let output = result["output"].as_str()?;
    let bytes = STANDARD.decode(output).expect("base64 output");
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn pid_of(text: &str) -> u32 {
    let start = text.find("pid=").expect("a pid") + 4;
    text[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_task_file_of_calls_runs_on_reused_workers_with_raises_replays_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("helpers.py"), HELPERS).unwrap();
    let pythonpath = format!("{}:{}", python_dir().display(), dir.path().display());
    let marker = dir.path().join("crashed-once");
    let made = std::process::Command::new("python3")
        .args(["-c", MAKE_TASKS])
        .arg(&marker)
        .env("PYTHONPATH", &pythonpath)
        .output()
        .expect("python3 runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let tasks = dir.path().join("calls.txt");
    std::fs::write(&tasks, &made.stdout).unwrap();
    let pilot = dir.path().join("pilot");

    let output = run(saker()
        .args(["run", "--slots", "2", "--progress", "none", "--no-sync"])
        .args(["--worker", "python=python3 -m saker.worker", "--dir"])
        .arg(&pilot)
        .arg(&tasks)
        .env("PYTHONPATH", &pythonpath));
    assert!(!output.status.success(), "a failed call fails the run");

    let records = results(&pilot);
    assert_eq!(records.len(), 15, "one result per call");
    let by_task = |task: u64| -> &Value {
        records
            .iter()
            .find(|r| r["task"] == task)
            .unwrap_or_else(|| panic!("task {task}"))
    };
    let mut pids = std::collections::BTreeSet::new();
    for task in 1..=12u64 {
        let result = by_task(task);
        assert_eq!(result["state"], "succeeded", "{result}");
        let text = output_text(result).expect("an answer");
        let value = (task - 1) * (task - 1);
        assert!(text.contains(&format!("value={value}")), "{text}");
        pids.insert(pid_of(&text));
    }
    assert!(pids.len() <= 2, "at most one worker per slot: {pids:?}");

    let raised = by_task(13);
    assert_eq!(raised["state"], "failed");
    assert_eq!(raised["reason"], "raised: ValueError: bad input");
    assert_eq!(raised["attempts"], 2, "a raise is retried like a failure");
    let exception = output_text(raised).expect("the exception travels back");
    assert!(exception.contains("bad input"), "{exception}");

    let replayed = by_task(14);
    assert_eq!(replayed["state"], "succeeded", "{replayed}");
    assert_eq!(replayed["history"][0]["end"], "lost");
    let reason = replayed["history"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("exit status 9"), "{reason}");
    assert!(output_text(replayed).unwrap().contains("replayed"));

    let hung = by_task(15);
    assert_eq!(hung["state"], "failed");
    assert_eq!(hung["reason"], "time limit exceeded");
    assert_eq!(hung["output"], Value::Null);

    // No worker outlives the pilot.
    let mut every_pid = pids;
    every_pid.insert(pid_of(&output_text(replayed).unwrap()));
    for pid in every_pid {
        wait_for(
            &format!("worker {pid} to end"),
            std::time::Duration::from_secs(10),
            || !Path::new(&format!("/proc/{pid}")).exists(),
        );
    }
    let logs = std::fs::read_dir(pilot.join("workers")).unwrap().count();
    assert!(logs >= 1, "workers log under the pilot directory");
}
