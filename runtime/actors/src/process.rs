//! Running one attempt as a child process: spawn, capture output, enforce the time
//! limit, kill on cancel. Nothing here knows who waits for the result or what else
//! its thread does meanwhile.
//!
//! An attempt runs on its slot's own thread, blocking, the way a plain spawn-and-wait
//! loop does: spawn, `poll` the output pipes and the child's pidfd, reap. Run as tokio
//! futures instead, every attempt paid for epoll registrations and cross-thread
//! wake-ups, about 15 % of no-op throughput on 2 cores. A caller with work of its own
//! to do on that thread at a set time waits with [`Running::wait_until`], which hands
//! the thread back at that time (the slot's report clock rides on it, see
//! [`crate::executor`]).
//!
//! Each attempt runs in its own process group so that a time limit or cancel kills
//! everything the task started, not only its first process. The group is registered
//! with this process's [reaper](crate::reaper), if any, for as long as it runs, so it
//! dies with the agent too.
//!
//! A spawn that fails tells whose fault it was: the task's (its program is missing or
//! not executable, its working directory is missing) is its attempt's outcome; this
//! node's (out of file descriptors, processes or memory) is a [`ResourceError`], for
//! the slot's supervisor to handle.

use std::ffi::{CStr, CString, NulError};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use saker_wire::messages::{Outcome, Output};

use crate::spawn::{self, Ended};

mod capture;
mod control;
#[cfg(test)]
mod tests;

pub use crate::attempt::Finished;
use capture::Capture;
pub(crate) use control::Group;
pub use control::{Control, Stop, StopHandle};

/// Everything needed to start one attempt.
///
/// The command line and the task's variables are held as `posix_spawn` takes them, C
/// strings built once, when the launch is (see [`crate::launch`]): that is the one copy
/// of a task's arguments and variables on their way from the job to the process.
#[derive(Debug, Clone)]
pub struct Launch {
    argv: Vec<CString>,
    /// Overrides applied on top of the agent's own environment, as `KEY=value`, one per
    /// key.
    env: Vec<CString>,
    /// An argument or variable held a NUL byte, which no C string can: the launch is
    /// kept, cut short at the NUL, but fails to start.
    nul: bool,
    pub cwd: Option<PathBuf>,
    pub time_limit: Option<Duration>,
    /// Bytes of each stream kept in memory and returned inline.
    pub inline_limit: usize,
    /// Where a stream longer than `inline_limit` is written in full.
    pub spill_dir: PathBuf,
    /// File stem for spill files, unique per attempt (e.g. `t42.a7`).
    pub spill_stem: String,
}

impl Launch {
    /// A launch with an empty command line and no variables of its own yet, with room
    /// for `args` arguments and `vars` variables; output spills to `spill_dir` under
    /// `spill_stem`.
    pub fn new(args: usize, vars: usize, spill_dir: PathBuf, spill_stem: String) -> Launch {
        Launch {
            argv: Vec::with_capacity(args),
            env: Vec::with_capacity(vars),
            nul: false,
            cwd: None,
            time_limit: None,
            inline_limit: 0,
            spill_dir,
            spill_stem,
        }
    }

    /// The command line, program first.
    pub fn argv(&self) -> &[CString] {
        &self.argv
    }

    /// The task's own variables as `KEY=value`, one per key, in the order their last
    /// values were set.
    pub fn env(&self) -> &[CString] {
        &self.env
    }

    /// The program, as given (not looked up), if the command line is not empty.
    pub fn program(&self) -> Option<&CStr> {
        self.argv.first().map(CString::as_c_str)
    }

    /// Whether an argument or variable held a NUL byte: such a launch cannot start.
    pub fn has_nul(&self) -> bool {
        self.nul
    }

    /// Appends `arg` to the command line (copying it).
    pub fn arg(&mut self, arg: &[u8]) {
        let arg = self.c_string(CString::new(arg));
        self.argv.push(arg);
    }

    /// Appends an argument already built, without its terminating NUL. Allocated with
    /// room for exactly one byte more, it becomes a C string in place.
    pub fn arg_bytes(&mut self, arg: Vec<u8>) {
        let arg = self.c_string(CString::new(arg));
        self.argv.push(arg);
    }

    /// Sets the task's variable `key` to `value` (copying them): a key set again keeps
    /// only its last value.
    pub fn set_var(&mut self, key: &[u8], value: &[u8]) {
        let mut entry = Vec::with_capacity(key.len() + value.len() + 2);
        entry.extend_from_slice(key);
        entry.push(b'=');
        entry.extend_from_slice(value);
        // What the task will read as the key: up to the first `=` (a valid key has none).
        let key = entry.split(|&b| b == b'=').next().unwrap_or_default();
        if let Some(earlier) = self.env.iter().position(|e| sets(e, key)) {
            self.env.remove(earlier);
        }
        let entry = self.c_string(CString::new(entry));
        self.env.push(entry);
    }

    /// The value the task's own variables give `key`, if they set it.
    pub fn var(&self, key: &[u8]) -> Option<&[u8]> {
        let entry = self.env.iter().find(|entry| sets(entry, key))?;
        Some(&entry.to_bytes()[key.len() + 1..])
    }

    /// This launch run through another program: `front` before its command line.
    pub fn wrapped(&self, front: impl IntoIterator<Item = Vec<u8>>) -> Launch {
        let mut wrapped = self.clone();
        let mut argv: Vec<CString> = Vec::with_capacity(self.argv.len() + 8);
        for arg in front {
            argv.push(wrapped.c_string(CString::new(arg)));
        }
        argv.append(&mut wrapped.argv);
        wrapped.argv = argv;
        wrapped
    }

    /// Whether the task's own variables set `key`.
    pub fn sets_var(&self, key: &[u8]) -> bool {
        self.env.iter().any(|entry| sets(entry, key))
    }

    /// Sets the task's variable `key` to the number `value`.
    pub fn set_var_number(&mut self, key: &[u8], value: u64) {
        let mut digits = [0u8; 20];
        self.set_var(key, decimal(value, &mut digits));
    }

    /// A C string, or on a NUL byte, the bytes before it and the launch marked.
    fn c_string(&mut self, made: Result<CString, NulError>) -> CString {
        made.unwrap_or_else(|error| {
            self.nul = true;
            let at = error.nul_position();
            let mut bytes = error.into_vec();
            bytes.truncate(at);
            CString::new(bytes).unwrap_or_default()
        })
    }
}

#[cfg(test)]
impl Launch {
    /// A launch of `argv` with the variables `env` (set in order), spilling to `dir`.
    pub(crate) fn of(argv: &[&str], env: &[(&str, &str)], dir: &Path) -> Launch {
        let mut launch = Launch::new(argv.len(), env.len(), dir.to_path_buf(), "t".into());
        for arg in argv {
            launch.arg(arg.as_bytes());
        }
        for (key, value) in env {
            launch.set_var(key.as_bytes(), value.as_bytes());
        }
        launch
    }

    /// The command line as strings (cut short at a NUL).
    pub(crate) fn argv_strs(&self) -> Vec<&str> {
        self.argv.iter().map(|s| s.to_str().unwrap()).collect()
    }

    /// The task's own variables as `KEY=value` strings (cut short at a NUL).
    pub(crate) fn env_strs(&self) -> Vec<&str> {
        self.env.iter().map(|s| s.to_str().unwrap()).collect()
    }
}

/// Whether the environment entry `entry` (`KEY=value`) sets `key`.
pub(crate) fn sets(entry: &CStr, key: &[u8]) -> bool {
    let entry = entry.to_bytes();
    entry.len() > key.len() && entry.starts_with(key) && entry[key.len()] == b'='
}

/// `value` in decimal, written into the end of `buf`.
pub(crate) fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buf[start..];
        }
    }
}

pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
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

/// What this node ran out of when it could not start a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// `EMFILE`, `ENFILE`: the process's or the system's open files.
    FileDescriptors,
    /// `EAGAIN`: the user's processes or threads.
    Processes,
    /// `ENOMEM`.
    Memory,
}

impl Resource {
    /// The resource a failed spawn ran out of, if that is why it failed; any other
    /// failure (a missing or non-executable program, say) is the task's own.
    pub fn exhausted(error: &io::Error) -> Option<Resource> {
        match Errno::from_raw(error.raw_os_error()?) {
            Errno::EMFILE | Errno::ENFILE => Some(Resource::FileDescriptors),
            Errno::EAGAIN => Some(Resource::Processes),
            Errno::ENOMEM => Some(Resource::Memory),
            _ => None,
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::FileDescriptors => "file descriptors",
            Resource::Processes => "processes",
            Resource::Memory => "memory",
        })
    }
}

/// This node could not start a task's process: not the task's fault.
#[derive(Debug, thiserror::Error)]
#[error("out of {resource} starting {program}")]
pub struct ResourceError {
    pub resource: Resource,
    pub program: String,
    #[source]
    pub source: io::Error,
}

/// What [`start`] did.
#[derive(Debug)]
pub enum Start<'a> {
    /// The attempt's process runs.
    Running(Running<'a>),
    /// It could not start, by the task's own fault (an empty command line, a program
    /// that is missing or not executable, a missing working directory): this is the
    /// attempt's result.
    Failed(Finished),
    /// It could not start by this node's fault: the attempt never ran.
    NoResources(ResourceError),
}

/// Runs `launch` to completion on this thread. Never panics on anything the task
/// does; the task's failures become its [`Outcome`], the node's are the error.
pub fn run(
    launch: &Launch,
    control: &Control,
    scratch: &mut Scratch,
) -> Result<Finished, ResourceError> {
    match start(launch, control, scratch) {
        Start::Running(running) => Ok(running.finish()),
        Start::Failed(finished) => Ok(finished),
        Start::NoResources(error) => Err(error),
    }
}

/// Starts `launch`; wait on it with [`Running::wait_until`] and [`Running::finish`].
pub fn start<'a>(launch: &'a Launch, control: &'a Control, scratch: &'a mut Scratch) -> Start<'a> {
    let start_unix_us = unix_micros();
    let failed = |reason: String| {
        control.end();
        Start::Failed(Finished {
            outcome: Outcome::SpawnFailed { reason },
            start_unix_us,
            end_unix_us: unix_micros(),
            stdout: Output::default(),
            stderr: Output::default(),
            body: None,
        })
    };
    let Some(program) = launch.program() else {
        return failed("empty command line".to_string());
    };
    let started = match spawn::start(launch, scratch.null.as_ref()) {
        Ok(started) => started,
        Err(source) => {
            let program = program.to_string_lossy();
            return match Resource::exhausted(&source) {
                Some(resource) => {
                    control.end();
                    Start::NoResources(ResourceError {
                        resource,
                        program: program.into_owned(),
                        source,
                    })
                }
                None => failed(spawn_reason(&program, launch.cwd.as_deref(), &source)),
            };
        }
    };
    let pid = started.pid;
    let group = Group::register(pid);
    control.started(pid);
    let Some(leader) = rustix::process::Pid::from_raw(pid as i32) else {
        unreachable!("a started process has a positive pid");
    };
    Start::Running(Running {
        control,
        buf: &mut scratch.buf,
        pid,
        leader,
        group,
        stdout: Capture::new(started.stdout, launch, "stdout"),
        stderr: Capture::new(started.stderr, launch, "stderr"),
        deadline: launch.time_limit.map(|limit| Instant::now() + limit),
        pidfd: None,
        ended: false,
        start_unix_us,
    })
}

/// An attempt whose process runs. Until [`Running::finish`] a stop can still kill its
/// group; dropped before that (a panic unwinding), it kills the group itself.
#[derive(Debug)]
pub struct Running<'a> {
    control: &'a Control,
    buf: &'a mut [u8],
    pid: u32,
    leader: rustix::process::Pid,
    group: Group,
    stdout: Capture<'a>,
    stderr: Capture<'a>,
    /// The time limit, until it has been enforced.
    deadline: Option<Instant>,
    /// Opened only once the output has closed: most tasks have exited by then, and a
    /// pidfd per attempt costs a file and an inode.
    pidfd: Option<OwnedFd>,
    /// Both streams are at their end and the leader has exited.
    ended: bool,
    start_unix_us: u64,
}

impl Running<'_> {
    /// The process id of the attempt's leader.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Reads both streams and waits for the leader to exit, killing the group at the
    /// time limit, but returns at `until` if the attempt runs past it. Returns whether
    /// the attempt has ended.
    pub fn wait_until(&mut self, until: Option<Instant>) -> bool {
        while !self.ended {
            if self.stdout.stream.is_none() && self.stderr.stream.is_none() && self.pidfd.is_none()
            {
                if has_exited(self.leader) {
                    self.ended = true;
                    break;
                }
                // The task closed its output but runs on. (Without pidfds, before Linux
                // 5.3, it then outlives its time limit and cannot be stopped.)
                match rustix::process::pidfd_open(self.leader, rustix::process::PidfdFlags::empty())
                {
                    Ok(fd) => self.pidfd = Some(fd),
                    Err(_) => {
                        self.ended = true;
                        break;
                    }
                }
            }
            let wake_at = match (self.deadline, until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let ready = wait_ready(
                [
                    self.stdout.stream.as_ref().map(AsFd::as_fd),
                    self.stderr.stream.as_ref().map(AsFd::as_fd),
                    self.pidfd.as_ref().map(AsFd::as_fd),
                ],
                poll_timeout(wake_at),
            );
            let now = Instant::now();
            match ready {
                Some([out, err, exited]) => {
                    if out {
                        self.stdout.read_some(self.buf);
                    }
                    if err {
                        self.stderr.read_some(self.buf);
                    }
                    // The pidfd is only polled once the output had closed.
                    self.ended = exited;
                }
                None if self.deadline.is_some_and(|at| at <= now) => {
                    // The time limit passed: kill the group; its output closes as it dies.
                    self.control.stop(Stop::TimedOut);
                    self.deadline = None;
                }
                None => {}
            }
            if !self.ended && until.is_some_and(|at| at <= now) {
                return false;
            }
        }
        true
    }

    /// Waits for the attempt to end (if it has not), reaps it and tells how it ended.
    pub fn finish(mut self) -> Finished {
        self.wait_until(None);
        let stop = self.control.end();
        let status = spawn::wait(self.pid);
        self.group.finished();
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
            start_unix_us: self.start_unix_us,
            end_unix_us: unix_micros(),
            stdout: self.stdout.finish(),
            stderr: self.stderr.finish(),
            body: None,
        }
    }
}

/// A poll timeout that ends at `at`, rounded up: waking a little early would only
/// loop once more.
pub(crate) fn poll_timeout(at: Option<Instant>) -> PollTimeout {
    let Some(at) = at else {
        return PollTimeout::NONE;
    };
    let millis = at
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000)
        .min(i32::MAX as u128) as i32;
    PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
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
