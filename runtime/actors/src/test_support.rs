//! For tests that need a real fault of this process: limits are process-wide, so such
//! a test runs alone in a child process of the test binary.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

const CHILD: &str = "SAKER_ACTORS_CHILD_TEST";

/// Whether this process is the child that runs test `name` of module `module` (pass
/// `module_path!()`). Otherwise runs that test alone in a child process, asserts
/// that it passed, and returns false: the caller then returns.
pub(crate) fn in_child_process(module: &str, name: &str) -> bool {
    let module = module.split_once("::").map_or("", |(_, path)| path);
    let test = format!("{module}::{name}");
    if std::env::var(CHILD).is_ok_and(|running| running == test) {
        return true;
    }
    // Invariant: a test binary can find itself.
    let binary = std::env::current_exe().expect("the test binary's path");
    let child = Command::new(binary)
        .args([&test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &test)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test binary starts again");
    let pid = child.id();
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || done_tx.send(child.wait_with_output()));
    let Ok(output) = done.recv_timeout(Duration::from_secs(120)) else {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("{test} did not end within 120 s in its child process");
    };
    let output = output.expect("the child's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test} failed in its child process ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    false
}

/// Lowers this process's limit of open files to what is open now, so that opening
/// one more file fails with `EMFILE` until [`restore_open_files`]. Works for root
/// too. Only for a test alone in its process (see [`in_child_process`]).
pub(crate) fn exhaust_open_files() -> Rlimit {
    let before = getrlimit(Resource::Nofile);
    // Descriptors are allocated lowest first: this is the next one's number.
    let next = File::open("/dev/null").expect("/dev/null").as_raw_fd() as u64;
    let limit = Rlimit {
        current: Some(next),
        maximum: before.maximum,
    };
    setrlimit(Resource::Nofile, limit).expect("lowering a soft limit is always allowed");
    before
}

pub(crate) fn restore_open_files(before: Rlimit) {
    setrlimit(Resource::Nofile, before).expect("raising a soft limit up to the hard one");
}

/// Whether `pid` runs (a zombie has finished).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim().chars().next());
        !matches!(state, None | Some('Z' | 'X'))
    })
}
