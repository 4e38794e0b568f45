//! Running one attempt as a child process: spawn, capture output, enforce the time
//! limit, kill on cancel.
//!
//! An attempt runs on its slot's own thread, blocking, the way a plain spawn-and-wait
//! loop does: spawn, `poll` the output pipes and the child's pidfd, reap. Run as tokio
//! futures instead, every attempt paid for epoll registrations and cross-thread
//! wake-ups, about 15 % of no-op throughput on 2 cores.
//!
//! Each attempt runs in its own process group so that a time limit or cancel kills
//! everything the task started, not only its first process. The group is registered
//! with this process's [reaper](crate::reaper), if any, for as long as it runs, so it
//! dies with the agent too.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use saker_wire::messages::{Outcome, Output};

use crate::spawn::{self, Ended};

/// Everything needed to start one attempt.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<String>,
    /// Overrides applied on top of the agent's own environment.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    pub time_limit: Option<Duration>,
    /// Bytes of each stream kept in memory and returned inline.
    pub inline_limit: usize,
    /// Where a stream longer than `inline_limit` is written in full.
    pub spill_dir: PathBuf,
    /// File stem for spill files, unique per attempt (e.g. `t42.a7`).
    pub spill_stem: String,
}

/// How an attempt ended, with its captured output.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub outcome: Outcome,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    pub stdout: Output,
    pub stderr: Output,
}

pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Why an attempt was stopped before it ended by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Cancelled,
    TimedOut,
    /// Its owner went away (the slot's executor crashed, or the agent is exiting).
    Detached,
}

/// What a running attempt and whoever may stop it share: its process group while it
/// is safe to signal, and the first reason to stop it.
#[derive(Debug, Default)]
pub struct Control {
    state: Mutex<ControlState>,
}

#[derive(Debug, Default)]
struct ControlState {
    /// Set from the spawn until just before the leader is reaped: after that the id
    /// may belong to somebody else.
    pgid: Option<u32>,
    stop: Option<Stop>,
    over: bool,
}

impl Control {
    pub fn new() -> Arc<Control> {
        Arc::default()
    }

    /// Stops the attempt (now, or as soon as it has started). The first reason given
    /// is the one reported; a stop after the attempt ended does nothing.
    pub fn stop(&self, why: Stop) {
        let mut state = self.lock();
        if state.over {
            return;
        }
        state.stop.get_or_insert(why);
        kill_group(state.pgid);
    }

    /// Why the attempt was stopped, if it was.
    pub fn stopped(&self) -> Option<Stop> {
        self.lock().stop
    }

    fn started(&self, pgid: u32) {
        let mut state = self.lock();
        state.pgid = Some(pgid);
        if state.stop.is_some() {
            kill_group(state.pgid);
        }
    }

    /// The attempt is about to be reaped: no more signals; returns why it was stopped.
    fn end(&self) -> Option<Stop> {
        let mut state = self.lock();
        state.over = true;
        state.pgid = None;
        state.stop
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The owner's hold on a running attempt: stops it on request, and when dropped.
#[derive(Debug)]
pub struct StopHandle(Arc<Control>);

impl StopHandle {
    /// A handle for `control`, and the attempt's side of it.
    pub fn new() -> (StopHandle, Arc<Control>) {
        let control = Control::new();
        (StopHandle(control.clone()), control)
    }

    pub fn cancel(self) {
        self.0.stop(Stop::Cancelled);
    }
}

impl Drop for StopHandle {
    fn drop(&mut self) {
        self.0.stop(Stop::Detached);
    }
}

/// Reused by one slot from attempt to attempt.
#[derive(Debug)]
pub struct Scratch {
    buf: Vec<u8>,
    /// Every task's stdin, opened once (`None` if it could not be: then each spawn
    /// opens its own).
    null: Option<File>,
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            buf: vec![0u8; 16 * 1024],
            null: File::open("/dev/null").ok(),
        }
    }
}

/// A timer this thread keeps for someone else while it waits on an attempt: when
/// `at` passes, `ring` runs and says when to ring next. (The agent's paced reports
/// ride on it, so a busy node needs no timer of its own.)
pub struct Alarm<'a> {
    at: Option<Instant>,
    ring: &'a mut dyn FnMut() -> Option<Instant>,
}

impl std::fmt::Debug for Alarm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alarm")
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

impl<'a> Alarm<'a> {
    pub fn new(at: Option<Instant>, ring: &'a mut dyn FnMut() -> Option<Instant>) -> Self {
        Alarm { at, ring }
    }

    /// When it rings next.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Rings if its time has come. A next time that has passed already is dropped
    /// rather than rung in a loop.
    fn check(&mut self, now: Instant) {
        if self.at.is_some_and(|at| at <= now) {
            self.at = (self.ring)().filter(|next| *next > now);
        }
    }
}

/// Runs `launch` to completion on this thread. Never panics on anything the task
/// does; every failure becomes an [`Outcome`].
pub fn run(launch: &Launch, control: &Control, scratch: &mut Scratch) -> Finished {
    run_with(
        launch,
        control,
        scratch,
        &mut Alarm::new(None, &mut || None),
    )
}

/// [`run`], ringing `alarm` on time meanwhile.
pub fn run_with(
    launch: &Launch,
    control: &Control,
    scratch: &mut Scratch,
    alarm: &mut Alarm<'_>,
) -> Finished {
    let start = unix_micros();
    let failed = |reason: String| Finished {
        outcome: Outcome::SpawnFailed { reason },
        start_unix_us: start,
        end_unix_us: unix_micros(),
        stdout: Output::default(),
        stderr: Output::default(),
    };
    let Some(program) = launch.argv.first() else {
        control.end();
        return failed("empty command line".to_string());
    };
    let started = match spawn::start(launch, scratch.null.as_ref()) {
        Ok(started) => started,
        Err(error) => {
            control.end();
            return failed(spawn_reason(program, launch.cwd.as_deref(), &error));
        }
    };
    let pid = started.pid;
    let mut group = Group::register(pid);
    control.started(pid);
    let mut stdout = Capture::new(started.stdout, launch, "stdout");
    let mut stderr = Capture::new(started.stderr, launch, "stderr");
    let Some(leader) = rustix::process::Pid::from_raw(pid as i32) else {
        unreachable!("a started process has a positive pid");
    };
    watch(
        leader,
        &mut stdout,
        &mut stderr,
        launch.time_limit.map(|limit| Instant::now() + limit),
        control,
        &mut scratch.buf,
        alarm,
    );
    let stop = control.end();
    let status = spawn::wait(pid);
    group.finished();
    let outcome = match (stop, status) {
        (Some(Stop::Cancelled), _) => Outcome::Cancelled,
        (Some(Stop::TimedOut), _) => Outcome::TimedOut,
        (Some(Stop::Detached), _) => Outcome::Lost {
            reason: "attempt detached from its agent".to_string(),
        },
        (None, Ok(Ended::Exited(code))) => Outcome::Exited { code },
        (None, Ok(Ended::Signaled(signal))) => Outcome::Signaled { signal },
        (None, Err(error)) => Outcome::Lost {
            reason: format!("waiting for the task failed: {error}"),
        },
    };
    Finished {
        outcome,
        start_unix_us: start,
        end_unix_us: unix_micros(),
        stdout: stdout.finish(),
        stderr: stderr.finish(),
    }
}

/// Reads both streams to their end and waits for the leader to exit, killing the
/// group at the time limit and ringing the alarm on time. Until this returns, a stop
/// can still kill the group.
fn watch(
    leader: rustix::process::Pid,
    stdout: &mut Capture<'_>,
    stderr: &mut Capture<'_>,
    mut deadline: Option<Instant>,
    control: &Control,
    buf: &mut [u8],
    alarm: &mut Alarm<'_>,
) {
    // Opened only once the output has closed: most tasks have exited by then, and a
    // pidfd per attempt costs a file and an inode.
    let mut pidfd: Option<OwnedFd> = None;
    loop {
        if stdout.stream.is_none() && stderr.stream.is_none() && pidfd.is_none() {
            if has_exited(leader) {
                return;
            }
            // The task closed its output but runs on. (Without pidfds, before Linux
            // 5.3, it then outlives its time limit and cannot be stopped.)
            match rustix::process::pidfd_open(leader, rustix::process::PidfdFlags::empty()) {
                Ok(fd) => pidfd = Some(fd),
                Err(_) => return,
            }
        }
        let wake_at = match (deadline, alarm.at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = match wake_at {
            // Rounded up: waking a little early would only loop once more.
            Some(at) => PollTimeout::try_from(
                at.saturating_duration_since(Instant::now())
                    .as_micros()
                    .div_ceil(1000)
                    .min(i32::MAX as u128) as i32,
            )
            .unwrap_or(PollTimeout::MAX),
            None => PollTimeout::NONE,
        };
        let ready = wait_ready(
            [
                stdout.stream.as_ref().map(AsFd::as_fd),
                stderr.stream.as_ref().map(AsFd::as_fd),
                pidfd.as_ref().map(AsFd::as_fd),
            ],
            timeout,
        );
        let now = Instant::now();
        alarm.check(now);
        let Some([out, err, exited]) = ready else {
            if deadline.is_some_and(|at| at <= now) {
                // The time limit passed: kill the group; its output closes as it dies.
                control.stop(Stop::TimedOut);
                deadline = None;
            }
            continue;
        };
        if out {
            stdout.read_some(buf);
        }
        if err {
            stderr.read_some(buf);
        }
        if exited {
            return; // The output had closed already.
        }
    }
}

/// Whether the leader has exited, leaving it to be reaped: until then its id stays
/// ours to signal. An error counts as exited, so that `wait` tells what went wrong.
fn has_exited(leader: rustix::process::Pid) -> bool {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    !matches!(waitid(WaitId::Pid(leader), options), Ok(None))
}

/// Polls the present descriptors; which are ready, or `None` on timeout.
fn wait_ready(fds: [Option<BorrowedFd<'_>>; 3], timeout: PollTimeout) -> Option<[bool; 3]> {
    let mut polled = Vec::with_capacity(3);
    let mut slots = Vec::with_capacity(3);
    for (slot, fd) in fds.into_iter().enumerate() {
        if let Some(fd) = fd {
            polled.push(PollFd::new(fd, PollFlags::POLLIN));
            slots.push(slot);
        }
    }
    let mut ready = [false; 3];
    match poll(&mut polled, timeout) {
        Ok(0) => return None,
        Ok(_) => {
            for (fd, &slot) in polled.iter().zip(&slots) {
                ready[slot] = fd.revents().is_some_and(|r| !r.is_empty());
            }
        }
        Err(Errno::EINTR) => {}
        Err(error) => {
            // Not expected with valid descriptors: treat all as ended rather than spin.
            tracing::warn!(%error, "polling a task's output failed");
            for &slot in &slots {
                ready[slot] = true;
            }
        }
    }
    Some(ready)
}

/// One output stream being read: the first `inline_limit` bytes are kept; if the
/// stream is longer, all of it goes to a spill file and the path is reported.
struct Capture<'a> {
    /// Until its end (or a read error).
    stream: Option<File>,
    launch: &'a Launch,
    name: &'static str,
    inline: Vec<u8>,
    total: u64,
    spill: Option<(File, PathBuf)>,
    spill_failed: Option<String>,
}

impl<'a> Capture<'a> {
    fn new(stream: File, launch: &'a Launch, name: &'static str) -> Self {
        Capture {
            stream: Some(stream),
            launch,
            name,
            inline: Vec::new(),
            total: 0,
            spill: None,
            spill_failed: None,
        }
    }

    /// One read (the stream was reported ready, so it does not block).
    fn read_some(&mut self, buf: &mut [u8]) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        match stream.read(buf) {
            Ok(0) => self.stream = None,
            Ok(n) => self.push(&buf[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(%error, stream = self.name, "reading task output failed");
                self.stream = None;
            }
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let n = chunk.len();
        self.total += n as u64;
        if self.spill.is_none()
            && self.spill_failed.is_none()
            && self.inline.len() + n <= self.launch.inline_limit
        {
            self.inline.extend_from_slice(chunk);
            return;
        }
        if self.spill.is_none() && self.spill_failed.is_none() {
            let path = self
                .launch
                .spill_dir
                .join(format!("{}.{}", self.launch.spill_stem, self.name));
            match open_spill(&path, &self.inline) {
                Ok(file) => self.spill = Some((file, path)),
                Err(error) => self.spill_failed = Some(format!("{}: {error}", path.display())),
            }
            let room = self.launch.inline_limit.saturating_sub(self.inline.len());
            self.inline.extend_from_slice(&chunk[..room.min(n)]);
        }
        if let Some((file, path)) = &mut self.spill
            && let Err(error) = file.write_all(chunk)
        {
            self.spill_failed = Some(format!("{}: {error}", path.display()));
            self.spill = None;
        }
    }

    fn finish(self) -> Output {
        let spill_path = match (self.spill, self.spill_failed) {
            (Some((mut file, path)), None) => {
                let _ = file.flush();
                Some(path.display().to_string())
            }
            (_, Some(reason)) => {
                tracing::warn!(%reason, "could not spill task output; only the inline part is kept");
                None
            }
            (None, None) => None,
        };
        Output {
            inline: self.inline,
            total_bytes: self.total,
            spill_path,
        }
    }
}

fn open_spill(path: &Path, already: &[u8]) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = File::create(path)?;
    file.write_all(already)?;
    Ok(file)
}

/// An attempt's process group while it is registered with the reaper. Dropped before
/// [`Group::finished`] (a panic unwound past the attempt) it kills the group first.
struct Group {
    pgid: u32,
    done: bool,
}

impl Group {
    fn register(pgid: u32) -> Group {
        // A kill of the agent between spawn and this write leaves the group unprotected;
        // the window is a few microseconds.
        if let Some(reaper) = crate::reaper::installed() {
            reaper.register(pgid);
        }
        Group { pgid, done: false }
    }

    /// The leader is reaped and the output pipes are closed (the group was killed, or
    /// every process of it ended or let go of its output), so the group is over.
    /// Remaining window: a member that closed its output and lives on is no longer
    /// covered; and once the group is empty its id could be reused before the reaper
    /// reads the release, which needs the pid space to wrap meanwhile.
    fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.done {
            kill_group(Some(self.pgid));
        }
        if let Some(reaper) = crate::reaper::installed() {
            reaper.release(self.pgid);
        }
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // ESRCH (already gone) is expected and harmless.
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}

fn spawn_reason(program: &str, cwd: Option<&Path>, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => match cwd {
            Some(cwd) if !cwd.is_dir() => {
                format!("working directory {} does not exist", cwd.display())
            }
            _ => format!("program not found: {program}"),
        },
        io::ErrorKind::PermissionDenied => format!("permission denied running {program}"),
        _ => format!("could not start {program}: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(argv: &[&str], dir: &Path) -> Launch {
        Launch {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("SAKER_TEST_VALUE".into(), "forty-two".into())],
            cwd: None,
            time_limit: None,
            inline_limit: 16,
            spill_dir: dir.to_path_buf(),
            spill_stem: "t1.a1".into(),
        }
    }

    fn run_now(launch: Launch) -> Finished {
        run(&launch, &Control::default(), &mut Scratch::default())
    }

    /// Runs `launch` on a thread of its own; its control stays here.
    fn run_aside(launch: Launch) -> (Arc<Control>, std::thread::JoinHandle<Finished>) {
        let control = Control::new();
        let theirs = control.clone();
        let thread = std::thread::spawn(move || run(&launch, &theirs, &mut Scratch::default()));
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

    /// Whether `pid` runs (a zombie has finished).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim().chars().next());
            !matches!(state, None | Some('Z' | 'X'))
        })
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
        let task = std::thread::spawn(move || run(&sleep, &theirs, &mut Scratch::default()));
        handle.cancel();
        assert_eq!(task.join().unwrap().outcome, Outcome::Cancelled);

        let (owner, control) = StopHandle::new();
        let sleep = launch(&["sleep", "30"], dir.path());
        let task = std::thread::spawn(move || run(&sleep, &control, &mut Scratch::default()));
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

    #[test]
    fn the_alarm_rings_on_time_while_an_attempt_runs() {
        let dir = tempfile::tempdir().unwrap();
        let gate = dir.path().join("gate");
        let wait = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
        let mut task = launch(&["sh", "-c", &wait], dir.path());
        // Should the alarm never ring, the attempt times out rather than hangs.
        task.time_limit = Some(Duration::from_secs(20));
        let mut rings = 0;
        let finished = {
            // Only the alarm opens the gate. Its next time has passed already: it is
            // dropped, not rung over and over.
            let mut ring = || {
                rings += 1;
                std::fs::write(&gate, b"").unwrap();
                Instant::now().checked_sub(Duration::from_millis(1))
            };
            let at = Instant::now() + Duration::from_millis(20);
            let mut alarm = Alarm::new(Some(at), &mut ring);
            let finished = run_with(
                &task,
                &Control::default(),
                &mut Scratch::default(),
                &mut alarm,
            );
            assert_eq!(alarm.at(), None);
            finished
        };
        assert_eq!(finished.outcome, Outcome::Exited { code: 0 });
        assert_eq!(rings, 1);
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
        let runner = std::thread::spawn(move || run(&task, &control, &mut Scratch::default()));
        assert!(appears(&marker), "the task never closed its output");
        let started = Instant::now();
        stop.cancel();
        assert_eq!(runner.join().unwrap().outcome, Outcome::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn the_alarm_still_rings_after_a_task_closed_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let gate = dir.path().join("gate");
        let then = format!("while [ ! -e '{}' ]; do sleep 0.01; done", gate.display());
        let task = closing_output(&then, dir.path());
        let (stop, control) = StopHandle::new();
        let opener = gate.clone();
        let runner = std::thread::spawn(move || {
            let mut ring = || {
                std::fs::write(&opener, b"").unwrap();
                None
            };
            let at = Instant::now() + Duration::from_millis(200);
            let mut alarm = Alarm::new(Some(at), &mut ring);
            run_with(&task, &control, &mut Scratch::default(), &mut alarm)
        });
        // Should the alarm not ring, the attempt is cancelled rather than left hanging.
        let rang = appears(&gate);
        if !rang {
            stop.cancel();
        }
        let finished = runner.join().unwrap();
        assert!(rang, "the alarm never rang");
        assert_eq!(finished.outcome, Outcome::Exited { code: 0 });
    }

    #[test]
    fn a_stop_before_the_spawn_kills_the_attempt_as_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let control = Control::new();
        control.stop(Stop::Cancelled);
        let started = std::time::Instant::now();
        let finished = run(
            &launch(&["sleep", "30"], dir.path()),
            &control,
            &mut Scratch::default(),
        );
        assert_eq!(finished.outcome, Outcome::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(10));
        // Over: a late stop does nothing (and signals nobody).
        control.stop(Stop::TimedOut);
        assert_eq!(control.stopped(), Some(Stop::Cancelled));
    }
}
