//! A client following results across a crash of the root: `saker results --follow`
//! reconnects to the resumed pilot and continues after the last result it showed,
//! with no gap and no repeat.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{run, saker, wait_for};

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn pilot(dir: &std::path::Path, resume: bool) -> Reaped {
    let mut command = saker();
    command
        .args([
            "pilot",
            "--no-sync",
            "--agents",
            "1",
            "--slots",
            "2",
            "--dir",
        ])
        .arg(dir);
    if resume {
        command.arg("--resume");
    }
    Reaped(
        command
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn submit(dir: &std::path::Path, array: &str) {
    let output = run(saker()
        .args(["submit", "--wait", "--array", array, "--dir"])
        .arg(dir)
        .args(["--", "true"]));
    assert!(output.status.success());
}

#[test]
fn a_follower_continues_across_a_root_crash_without_gaps_or_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let pilot_dir = dir.path().join("pilot");
    let mut first = pilot(&pilot_dir, false);
    wait_for("the first pilot", Duration::from_secs(60), || {
        pilot_dir.join("client.json").exists()
    });
    submit(&pilot_dir, "1-20");

    let out = dir.path().join("followed.jsonl");
    let mut follower = Reaped(
        saker()
            .args(["results", "--follow", "--format", "jsonl", "--dir"])
            .arg(&pilot_dir)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the first 20 results", Duration::from_secs(60), || {
        lines(&out).len() == 20
    });

    // The root dies without a word; its agent is stopped too.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let _ = Command::new("pkill")
        .args([
            "-KILL",
            "-f",
            &format!("agent --dir {}", pilot_dir.display()),
        ])
        .status();

    let stale = std::fs::read_to_string(pilot_dir.join("client.json")).unwrap();
    let _second = pilot(&pilot_dir, true);
    wait_for(
        "the resumed pilot's endpoint",
        Duration::from_secs(60),
        || std::fs::read_to_string(pilot_dir.join("client.json")).is_ok_and(|now| now != stale),
    );
    submit(&pilot_dir, "1-10");
    wait_for("all 30 results", Duration::from_secs(60), || {
        lines(&out).len() >= 30
    });

    let stopped = run(saker().args(["shutdown", "--dir"]).arg(&pilot_dir));
    assert!(stopped.status.success());
    let status = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = follower.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the follower did not end with the pilot"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(
        status.success(),
        "a pilot that shuts down ends the stream cleanly"
    );
    let seqs: Vec<u64> = lines(&out)
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=30).collect::<Vec<_>>(), "no gap, no repeat");
}
