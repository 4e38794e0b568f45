//! MPI jobs whose ranks Saker's agents start and serve PMI themselves (`--mpi pmi`),
//! end to end in local mode: MPICH's PMI-1 client, Slurm's PMI-2 client, Open MPI
//! through Saker's PMI library; failures that end a group whole; small jobs side by
//! side on one node; fences gathered at the job's leader, without the root.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::hpc::{check_probe_world, every_ranks_stdout, only_result, run_on_three};
use common::{Service, field, mpi_probe as probe, probe_lines, results, run, saker, wait_for};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// `kind`'s probe as a 3 × 2 job through PMI, each agent starting its two ranks and
/// serving them (no launcher, no daemon): every rank saw the whole world. The
/// probe's path and the job's result, or `None` without that MPI.
fn a_world_through_pmi(dir: &Path, kind: &str) -> Option<(String, Value)> {
    let probe = probe(kind, dir)?.display().to_string();
    let layout = ["--nodes", "3", "--ranks-per-node", "2", "--mpi", "pmi"];
    let pilot = dir.join("pilot");
    let output = run_on_three(&pilot, &[&layout[..], &["--", &probe]].concat());
    let result = only_result(&pilot);
    assert!(output.status.success(), "{kind}: {result}");
    check_probe_world(&every_ranks_stdout(&pilot, &result, 6), true);
    Some((probe, result))
}

#[test]
fn mpich_ranks_started_by_their_agents_wire_up_through_pmi_and_end_whole() {
    let dir = tempfile::tempdir().unwrap();
    let Some((probe, result)) = a_world_through_pmi(dir.path(), "mpich") else {
        return;
    };
    let layout = ["--nodes", "3", "--ranks-per-node", "2", "--mpi", "pmi"];
    let processes = result["gang"]["processes"].as_array().unwrap();
    let ranks: Vec<(u64, u64)> = processes
        .iter()
        .map(|p| (p["rank"].as_u64().unwrap(), p["member"].as_u64().unwrap()))
        .collect();
    assert_eq!(ranks, [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)]);
    assert!(processes.iter().all(|process| process["exit_code"] == 0));

    // What each rank is handed: its PMI socket and variables, Hydra's local layout,
    // and the node's topology read once by its agent (hwloc comes with MPICH).
    let pilot = dir.path().join("pilot-env");
    let script = "echo $PMI_FD $PMI_RANK $PMI_SIZE $PMI_JOBID $MPI_LOCALNRANKS \
                  $MPI_LOCALRANKID $HWLOC_THISSYSTEM $HWLOC_XMLFILE";
    let output = run_on_three(&pilot, &[&layout[..], &["--shell", "--", script]].concat());
    let result = only_result(&pilot);
    assert!(output.status.success(), "{result}");
    for (rank, line) in every_ranks_stdout(&pilot, &result, 6).lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let expected = ["3", &rank.to_string(), "6"];
        assert_eq!(words[..3], expected, "{line}");
        assert!(words[3].starts_with("saker-"), "{line}");
        assert_eq!(words[4..7], ["2", &(rank % 2).to_string(), "1"], "{line}");
        let topology = Path::new(words[7]);
        assert!(topology.is_absolute() && topology.is_file(), "{line}");
    }

    // A rank's crash, its MPI_Abort, or nonsense on its PMI socket ends the whole
    // group at once with one result naming the rank.
    let mut cases = failures(&probe);
    cases.push((
        "nonsense",
        vec![
            "--shell",
            "--",
            "if [ $RANK = 3 ]; then echo nonsense >&3; fi; sleep 60",
        ],
        "rank 3 broke the PMI protocol: a request without `cmd=`",
    ));
    end_whole(dir.path(), cases);
}

/// A failure case: its name, what runs, and what the result's reason says.
type Case<'a> = (&'a str, Vec<&'a str>, &'a str);

/// The probe's crash (rank 3, exit 3) and `MPI_Abort` (rank 4, code 7).
fn failures(probe: &str) -> Vec<Case<'_>> {
    vec![
        ("crash", vec![probe, "fail=3"], "rank 3: exit 3 (on "),
        ("abort", vec![probe, "abort=4"], "rank 4: exit 7 (on "),
    ]
}

/// Each case, as a 3 × 2 PMI job, ends the whole group at once with one result
/// naming the rank (the others wait in MPI calls, or sleep, until stopped).
fn end_whole(dir: &Path, cases: Vec<Case<'_>>) {
    let layout = ["--nodes", "3", "--ranks-per-node", "2", "--mpi", "pmi"];
    for (case, args, reason) in cases {
        let pilot = dir.join(format!("pilot-{case}"));
        let args = match args[0] {
            "--shell" => args,
            _ => [&["--"][..], &args].concat(),
        };
        let started = std::time::Instant::now();
        let output = run_on_three(&pilot, &[&layout[..], &args].concat());
        assert!(!output.status.success(), "{case}");
        let result = only_result(&pilot);
        assert_eq!(result["state"], "failed", "{case}: {result}");
        let said = result["reason"].as_str().unwrap();
        assert!(said.contains(reason), "{case}: {said}");
        assert!(
            started.elapsed() < Duration::from_secs(50),
            "{case}: not at once"
        );
        let processes = result["gang"]["processes"].as_array().unwrap();
        assert_eq!(processes.len(), 6, "{case}: {processes:?}");
    }
}

#[test]
fn openmpi_ranks_wire_up_through_sakers_pmi_library_and_end_whole() {
    let dir = tempfile::tempdir().unwrap();
    // No mpirun, no orted: Open MPI's pmix/flux component loads Saker's PMI library,
    // which talks to the rank's agent over PMI_FD.
    let Some((probe, _)) = a_world_through_pmi(dir.path(), "openmpi") else {
        return;
    };
    let layout = ["--nodes", "3", "--ranks-per-node", "2", "--mpi", "pmi"];

    // What each rank is handed: the library, a numeric job id, and a shared-memory
    // directory of its agent's own (agents of one host would otherwise map each
    // other's segments: Open MPI names them by node-local rank), gone afterwards.
    let pilot = dir.path().join("pilot-env");
    let script = "echo $FLUX_PMI_LIBRARY_PATH $OMPI_MCA_pmix $FLUX_JOB_ID \
                  $OMPI_MCA_btl_vader_backing_directory ${OMPI_MCA_pml:--}";
    let output = run_on_three(&pilot, &[&layout[..], &["--shell", "--", script]].concat());
    let result = only_result(&pilot);
    assert!(output.status.success(), "{result}");
    let stdout = every_ranks_stdout(&pilot, &result, 6);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    for (rank, words) in lines.iter().enumerate() {
        let library = Path::new(words[0]);
        assert!(library.is_absolute() && library.is_file(), "{words:?}");
        assert_eq!(words[1], "flux");
        assert!(words[2].parse::<u32>().is_ok(), "{words:?}");
        let shared = words[3];
        assert_eq!(shared, lines[rank - rank % 2][3], "one per agent");
        assert!(
            !Path::new(shared).exists(),
            "removed with its part: {shared}"
        );
        // Without a fabric (the test machines), the pml Open MPI picks anyway.
        let fabric = Path::new("/sys/class/infiniband").exists();
        assert!(fabric || words[4] == "ob1", "{words:?}");
    }
    let shared: std::collections::BTreeSet<&str> = lines.iter().map(|w| w[3]).collect();
    assert_eq!(shared.len(), 3, "{stdout}");

    end_whole(dir.path(), failures(&probe));
}

/// `pilot/tests/mpi/pmi2.c` built against Slurm's libpmi2, if it can be.
fn pmi2_client(dir: &Path) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/pmi2.c");
    let binary = dir.join("pmi2");
    let built = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&binary)
        .arg(&source)
        .arg("-lpmi2")
        .status();
    if built.as_ref().is_ok_and(|status| status.success()) {
        return Some(binary);
    }
    assert!(
        std::env::var("SAKER_REQUIRE_MPI").as_deref() != Ok("1"),
        "SAKER_REQUIRE_MPI=1 but pmi2.c does not build ({built:?}): install libpmi2-0-dev"
    );
    eprintln!("skipped: pmi2.c does not build against libpmi2 ({built:?})");
    None
}

#[test]
fn slurms_pmi2_client_wires_up_through_the_agents_and_aborts_whole() {
    let dir = tempfile::tempdir().unwrap();
    let Some(client) = pmi2_client(dir.path()) else {
        return;
    };
    let run_on_two = |pilot: &Path, args: &[&str]| {
        run(saker()
            .args(["run", "--progress", "none", "--no-sync", "--agents", "2"])
            .args(["--slots", "4", "--dir"])
            .arg(pilot)
            .args([
                "--nodes",
                "2",
                "--ranks-per-node",
                "2",
                "--mpi",
                "pmi",
                "--",
            ])
            .arg(&client)
            .args(args))
    };
    let pilot = dir.path().join("pilot");
    let output = run_on_two(&pilot, &[]);
    let result = only_result(&pilot);
    assert!(output.status.success(), "{result}");
    let stdout = every_ranks_stdout(&pilot, &result, 4);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("pmi2 ")).collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    for (rank, line) in lines.iter().enumerate() {
        assert_eq!(field(line, "rank"), rank.to_string(), "{line}");
        assert_eq!(field(line, "size"), "4", "{line}");
        assert!(field(line, "jobid").starts_with("saker-"), "{line}");
        assert_eq!(field(line, "mapping"), "(vector,(0,2,2))", "{line}");
        // Every other rank's key read after the fence, `;` and all.
        assert_eq!(field(line, "cards"), "3", "{line}");
        // The node attribute its node's first rank put, waited for by the other.
        assert_eq!(
            field(line, "node"),
            format!("from-{}", rank / 2 * 2),
            "{line}"
        );
    }
    let wireup = &result["gang"]["wireup"];
    let (init, fence) = (wireup["init_us"].as_u64(), wireup["fence_us"].as_u64());
    assert!(
        init.is_some_and(|init| fence.is_some_and(|fence| init <= fence)),
        "{wireup}"
    );

    let pilot = dir.path().join("pilot-abort");
    let output = run_on_two(&pilot, &["abort=1"]);
    assert!(!output.status.success());
    let result = only_result(&pilot);
    assert_eq!(
        result["reason"].as_str().unwrap().get(..14),
        Some("rank 1: exit 1"),
        "{result}"
    );
}

#[test]
fn small_pmi_jobs_share_a_node_each_in_a_world_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("mpich", dir.path()) else {
        return;
    };
    // One agent of 4 cores: two 2-rank jobs fit on it at once.
    let pilot = dir.path().join("pilot");
    let output = run(saker()
        .args(["run", "--progress", "none", "--no-sync", "--agents", "1"])
        .args(["--slots", "4", "--dir"])
        .arg(&pilot)
        .args(["--array", "1-4", "--nodes", "1", "--ranks-per-node", "2"])
        .args(["--mpi", "pmi", "--"])
        .arg(&probe)
        .arg("sleep=1"));
    assert!(output.status.success());
    let records = results(&pilot);
    assert_eq!(records.len(), 4);
    let mut spans = Vec::new();
    for record in &records {
        assert_eq!(record["state"], "succeeded", "{record}");
        let stdout = record["stdout"].as_str().unwrap();
        let line = probe_lines(stdout)[0];
        assert_eq!(
            (field(line, "size"), field(line, "sum")),
            ("2", "3"),
            "{line}"
        );
        let time = |key: &str| record[key].as_str().unwrap().to_owned();
        spans.push((time("start_time"), time("end_time")));
    }
    // RFC 3339 times in UTC order as text.
    let overlapping = spans.iter().enumerate().any(|(i, (start, end))| {
        spans[i + 1..]
            .iter()
            .any(|(other_start, other_end)| start < other_end && other_start < end)
    });
    assert!(overlapping, "two jobs ran on the node at once: {spans:?}");
}

#[test]
fn a_pmi_jobs_fences_gather_at_its_leader_while_the_root_is_frozen() {
    let dir = tempfile::tempdir().unwrap();
    let Some(probe) = probe("mpich", dir.path()) else {
        return;
    };
    let service = Service::start_args(dir.path(), &["--agents", "2", "--slots", "4"]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Each rank says it started, then waits a moment before MPI_Init: time to freeze
    // the root, so that every fence of the wire-up happens while it hears nothing.
    let script = format!(
        "touch {out}/started.$RANK; sleep 2; exec {probe} out={out}",
        out = out.display(),
        probe = probe.display()
    );
    let submitted = run(saker()
        .args(["submit", "--dir"])
        .arg(&service.pilot)
        .args(["--nodes", "2", "--ranks-per-node", "2", "--mpi", "pmi"])
        .args(["--shell", "--", &script]));
    assert!(submitted.status.success(), "{submitted:?}");
    let count = |prefix: &str| {
        std::fs::read_dir(&out)
            .unwrap()
            .filter(|entry| {
                let name = entry.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with(prefix)
            })
            .count()
    };
    wait_for("four ranks started", Duration::from_secs(60), || {
        count("started.") == 4
    });
    let root = Pid::from_raw(service.child.id() as i32);
    signal::kill(root, Signal::SIGSTOP).unwrap();
    // Past MPI_Init and a ring through every rank: the fences went agent to agent.
    let inits = std::panic::catch_unwind(|| {
        wait_for("every rank past MPI_Init", Duration::from_secs(20), || {
            count("probe.") == 4
        })
    });
    signal::kill(root, Signal::SIGCONT).unwrap();
    assert!(inits.is_ok(), "the ranks wired up only through the root");
    let waited = run(saker().args(["wait", "--dir"]).arg(&service.pilot));
    assert!(waited.status.success(), "{waited:?}");
    let records = results(&service.pilot);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["state"], "succeeded", "{}", records[0]);
    assert_eq!(records[0]["attempts"], 1, "{}", records[0]);
    for rank in 0..4 {
        let line = std::fs::read_to_string(out.join(format!("probe.{rank}"))).unwrap();
        assert_eq!(field(&line, "size"), "4", "{line}");
        assert_eq!(field(&line, "sum"), "10", "{line}");
    }
}
