//! A task file's plain lines travel as `submit_lines` batches (one set of options, a
//! few bytes per line) and JSON lines as whole jobs: every line still becomes its own
//! job, in file order, meaning exactly what it says, and survives a root crash.

mod common;

use std::time::Duration;

use common::Service;
use common::{assert_one_result_per_task, results, run, saker, wait_for};

/// The stdout of each job's result, by job id.
fn outputs(pilot: &std::path::Path) -> Vec<(u64, String)> {
    let mut outputs: Vec<(u64, String)> = results(pilot)
        .iter()
        .map(|r| {
            (
                r["job"].as_u64().unwrap(),
                r["stdout"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    outputs.sort();
    outputs
}

#[test]
fn plain_and_json_lines_run_as_their_own_jobs_in_file_order_and_survive_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 4);
    let pilot = service.pilot.clone();
    let mut text = String::from(
        "# a comment, then the tasks\n\
         echo a \"b c\"\n\
         GREETING=hi sh -c 'echo $GREETING $BASE'\n\
         {\"argv\": [\"sh\", \"-c\", \"echo json ${BASE:-unset}\"], \"priority\": 3}\n\
         \n\
         sh -c 'echo $BASE'\n",
    );
    for k in 0..300 {
        text.push_str(&format!("echo line{k}\n"));
    }
    let file = dir.path().join("tasks.txt");
    std::fs::write(&file, &text).unwrap();

    let submitted = run(saker()
        .args(["submit", "--env", "BASE=1", "--dir"])
        .arg(&pilot)
        .arg(&file));
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let expected: String = (1..=304)
        .map(|k| format!("job {k} tasks 1 first_task {k}\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&submitted.stdout), expected);

    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success());
    let before = outputs(&pilot);
    assert_one_result_per_task(&results(&pilot), 304);
    assert_eq!(before[0], (1, "a b c\n".to_owned()));
    // A line's variables add to the options'.
    assert_eq!(before[1], (2, "hi 1\n".to_owned()));
    // A JSON line means exactly what it says: the CLI's options are not its.
    assert_eq!(before[2], (3, "json unset\n".to_owned()));
    assert_eq!(before[3], (4, "1\n".to_owned()));
    assert_eq!(before[303], (304, "line299\n".to_owned()));

    // The root dies; the resumed one knows every job and runs none again.
    service.kill_root();
    let resumed = Service::start_with(dir.path(), 4, true);
    wait_for(
        "the resumed root's results",
        Duration::from_secs(30),
        || results(&resumed.pilot).len() == 304,
    );
    assert_eq!(outputs(&resumed.pilot), before);
    let more = dir.path().join("more.txt");
    std::fs::write(&more, "echo after\n").unwrap();
    let submitted = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&resumed.pilot)
        .arg(&more));
    assert!(submitted.status.success());
    assert!(
        String::from_utf8_lossy(&submitted.stdout).starts_with("job 305 tasks 1 first_task 305\n")
    );
    let after = outputs(&resumed.pilot);
    assert_eq!(after.len(), 305);
    assert_eq!(after[304], (305, "after\n".to_owned()));
}

#[test]
fn a_bad_line_refuses_the_file_before_anything_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let file = dir.path().join("tasks.txt");
    std::fs::write(&file, "echo fine\necho 'unterminated\n").unwrap();
    let refused = run(saker()
        .args(["submit", "--dir"])
        .arg(&service.pilot)
        .arg(&file));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("tasks.txt:2"), "{stderr}");
    let status = run(saker().args(["status", "--dir"]).arg(&service.pilot));
    assert!(String::from_utf8_lossy(&status.stdout).contains("jobs      0"));
}
