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

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use saker_wire::messages::{Outcome, Output};

use crate::spawn::{self, Ended};

mod capture;
mod control;
pub(crate) mod launch;
#[cfg(test)]
mod tests;

pub use crate::attempt::Finished;
use capture::Capture;
pub(crate) use control::Group;
pub use control::{Control, Stop, StopHandle};
pub use launch::Launch;
pub(crate) use launch::decimal;

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
