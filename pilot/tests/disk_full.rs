//! The pilot directory's disk fills up under a running pilot (a real tmpfs of a few
//! megabytes): submissions are refused whole and never run, running tasks finish and
//! their results wait in memory, the pilot stays up, and once space returns everything
//! acknowledged finishes exactly once.

mod common;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::tmpfs::Tmpfs;
use common::{Service, assert_one_result_per_task, results, run, saker, wait_for};
use serde_json::Value;

fn status(pilot: &std::path::Path) -> Value {
    let output = run(saker().args(["status", "--json", "--dir"]).arg(pilot));
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

fn executed(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_full_disk_refuses_submissions_whole_holds_results_and_loses_nothing() {
    let tmpfs = Tmpfs::mount("8m");
    // Outside the small file system: what ran, and the gate the first tasks wait at.
    let outside = tempfile::tempdir().unwrap();
    let log = outside.path().join("executed.log");
    let gate = outside.path().join("gate");
    let mut pilot = Service::start_args(tmpfs.path(), &["--agents", "1", "--slots", "4"]);
    let dir = pilot.pilot.clone();

    let script = format!(
        "while [ ! -e {gate} ]; do sleep 0.02; done; echo first-{{index}} >> {log}",
        gate = gate.display(),
        log = log.display()
    );
    let first = run(saker()
        .args(["submit", "--array", "1-8", "--dir"])
        .arg(&dir)
        .args(["--", "sh", "-c", &script]));
    assert!(first.status.success());
    wait_for("four tasks running", Duration::from_secs(30), || {
        status(&dir)["running"].as_u64() >= Some(4)
    });

    let filler = tmpfs.fill();
    // Small submissions may still fit the journal's last page. The one whose record
    // finds the disk full is held with it, answered once durable (it may have been
    // dispatched already: refusing it could refuse what runs); every later one is
    // refused at once.
    let mut accepted = Vec::new();
    let mut held = Vec::new();
    let mut refused = 0;
    for attempt in 0..200 {
        let line = format!("echo later-{attempt} >> {}", log.display());
        // Known full before it was sent: it must be answered (refused).
        let full_before = status(&dir)["disk_full"] == true;
        let mut submit = saker()
            .args(["submit", "--dir"])
            .arg(&dir)
            .args(["--", "sh", "-c", &line])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut answered = None;
        wait_for(
            "the submission answered or held",
            Duration::from_secs(30),
            || {
                answered = submit.try_wait().unwrap();
                answered.is_some() || (!full_before && status(&dir)["disk_full"] == true)
            },
        );
        match answered {
            Some(exit) if exit.success() => {
                assert!(held.is_empty() && refused == 0, "taken with the disk full");
                accepted.push(attempt);
            }
            Some(_) => {
                let mut stderr = String::new();
                std::io::Read::read_to_string(&mut submit.stderr.take().unwrap(), &mut stderr)
                    .unwrap();
                assert!(stderr.contains("disk_full"), "{stderr}");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            None => held.push((attempt, submit)),
        }
    }
    eprintln!(
        "with the disk filling: {} accepted, {} held, {refused} refused",
        accepted.len(),
        held.len()
    );
    assert_eq!(refused, 3, "the journal found its disk full");
    assert!(
        held.len() <= 1,
        "one submission at most meets the full disk"
    );
    let full = status(&dir);
    assert_eq!(full["disk_full"], true, "{full}");

    // The running tasks finish; their results wait for space, and nothing new starts.
    std::fs::write(&gate, b"").unwrap();
    wait_for("the gated tasks to end", Duration::from_secs(30), || {
        executed(&log).len() >= 8
    });
    wait_for("their slots to be free", Duration::from_secs(30), || {
        status(&dir)["running"] == 0
    });
    let waiting = status(&dir);
    assert_eq!(waiting["disk_full"], true);
    assert!(
        waiting["succeeded"].as_u64() < Some(8 + accepted.len() as u64),
        "some results wait for space: {waiting}"
    );
    assert!(
        executed(&log).iter().all(|line| line.starts_with("first-")),
        "no attempt started with the disk full"
    );
    assert!(pilot.child.try_wait().unwrap().is_none(), "the pilot is up");

    // Space returns: everything acknowledged finishes, once; nothing refused ever ran.
    std::fs::remove_file(filler).unwrap();
    for (attempt, submit) in held {
        // Acknowledged once durable; or, had another record found the disk full
        // first, refused: then it must never run.
        let output = submit.wait_with_output().unwrap();
        if output.status.success() {
            accepted.push(attempt);
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("disk_full"), "{stderr}");
        }
    }
    let waited = run(saker().args(["wait", "--dir"]).arg(&dir));
    assert!(waited.status.success());
    assert_eq!(status(&dir)["disk_full"], false);
    let records = results(&dir);
    assert_one_result_per_task(&records, 8 + accepted.len());
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let ran: BTreeSet<String> = executed(&log).into_iter().collect();
    let expected: BTreeSet<String> = (1..=8)
        .map(|index| format!("first-{index}"))
        .chain(accepted.iter().map(|attempt| format!("later-{attempt}")))
        .collect();
    assert_eq!(
        ran, expected,
        "what was acknowledged ran, what was refused did not"
    );
    assert_eq!(executed(&log).len(), expected.len(), "each once");

    let again = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&dir)
        .args(["--", "true"]));
    assert!(again.status.success(), "submissions are taken again");
    assert!(pilot.child.try_wait().unwrap().is_none());
}

/// Tasks write more output than the disk has left, and the agent's own log is on the
/// same full disk: the agent stays up (a log line that cannot be written is dropped;
/// output past the inline part that cannot be spilled is cut), and once space
/// returns every task ends once and `wait` ends. (It used to end the agent: the
/// logger's own error report panicked on a full stderr, and nothing replaced it.)
#[test]
fn an_agent_outlives_a_full_disk_under_its_output_and_its_log() {
    let tmpfs = Tmpfs::mount("32m");
    let pilot = Service::start_args(tmpfs.path(), &["--agents", "1", "--slots", "2"]);
    let dir = pilot.pilot.clone();
    // 400 tasks of 40 kB of output each.
    let submitted = run(saker()
        .args(["submit", "--array", "1-400", "--dir"])
        .arg(&dir)
        .args(["--", "sh", "-c", "head -c 40000 /dev/zero | tr '\\0' x"]));
    assert!(submitted.status.success());
    wait_for("some tasks to end", Duration::from_secs(60), || {
        status(&dir)["succeeded"].as_u64() >= Some(20)
    });
    let filler = tmpfs.fill();
    wait_for(
        "the journal to find the disk full",
        Duration::from_secs(60),
        || status(&dir)["disk_full"] == true,
    );
    // Space returns.
    std::fs::remove_file(filler).unwrap();
    let mut waiting = saker()
        .args(["wait", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut waited = None;
    wait_for("every task to end", Duration::from_secs(120), || {
        waited = waiting.try_wait().unwrap();
        waited.is_some()
    });
    assert!(waited.unwrap().success());
    let records = results(&dir);
    assert_one_result_per_task(&records, 400);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    let end = status(&dir);
    assert_eq!(end["agents"], 1, "the agent never left: {end}");
    assert_eq!(end["replays"], 0, "{end}");
}
