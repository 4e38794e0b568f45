//! Chaos at the root: tasks run while the root is SIGKILLed again and again, at
//! random moments: most kills leave a standby to take over, every third leaves none
//! and the root is resumed (`--resume`). The tasks count their own starts: each
//! acknowledged task starts exactly once, none is lost, and each has exactly one
//! accepted result.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_one_result_per_task, results, root_pid, run, saker, sigkill, standbys, wait_for,
};

/// Tasks of each submission; another is submitted whenever fewer than `LOW` are left
/// to start, so that a slow machine's kills never outrun the work.
const BATCH: u32 = 600;
const LOW: usize = 150;
const KILLS: u32 = 21;
/// Four agents of four slots (`--slots` counts the pilot's).
const SHAPE: [&str; 6] = ["--agents", "4", "--slots", "16", "--standby", "1"];

/// SplitMix64: the schedule of kills is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// Every root this test started is killed when it ends, pass or fail; standbys and
/// agents follow the pilot's shutdown.
struct Roots {
    pilot: std::path::PathBuf,
    children: Vec<Child>,
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = run(saker().args(["shutdown", "--dir"]).arg(&self.pilot));
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// (array index, submission) of each start the tasks logged so far.
fn starts(log: &Path) -> Vec<(u32, u32)> {
    common::executions(log)
}

/// Submits batch `batch`: tasks of 0.1 to 0.5 s, so that at every kill some run and
/// some wait in the agents' queues, each logging its start first.
fn submit(pilot: &Path, log: &Path, batch: u32) {
    let script = format!(
        "echo {{index}} {batch} >> {}; sleep 0.$(( {{index}} % 5 + 1 ))",
        log.display()
    );
    let submitted = run(saker()
        .args(["submit", "--array", &format!("1-{BATCH}"), "--dir"])
        .arg(pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(submitted.status.success(), "{submitted:?}");
}

fn answers(pilot: &Path) -> bool {
    saker()
        .args(["status", "--dir"])
        .arg(pilot)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Starts a root (resumed, with `resume`), its stderr appended to `log`.
fn start_root(pilot: &Path, resume: bool, log: &Path) -> Child {
    let mut command = saker();
    command.arg("pilot").args(SHAPE).arg("--dir").arg(pilot);
    if resume {
        command.arg("--resume");
    }
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    command
        .stdin(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap()
}

/// The roots' stderr and the pilot's own logs (standbys, agents): for a failure.
fn logs(temp: &Path) -> String {
    let mut text = String::new();
    let mut files = vec![temp.join("roots.log")];
    if let Ok(entries) = std::fs::read_dir(temp.join("pilot").join("logs")) {
        files.extend(entries.flatten().map(|entry| entry.path()));
    }
    files.sort();
    for file in files {
        let content = std::fs::read_to_string(&file).unwrap_or_default();
        let lines: Vec<&str> = content.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        text.push_str(&format!("--- {}\n{tail}\n", file.display()));
    }
    text
}

#[test]
fn root_kills_with_standbys_and_resumes_start_no_task_twice() {
    let temp = tempfile::tempdir().unwrap();
    let pilot = temp.path().join("pilot");
    let log = temp.path().join("started.log");
    let roots_log = temp.path().join("roots.log");
    let mut rng = Rng(40);
    let mut roots = Roots {
        pilot: pilot.clone(),
        children: vec![start_root(&pilot, false, &roots_log)],
    };
    wait_for("the pilot", Duration::from_secs(30), || answers(&pilot));

    let mut batches = 0;
    submit(&pilot, &log, batches);
    batches += 1;
    wait_for("work to flow", Duration::from_secs(60), || {
        starts(&log).len() >= 50
    });

    let mut resumes = 0;
    for kill in 1..=KILLS {
        if (batches * BATCH) as usize - starts(&log).len() < LOW {
            submit(&pilot, &log, batches);
            batches += 1;
        }
        // The new root has its standby before the next kill (or none, to resume).
        wait_for("a standby", Duration::from_secs(60), || {
            standbys(&pilot).len() == 1
        });
        std::thread::sleep(Duration::from_millis(100 + rng.below(500)));
        let root = root_pid(&pilot).expect("a root holds the lock");
        let resume = kill % 3 == 0;
        if resume {
            for standby in standbys(&pilot) {
                sigkill(standby);
            }
        }
        sigkill(root);
        let killed = Instant::now();
        wait_for("the root to die", Duration::from_secs(10), || {
            !common::alive(root)
        });
        if resume {
            // The agents keep their tasks running and wait for a root.
            let _ = std::fs::remove_file(pilot.join("client.json"));
            roots.children.push(start_root(&pilot, true, &roots_log));
            resumes += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(root_pid(&pilot).is_some_and(|pid| pid != root) && answers(&pilot)) {
            assert!(
                Instant::now() < deadline,
                "no root answered after kill {kill}:\n{}",
                logs(temp.path())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "kill {kill} ({}): answered after {:?}, {} started",
            if resume { "resume" } else { "standby" },
            killed.elapsed(),
            starts(&log).len()
        );
    }
    assert_eq!(resumes, KILLS / 3);

    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "{waited:?}");
    let records = results(&pilot);
    let status = run(saker().args(["status", "--dir"]).arg(&pilot));
    eprintln!("{}", String::from_utf8_lossy(&status.stdout));

    let tasks = (batches * BATCH) as usize;
    assert_one_result_per_task(&records, tasks);
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
    let mut started = starts(&log);
    started.sort_unstable();
    let twice: Vec<_> = started
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    assert!(twice.is_empty(), "started twice: {twice:?}");
    let mut every: Vec<(u32, u32)> = (0..batches)
        .flat_map(|batch| (1..=BATCH).map(move |index| (index, batch)))
        .collect();
    every.sort_unstable();
    assert_eq!(started, every, "every task started");
    // The pilot's own record agrees: no task needed a second attempt.
    let replayed: Vec<_> = records
        .iter()
        .filter(|r| !r["history"].as_array().unwrap().is_empty())
        .collect();
    assert!(replayed.is_empty(), "replayed: {replayed:?}");
}
