//! Data items end to end: writers leave files in their node's scratch directory,
//! readers run where those are (delay scheduling), and a reader elsewhere gets the
//! bytes from the holder node to node (or through the root when it cannot), intact.
//! Real agents, real files, real QUIC between the agents.

mod common;

use std::collections::HashMap;

use common::{Service, results, run, saker};
use serde_json::{Value, json};

/// A writer of `bytes` random bytes as item `name`: prints the item's md5 and its node.
fn writer(name: &str, bytes: u32, node: Option<u32>) -> Value {
    let script = format!(
        "head -c {bytes} /dev/urandom > \"$SAKER_SCRATCH/{name}\"; md5sum < \"$SAKER_SCRATCH/{name}\"; echo node=$SAKER_NODE"
    );
    let mut spec = json!({"argv": ["sh", "-c", script], "name": name, "writes": [name]});
    if let Some(node) = node {
        spec["node"] = json!(node);
    }
    spec
}

/// A reader of item `item` after its writer: prints the md5 of what it sees.
fn reader(name: &str, item: &str, node: Option<u32>) -> Value {
    let script = format!("md5sum < \"$SAKER_SCRATCH/{item}\"; echo node=$SAKER_NODE");
    let mut spec = json!({
        "argv": ["sh", "-c", script], "name": name, "after": [item], "reads": [item]
    });
    if let Some(node) = node {
        spec["node"] = json!(node);
    }
    spec
}

/// md5 and node of each result, by job name (given in the submission order).
fn seen(pilot: &std::path::Path, names: &[String]) -> HashMap<String, (String, String)> {
    let mut by_job: Vec<Value> = results(pilot);
    by_job.sort_by_key(|record| record["job"].as_u64());
    by_job
        .iter()
        .zip(names)
        .map(|(record, name)| {
            assert_eq!(record["state"], "succeeded", "{name}: {record}");
            // (A gate job prints nothing.)
            let stdout = record["stdout"].as_str().unwrap_or_default();
            let md5 = stdout
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            let node = stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix("node="))
                .unwrap_or_default()
                .to_owned();
            (name.clone(), (md5, node))
        })
        .collect()
}

/// `status`'s count of bytes moved between nodes.
fn moved_bytes(pilot: &std::path::Path) -> u64 {
    data_bytes(pilot).0
}

/// `status`'s counts of bytes moved between nodes, and of those through the root.
fn data_bytes(pilot: &std::path::Path) -> (u64, u64) {
    let (moved, root, _) = relay_bytes(pilot);
    (moved, root)
}

/// `status`'s data line, as numbers: bytes moved, through the root, relayed (0s
/// without a data line).
fn relay_bytes(pilot: &std::path::Path) -> (u64, u64, u64) {
    let output = run(saker().args(["status", "--dir"]).arg(pilot));
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(line) = text.lines().find_map(|line| line.strip_prefix("data ")) else {
        return (0, 0, 0);
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "bytes").unwrap();
    let number = |word: &str| word.trim_start_matches('(').parse().unwrap();
    (
        number(words[at - 1]),
        number(words[at + 4]),
        number(words[at + 8]),
    )
}

/// `saker submit --wait` of `specs` as a task file.
fn submit_waiting(pilot: &std::path::Path, specs: &[Value]) -> std::process::Output {
    let file = pilot.parent().unwrap().join("dag.jsonl");
    let lines: Vec<String> = specs.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(pilot)
        .arg(&file))
}

fn submit(pilot: &std::path::Path, specs: &[Value]) -> Vec<String> {
    assert!(submit_waiting(pilot, specs).status.success());
    specs
        .iter()
        .map(|spec| spec["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Submits `specs` as a task file and waits until `results` of them have ended.
fn submit_then_wait_for(pilot: &std::path::Path, specs: &[Value], results_count: usize) {
    let file = pilot.parent().unwrap().join("dag.jsonl");
    let lines: Vec<String> = specs.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let output = run(saker().args(["submit", "--dir"]).arg(pilot).arg(&file));
    assert!(output.status.success());
    common::wait_for(
        "the first results",
        std::time::Duration::from_secs(30),
        || results(pilot).len() == results_count,
    );
}

/// With a wait long enough, every reader runs on the node that wrote its input, and
/// nothing moves between nodes.
#[test]
fn readers_run_where_their_data_is_and_nothing_moves() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(
        dir.path(),
        &["--agents", "4", "--slots", "8", "--locality-wait", "20s"],
    );
    // The writers spread only over agents that have joined: all of them, first.
    common::wait_for("four agents", std::time::Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&service.pilot));
        String::from_utf8_lossy(&status.stdout).contains("agents    4")
    });
    let mut specs = Vec::new();
    for i in 0..8 {
        specs.push(writer(&format!("w{i}"), 300_000, None));
        specs.push(reader(&format!("r{i}"), &format!("w{i}"), None));
    }
    let names = submit(&service.pilot, &specs);
    let seen = seen(&service.pilot, &names);
    let nodes: std::collections::BTreeSet<&String> = seen.values().map(|(_, node)| node).collect();
    assert!(nodes.len() > 1, "the writers spread: {seen:?}");
    for i in 0..8 {
        let (written, writer_node) = &seen[&format!("w{i}")];
        let (read, reader_node) = &seen[&format!("r{i}")];
        assert_eq!(read, written, "r{i} read what w{i} wrote");
        assert_eq!(reader_node, writer_node, "r{i} ran where w{i} wrote");
    }
    assert_eq!(moved_bytes(&service.pilot), 0);
}

/// Readers placed on other nodes than their writers get the bytes from the writer's
/// node directly, intact (1.5 chunks each), none through the root, and status counts
/// exactly those bytes; a reader of an item no node holds, and a writer that did not
/// write, fail with the reason.
#[test]
fn readers_elsewhere_fetch_their_data_intact_and_failures_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(dir.path(), &["--agents", "4", "--slots", "8"]);
    let size = 1_572_864; // 1.5 chunks of 1 MiB
    let mut specs = Vec::new();
    for i in 0..3 {
        specs.push(writer(&format!("w{i}"), size, Some(0)));
        specs.push(reader(&format!("r{i}"), &format!("w{i}"), Some(i + 1)));
    }
    // Two readers of one item on one node: fetched once.
    specs.push(reader("r0-again", "w0", Some(1)));
    let names = submit(&service.pilot, &specs);
    let seen = seen(&service.pilot, &names);
    for i in 0..3 {
        assert_eq!(
            seen[&format!("r{i}")].0,
            seen[&format!("w{i}")].0,
            "r{i} intact"
        );
        assert_eq!(seen[&format!("r{i}")].1, (i + 1).to_string());
    }
    assert_eq!(seen["r0-again"].0, seen["w0"].0);
    assert_eq!(data_bytes(&service.pilot), (3 * u64::from(size), 0));
    // Each reader's result says how long it waited for its item; a writer's none.
    let records = results(&service.pilot);
    let fetch_us = |job: u64| {
        let record = records.iter().find(|r| r["job"] == job).unwrap();
        record["fetch_us"].as_u64()
    };
    assert_eq!(fetch_us(1), None, "a writer fetched nothing");
    for reader in [2, 4, 6] {
        assert!(fetch_us(reader).is_some_and(|us| us > 0), "job {reader}");
    }

    let broken = [
        json!({"argv": ["true"], "name": "orphan", "reads": ["nowhere"]}),
        json!({"argv": ["true"], "name": "lazy", "writes": ["never"]}),
    ];
    let file = dir.path().join("broken.jsonl");
    let lines: Vec<String> = broken.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let output = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&service.pilot)
        .arg(&file));
    assert_eq!(output.status.code(), Some(1), "two failed");
    let records = results(&service.pilot);
    let reason = |job: u64| {
        records
            .iter()
            .find(|r| r["job"].as_u64() == Some(job))
            .and_then(|r| r["reason"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let first = specs.len() as u64 + 1;
    assert_eq!(
        reason(first),
        "data item \"nowhere\": no live node holds it"
    );
    assert!(
        reason(first + 1).contains("without writing data item \"never\""),
        "{}",
        reason(first + 1)
    );

    // Refused at submission: an array writing one name, and a bad name.
    for (flags, said) in [
        (
            &["--array", "1-3", "--writes", "out"][..],
            "its 3 tasks would all write the same data items",
        ),
        (&["--reads", "../etc"][..], "invalid data item name"),
    ] {
        let output = run(saker()
            .args(["submit", "--dir"])
            .arg(&service.pilot)
            .args(flags)
            .args(["--", "true"]));
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{flags:?}: {stderr}");
    }
}

/// Readers of one item on several nodes at once get it intact, each copy moved once,
/// none through the root, and most of it relayed: each reader after the first fetches
/// from a node still fetching it (a pipeline), not all from the writer.
#[test]
fn readers_of_one_item_at_once_relay_it_to_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(
        dir.path(),
        &["--agents", "5", "--slots", "10", "--locality-wait", "0"],
    );
    common::wait_for("five agents", std::time::Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&service.pilot));
        String::from_utf8_lossy(&status.stdout).contains("agents    5")
    });
    let size: u32 = 48 << 20;
    let mut specs = vec![writer("big", size, Some(0))];
    for node in 1..=4 {
        specs.push(reader(&format!("r{node}"), "big", Some(node)));
    }
    let names = submit(&service.pilot, &specs);
    let seen = seen(&service.pilot, &names);
    for node in 1..=4 {
        let (read, on) = &seen[&format!("r{node}")];
        assert_eq!((read, on), (&seen["big"].0, &node.to_string()), "r{node}");
    }
    let (moved, root, relayed) = relay_bytes(&service.pilot);
    assert_eq!((moved, root), (4 * u64::from(size), 0));
    // The readers start together, so all but the first are named an upstream (on a
    // busy machine, at least one is); a reader whose upstream finished first reads
    // the rest from it whole, still counted as relayed.
    assert!(
        relayed >= u64::from(size),
        "{relayed} of {moved} bytes relayed"
    );
}

/// Holders are journaled: a root SIGKILLed after the writers ran is resumed, and the
/// readers (held back by a gate until then) find the items where they were written.
#[test]
fn after_a_root_crash_the_resumed_pilot_knows_where_the_items_are() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let args = ["--agents", "2", "--slots", "2", "--locality-wait", "20s"];
    let mut service = Service::start_args(dir.path(), &args);
    let wait_gate = format!("while [ ! -e {} ]; do sleep 0.02; done", gate.display());
    let mut specs = vec![
        writer("w0", 200_000, Some(0)),
        writer("w1", 200_000, Some(1)),
        json!({"argv": ["sh", "-c", wait_gate], "name": "gate"}),
    ];
    for i in 0..2 {
        let mut spec = reader(&format!("r{i}"), &format!("w{i}"), None);
        spec["after"] = json!([format!("w{i}"), "gate"]);
        specs.push(spec);
    }
    submit_then_wait_for(&service.pilot, &specs, 2);
    let agents: Vec<u32> = (0..2)
        .filter_map(|node| common::agent_pid(&service.pilot, node))
        .collect();
    service.child.kill().unwrap(); // SIGKILL
    service.child.wait().unwrap();
    for agent in agents {
        common::sigkill(agent);
    }
    let _ = std::fs::remove_file(service.pilot.join("client.json"));
    drop(service);

    let resumed = Service::start_args(dir.path(), &[&args[..], &["--resume"]].concat());
    std::fs::write(&gate, "").unwrap();
    let output = run(saker().args(["wait", "--dir"]).arg(&resumed.pilot));
    assert!(output.status.success());
    let names: Vec<String> = specs
        .iter()
        .map(|spec| spec["name"].as_str().unwrap().to_owned())
        .collect();
    let seen = seen(&resumed.pilot, &names);
    for i in 0..2 {
        assert_eq!(
            seen[&format!("r{i}")].0,
            seen[&format!("w{i}")].0,
            "r{i} intact"
        );
        assert_eq!(
            seen[&format!("r{i}")].1,
            i.to_string(),
            "r{i} ran where w{i} is"
        );
    }
    assert_eq!(moved_bytes(&resumed.pilot), 0);
}

/// With `--shared-scratch` (every node sees one scratch filesystem, as all agents on
/// one machine do), a reader elsewhere links the item from its writer's directory:
/// intact, and nothing moves through the tree.
#[test]
fn on_a_shared_scratch_a_reader_elsewhere_links_the_item_and_nothing_moves() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("shared");
    let scratch_arg = scratch.to_string_lossy().into_owned();
    let service = Service::start_args(
        dir.path(),
        &[
            "--agents",
            "2",
            "--slots",
            "4",
            "--scratch",
            &scratch_arg,
            "--shared-scratch",
        ],
    );
    let specs = vec![
        writer("w0", 1_500_000, Some(0)),
        reader("r0", "w0", Some(1)),
    ];
    let names = submit(&service.pilot, &specs);
    let seen = seen(&service.pilot, &names);
    assert_eq!(seen["r0"].0, seen["w0"].0, "r0 intact");
    assert_eq!(seen["r0"].1, "1");
    assert_eq!(moved_bytes(&service.pilot), 0);
    let pilot_scratch = std::fs::read_dir(&scratch)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        pilot_scratch.join("node-1/w0").is_file(),
        "linked into node 1's scratch"
    );
}

/// A holder that lost its item after writing it: the reader's direct read is refused,
/// the root is asked instead and finds no other holder, and the reader fails with the
/// reason, nothing hanging. A second reader on the first reader's node later finds the
/// copy it fetched of another item there, and the root counts that node as a holder.
#[test]
fn a_holder_that_lost_its_item_fails_the_reader_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(dir.path(), &["--agents", "3", "--slots", "6"]);
    let thief = json!({
        "argv": ["sh", "-c", "rm \"$SAKER_SCRATCH/gone\""],
        "name": "thief", "after": ["gone"], "reads": ["gone"], "node": 0
    });
    let mut late = reader("late", "gone", Some(1));
    late["after"] = json!(["thief"]);
    let specs = [
        writer("gone", 100_000, Some(0)),
        thief,
        late,
        writer("kept", 2_000_000, Some(0)),
        reader("copy", "kept", Some(1)),
    ];
    let file = dir.path().join("lost.jsonl");
    let lines: Vec<String> = specs.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let output = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&service.pilot)
        .arg(&file));
    assert_eq!(output.status.code(), Some(1), "one failed");
    let records = results(&service.pilot);
    let late = records.iter().find(|r| r["job"] == 3).unwrap();
    assert_eq!(late["state"], "failed", "{late}");
    assert_eq!(
        late["reason"],
        "data item \"gone\": no live node holds it, and job 1 that wrote it may not run twice to make it again (it is not idempotent)"
    );
    let copy = records.iter().find(|r| r["job"] == 5).unwrap();
    assert_eq!(copy["state"], "succeeded", "{copy}");
    assert_eq!(data_bytes(&service.pilot), (2_000_000, 0));

    // Node 1 holds a copy now: a reader placed on node 2 may fetch from either, and
    // one that would rather run where the item is waits for node 0 or node 1.
    let mut again = reader("again", "kept", Some(2));
    again.as_object_mut().unwrap().remove("after");
    let file = dir.path().join("again.jsonl");
    std::fs::write(&file, again.to_string()).unwrap();
    let output = run(saker()
        .args(["submit", "--wait", "--dir"])
        .arg(&service.pilot)
        .arg(&file));
    assert!(output.status.success());
    assert_eq!(data_bytes(&service.pilot), (4_000_000, 0));
}

/// Chaos mid-DAG: the only holder of two intermediates is SIGKILLed after their
/// writers ran and before their readers start. The idempotent writer runs again
/// elsewhere, and its readers (on the other nodes) wait for it and read the right
/// bytes; the reader of the item whose writer may not run twice fails with the reason.
/// Nothing hangs.
#[test]
fn the_only_holder_killed_mid_dag_its_item_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let service = Service::start_args(dir.path(), &["--agents", "3", "--slots", "6"]);
    common::wait_for("three agents", std::time::Duration::from_secs(30), || {
        let status = run(saker().args(["status", "--dir"]).arg(&service.pilot));
        String::from_utf8_lossy(&status.stdout).contains("agents    3")
    });
    let make = |name: &str, idempotent: bool| {
        let script = format!(
            "seq 1 300000 > \"$SAKER_SCRATCH/{name}\"; echo made $(md5sum < \"$SAKER_SCRATCH/{name}\")"
        );
        json!({"argv": ["sh", "-c", script], "name": name, "writes": [name],
               "node": 0, "idempotent": idempotent})
    };
    // Readers wait for the gate job, so that nothing is fetched before the kill.
    let read = |name: &str, item: &str, node: u32| {
        let script = format!("echo read $(md5sum < \"$SAKER_SCRATCH/{item}\")");
        json!({"argv": ["sh", "-c", script], "name": name, "after": [item, "gate"],
               "reads": [item], "node": node})
    };
    let wait_gate = format!("while [ ! -e {} ]; do sleep 0.02; done", gate.display());
    let specs = [
        make("mid", true),
        make("once", false),
        json!({"argv": ["sh", "-c", wait_gate], "name": "gate", "node": 1}),
        read("r1", "mid", 1),
        read("r2", "mid", 2),
        read("lonely", "once", 2),
    ];
    submit_then_wait_for(&service.pilot, &specs, 2);
    // The holder is killed mid-DAG: its writers have run, its readers not yet.
    let holder = common::agent_pid(&service.pilot, 0).expect("agent 0");
    common::sigkill(holder);
    std::fs::write(&gate, "").unwrap();

    let output = run(saker().args(["wait", "--dir"]).arg(&service.pilot));
    assert_eq!(output.status.code(), Some(1), "one failed");
    let records = results(&service.pilot);
    let stdout = |record: &Value| {
        record["stdout"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    // (`echo $(md5sum)` says "<md5> -".)
    let expected = {
        let seq = std::process::Command::new("sh")
            .args(["-c", "echo $(seq 1 300000 | md5sum)"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&seq.stdout).trim().to_owned()
    };
    let made = records
        .iter()
        .filter(|r| r["state"] == "succeeded" && stdout(r) == format!("made {expected}"))
        .count();
    assert_eq!(made, 3, "mid twice, once once: {records:?}");
    for job in [4, 5] {
        let reader = records.iter().find(|r| r["job"] == job).unwrap();
        assert_eq!(reader["state"], "succeeded", "{reader}");
        assert_eq!(stdout(reader), format!("read {expected}"));
    }
    let lonely = records.iter().find(|r| r["job"] == 6).unwrap();
    assert_eq!(lonely["state"], "failed", "{lonely}");
    let reason = lonely["reason"].as_str().unwrap();
    assert!(reason.contains("not idempotent"), "{reason}");
}

/// A job over several nodes reads an item: every node of its group has it before
/// any rank starts (the members fetch it node to node), each rank reads it whole; one
/// reading an item no node holds fails with the reason, nothing hanging.
#[test]
fn every_node_of_a_group_gets_the_items_its_job_reads() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_args(dir.path(), &["--agents", "3", "--slots", "6"]);
    let pilot = &service.pilot;
    let content = "seq 1 300000";
    let rank = "seq 1 300000 | cmp - \"$SAKER_SCRATCH/table\" && echo rank=$SAKER_RANK ok";
    let specs = [
        json!({
            "argv": ["sh", "-c", format!("{content} > \"$SAKER_SCRATCH/table\"")],
            "name": "table", "writes": ["table"], "node": 0,
        }),
        json!({
            "argv": [rank], "shell": true, "name": "group", "nodes": 3, "ranks_per_node": 1,
            "after": ["table"], "reads": ["table"], "time_limit": "60s",
        }),
        json!({
            "argv": ["true"], "shell": true, "name": "ghost", "nodes": 2, "ranks_per_node": 1,
            "reads": ["ghost"], "time_limit": "60s", "max_retries": 0,
        }),
    ];
    let output = submit_waiting(pilot, &specs);
    assert!(!output.status.success(), "the ghost reader fails");
    let mut records = results(pilot);
    records.sort_by_key(|record| record["job"].as_u64());
    assert_eq!(records[0]["state"], "succeeded", "{}", records[0]);
    assert_eq!(records[1]["state"], "succeeded", "{}", records[1]);
    assert!(
        records[1]["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("rank=0 ok"),
        "{}",
        records[1]
    );
    // Two members fetched it from node 0.
    let table_bytes = 1_988_895;
    assert!(
        moved_bytes(pilot) >= 2 * table_bytes,
        "{}",
        moved_bytes(pilot)
    );
    assert_eq!(records[2]["state"], "failed", "{}", records[2]);
    let reason = records[2].to_string();
    assert!(reason.contains("ghost"), "{reason}");

    // The same through each MPI's own launcher, whose ranks get `SAKER_SCRATCH` from
    // their launcher or their daemon.
    for kind in ["openmpi", "mpich"] {
        if common::mpi_probe(kind, dir.path()).is_none() {
            continue;
        }
        let spec = json!({
            "argv": ["sh", "-c", "seq 1 300000 | cmp - \"$SAKER_SCRATCH/table\""],
            "nodes": 3, "ranks_per_node": 1, "mpi": kind, "reads": ["table"],
            "time_limit": "60s", "max_retries": 0,
        });
        let output = submit_waiting(pilot, &[spec]);
        let last = results(pilot)
            .into_iter()
            .max_by_key(|record| record["job"].as_u64())
            .unwrap();
        assert!(output.status.success(), "{kind}: {last}");
        assert_eq!(last["state"], "succeeded", "{kind}: {last}");
    }
}
