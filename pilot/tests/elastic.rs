//! Elastic pilots on the real local Slurm cluster (scripts/slurm-cluster/up.sh): the
//! root runs here, as on a login node, and asks Slurm for allocations as its queue
//! needs them; their agents join the tree, and idle allocations are released.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::slurm::{allocation_records, cluster, elastic_args, job_fields};
use common::{Service, assert_one_result_per_task, results, run, saker, wait_for};
use serde_json::Value;

/// `saker alloc list`.
fn alloc_list(pilot: &Path) -> String {
    let output = run(saker().args(["alloc", "list", "--dir"]).arg(pilot));
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// 2,000 one-second tasks on an elastic pilot with no node: it asks for three
/// one-node allocations (policy `all`, `--max-nodes 3`), runs every task exactly once
/// on their agents, then, idle, releases them: their jobs end COMPLETED and nothing
/// is left pending or running.
#[test]
fn an_elastic_pilot_grows_to_its_limit_runs_everything_once_and_shrinks_to_nothing() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = elastic_args("3", "all", &[]);
    let began = std::time::Instant::now();
    let service = Service::start_args(dir.path(), &args);
    let pilot = service.pilot.clone();
    let submitted = run(saker()
        .args(["submit", "--dir"])
        .arg(&pilot)
        .args(["--array", "1-2000", "--", "sleep", "1"]));
    assert!(submitted.status.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "every task succeeds");
    eprintln!("all done after {:?}", began.elapsed());
    let records = results(&pilot);
    assert_eq!(records.len(), 2000);
    assert_one_result_per_task(&records, 2000);
    let submitted: BTreeMap<u64, u32> = allocation_records(&pilot)
        .into_iter()
        .filter(|r| !r.ended)
        .map(|r| (r.allocation, r.job_id))
        .collect();
    assert_eq!(submitted.len(), 3, "three allocations: {submitted:?}");
    // The tasks ran on the allocations' agents, numbered from their first nodes.
    let nodes: BTreeSet<u64> = records
        .iter()
        .map(|r| r["node_id"].as_u64().unwrap())
        .collect();
    assert!(
        nodes.len() >= 2,
        "work spread over the allocations: {nodes:?}"
    );

    // Idle: released, each job COMPLETED (its agents were told to stop).
    wait_for("the allocations to end", Duration::from_secs(90), || {
        allocation_records(&pilot)
            .iter()
            .filter(|r| r.ended)
            .count()
            == 3
    });
    eprintln!("released after {:?}", began.elapsed());
    for job in submitted.values() {
        let state = job_fields(&job.to_string())
            .get("JobState")
            .cloned()
            .unwrap_or_default();
        assert_eq!(state, "COMPLETED", "job {job}");
    }
    assert_eq!(alloc_list(&pilot).trim(), "no allocations");
    let left = run(std::process::Command::new("squeue").args(["-h", "-o", "%i %j"]));
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "jobs left in the queue: {}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// The Slurm jobs of allocations `alloc list` shows running.
fn running_jobs(pilot: &Path) -> Vec<String> {
    alloc_list(pilot)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&"running")).then(|| fields[1].to_owned())
        })
        .collect()
}

fn submit_sleeps(pilot: &Path, count: u32, seconds: &str) {
    let submitted = run(saker().args(["submit", "--dir"]).arg(pilot).args([
        "--array",
        &format!("1-{count}"),
        "--",
        "sleep",
        seconds,
    ]));
    assert!(submitted.status.success());
}

/// An allocation cancelled from outside (`scancel`) mid-run: the tasks it was running
/// are replayed on the other, every task has one result, and the pilot asks for a
/// replacement while work remains.
#[test]
fn an_allocation_cancelled_from_outside_is_replaced_and_its_work_replayed() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(dir.path(), &elastic_args("2", "all", &[]));
    let pilot = service.pilot.clone();
    submit_sleeps(&pilot, 400, "0.5");
    wait_for("two running allocations", Duration::from_secs(60), || {
        running_jobs(&pilot).len() == 2
    });
    wait_for("work on both", Duration::from_secs(60), || {
        results(&pilot).len() >= 40
    });
    let victim = running_jobs(&pilot)[0].clone();
    let cancelled = std::process::Command::new("scancel")
        .arg(&victim)
        .status()
        .unwrap();
    assert!(cancelled.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    let records = results(&pilot);
    let not_succeeded: Vec<&Value> = records
        .iter()
        .filter(|r| r["state"] != "succeeded")
        .collect();
    assert!(
        waited.status.success() && not_succeeded.is_empty(),
        "every task succeeds; these did not: {not_succeeded:#?}"
    );
    assert_one_result_per_task(&records, 400);
    let mut lost: BTreeMap<&str, usize> = BTreeMap::new();
    for note in records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .filter(|note| note["end"] == "lost")
    {
        *lost
            .entry(note["reason"].as_str().unwrap_or(""))
            .or_default() += 1;
    }
    eprintln!("lost attempts, by reason: {lost:#?}");
    let replayed: usize = lost.values().sum();
    assert!(
        replayed >= 1,
        "the cancelled allocation's running tasks were replayed"
    );
    let journal = allocation_records(&pilot);
    let ended = journal
        .iter()
        .find(|r| r.ended && r.job_id.to_string() == victim)
        .expect("the cancelled allocation's end is journaled");
    assert!(ended.reason.contains("CANCELLED"), "{ended:?}");
    let submitted = journal.iter().filter(|r| !r.ended).count();
    assert!(submitted >= 3, "a replacement was asked for: {journal:?}");
}

/// The root is SIGKILLed while its allocation runs; restarted with `--resume`, it
/// adopts the allocation (its agents join the new root) instead of asking again, and
/// every task ends once.
#[test]
fn a_resumed_root_adopts_its_running_allocation() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = elastic_args("1", "all", &["--agents-reattach-for", "2m"]);
    let mut service = Service::start_args(dir.path(), &args);
    let pilot = service.pilot.clone();
    submit_sleeps(&pilot, 200, "0.3");
    wait_for("some work done", Duration::from_secs(90), || {
        results(&pilot).len() >= 30
    });
    service.child.kill().unwrap();
    service.child.wait().unwrap();
    let _ = std::fs::remove_file(pilot.join("client.json"));
    std::mem::forget(service); // its shutdown in drop would find nobody
    let mut resumed_args = args.clone();
    resumed_args.push("--resume");
    let resumed = Service::start_args(dir.path(), &resumed_args);
    let waited = run(saker().args(["wait", "--dir"]).arg(&resumed.pilot));
    assert!(waited.status.success(), "every task succeeds");
    let records = results(&pilot);
    assert_one_result_per_task(&records, 200);
    let journal = allocation_records(&pilot);
    let submitted: Vec<_> = journal.iter().filter(|r| !r.ended).collect();
    assert_eq!(
        submitted.len(),
        1,
        "adopted, not asked for again: {journal:?}"
    );
    drop(resumed);
    wait_for(
        "the adopted allocation to end",
        Duration::from_secs(60),
        || {
            let job = submitted[0].job_id.to_string();
            let state = job_fields(&job)
                .get("JobState")
                .cloned()
                .unwrap_or_default();
            state == "COMPLETED" || state == "CANCELLED"
        },
    );
}

/// `saker status --json`.
fn status_json(pilot: &Path) -> Value {
    let output = run(saker().args(["status", "--json", "--dir"]).arg(pilot));
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The local cluster's partition set DOWN (Slurm queues jobs there and starts none)
/// until dropped.
struct PartitionDown;

impl PartitionDown {
    fn new() -> PartitionDown {
        set_partition_state("DOWN");
        PartitionDown
    }
}

impl Drop for PartitionDown {
    fn drop(&mut self) {
        set_partition_state("UP");
    }
}

fn set_partition_state(state: &str) {
    let status = std::process::Command::new("scontrol")
        .args(["update", "PartitionName=debug", &format!("State={state}")])
        .status()
        .unwrap();
    assert!(status.success(), "scontrol update State={state}");
}

/// While Slurm keeps every allocation pending, each policy asks for what it
/// promises in its first five decision rounds, with 8 nodes wanted (`--max-nodes 8`,
/// one-node allocations): `one` one allocation and no more while it pends,
/// `additive` one a round, `exponential` 1, 2, 4 and the one left, `all` eight at
/// once. At shutdown the pending allocations are cancelled.
#[test]
fn each_policy_asks_for_the_allocations_it_promises() {
    if !cluster() {
        return;
    }
    let _down = PartitionDown::new();
    let policies: [(&str, [usize; 5]); 4] = [
        ("one", [1, 0, 0, 0, 0]),
        ("additive", [1, 1, 1, 1, 1]),
        ("exponential", [1, 2, 4, 1, 0]),
        ("all", [8, 0, 0, 0, 0]),
    ];
    for (policy, promised) in policies {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::start_args(dir.path(), &elastic_args("8", policy, &[]));
        let pilot = service.pilot.clone();
        submit_sleeps(&pilot, 1000, "1");
        let mut status = Value::Null;
        wait_for("five decision rounds", Duration::from_secs(60), || {
            status = status_json(&pilot);
            let allocations = status["allocations"].as_array().unwrap();
            status["provisioning_rounds"].as_u64().unwrap() >= 5
                && allocations.iter().all(|a| a["job_id"].is_u64())
        });
        let mut asked = [0usize; 5];
        let mut jobs = Vec::new();
        let pilot_id = status["pilot_id"].as_str().unwrap().to_owned();
        for allocation in status["allocations"].as_array().unwrap() {
            assert_eq!(allocation["state"], "pending", "{policy}: {allocation}");
            let job = allocation["job_id"].as_u64().unwrap().to_string();
            // Named after the pilot's id: a resumed root finds its own jobs so.
            assert_eq!(
                job_fields(&job).get("JobName").cloned().unwrap_or_default(),
                format!("saker-{}-{}", &pilot_id[..12], allocation["allocation"]),
            );
            jobs.push(job);
            // A sixth round may have begun since.
            let round = allocation["round"].as_u64().unwrap() as usize;
            assert!(round >= 1, "{policy}: {allocation}");
            if round <= 5 {
                asked[round - 1] += 1;
            }
        }
        assert_eq!(asked, promised, "{policy}: allocations asked for per round");
        drop(service);
        for job in &jobs {
            let state = job_fields(job).get("JobState").cloned().unwrap_or_default();
            assert_eq!(
                state, "CANCELLED",
                "{policy}: pending job {job} at shutdown"
            );
        }
        let left = run(std::process::Command::new("squeue").args(["-h", "-o", "%i %j"]));
        assert!(
            String::from_utf8_lossy(&left.stdout).trim().is_empty(),
            "{policy}: jobs left in the queue: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}

/// Microseconds since the epoch of a result's timestamp field.
fn micros(record: &Value, field: &str) -> u64 {
    record[field]
        .as_str()
        .unwrap()
        .parse::<saker_client::results::Timestamp>()
        .unwrap()
        .unix_micros()
}

/// A campaign longer than an allocation's one-minute time limit, wanting one node at
/// a time (tasks limited to 2 s and `--grow-after 10m`: 1,200 core-seconds at most
/// fit one 4-core node's ten minutes; room for two): the replacement of an allocation is
/// asked for while it still runs (`--replace-ahead 30s`), the old one drains (no new
/// work a few seconds before its end) and is released before Slurm's limit, with no
/// task lost; the work goes on without a gap, and every task ends once.
#[test]
fn a_campaign_longer_than_an_allocation_is_replaced_ahead_without_a_gap() {
    if !cluster() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = elastic_args(
        "2",
        "additive",
        &[
            "--time",
            "1m",
            "--replace-ahead",
            "30s",
            "--grow-after",
            "10m",
        ],
    );
    let service = Service::start_args(dir.path(), &args);
    let pilot = service.pilot.clone();
    let submitted = run(saker().args(["submit", "--dir"]).arg(&pilot).args([
        "--time-limit",
        "2s",
        "--array",
        "1-600",
        "--",
        "sleep",
        "1",
    ]));
    assert!(submitted.status.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert!(waited.status.success(), "every task succeeds");
    let records = results(&pilot);
    assert_one_result_per_task(&records, 600);

    let journal = allocation_records(&pilot);
    let submitted: Vec<_> = journal.iter().filter(|r| !r.ended).collect();
    assert!(submitted.len() >= 2, "replaced: {journal:?}");
    assert!(
        submitted[1].unix_us - submitted[0].unix_us > 10_000_000,
        "one node wanted at first, the second came as a replacement: {journal:?}"
    );
    let first_end = journal
        .iter()
        .find(|r| r.ended && r.allocation == submitted[0].allocation);
    // Asked for while the first still ran: before its end was journaled, if it ended.
    if let Some(end) = first_end {
        assert!(
            submitted[1].unix_us < end.unix_us,
            "the replacement came after the end: {journal:?}"
        );
    }
    // Drained before Slurm's limit: released once idle, nothing lost to the limit.
    let drained = journal
        .iter()
        .filter(|r| r.ended && r.reason == "drained before its end")
        .count();
    assert!(drained >= 1, "no allocation was drained: {journal:?}");
    let replayed = records
        .iter()
        .flat_map(|r| r["history"].as_array().unwrap())
        .filter(|note| note["end"] == "lost")
        .count();
    assert_eq!(replayed, 0, "work was lost at an allocation's end");
    // No gap: some task ran at every instant from the first start to the last end
    // (allowing a dispatch round trip between tasks).
    let mut spans: Vec<(u64, u64)> = records
        .iter()
        .map(|r| (micros(r, "start_time"), micros(r, "end_time")))
        .collect();
    spans.sort_unstable();
    let mut covered = spans[0].1;
    let mut widest_gap = 0;
    for &(start, end) in &spans[1..] {
        widest_gap = widest_gap.max(start.saturating_sub(covered));
        covered = covered.max(end);
    }
    eprintln!(
        "allocations {}, drained {drained}, widest gap {:.2} s, makespan {:.1} s",
        submitted.len(),
        widest_gap as f64 / 1e6,
        (covered - spans[0].0) as f64 / 1e6
    );
    assert!(
        widest_gap < 2_000_000,
        "work stopped for {:.1} s between allocations: {journal:?}",
        widest_gap as f64 / 1e6
    );
    drop(service);
}
