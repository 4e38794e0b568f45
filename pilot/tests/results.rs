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

#[test]
fn one_tasks_result_is_found_live_and_after_the_pilot_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), 2);
    let pilot = service.pilot.clone();
    let output = run(saker()
        .args(["submit", "--wait", "--array", "1-20", "--dir"])
        .arg(&pilot)
        .args(["--", "echo", "line-{index}"]));
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
