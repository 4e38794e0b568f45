//! The Rust API end to end: the test application (`src/main.rs`) run as its users
//! run theirs — alone (an embedded pilot of its own binary), under `saker run --app`,
//! and against a `saker pilot` whose workers are a different build of it — with
//! agents killed under it.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn testapp() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saker-testapp"));
    command.env_remove("SAKER_PILOT_DIR");
    command
}

/// The `saker` binary: `SAKER_BIN` (the release build, in CI), else the one built
/// beside this test's application.
fn saker_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("SAKER_BIN") {
        return PathBuf::from(bin);
    }
    let beside = Path::new(env!("CARGO_BIN_EXE_saker-testapp")).with_file_name("saker");
    assert!(
        beside.exists(),
        "{} is not built: build the workspace (or set SAKER_BIN)",
        beside.display()
    );
    beside
}

fn saker() -> Command {
    let mut command = Command::new(saker_bin());
    command.env_remove("SAKER_DIR");
    command
}

fn output(command: &mut Command) -> Output {
    let output = command.output().expect("the program runs");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Polls `done` every 20 ms until it holds, failing after `timeout`.
fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `saker pilot` whose workers of kind `rust` are the test application; shut down
/// (and killed) when dropped.
struct ServicePilot {
    dir: tempfile::TempDir,
    child: Child,
}

impl ServicePilot {
    /// Agents are `saker`, workers of kind `rust` the test application.
    fn start(agents: u32) -> ServicePilot {
        let worker = format!("rust={}", env!("CARGO_BIN_EXE_saker-testapp"));
        ServicePilot::start_with(agents, &[OsStr::new("--worker"), OsStr::new(&worker)])
    }

    /// Agents and workers are the test application (`--app`), whose driver only
    /// keeps the pilot up.
    fn start_app(agents: u32) -> ServicePilot {
        let app = OsStr::new(env!("CARGO_BIN_EXE_saker-testapp"));
        let args = [
            OsStr::new("--app"),
            app,
            OsStr::new("--"),
            OsStr::new("serve"),
        ];
        ServicePilot::start_with(agents, &args)
    }

    fn start_with(agents: u32, args: &[&OsStr]) -> ServicePilot {
        let dir = tempfile::tempdir().unwrap();
        let child = saker()
            .args(["pilot", "--agents", &agents.to_string()])
            .args(["--slots", &agents.to_string(), "--fanout", "2"])
            .args(["--heartbeat-interval", "200ms", "--heartbeat-timeout", "1s"])
            .arg("--dir")
            .arg(dir.path().join("pilot"))
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pilot = ServicePilot { dir, child };
        wait_for(
            "the pilot's client endpoint",
            Duration::from_secs(30),
            || pilot.path().join("client.json").exists(),
        );
        pilot
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("pilot")
    }

    fn status(&self) -> String {
        stdout(&output(saker().args(["status", "--dir"]).arg(self.path())))
    }

    /// Runs the test application's `scenario` as a driver attached to this pilot.
    fn drive(&self, scenario: &str) -> Output {
        output(testapp().arg("--pilot-dir").arg(self.path()).arg(scenario))
    }
}

impl Drop for ServicePilot {
    fn drop(&mut self) {
        let _ = saker()
            .args(["shutdown", "--dir"])
            .arg(self.path())
            .output();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn typed_tasks_round_trip_on_an_embedded_pilot() {
    let done = output(testapp().arg("round-trip"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok round trip"));
}

#[test]
fn tasks_placed_on_a_node_run_there_and_a_missing_node_is_refused() {
    let done = output(testapp().arg("pinned"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok pinned"));
}

#[test]
fn an_input_and_an_output_near_the_size_limit_are_journaled_and_answered() {
    let done = output(testapp().arg("big"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok big"));
}

#[test]
fn objects_by_reference_are_read_in_place_fetched_kept_and_freed() {
    let done = output(testapp().arg("objects"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok objects"));
}

#[test]
fn objects_by_reference_work_through_a_pilot_the_driver_attaches_to() {
    let pilot = ServicePilot::start(2);
    let done = pilot.drive("objects");
    objects_freed_and_none_through_the_root(&pilot, &done);
}

/// The objects scenario ended well on `pilot`: every object the driver made is freed
/// once its refs are gone, and the array fetched to the other node went node to node.
fn objects_freed_and_none_through_the_root(pilot: &ServicePilot, done: &Output) {
    assert!(done.status.success(), "{}", stdout(done));
    assert!(stdout(done).contains("ok objects"));
    let status = pilot.status();
    let data = status
        .lines()
        .find(|line| line.starts_with("data"))
        .unwrap();
    assert!(data.contains(" 0 items held"), "{status}");
    assert!(data.contains("(0 through the root"), "{status}");
    assert!(!data.contains(" 0 bytes moved"), "{status}");
}

/// A driver on no node of the pilot, as on a login node: it runs in a mount
/// namespace of its own where the nodes' scratch is an empty tmpfs, so it sees no
/// store. It puts, reads in place and frees the same objects, over data connections
/// to the agents with the pilot's client certificate; no byte through the root.
#[test]
fn objects_by_reference_work_from_a_driver_that_sees_no_nodes_store() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(
        status.lines().any(|line| line.starts_with("Uid:\t0\t")),
        "this test hides the nodes' scratch in a mount namespace: run it as root"
    );
    let pilot = ServicePilot::start(2);
    let status = pilot.status();
    let id = status
        .lines()
        .find_map(|line| line.strip_prefix("pilot"))
        .map(str::trim)
        .unwrap();
    let scratch = std::env::temp_dir().join(format!("saker-{id}"));
    wait_for("both nodes' scratch", Duration::from_secs(30), || {
        scratch.join("node-0").is_dir() && scratch.join("node-1").is_dir()
    });
    // The shell checks that the nodes' marks are hidden before it runs the driver.
    let hidden = format!(
        "mount -t tmpfs none '{0}' && test ! -e '{0}/node-0/.saker-node' && exec \"$@\"",
        scratch.display()
    );
    let done = output(
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                &hidden,
                "sh",
            ])
            .arg(env!("CARGO_BIN_EXE_saker-testapp"))
            .env("SAKER_BIN", saker_bin())
            .arg("--pilot-dir")
            .arg(pilot.path())
            .arg("objects"),
    );
    objects_freed_and_none_through_the_root(&pilot, &done);
}

/// A driver attached to a pilot that goes on ends holding a ref: the object is freed
/// all the same (its free is sent before the driver's process ends).
#[test]
fn objects_a_driver_holds_as_it_ends_are_freed_on_a_pilot_that_goes_on() {
    let pilot = ServicePilot::start(1);
    let done = pilot.drive("put-and-go");
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok put obj-"));
    // (`status` leaves its data line out while no item is held and none moved.)
    let status = pilot.status();
    let data = status.lines().find(|line| line.starts_with("data"));
    assert!(
        data.is_none_or(|data| data.contains(" 0 items held")),
        "{status}"
    );
}

#[test]
fn command_and_mpi_jobs_run_from_the_rust_api() {
    let scratch = tempfile::tempdir().unwrap();
    // An MPICH probe for the PMI part, where MPICH is installed.
    let probe = scratch.path().join("probe");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pilot/tests/mpi/probe.c");
    let built = Command::new("mpicc.mpich")
        .args(["-O2", "-o"])
        .arg(&probe)
        .arg(&source)
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        built || std::env::var("SAKER_REQUIRE_MPI").as_deref() != Ok("1"),
        "SAKER_REQUIRE_MPI=1 but mpicc.mpich cannot build probe.c"
    );
    let mut command = testapp();
    command.arg("commands");
    if built {
        command.arg(&probe);
    }
    let done = output(&mut command);
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok commands"));
    assert_eq!(stdout(&done).contains("ok mpi through pmi"), built);
    assert_eq!(stdout(&done).contains("ok mpi runs from a script"), built);
}

#[test]
fn panics_retries_and_time_limits_come_back_typed() {
    let scratch = tempfile::tempdir().unwrap();
    let done = output(testapp().arg("failures").arg(scratch.path()));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok failures"));
}

#[test]
fn saker_run_app_drives_the_pilot_it_starts_and_exits_with_the_app() {
    let done = output(
        saker()
            .args(["run", "--agents", "2", "--app"])
            .arg(env!("CARGO_BIN_EXE_saker-testapp"))
            .args(["--", "round-trip"]),
    );
    assert!(done.status.success());
    assert!(stdout(&done).contains("ok round trip"));
    // The app's failure is the run's.
    let failed = output(
        saker()
            .args(["run", "--app"])
            .arg(env!("CARGO_BIN_EXE_saker-testapp"))
            .args(["--", "no-such-scenario"]),
    );
    assert_eq!(failed.status.code(), Some(1));
    // Task flags would not reach typed tasks: refused, not ignored.
    let refused = output(
        saker()
            .args(["run", "--cores", "2", "--app"])
            .arg(env!("CARGO_BIN_EXE_saker-testapp"))
            .args(["--", "round-trip"]),
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--cores does not apply"));
}

/// A driver built differently from the pilot's workers: a changed type is refused
/// with a typed error naming the task, never read as the wrong type; a task the
/// workers lack is refused as unknown.
#[test]
fn a_driver_and_workers_of_different_builds_get_typed_refusals() {
    let pilot = ServicePilot::start(1);
    let mismatch = output(
        testapp()
            .env("SAKER_TESTAPP_V2", "1")
            .arg("--pilot-dir")
            .arg(pilot.path())
            .arg("v2"),
    );
    assert!(mismatch.status.success(), "{}", stdout(&mismatch));
    assert!(stdout(&mismatch).contains("different versions"));
    let unknown = output(
        testapp()
            .env("SAKER_TESTAPP_EXTRA", "1")
            .arg("--pilot-dir")
            .arg(pilot.path())
            .arg("extra"),
    );
    assert!(unknown.status.success(), "{}", stdout(&unknown));
    assert!(
        stdout(&unknown).contains("no task named"),
        "{}",
        stdout(&unknown)
    );
}

/// The agent of `node`: a worker it is starting shows the agent's command line until
/// it execs, so a match whose parent matches too is skipped.
fn agent_pid(dir: &Path, node: u32) -> Option<u32> {
    let pattern = format!("agent --dir {} --node {node} ", dir.display());
    let matching: Vec<(u32, Option<u32>)> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&pattern).then(|| (pid, parent_pid(pid)))
        })
        .collect();
    matching
        .iter()
        .find(|(_, parent)| !matching.iter().any(|(pid, _)| Some(*pid) == *parent))
        .map(|(pid, _)| *pid)
}

/// SIGKILLs the agent of `node`.
fn kill_agent(dir: &Path, node: u32) {
    let victim = agent_pid(dir, node).expect("the node's agent runs");
    let killed = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// SIGKILL of an agent while typed tasks run on it: they are replayed on the others,
/// and the driver gets every output once, in order, none lost.
#[test]
fn typed_tasks_of_a_killed_agent_are_replayed_elsewhere() {
    let pilot = ServicePilot::start(3);
    let mut driver = testapp()
        .arg("--pilot-dir")
        .arg(pilot.path())
        .args(["naps", "30", "400"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    // Once work flows, kill node 1's agent mid-task.
    let first = lines.next().expect("a line").unwrap();
    assert!(first.starts_with("done"), "{first}");
    kill_agent(&pilot.path(), 1);
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = driver.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    let last = rest.last().expect("a summary");
    assert!(last.starts_with("ok 30 naps"), "{last}");
    let summary = pilot.status();
    let replayed: u64 = summary
        .split_whitespace()
        .skip_while(|word| *word != "replayed")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a replay count");
    assert!(replayed >= 1, "{summary}");
}

/// The pilot's root is SIGKILLed while a driver attached with `--pilot-dir` waits on
/// a map; a standby root takes over, the driver reconnects on its own and gets every
/// output once, in order.
#[test]
fn a_driver_reconnects_to_a_standby_that_takes_over() {
    let worker = format!("rust={}", env!("CARGO_BIN_EXE_saker-testapp"));
    let pilot = ServicePilot::start_with(
        3,
        &[
            OsStr::new("--worker"),
            OsStr::new(&worker),
            OsStr::new("--standby"),
            OsStr::new("1"),
        ],
    );
    let mut driver = testapp()
        .arg("--pilot-dir")
        .arg(pilot.path())
        .args(["naps", "30", "300"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a line").unwrap();
    assert!(first.starts_with("done"), "{first}");
    // `PID HOST NODE`, as the root writes it.
    let holder = std::fs::read_to_string(pilot.path().join("root.lock")).unwrap();
    let root = holder.split_whitespace().next().unwrap();
    let killed = Command::new("kill").args(["-KILL", root]).status().unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = driver.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    let last = rest.last().expect("a summary");
    assert!(last.starts_with("ok 30 naps"), "{last}");
    let summary = pilot.status();
    assert!(summary.contains("a standby that took over"), "{summary}");
}

#[test]
fn actors_answer_calls_and_casts_carry_refs_restart_and_stop_on_an_embedded_pilot() {
    let done = output(testapp().arg("actors"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok actors"));
}

/// SIGKILL of the agent an actor runs on, with a call in flight: the call fails as
/// lost, the actor starts again on another node, and later calls succeed.
#[test]
fn an_actor_of_a_killed_agent_restarts_elsewhere_and_its_call_in_flight_is_lost() {
    let pilot = ServicePilot::start_app(3);
    wait_for("three agents", Duration::from_secs(30), || {
        pilot.status().contains("agents    3 ")
    });
    let mut driver = testapp()
        .arg("--pilot-dir")
        .arg(pilot.path())
        .arg("actor-loss")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("a line").unwrap();
    assert_eq!(ready, "ready");
    kill_agent(&pilot.path(), 1);
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = driver.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    assert!(
        rest.iter().any(|line| line.starts_with("in flight: lost")),
        "{rest:?}"
    );
    assert!(
        rest.last().is_some_and(|l| l.starts_with("ok actor loss")),
        "{rest:?}"
    );
}

/// Runs the `actor-takeover` driver against `pilot`: once its actor holds state,
/// `kill` kills the root (and starts another, if it must); the driver's next calls
/// must find the actor with that state.
fn actor_outlives_its_root(pilot: &mut ServicePilot, kill: impl FnOnce(&mut ServicePilot)) {
    let mut driver = testapp()
        .arg("--pilot-dir")
        .arg(pilot.path())
        .arg("actor-takeover")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("a line").unwrap();
    assert_eq!(ready, "ready");
    kill(pilot);
    let mut stdin = driver.stdin.take().unwrap();
    writeln!(stdin, "killed").unwrap();
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect();
    let status = driver.wait().unwrap();
    assert!(status.success(), "{rest:?}");
    assert!(
        rest.last().is_some_and(|l| l == "ok actor takeover"),
        "{rest:?}"
    );
}

/// The pid of the pilot's root, from its lock.
fn root_pid(pilot: &ServicePilot) -> String {
    let holder = std::fs::read_to_string(pilot.path().join("root.lock")).unwrap();
    holder.split_whitespace().next().unwrap().to_owned()
}

/// SIGKILL of the root while an actor with state runs, the pilot resumed at once: the
/// agents keep the actor running while no root hears them, the resumed root adopts
/// it in its life, and the driver's next call gets the state it had.
#[test]
fn an_actor_keeps_its_state_and_node_when_its_root_is_killed_and_resumed() {
    let app = env!("CARGO_BIN_EXE_saker-testapp");
    let shape = [
        "--agents",
        "3",
        "--slots",
        "3",
        "--fanout",
        "2",
        "--heartbeat-interval",
        "200ms",
        "--heartbeat-timeout",
        "1s",
    ];
    let mut pilot = ServicePilot::start_app(3);
    wait_for("three agents", Duration::from_secs(30), || {
        pilot.status().contains("agents    3 ")
    });
    actor_outlives_its_root(&mut pilot, |pilot| {
        // The root and the program it drives (`serve`) die, as a batch step's would;
        // its agents are its children too, and live on, waiting for a root.
        let root = root_pid(pilot);
        let served = output(Command::new("pgrep").args(["-P", &root, "-f", "serve$"]));
        let killed = Command::new("kill")
            .arg("-KILL")
            .arg(&root)
            .args(stdout(&served).split_whitespace())
            .status()
            .unwrap();
        assert!(killed.success());
        pilot.child.wait().unwrap();
        let _ = std::fs::remove_file(pilot.path().join("client.json"));
        pilot.child = saker()
            .args(["pilot", "--resume"])
            .args(shape)
            .arg("--dir")
            .arg(pilot.path())
            .arg("--app")
            .arg(app)
            .args(["--", "serve"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
    });
}

/// SIGKILL of the root while an actor with state runs, a standby taking over (the
/// program that drives the pilot is kept by the `saker pilot` process, not by the
/// root): the actor runs on in its life, and the driver's next call gets the state it
/// had.
#[test]
fn an_actor_keeps_its_state_and_node_across_a_takeover() {
    let app = OsStr::new(env!("CARGO_BIN_EXE_saker-testapp"));
    let args = [
        OsStr::new("--standby"),
        OsStr::new("1"),
        OsStr::new("--app"),
        app,
        OsStr::new("--"),
        OsStr::new("serve"),
    ];
    let mut pilot = ServicePilot::start_with(3, &args);
    wait_for(
        "three agents and a standby",
        Duration::from_secs(30),
        || {
            let status = pilot.status();
            status.contains("agents    3 ") && status.contains("standbys  1")
        },
    );
    actor_outlives_its_root(&mut pilot, |pilot| {
        let killed = Command::new("kill")
            .args(["-KILL", &root_pid(pilot)])
            .status()
            .unwrap();
        assert!(killed.success());
    });
    let summary = pilot.status();
    assert!(summary.contains("a standby that took over"), "{summary}");
}

/// A driver whose actor type differs from the nodes' build is refused at the spawn
/// with a typed error; a pilot whose agents are not the application hosts none.
#[test]
fn actors_of_another_build_or_without_a_host_are_refused_typed() {
    let app = ServicePilot::start_app(1);
    let mismatch = output(
        testapp()
            .env("SAKER_TESTAPP_V2", "1")
            .arg("--pilot-dir")
            .arg(app.path())
            .arg("actor-v2"),
    );
    assert!(mismatch.status.success(), "{}", stdout(&mismatch));
    assert!(stdout(&mismatch).contains("ok actor type mismatch"));
    drop(app);
    let plain = ServicePilot::start(1);
    let no_host = output(
        testapp()
            .arg("--pilot-dir")
            .arg(plain.path())
            .arg("actor-nohost"),
    );
    assert!(no_host.status.success(), "{}", stdout(&no_host));
    assert!(stdout(&no_host).contains("ok no actor host"));
}

#[test]
fn typed_tasks_wait_for_other_jobs_and_for_their_time() {
    let done = output(testapp().arg("when"));
    assert!(done.status.success(), "{}", stdout(&done));
    assert!(stdout(&done).contains("ok when"));
}
