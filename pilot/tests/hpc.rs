//! HPC jobs end to end in local mode (agents act as nodes): ranks started by Saker
//! with their rendezvous variables, and real OpenMPI and MPICH programs whose
//! launchers start their daemons through Saker's agents; a failing rank, a cancel and
//! a killed member agent, each leaving no rank behind; bad requests refused.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::hpc::{check_probe_world, only_result, run_on_three};
use common::{agent_pid, alive, mpi_probe as probe, results, run, saker, sigkill, wait_for};

#[test]
fn without_mpi_every_rank_gets_its_rendezvous_on_three_agents() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let out = dir.path().join("ranks");
    std::fs::create_dir(&out).unwrap();
    let script = format!(
        "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $SAKER_RANK $SAKER_WORLD_SIZE $SAKER_NODE \
         $MASTER_ADDR $MASTER_PORT $SAKER_NODES $(wc -l < $SAKER_HOSTFILE)\" > {}/$RANK",
        out.display()
    );
    let output = run_on_three(
        &pilot,
        &[
            "--nodes",
            "3",
            "--ranks-per-node",
            "2",
            "--shell",
            "--",
            &script,
        ],
    );
    assert!(output.status.success());
    let mut agents = std::collections::BTreeMap::new();
    let mut ports = BTreeSet::new();
    for rank in 0..6 {
        let line = std::fs::read_to_string(out.join(rank.to_string())).expect("every rank ran");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], rank.to_string());
        assert_eq!(words[1], (rank % 2).to_string(), "local rank");
        assert_eq!((words[2], words[3], words[4]), ("6", words[0], "6"));
        *agents.entry(words[5].to_owned()).or_insert(0) += 1;
        ports.insert(words[7].to_owned());
        assert_eq!(words[8].split(',').count(), 3, "SAKER_NODES lists 3 hosts");
        assert_eq!(words[9], "3", "one hostfile line per node");
    }
    assert_eq!(agents.len(), 3, "ranks on three agents: {agents:?}");
    assert!(agents.values().all(|&ranks| ranks == 2));
    assert_eq!(ports.len(), 1, "one rendezvous port for the job");
    let result = only_result(&pilot);
    assert_eq!(result["state"], "succeeded");
    let gang = &result["gang"];
    assert_eq!(gang["ranks"], 6);
    assert_eq!(gang["nodes"].as_array().unwrap().len(), 3);
    let processes = gang["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 6);
    for (rank, process) in processes.iter().enumerate() {
        assert_eq!(process["rank"], rank);
        assert_eq!(process["member"], rank / 2);
        assert_eq!(process["exit_code"], 0);
    }
}

#[test]
fn openmpi_and_mpich_start_their_daemons_through_the_agents() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, nodes_visible) in [("openmpi", true), ("mpich", false)] {
        let Some(probe) = probe(kind, dir.path()) else {
            continue;
        };
        let pilot = dir.path().join(format!("pilot-{kind}"));
        let probe = probe.display().to_string();
        let output = run_on_three(
            &pilot,
            &[
                "--nodes",
                "3",
                "--ranks-per-node",
                "2",
                "--mpi",
                kind,
                "--",
                &probe,
            ],
        );
        let result = only_result(&pilot);
        assert!(output.status.success(), "{kind}: {result}");
        let stdout = result["stdout"].as_str().unwrap();
        // MPICH hands its own environment to every rank, so SAKER_NODE is the
        // leader's everywhere: where the daemons ran shows the placement instead.
        check_probe_world(stdout, nodes_visible);
        let processes = result["gang"]["processes"].as_array().unwrap();
        let members: BTreeSet<u64> = processes
            .iter()
            .filter(|process| process["rank"] != 0 || process["member"] != 0)
            .map(|process| process["member"].as_u64().unwrap())
            .collect();
        assert_eq!(
            members,
            [0, 1, 2].into_iter().collect(),
            "{kind}: a daemon on every member: {processes:?}"
        );
        assert!(processes.iter().all(|process| process["exit_code"] == 0));
    }
}

/// Four relay jobs of one rank per node at once, two of them led by one agent of
/// two slots: their launchers run off the slots, so the daemon each launcher starts
/// on its own node finds the slot of the core its part holds (with the launchers on
/// the slots, both waited for ever on daemons that waited for a slot).
#[test]
fn relay_jobs_led_by_one_agent_never_wait_on_each_others_slots() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("mpich", dir.path()) else {
        return;
    };
    let pilot = dir.path().join("pilot");
    let probe = probe.display().to_string();
    let layout = ["--array", "1-4", "--nodes", "3", "--mpi", "mpich", "--"];
    let output = run_on_three(&pilot, &[&layout[..], &[&probe]].concat());
    let records = results(&pilot);
    assert!(output.status.success(), "{records:?}");
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|record| record["state"] == "succeeded"));
}

#[test]
fn a_failing_rank_fails_the_attempt_and_the_retry_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let marker = dir.path().join("failed-once");
    let script = format!(
        "if [ \"$RANK\" = 3 ] && [ ! -e {m} ]; then touch {m}; exit 3; fi; echo ok $RANK",
        m = marker.display()
    );
    let output = run_on_three(
        &pilot,
        &[
            "--nodes",
            "2",
            "--ranks-per-node",
            "2",
            "--retries",
            "1",
            "--shell",
            "--",
            &script,
        ],
    );
    assert!(output.status.success());
    let result = only_result(&pilot);
    assert_eq!(result["state"], "succeeded");
    assert_eq!(result["attempts"], 2);
    let history = result["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["end"], "failed");
    assert_eq!(history[0]["exit_code"], 3);
    let processes = result["gang"]["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 4, "the retry ran every rank");
}

/// A job still running after `timeout`: the pilot in the background, the ranks'
/// pids in `pids/`.
struct Running {
    pilot: PathBuf,
    pids: PathBuf,
    child: std::process::Child,
}

impl Running {
    /// Starts `saker run` of a 3-node job whose ranks record their pid and sleep,
    /// on `agents` agents, and waits until all 3 ranks run.
    fn start(dir: &Path, agents: &str, extra: &[&str]) -> Running {
        let pilot = dir.join("pilot");
        let pids = dir.join("pids");
        std::fs::create_dir(&pids).unwrap();
        let script = format!(
            "if [ -e {p}/done ]; then exit 0; fi; echo $$ > {p}/$SAKER_NODE.$RANK.$SAKER_ATTEMPT_ID; exec sleep 600",
            p = pids.display()
        );
        let child = saker()
            .args(["run", "--progress", "none", "--no-sync", "--agents", agents])
            .args(["--slots", &(2 * agents.parse::<u32>().unwrap()).to_string()])
            .arg("--dir")
            .arg(&pilot)
            .args(["--nodes", "3", "--shell"])
            .args(extra)
            .args(["--", &script])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let running = Running { pilot, pids, child };
        wait_for("3 ranks running", Duration::from_secs(60), || {
            running.rank_pids().len() == 3
        });
        running
    }

    /// (file name, pid) of every rank that started.
    fn rank_pids(&self) -> Vec<(String, u32)> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir(&self.pids).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Ok(pid) = std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .trim()
                .parse()
            {
                pids.push((name, pid));
            }
        }
        pids.sort();
        pids
    }
}

#[test]
fn a_cancelled_job_leaves_no_rank_running_on_any_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = Running::start(dir.path(), "3", &[]);
    let ranks = job.rank_pids();
    let status = run(saker().args(["status", "--dir"]).arg(&job.pilot));
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.contains("hpc jobs  running 1  waiting 0"),
        "{status}"
    );
    let cancelled = run(saker().args(["cancel", "--dir"]).arg(&job.pilot).arg("1"));
    assert!(cancelled.status.success());
    let status = job.child.wait().unwrap();
    assert!(!status.success(), "a cancelled task makes the run fail");
    for (name, pid) in &ranks {
        wait_for(
            &format!("rank {name} gone"),
            Duration::from_secs(10),
            || !alive(*pid),
        );
    }
    let result = only_result(&job.pilot);
    assert_eq!(result["state"], "cancelled");
}

#[test]
fn a_killed_member_agent_stops_the_gang_everywhere_and_it_is_replayed_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let mut job = Running::start(dir.path(), "4", &[]);
    let first = job.rank_pids();
    // A member that is not the leader (rank 0's agent). Files: NODE.RANK.ATTEMPT.
    let victim: u32 = first
        .iter()
        .map(|(name, _)| name.split('.').collect::<Vec<_>>())
        .find(|parts| parts[1] != "0")
        .map(|parts| parts[0].parse().unwrap())
        .unwrap();
    // The replay must finish: from now on a rank that starts ends at once.
    std::fs::write(job.pids.join("done"), "").unwrap();
    sigkill(agent_pid(&job.pilot, victim).expect("the member's agent runs"));
    for (name, pid) in &first {
        wait_for(
            &format!("rank {name} gone"),
            Duration::from_secs(15),
            || !alive(*pid),
        );
    }
    let status = job.child.wait().unwrap();
    assert!(status.success(), "the replay succeeds");
    let result = only_result(&job.pilot);
    assert_eq!(result["state"], "succeeded");
    assert_eq!(result["attempts"], 2);
    assert_eq!(result["history"][0]["end"], "lost");
    assert_eq!(result["gang"]["processes"].as_array().unwrap().len(), 3);
}

#[test]
fn requests_that_can_never_run_are_refused_and_a_missing_launcher_fails_only_its_job() {
    let dir = tempfile::tempdir().unwrap();
    let refusal = |name: &str, args: &[&str]| {
        let output = run_on_three(&dir.path().join(name), args);
        assert!(!output.status.success(), "{name} is refused");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = refusal("too-many-nodes", &["--nodes", "4", "--", "true"]);
    assert!(
        stderr.contains("4 nodes; this pilot has at most 3"),
        "{stderr}"
    );
    let stderr = refusal(
        "too-wide",
        &["--nodes", "2", "--ranks-per-node", "3", "--", "true"],
    );
    assert!(stderr.contains("needs 3 cores on each node"), "{stderr}");
    let stderr = refusal(
        "unknown-mpi",
        &["--nodes", "2", "--mpi", "lam", "--", "true"],
    );
    assert!(stderr.contains("lam"), "{stderr}");
    let stderr = refusal(
        "uneven",
        &[
            "--nodes",
            "2",
            "--ranks",
            "5",
            "--ranks-per-node",
            "2",
            "--",
            "true",
        ],
    );
    assert!(stderr.contains("5 ranks do not fit 2 nodes"), "{stderr}");

    // A launcher that is not there fails the job's attempt; the pilot carries on.
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(
        &tasks,
        concat!(
            r#"{"argv": ["true"], "nodes": 2, "mpi": "openmpi", "env": {"SAKER_MPIRUN": "mpirun.missing"}}"#,
            "\n",
            r#"{"argv": ["true"]}"#,
            "\n",
        ),
    )
    .unwrap();
    let pilot = dir.path().join("pilot-2");
    let output = run_on_three(&pilot, &[tasks.to_str().unwrap()]);
    assert!(!output.status.success(), "one task failed");
    let records = results(&pilot);
    assert_eq!(records.len(), 2);
    let failed = records.iter().find(|r| r["job"] == 1).unwrap();
    assert_eq!(failed["state"], "failed");
    let reason = failed["reason"].as_str().unwrap();
    assert!(reason.contains("mpirun.missing"), "{reason}");
    let other = records.iter().find(|r| r["job"] == 2).unwrap();
    assert_eq!(other["state"], "succeeded");
}

/// The issue's mixed load: 20,000 short tasks and 10 HPC jobs of 2–3 nodes submitted
/// together on 4 agents. Every task and job ends once; each job's ranks start within
/// a short time of each other on distinct agents.
#[test]
fn twenty_thousand_tasks_and_ten_hpc_jobs_share_four_agents() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let starts = dir.path().join("starts");
    std::fs::create_dir(&starts).unwrap();
    let mut lines = String::new();
    for chunk in 0..10 {
        lines.push_str(&format!(
            "{{\"argv\": [\"true\"], \"time_limit\": \"5s\"}}\n{}",
            "{\"argv\": [\"true\"], \"time_limit\": \"5s\"}\n".repeat(1_999)
        ));
        let nodes = 2 + chunk % 2;
        let script = format!(
            "echo \"$SAKER_NODE $(date +%s%N)\" > {}/{chunk}.$RANK",
            starts.display()
        );
        lines.push_str(&format!(
            "{}\n",
            serde_json::json!({
                "argv": [script],
                "shell": true,
                "nodes": nodes,
                "ranks_per_node": 2,
                "time_limit": "30s",
            })
        ));
    }
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, lines).unwrap();
    let output = run(saker()
        .args([
            "run",
            "--progress",
            "none",
            "--no-sync",
            "--agents",
            "4",
            "--slots",
            "8",
        ])
        .arg("--dir")
        .arg(&pilot)
        .arg(&tasks));
    assert!(output.status.success());
    let records = results(&pilot);
    common::assert_one_result_per_task(&records, 20_010);
    assert!(records.iter().all(|r| r["state"] == "succeeded"));
    for chunk in 0..10u32 {
        let nodes = 2 + chunk % 2;
        let mut agents = BTreeSet::new();
        let mut times = Vec::new();
        for rank in 0..nodes * 2 {
            let line = std::fs::read_to_string(starts.join(format!("{chunk}.{rank}")))
                .unwrap_or_else(|_| panic!("job {chunk} rank {rank} ran"));
            let mut words = line.split_whitespace();
            agents.insert(words.next().unwrap().to_owned());
            times.push(words.next().unwrap().parse::<u64>().unwrap());
        }
        assert_eq!(
            agents.len() as u32,
            nodes,
            "job {chunk} on {nodes} distinct agents"
        );
        let spread = times.iter().max().unwrap() - times.iter().min().unwrap();
        assert!(
            spread < 2_000_000_000,
            "job {chunk}'s ranks started {spread} ns apart"
        );
    }
}

/// HPC jobs are journaled like any job: a root killed while one runs and the rest
/// wait is resumed, and every job then runs whole once more or keeps its result.
#[test]
fn a_killed_root_resumes_its_queued_and_running_hpc_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let pilot = dir.path().join("pilot");
    let log = dir.path().join("ranks.log");
    let script = format!(
        "echo \"$SAKER_TASK_ID $RANK\" >> {}; sleep 0.2",
        log.display()
    );
    let line = serde_json::json!({
        "argv": [script], "shell": true, "nodes": 3, "ranks_per_node": 2, "time_limit": "20s",
    });
    let tasks = dir.path().join("tasks.jsonl");
    std::fs::write(&tasks, format!("{line}\n").repeat(5)).unwrap();
    let mut first = saker()
        .args([
            "run",
            "--progress",
            "none",
            "--agents",
            "3",
            "--slots",
            "6",
            "--dir",
        ])
        .arg(&pilot)
        .arg(&tasks)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the first job's ranks", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.lines().count() >= 6)
    });
    first.kill().unwrap();
    first.wait().unwrap();
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &format!("agent --dir {}", pilot.display())])
        .status();
    let resumed = run(saker()
        .args([
            "run",
            "--resume",
            "--progress",
            "none",
            "--agents",
            "3",
            "--slots",
            "6",
        ])
        .arg("--dir")
        .arg(&pilot));
    assert!(resumed.status.success());
    let records = results(&pilot);
    common::assert_one_result_per_task(&records, 5);
    for record in &records {
        assert_eq!(record["state"], "succeeded");
        assert_eq!(record["gang"]["processes"].as_array().unwrap().len(), 6);
    }
}
