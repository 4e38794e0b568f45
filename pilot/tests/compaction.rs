//! Journal compaction on a long-lived `saker pilot` (issue 15): results read the same
//! before and after compactions, live and from the journal; a root killed while it
//! compacts resumes with every acknowledged submission and accepted result and runs no
//! finished task again; with `--keep-results` small, the journal's size stays bounded
//! however much work passes through.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

use common::{Service, results, run, saker, wait_for};
use serde_json::Value;

/// Tiny segments, compacting every two, so that a few hundred tasks compact often.
const SMALL_JOURNAL: [&str; 4] = [
    "--journal-segment-bytes",
    "8192",
    "--compact-every-segments",
    "2",
];

fn pilot_args(keep: &str, resume: bool) -> Vec<&str> {
    // A loaded test machine can stall a link for seconds; a killed root's agent is
    // killed by pid (`kill`), so a long timeout delays nothing.
    let mut args = vec![
        "--agents",
        "1",
        "--slots",
        "4",
        "--heartbeat-timeout",
        "60s",
        "--keep-results",
        keep,
    ];
    args.extend(SMALL_JOURNAL);
    if resume {
        args.push("--resume");
    }
    args
}

/// How long a round of work may take on a loaded machine before the test fails
/// (instead of hanging on a pilot that lost its agent).
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` to its end, failing the test if that takes over [`ROUND_TIMEOUT`].
fn bounded(mut command: Command, what: &str) -> Output {
    let (sender, outcome) = mpsc::channel();
    std::thread::spawn(move || sender.send(run(&mut command)));
    outcome
        .recv_timeout(ROUND_TIMEOUT)
        .unwrap_or_else(|_| panic!("{what} did not end within {ROUND_TIMEOUT:?}"))
}

/// Submits `count` tasks that append their task id to `log` as one array job, and
/// waits for them.
fn round(pilot: &Path, count: u32, log: &Path) {
    round_as(pilot, count, log, false);
}

/// [`round`], or with `lines` as a task file of `count` lines (`submit_lines`
/// batches, which compaction folds job by job).
fn round_as(pilot: &Path, count: u32, log: &Path, lines: bool) {
    static ROUNDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let script = format!("echo $SAKER_TASK_ID >> {}", log.display());
    let mut command = saker();
    let number = ROUNDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if lines {
        let file = log.with_file_name(format!("round-{number}.txt"));
        let line = format!("sh -c 'echo $SAKER_TASK_ID >> {}'\n", log.display());
        std::fs::write(&file, line.repeat(count as usize)).unwrap();
        command
            .args(["submit", "--wait", "--dir"])
            .arg(pilot)
            .arg(file);
    } else {
        command
            .args(["submit", "--wait", "--array"])
            .arg(format!("1-{count}"))
            .arg("--dir")
            .arg(pilot)
            .args(["--", "sh", "-c", &script]);
    }
    let output = bounded(command, "a round of work");
    assert!(output.status.success(), "a round of {count} tasks");
}

/// Sizes of the segment files of the pilot's journal, and whether it was compacted
/// (its first segment is no longer segment 1).
fn journal(pilot: &Path) -> (u64, bool) {
    let mut bytes = 0;
    let mut first = u64::MAX;
    for entry in std::fs::read_dir(pilot.join("journal")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(number) = name
            .strip_prefix("journal-")
            .and_then(|rest| rest.strip_suffix(".log"))
        {
            first = first.min(number.parse().unwrap());
            bytes += entry.metadata().map_or(0, |m| m.len());
        }
    }
    (bytes, first > 1)
}

/// SIGKILLs the root and its agent (node 0: `Service::kill_root` looks for node 1).
fn kill_with_agent(service: Service) {
    let agent = common::agent_pid(&service.pilot, 0);
    service.kill_root();
    if let Some(agent) = agent.filter(|&pid| common::alive(pid)) {
        common::sigkill(agent);
    }
}

fn by_task(records: &[Value]) -> BTreeMap<u64, Value> {
    records
        .iter()
        .map(|r| (r["task"].as_u64().unwrap(), r.clone()))
        .collect()
}

#[test]
fn results_read_the_same_before_and_after_compactions_live_from_the_journal_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran.log");
    let service = Service::start_args(dir.path(), &pilot_args("1000000", false));
    let pilot = service.pilot.clone();
    round(&pilot, 40, &log);
    let early = results(&pilot);
    assert_eq!(early.len(), 40);
    for k in 0..5 {
        round_as(&pilot, 60, &log, k % 2 == 0);
    }
    wait_for("a compaction", Duration::from_secs(30), || {
        journal(&pilot).1
    });
    let live = results(&pilot);
    assert_eq!(live.len(), 340);
    let seqs: Vec<u64> = live.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=340).collect::<Vec<_>>(),
        "every result, in order"
    );
    assert_eq!(
        &live[..40],
        &early[..],
        "results before compaction unchanged"
    );

    drop(service); // shuts the pilot down
    assert_eq!(results(&pilot), live, "from the compacted journal");

    let resumed = Service::start_args(dir.path(), &pilot_args("1000000", true));
    assert_eq!(results(&resumed.pilot), live, "from a resumed pilot");
    let task = live[3]["task"].as_u64().unwrap().to_string();
    let one = run(saker()
        .args(["results", "--format", "jsonl", "--task", &task, "--dir"])
        .arg(&pilot));
    assert!(one.status.success());
    let one: Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(one, live[3]);
}

#[test]
fn a_root_killed_while_it_compacts_resumes_with_every_submission_and_result() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran.log");
    let mut accepted: BTreeMap<u64, Value> = BTreeMap::new();
    let mut submitted = 0u64;
    // Keeping the last 50: some results accepted before a kill are kept, most not.
    let mut service = Service::start_args(dir.path(), &pilot_args("50", false));
    let pilot = service.pilot.clone();
    for kill in 0..4 {
        // Work enough to seal and compact, then kill the root at once: with 8 KiB
        // segments it is compacting, or about to, most of the time.
        for k in 0..3 {
            round_as(&pilot, 30, &log, k == 1);
            submitted += 30;
        }
        for record in results(&pilot) {
            accepted.insert(record["task"].as_u64().unwrap(), record);
        }
        let submit = run(saker()
            .args(["submit", "--array", "1-20", "--dir"])
            .arg(&pilot)
            .args(["--", "sh", "-c", "sleep 0.05"]));
        assert!(submit.status.success(), "acknowledged before the kill");
        submitted += 20;
        kill_with_agent(service);
        service = Service::start_args(dir.path(), &pilot_args("50", true));
        let mut wait = saker();
        wait.args(["wait", "--dir"]).arg(&pilot);
        let waited = bounded(wait, "waiting after a resume");
        assert!(waited.status.success(), "after kill {kill}");
    }
    // Every acknowledged task ended; the live results plus those compacted away
    // account for all of them, and those still held read as they were accepted.
    let last = results(&pilot);
    let compacted = run(saker()
        .args(["results", "--format", "jsonl", "--dir"])
        .arg(&pilot));
    let note = String::from_utf8_lossy(&compacted.stderr).into_owned();
    let dropped: u64 = note
        .split_whitespace()
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    assert!(dropped > 0, "compactions dropped results: {note}");
    assert_eq!(last.len() as u64 + dropped, submitted, "{note}");
    let mut kept_from_before = 0;
    for (task, record) in by_task(&last) {
        if let Some(before) = accepted.get(&task) {
            assert_eq!(&record, before, "task {task} kept its accepted result");
            kept_from_before += 1;
        }
    }
    assert!(kept_from_before > 0, "some accepted results were kept");
    // Each task of a round (they log their runs; the jobs in flight at a kill do not)
    // was accepted (`submit --wait` returned) before a kill, and never ran again,
    // whether its result was kept or compacted away.
    let mut runs: BTreeMap<u64, u32> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        *runs.entry(line.parse().unwrap()).or_default() += 1;
    }
    assert_eq!(runs.len(), 4 * 90, "every round's task ran");
    for (task, count) in &runs {
        assert_eq!(*count, 1, "task {task} ran again");
    }
    // A result compacted away says so, with its own error kind.
    let gone = (1..=submitted)
        .find(|task| !by_task(&last).contains_key(task))
        .expect("some result was compacted away");
    let one = run(saker()
        .args(["results", "--task", &gone.to_string(), "--dir"])
        .arg(&pilot));
    assert!(!one.status.success());
    let message = String::from_utf8_lossy(&one.stderr);
    assert!(
        message.contains(&format!(
            "task {gone}'s result was compacted away (--keep-results 50)"
        )),
        "{message}"
    );
}

/// Same work twice, once keeping every result, once the last 100: the compacted
/// journal stays under a bound however many rounds pass.
#[test]
fn with_few_results_kept_the_journal_stays_small_however_long_the_pilot_runs() {
    let mut sizes = Vec::new();
    for keep in ["all", "100"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ran.log");
        let service = Service::start_args(dir.path(), &pilot_args(keep, false));
        let pilot = service.pilot.clone();
        let mut largest = 0;
        for _ in 0..20 {
            round(&pilot, 100, &log);
            largest = largest.max(journal(&pilot).0);
        }
        let end = journal(&pilot).0;
        eprintln!("keep {keep}: journal {end} bytes at the end, {largest} at most, 2000 tasks");
        sizes.push((keep, end, largest));
        drop(service);
    }
    let (_, everything, _) = sizes[0];
    let (_, end, largest) = sizes[1];
    // 100 results, the finished records and two segments of tail, whatever the rounds;
    // at a peak twice that, while a compaction writes the kept copy beside the
    // segments it replaces (they go once it is in place and no reader holds them).
    // The bound was 160 KiB, which peaks of 170-190 KiB crossed in 4 of 6 solo runs
    // before issue 40 as after: timing, not growth.
    assert!(largest < 256 * 1024, "{sizes:?}");
    assert!(end * 4 < everything, "{sizes:?}");
}
