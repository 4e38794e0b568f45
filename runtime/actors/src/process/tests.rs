use super::*;
use std::sync::Arc;
use std::time::Duration;

use crate::test_support::alive;

fn launch(argv: &[&str], dir: &Path) -> Launch {
    let mut launch = Launch::of(argv, &[("SAKER_TEST_VALUE", "forty-two")], dir);
    launch.inline_limit = 16;
    launch.spill_stem = "t1.a1".into();
    launch
}

/// Runs `launch` here with plenty of resources.
fn run_now(launch: Launch) -> Finished {
    run_with(&launch, &Control::default())
}

fn run_with(launch: &Launch, control: &Control) -> Finished {
    run(launch, control, &mut Scratch::default()).expect("resources to start a task")
}

/// Runs `launch` on a thread of its own; its control stays here.
fn run_aside(launch: Launch) -> (Arc<Control>, std::thread::JoinHandle<Finished>) {
    let control = Control::new();
    let theirs = control.clone();
    let thread = std::thread::spawn(move || run_with(&launch, &theirs));
    (control, thread)
}

#[test]
fn exit_codes_signals_and_environment_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let ok = run_now(launch(
        &["sh", "-c", "printf %s \"$SAKER_TEST_VALUE\""],
        dir.path(),
    ));
    assert_eq!(ok.outcome, Outcome::Exited { code: 0 });
    assert_eq!(ok.stdout.inline, b"forty-two");
    assert_eq!(ok.stdout.spill_path, None);
    let failed = run_now(launch(&["sh", "-c", "echo oops >&2; exit 7"], dir.path()));
    assert_eq!(failed.outcome, Outcome::Exited { code: 7 });
    assert_eq!(failed.stderr.inline, b"oops\n");
    let killed = run_now(launch(&["sh", "-c", "kill -9 $$"], dir.path()));
    assert_eq!(killed.outcome, Outcome::Signaled { signal: 9 });
}

#[test]
fn a_missing_program_fails_with_that_reason() {
    let dir = tempfile::tempdir().unwrap();
    let finished = run_now(launch(&["/no/such/program-xyz"], dir.path()));
    assert_eq!(
        finished.outcome,
        Outcome::SpawnFailed {
            reason: "program not found: /no/such/program-xyz".into()
        }
    );
    let mut bad_cwd = launch(&["true"], dir.path());
    bad_cwd.cwd = Some(dir.path().join("missing"));
    let finished = run_now(bad_cwd);
    let Outcome::SpawnFailed { reason } = finished.outcome else {
        panic!("spawned")
    };
    assert!(reason.contains("working directory"), "{reason}");
}

/// Out of file descriptors, no task can start, whatever its program: that is this
/// node's fault, told apart from the task's own (a missing program, with descriptors
/// to spare). Lowers this process's limit, so it runs alone in a child process.
#[test]
fn a_node_out_of_descriptors_starts_nothing_but_a_missing_program_is_the_tasks_fault() {
    if !crate::test_support::in_child_process(
        module_path!(),
        "a_node_out_of_descriptors_starts_nothing_but_a_missing_program_is_the_tasks_fault",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = launch(&["/no/such/program-xyz"], dir.path());
    let mut scratch = Scratch::default();
    let control = Control::default();
    let finished = run(&missing, &control, &mut scratch).expect("descriptors to spare");
    assert!(matches!(finished.outcome, Outcome::SpawnFailed { .. }));

    let limit = crate::test_support::exhaust_open_files();
    let mut in_a_directory = launch(&["true"], dir.path());
    in_a_directory.cwd = Some(dir.path().to_path_buf()); // started by `Command`
    for task in [launch(&["true"], dir.path()), in_a_directory, missing] {
        let control = Control::default();
        match run(&task, &control, &mut scratch) {
            Err(ResourceError {
                resource: Resource::FileDescriptors,
                source,
                ..
            }) => assert_eq!(source.raw_os_error(), Some(libc::EMFILE)),
            other => panic!("{:?} started: {other:?}", task.argv()),
        }
    }
    crate::test_support::restore_open_files(limit);
    let finished = run(&launch(&["true"], dir.path()), &control, &mut scratch).unwrap();
    assert_eq!(finished.outcome, Outcome::Exited { code: 0 });
}

#[test]
fn long_output_is_kept_inline_up_to_the_limit_and_spilled_whole() {
    let dir = tempfile::tempdir().unwrap();
    let finished = run_now(launch(&["sh", "-c", "seq 1 10000"], dir.path()));
    let expected: String = (1..=10000).map(|i| format!("{i}\n")).collect();
    assert_eq!(finished.stdout.total_bytes, expected.len() as u64);
    assert_eq!(finished.stdout.inline, &expected.as_bytes()[..16]);
    let path = finished.stdout.spill_path.expect("spilled");
    assert_eq!(std::fs::read_to_string(path).unwrap(), expected);
}

#[test]
fn time_limit_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    // The background child holds stdout open: if it survived the kill, capturing
    // output would not finish for 30 s.
    let mut limited = launch(&["sh", "-c", "(sleep 30) & sleep 30"], dir.path());
    limited.time_limit = Some(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let finished = run_now(limited);
    assert_eq!(finished.outcome, Outcome::TimedOut);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_stopped_attempt_kills_its_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("background.pid");
    // The background sleep lets go of the output: only a kill of the group ends it.
    let script = format!(
        "sleep 30 >/dev/null 2>&1 & echo $! > {f}.tmp; mv {f}.tmp {f}; wait",
        f = pid_file.display()
    );
    let (control, attempt) = run_aside(launch(&["sh", "-c", &script], dir.path()));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let background: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            break text.trim().parse().unwrap();
        }
        assert!(!attempt.is_finished(), "the attempt ended early");
        assert!(
            std::time::Instant::now() < deadline,
            "the task never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(alive(background));
    control.stop(Stop::Detached);
    let finished = attempt.join().unwrap();
    assert!(
        matches!(finished.outcome, Outcome::Lost { .. }),
        "{:?}",
        finished.outcome
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive(background) {
        assert!(
            std::time::Instant::now() < deadline,
            "the background process outlived its stopped attempt"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// With a reaper installed, every attempt's group is registered after the spawn and
/// released at its end. (Process-wide: other tests' attempts may show up too.)
#[test]
fn an_attempt_registers_its_group_with_the_reaper_for_its_lifetime() {
    use std::io::BufRead;
    let (read, write) = std::io::pipe().unwrap();
    if !crate::reaper::install(crate::reaper::Reaper::from_pipe(write)) {
        return; // Another test of this process installed one first.
    }
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(read).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let finished = run_now(launch(&["sh", "-c", "echo $$"], dir.path()));
    let pid = String::from_utf8(finished.stdout.inline).unwrap();
    let pid = pid.trim();
    let expected = [format!("+{pid}"), format!("-{pid}")];
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let line = lines_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        if line.get(1..) == Some(pid) {
            seen.push(line);
        }
    }
    assert_eq!(seen, expected);
}

#[test]
fn cancel_kills_and_a_dropped_owner_kills_too() {
    let dir = tempfile::tempdir().unwrap();
    let (handle, control) = StopHandle::new();
    let theirs = control.clone();
    let sleep = launch(&["sleep", "30"], dir.path());
    let task = std::thread::spawn(move || run_with(&sleep, &theirs));
    handle.cancel();
    assert_eq!(task.join().unwrap().outcome, Outcome::Cancelled);

    let (owner, control) = StopHandle::new();
    let sleep = launch(&["sleep", "30"], dir.path());
    let task = std::thread::spawn(move || run_with(&sleep, &control));
    drop(owner);
    let finished = task.join().unwrap();
    assert!(
        matches!(finished.outcome, Outcome::Lost { .. }),
        "{:?}",
        finished.outcome
    );
}

#[test]
fn a_task_that_closes_its_output_is_still_held_to_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut quiet = closing_output("sleep 30", dir.path());
    quiet.time_limit = Some(Duration::from_millis(200));
    let started = std::time::Instant::now();
    assert_eq!(run_now(quiet).outcome, Outcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A task that runs until `gate` exists, or for 20 s at most.
fn gated(gate: &Path, closes_output: bool, dir: &Path) -> Launch {
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
    let mut task = if closes_output {
        closing_output(&wait, dir)
    } else {
        launch(&["sh", "-c", &wait], dir)
    };
    // Should a wait never return, the attempt times out rather than hangs.
    task.time_limit = Some(Duration::from_secs(20));
    task
}

#[test]
fn a_wait_returns_at_its_time_while_the_attempt_runs() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let task = gated(&gate, false, dir.path());
    let control = Control::default();
    let mut scratch = Scratch::default();
    let Start::Running(mut running) = start(&task, &control, &mut scratch) else {
        panic!("not started");
    };
    let at = Instant::now() + Duration::from_millis(20);
    assert!(
        !running.wait_until(Some(at)),
        "the attempt is still running"
    );
    assert!(Instant::now() >= at, "returned early");
    // A time that has passed already returns at once, still running.
    assert!(!running.wait_until(Instant::now().checked_sub(Duration::from_millis(1))));
    std::fs::write(&gate, b"").unwrap();
    assert!(running.wait_until(None));
    assert_eq!(running.finish().outcome, Outcome::Exited { code: 0 });
}

/// A task that closes its output, then runs `then`.
fn closing_output(then: &str, dir: &Path) -> Launch {
    launch(&["sh", "-c", &format!("exec >/dev/null 2>&1; {then}")], dir)
}

/// Whether `path` exists within 20 s.
fn appears(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    path.exists()
}

#[test]
fn a_task_that_closed_its_output_can_still_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("closed");
    let then = format!("touch '{}'; sleep 30", marker.display());
    let task = closing_output(&then, dir.path());
    let (stop, control) = StopHandle::new();
    let runner = std::thread::spawn(move || run_with(&task, &control));
    assert!(appears(&marker), "the task never closed its output");
    let started = Instant::now();
    stop.cancel();
    assert_eq!(runner.join().unwrap().outcome, Outcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Once the output has closed, the wait is on the task's pidfd; it still returns on time.
#[test]
fn a_wait_returns_at_its_time_after_the_task_closed_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let task = gated(&gate, true, dir.path());
    let control = Control::default();
    let mut scratch = Scratch::default();
    let Start::Running(mut running) = start(&task, &control, &mut scratch) else {
        panic!("not started");
    };
    let at = Instant::now() + Duration::from_millis(200);
    assert!(
        !running.wait_until(Some(at)),
        "the attempt is still running"
    );
    assert!(Instant::now() >= at, "returned early");
    assert!(running.pidfd.is_some(), "the output closed within 200 ms");
    std::fs::write(&gate, b"").unwrap();
    assert_eq!(running.finish().outcome, Outcome::Exited { code: 0 });
}

#[test]
fn a_stop_before_the_spawn_kills_the_attempt_as_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let control = Control::new();
    control.stop(Stop::Cancelled);
    let started = std::time::Instant::now();
    let finished = run_with(&launch(&["sleep", "30"], dir.path()), &control);
    assert_eq!(finished.outcome, Outcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Over: a late stop does nothing (and signals nobody).
    control.stop(Stop::TimedOut);
    assert_eq!(control.stopped(), Some(Stop::Cancelled));
}
