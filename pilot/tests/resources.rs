//! What runs where, by resources: GPUs bound to tasks, memory placed and limited, named
//! resources, CPU pinning; and requests no node could hold refused at submission.
//! Real agents and real processes; each task reports what it saw and when.

mod common;

use std::path::Path;

use common::{results, run, saker};
use serde_json::Value;

/// One task's view: when it ran (ns since the epoch, read inside the task) and the
/// words it printed in between.
#[derive(Debug)]
struct Seen {
    start: u128,
    end: u128,
    words: Vec<String>,
}

/// Prints `start-ns WORDS…` then, after `sleep`, `end-ns`: the interval lies inside
/// the task's hold on its resources.
fn reporting(words: &str, sleep: &str) -> String {
    format!("echo $(date +%s%N) {words}; sleep {sleep}; date +%s%N")
}

fn seen(record: &Value) -> Seen {
    let stdout = record["stdout"].as_str().expect("inline stdout");
    let mut lines = stdout.lines();
    let mut first = lines.next().expect("a first line").split(' ');
    let start = first.next().unwrap().parse().expect("a start time");
    let words = first.map(str::to_owned).collect();
    let end = lines.next().expect("an end line").trim().parse().unwrap();
    Seen { start, end, words }
}

fn all_seen(pilot: &Path, count: usize) -> Vec<Seen> {
    let records = results(pilot);
    assert_eq!(records.len(), count);
    for record in &records {
        assert_eq!(record["state"], "succeeded", "{record}");
    }
    records.iter().map(seen).collect()
}

fn overlap(a: &Seen, b: &Seen) -> bool {
    a.start < b.end && b.start < a.end
}

/// The most intervals that overlap at one instant.
fn most_at_once(seen: &[Seen]) -> usize {
    let mut events: Vec<(u128, i32)> = seen
        .iter()
        .flat_map(|s| [(s.start, 1), (s.end, -1)])
        .collect();
    // An end before a start at the same instant.
    events.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    most as usize
}

fn pilot_run(pilot: &Path, flags: &[&str], command: &[&str]) -> std::process::Output {
    run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--dir"])
        .arg(pilot)
        .args(flags)
        .arg("--")
        .args(command))
}

#[test]
fn on_a_node_declared_with_four_gpus_every_task_sees_only_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.txt");
    let script = reporting(
        "gpus=$CUDA_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES saker=$SAKER_GPUS",
        "0.2",
    );
    let mut lines = String::new();
    for (count, gpus) in [(12, 1), (6, 2), (6, 0)] {
        for _ in 0..count {
            let spec = serde_json::json!({"argv": ["sh", "-c", script], "gpus": gpus});
            lines.push_str(&format!("{spec}\n"));
        }
    }
    std::fs::write(&tasks, lines).unwrap();
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--slots", "8"])
        .args(["--gpus-per-node", "4", "--dir"])
        .arg(&pilot)
        .arg(&tasks));
    assert!(output.status.success());

    let seen = all_seen(&pilot, 24);
    let mut used = std::collections::BTreeSet::new();
    let gpus_of = |s: &Seen| -> Vec<String> {
        let value = |key: &str| {
            s.words
                .iter()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_else(|| panic!("{key} in {:?}", s.words))
                .to_owned()
        };
        let (cuda, rocr, saker) = (value("gpus="), value("rocr="), value("saker="));
        assert_eq!(
            (&cuda, &rocr),
            (&saker, &saker),
            "every variable names the same"
        );
        cuda.split(',')
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut counts = [0; 3];
    for task in &seen {
        let gpus = gpus_of(task);
        counts[gpus.len()] += 1;
        for gpu in &gpus {
            assert!(["0", "1", "2", "3"].contains(&gpu.as_str()), "{gpu}");
            used.insert(gpu.clone());
        }
    }
    assert_eq!(counts, [6, 12, 6], "tasks asking none see none");
    assert_eq!(used.len(), 4, "every GPU was used");
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            let shared = gpus_of(a).iter().any(|g| gpus_of(b).contains(g));
            assert!(
                !(shared && overlap(a, b)),
                "two tasks held one GPU at once: {a:?} {b:?}"
            );
        }
    }
    let gpu_tasks: Vec<Seen> = seen
        .into_iter()
        .filter(|s| !s.words[0].ends_with('='))
        .collect();
    let gpus_at_once = most_at_once(&gpu_tasks);
    assert!(
        gpus_at_once <= 4,
        "{gpus_at_once} GPU tasks at once on 4 GPUs"
    );
}

#[test]
fn memory_places_tasks_where_it_fits_and_a_task_past_its_limit_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let script = reporting("", "0.3");
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--slots", "8"])
        .args(["--mem-per-node", "1G", "--mem", "400M", "--array", "1-8"])
        .arg("--dir")
        .arg(dir.path().join("placed"))
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    let seen = all_seen(&dir.path().join("placed"), 8);
    assert_eq!(
        most_at_once(&seen),
        2,
        "two of 400 MiB fit in 1 GiB, not three"
    );

    // Past its limit: killed, and said so, where the agent can limit memory; also
    // when the process killed is a shell's child (the shell then exits 137).
    let greedy = "import sys; sys.stdout.write(str(len(bytearray(300 << 20))))";
    let wrapped = format!("python3 -c '{greedy}'; exit $?");
    for (case, command) in [
        (&["python3", "-c", greedy][..], "python"),
        (&["sh", "-c", wrapped.as_str()][..], "shell"),
    ] {
        let pilot = dir.path().join(command);
        // The agent says at `info` whether it limits memory.
        let output = run(saker()
            .env("SAKER_LOG", "info")
            .args([
                "run",
                "--progress",
                "none",
                "--no-sync",
                "--mem",
                "64M",
                "--dir",
            ])
            .arg(&pilot)
            .arg("--")
            .args(case));
        let log = std::fs::read_to_string(pilot.join("logs/agent-0.log")).unwrap();
        let record = &results(&pilot)[0];
        if log.contains("memory limits: a cgroup per slot") {
            assert_eq!(output.status.code(), Some(1), "{command}");
            assert_eq!(record["state"], "failed");
            let reason = record["reason"].as_str().unwrap();
            assert!(
                reason.contains("out of memory: killed at its limit of 64 MiB"),
                "{command}: {reason}"
            );
        } else {
            // The documented fallback: accounted, not limited, and the log says why.
            assert!(log.contains("memory is accounted but not limited"), "{log}");
            assert_eq!(record["state"], "succeeded");
        }
    }
}

#[test]
fn named_resources_bound_what_runs_at_once_and_impossible_asks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let script = reporting("", "0.3");
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--slots", "8"])
        .args(["--node-resource", "licence=2", "--resource", "licence=1"])
        .args(["--array", "1-8", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    assert_eq!(most_at_once(&all_seen(&pilot, 8)), 2, "two licences");

    for (case, (flags, said)) in [
        (
            &["--node-resource", "licence=2", "--resource", "licence=3"][..],
            "it asks for 3 of resource \"licence\" per task; the most a node offers is 2",
        ),
        (
            &["--resource", "scratch=1"][..],
            "it asks for resource \"scratch\", which no node offers",
        ),
        (
            &["--gpus", "1"][..],
            "it asks for 1 GPU per task; no node has more than 0",
        ),
        (
            &["--mem-per-node", "1G", "--mem", "2G"][..],
            "it asks for 2048 MiB of memory per task; the most a node offers is 1024 MiB",
        ),
        (
            &["--slots", "2", "--cores", "3"][..],
            "it asks for 3 cores per task; the widest node has 2",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let refused = dir.path().join(format!("refused-{case}"));
        let output = pilot_run(&refused, flags, &["true"]);
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{flags:?}: {stderr}");
    }
}

/// The CPUs a task may run on, from its own `/proc/self/status`.
const CPUS_SEEN: &str = "cpus=$SAKER_CPUS allowed=$(sed -n 's/^Cpus_allowed_list:\\t//p' /proc/self/status) omp=$OMP_NUM_THREADS";

#[test]
fn tasks_are_pinned_to_cores_of_their_own_when_each_slot_has_a_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let script = reporting(CPUS_SEEN, "0.2");
    let slots = cpus.to_string();
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--slots", &slots])
        .args(["--array", "1-12", "--dir"])
        .arg(&pilot)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    let seen = all_seen(&pilot, 12);
    let word = |s: &Seen, key: &str| -> String {
        s.words
            .iter()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_default()
            .to_owned()
    };
    for (i, task) in seen.iter().enumerate() {
        let (pinned, allowed) = (word(task, "cpus="), word(task, "allowed="));
        assert!(!pinned.is_empty(), "pinned: {task:?}");
        assert_eq!(pinned, allowed, "the kernel holds it to its CPU");
        assert!(!pinned.contains(',') && !pinned.contains('-'), "one CPU");
        assert_eq!(word(task, "omp="), "1", "OMP_NUM_THREADS follows its cores");
        for other in &seen[i + 1..] {
            if overlap(task, other) {
                assert_ne!(pinned, word(other, "cpus="), "two tasks on one CPU");
            }
        }
    }

    // More slots than CPUs: nothing is pinned (slots share the CPUs).
    let crowded = dir.path().join("crowded");
    let slots = (cpus * 2).to_string();
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--slots", &slots])
        .arg("--dir")
        .arg(&crowded)
        .args(["--", "sh", "-c", &script]));
    assert!(output.status.success());
    let seen = all_seen(&crowded, 1);
    assert_eq!(word(&seen[0], "cpus="), "", "not pinned: {:?}", seen[0]);
}
