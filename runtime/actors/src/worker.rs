//! Persistent workers: function tasks run as calls on a long-lived process of their
//! kind, one per slot and kind, spoken to over its stdin and stdout with
//! length-prefixed frames (the protocol is `docs/workers.md`).
//!
//! A slot's thread owns its workers ([`Workers`]) and runs a call the way it runs a
//! command: blocking, on its own thread, waiting with `poll` on the worker's pipes
//! until the answer, the time limit or the slot's report clock. For the length of a
//! call the worker's process group is the attempt's, registered with the attempt's
//! [`Control`], so a cancel or time limit kills it through the same path as a
//! command's group. Any kind plugs in the same way: only the command line differs
//! (`SAKER_WORKER_<KIND>`), and nothing above the slot knows about kinds.
//!
//! How a call ends, and why:
//! - RETURNED / RAISED: the task's result (a raise is the task's own failure).
//! - the worker died, sent garbage or answered for another attempt: the attempt is
//!   lost (replayed elsewhere, not counted against retries) and the worker replaced,
//!   as when an executor crashes.
//! - the worker never got ready (missing program, a crash on import): spawn failed,
//!   with the last line of its log, like a missing program of a command.
//! - past the time limit: the task failed, the worker is killed; replaying a hung
//!   call elsewhere would most likely hang there too.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, poll};
use saker_wire::messages::{
    AttemptId, JobDef, MAX_FUNCTION_BYTES, Outcome, Output, Payload, ResultBody, TaskId,
};

use crate::process::{Control, Finished, Group, Stop, poll_timeout, unix_micros};
use crate::resources::Binding;
use crate::resources::limits::{SlotLimits, cgroup_exec, cpu_set};

/// Frame types of the worker protocol.
const READY: u8 = 1;
const CALL: u8 = 2;
const RETURNED: u8 = 3;
const RAISED: u8 = 4;

/// The worker protocol version this agent speaks (sent by the worker in READY).
pub const WORKER_PROTOCOL: u32 = 1;

/// The most a READY frame may hold.
const MAX_READY: usize = 64 << 10;

/// The variables threaded libraries (OpenMP, MKL, OpenBLAS) size their pools by: a
/// worker's are set to the cores of its calls.
const THREAD_VARIABLES: [&str; 3] = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"];

/// How long a worker may take to get ready when the call has no time limit of its own.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// One function call for a slot's thread to run.
#[derive(Debug)]
pub struct Call {
    /// Holds the payload: a call costs no copy of it on the agent.
    pub job: Arc<JobDef>,
    pub task: TaskId,
    pub attempt: AttemptId,
    pub node: u32,
    /// The cores the call holds (pinned to them where the node pins).
    pub cores: u32,
    pub time_limit: Option<Duration>,
    /// Where worker logs go (`<kind>` files per slot).
    pub log_dir: PathBuf,
    /// The node's scratch directory for data items (`SAKER_SCRATCH`).
    pub scratch: PathBuf,
    /// The node's object memory (`SAKER_OBJECTS`), if it has one.
    pub objects: Option<PathBuf>,
}

/// The command lines of workers by kind, as the agent's environment gives them:
/// `SAKER_WORKER_<KIND>`, split like a shell would; for `python` when unset,
/// `python3 -m saker.worker`.
#[derive(Debug, Clone, Default)]
pub struct WorkerCommands {
    /// Variable name → its value.
    lines: HashMap<String, String>,
}

impl WorkerCommands {
    /// The commands this process's environment names.
    pub fn from_env() -> WorkerCommands {
        WorkerCommands {
            lines: std::env::vars()
                .filter(|(name, _)| name.starts_with("SAKER_WORKER_"))
                .collect(),
        }
    }

    /// These commands, and `command` for workers of `kind`.
    pub fn with(mut self, kind: &str, command: &str) -> WorkerCommands {
        self.lines.insert(worker_variable(kind), command.to_owned());
        self
    }

    /// The command line a worker of `kind` runs.
    pub fn command(&self, kind: &str) -> Result<Vec<String>, WorkerStartError> {
        let variable = worker_variable(kind);
        match self.lines.get(&variable) {
            Some(line) => {
                let words =
                    shell_words::split(line).map_err(|source| WorkerStartError::Unparsable {
                        variable: variable.clone(),
                        source,
                    })?;
                if words.is_empty() {
                    return Err(WorkerStartError::Empty { variable });
                }
                Ok(words)
            }
            None if kind == "python" => {
                Ok(vec!["python3".into(), "-m".into(), "saker.worker".into()])
            }
            None => Err(WorkerStartError::NoCommand {
                kind: kind.to_owned(),
                variable,
            }),
        }
    }
}

/// Why a slot's persistent worker could not start; its call fails with this as the
/// reason (`WorkerFailed`).
#[derive(Debug, thiserror::Error)]
pub enum WorkerStartError {
    #[error("{variable}")]
    Unparsable {
        variable: String,
        #[source]
        source: shell_words::ParseError,
    },
    #[error("{variable} is empty")]
    Empty { variable: String },
    #[error("no worker command for kind {kind:?}: set {variable} (or `--worker {kind}=COMMAND`)")]
    NoCommand { kind: String, variable: String },
    #[error("cannot create {}", .path.display())]
    LogDirectory {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {}", .path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("worker program not found: {program}")]
    NotFound { program: String },
    #[error("could not start worker {program}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("worker pipes")]
    Pipes(#[source] io::Error),
}

/// The environment variable naming the command of worker `kind`.
pub fn worker_variable(kind: &str) -> String {
    format!(
        "SAKER_WORKER_{}",
        kind.to_ascii_uppercase().replace('-', "_")
    )
}

/// The workers of one slot, by kind.
#[derive(Debug)]
pub struct Workers {
    slot: u32,
    commands: WorkerCommands,
    by_kind: HashMap<String, Worker>,
}

impl Workers {
    pub fn new(slot: u32, commands: WorkerCommands) -> Workers {
        Workers {
            slot,
            commands,
            by_kind: HashMap::new(),
        }
    }

    /// Runs `call` on this slot's worker of its kind, starting one if there is none,
    /// ringing the report clock at `report_at` meanwhile (as [`crate::executor`] does
    /// for commands).
    pub fn run(
        &mut self,
        call: &Call,
        control: &Control,
        binding: &Binding,
        limits: &SlotLimits,
        report_at: &mut Option<Instant>,
        ring: &mut dyn FnMut() -> Option<Instant>,
    ) -> Finished {
        let start_unix_us = unix_micros();
        let ended = |outcome: Outcome, output: Option<Vec<u8>>| Finished {
            outcome,
            start_unix_us,
            end_unix_us: unix_micros(),
            stdout: Output::default(),
            stderr: Output::default(),
            body: Some(ResultBody::Function { output }),
        };
        let Payload::Function(function) = &call.job.payload else {
            control.end();
            return ended(
                Outcome::SpawnFailed {
                    reason: "not a function task".into(),
                },
                None,
            );
        };
        let deadline = call.time_limit.map(|limit| Instant::now() + limit);
        // A worker sees the GPUs it was started with (a process's CUDA devices are
        // fixed once it has looked), and sizes its libraries' thread pools by the
        // cores it was started with (they read `OMP_NUM_THREADS` and the like once):
        // one started for others is replaced. (Slots take the GPUs they held last,
        // and a run's calls mostly ask for the same cores, so this is rare.)
        let kept = self
            .by_kind
            .remove(&function.kind)
            .filter(|worker| worker.gpus == binding.gpus && worker.cores == call.cores);
        let mut worker = match kept {
            Some(mut worker) => {
                worker.pin(binding);
                worker
            }
            None => match Worker::spawn(
                &self.commands,
                &function.kind,
                self.slot,
                call,
                binding,
                limits,
            ) {
                Ok(worker) => worker,
                Err(error) => {
                    control.end();
                    let reason = crate::error_chain(&error);
                    return ended(Outcome::WorkerFailed { reason }, None);
                }
            },
        };
        control.started(worker.pid);
        let mut header = Vec::with_capacity(21);
        header.extend_from_slice(&((17 + function.data.len()) as u32).to_le_bytes());
        header.push(CALL);
        header.extend_from_slice(&call.task.0.to_le_bytes());
        header.extend_from_slice(&call.attempt.0.to_le_bytes());
        let mut exchange = Exchange {
            out: [&header[..], &function.data[..]],
            written: 0,
            deadline,
            ready_by: (!worker.ready).then(|| deadline.unwrap_or(Instant::now() + READY_TIMEOUT)),
        };
        let answer = worker.exchange(&mut exchange, control, report_at, ring);
        let stop = control.end();
        let (outcome, output) = match (stop, answer) {
            (
                _,
                Answer::Returned {
                    task,
                    attempt,
                    output,
                },
            ) if (task, attempt) == (call.task, call.attempt) => {
                (Outcome::Exited { code: 0 }, Some(output))
            }
            (
                _,
                Answer::Raised {
                    task,
                    attempt,
                    message,
                    output,
                },
            ) if (task, attempt) == (call.task, call.attempt) => {
                (Outcome::Raised { message }, Some(output))
            }
            (Some(Stop::Cancelled), _) => (Outcome::Cancelled, None),
            (Some(Stop::TimedOut), _) => (Outcome::TimedOut, None),
            (Some(Stop::Detached), _) => (
                Outcome::Lost {
                    reason: "attempt detached from its agent".into(),
                },
                None,
            ),
            (
                None,
                Answer::Returned { task, attempt, .. } | Answer::Raised { task, attempt, .. },
            ) => {
                let reason = format!(
                    "worker answered for task {task} attempt {attempt}, not task {} attempt {}",
                    call.task, call.attempt
                );
                (
                    Outcome::Lost {
                        reason: worker.lost(&reason),
                    },
                    None,
                )
            }
            (None, Answer::TooLarge { bytes }) => {
                let message = format!(
                    "its answer of {bytes} bytes exceeds the limit of {MAX_FUNCTION_BYTES}"
                );
                (Outcome::Raised { message }, None)
            }
            (None, Answer::NeverReady(why)) => {
                let reason = worker.lost(&why);
                (Outcome::WorkerFailed { reason }, None)
            }
            (None, Answer::Broken(why)) => (
                Outcome::Lost {
                    reason: worker.lost(&why),
                },
                None,
            ),
        };
        // A worker that answered stays for the next call; any other is killed, and so
        // is one whose group a stop signalled just after it answered.
        let answered = matches!(outcome, Outcome::Exited { .. } | Outcome::Raised { .. });
        if answered && output.is_some() && stop.is_none() {
            self.by_kind.insert(function.kind.clone(), worker);
        }
        ended(outcome, output)
    }
}

/// What the worker said to a call.
enum Answer {
    Returned {
        task: TaskId,
        attempt: AttemptId,
        output: Vec<u8>,
    },
    Raised {
        task: TaskId,
        attempt: AttemptId,
        message: String,
        output: Vec<u8>,
    },
    TooLarge {
        bytes: usize,
    },
    /// It ended or misbehaved before READY.
    NeverReady(String),
    /// It ended or misbehaved during the call.
    Broken(String),
}

/// One call's frame on its way out, and its clocks.
struct Exchange<'a> {
    out: [&'a [u8]; 2],
    written: usize,
    deadline: Option<Instant>,
    /// Set while the worker has not said READY yet.
    ready_by: Option<Instant>,
}

impl Exchange<'_> {
    fn unwritten(&self) -> Option<&[u8]> {
        let [header, payload] = self.out;
        if self.written < header.len() {
            Some(&header[self.written..])
        } else if self.written < header.len() + payload.len() {
            Some(&payload[self.written - header.len()..])
        } else {
            None
        }
    }
}

/// One worker process.
#[derive(Debug)]
struct Worker {
    kind: String,
    pid: u32,
    /// The GPUs it was started seeing (see [`Binding::gpus`]).
    gpus: Option<Vec<String>>,
    /// The cores it was started for (its threads' variables say so).
    cores: u32,
    /// The CPUs it runs on: its slot thread's when it started, then each call's.
    cpus: Vec<u32>,
    child: Child,
    group: Option<Group>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    log: PathBuf,
    ready: bool,
    /// Bytes read and not yet taken as a frame.
    inbox: Vec<u8>,
}

impl Worker {
    /// Pins every thread of the worker to the call's CPUs, if they differ from its own.
    /// (Threads it starts later inherit the pinning of the thread that starts them.)
    fn pin(&mut self, binding: &Binding) {
        if binding.cpus.is_empty() || binding.cpus == self.cpus {
            return;
        }
        let set = cpu_set(&binding.cpus);
        let threads = std::fs::read_dir(format!("/proc/{}/task", self.pid));
        for thread in threads.into_iter().flatten().flatten() {
            let tid = thread
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<i32>().ok());
            if let Some(tid) = tid.and_then(rustix::process::Pid::from_raw) {
                // A thread that just ended is no matter.
                let _ = rustix::thread::sched_setaffinity(Some(tid), &set);
            }
        }
        self.cpus.clone_from(&binding.cpus);
    }

    fn spawn(
        commands: &WorkerCommands,
        kind: &str,
        slot: u32,
        call: &Call,
        binding: &Binding,
        limits: &SlotLimits,
    ) -> Result<Worker, WorkerStartError> {
        let argv = commands.command(kind)?;
        std::fs::create_dir_all(&call.log_dir).map_err(|source| {
            WorkerStartError::LogDirectory {
                path: call.log_dir.clone(),
                source,
            }
        })?;
        let log = call
            .log_dir
            .join(format!("node{}-slot{slot}-{kind}.log", call.node));
        let log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|source| WorkerStartError::Log {
                path: log.clone(),
                source,
            })?;
        // In the slot's memory cgroup, if it has one, from its first instruction: its
        // calls' limits are set on the cgroup as they come.
        let mut command = match limits.memory() {
            Some(cgroup) => {
                let resolved = crate::resources::cgroup::resolve(
                    std::ffi::OsStr::new(&argv[0]),
                    std::env::var_os("PATH").as_deref(),
                )
                .ok_or_else(|| WorkerStartError::NotFound {
                    program: argv[0].clone(),
                })?;
                let front = cgroup_exec(cgroup, &resolved);
                let mut command = Command::new(std::ffi::OsStr::from_bytes(&front[0]));
                command.args(front[1..].iter().map(|a| std::ffi::OsStr::from_bytes(a)));
                command.arg(&argv[0]);
                command
            }
            None => Command::new(&argv[0]),
        };
        // A task may call the pilot (a placed actor, say) through its client socket.
        if let Some(dir) = crate::actor_host::pilot_dir() {
            command.env("SAKER_PILOT_DIR", dir);
        }
        // Its CPUs it inherits from the slot's thread, pinned for this call already.
        for (name, value) in binding
            .variables()
            .filter(|(name, _)| *name != "SAKER_CPUS")
        {
            command.env(name, value);
        }
        if let Some(objects) = &call.objects {
            command.env("SAKER_OBJECTS", objects);
        }
        // How many threads its calls should run: threaded libraries size their pools
        // by these at start, unless the agent's environment sets them.
        let cores = call.cores.max(1).to_string();
        command.env("SAKER_CORES", &cores);
        for name in THREAD_VARIABLES {
            if std::env::var_os(name).is_none() {
                command.env(name, &cores);
            }
        }
        let mut child = command
            .args(&argv[1..])
            .env("SAKER_WORKER_KIND", kind)
            .env("SAKER_NODE", call.node.to_string())
            .env("SAKER_SLOT", slot.to_string())
            .env("SAKER_SCRATCH", &call.scratch)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .process_group(0)
            .spawn()
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => WorkerStartError::NotFound {
                    program: argv[0].clone(),
                },
                _ => WorkerStartError::Spawn {
                    program: argv[0].clone(),
                    source,
                },
            })?;
        let pid = child.id();
        let group = Some(Group::register(pid));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            unreachable!("both pipes were asked for");
        };
        set_nonblocking(&stdin)
            .and_then(|()| set_nonblocking(&stdout))
            .map_err(WorkerStartError::Pipes)?;
        Ok(Worker {
            kind: kind.to_owned(),
            pid,
            gpus: binding.gpus.clone(),
            cores: call.cores,
            cpus: binding.cpus.clone(),
            child,
            group,
            stdin,
            stdout,
            log,
            ready: false,
            inbox: Vec::new(),
        })
    }

    /// Writes the call and reads until its answer (or the worker's end, the time
    /// limit, a stop), ringing the report clock meanwhile.
    fn exchange(
        &mut self,
        ex: &mut Exchange<'_>,
        control: &Control,
        report_at: &mut Option<Instant>,
        ring: &mut dyn FnMut() -> Option<Instant>,
    ) -> Answer {
        let mut buf = [0u8; 64 << 10];
        loop {
            if let Some(answer) = self.take_frame(ex) {
                return answer;
            }
            let wake_at = [ex.deadline, ex.ready_by, *report_at]
                .into_iter()
                .flatten()
                .min();
            let writing = self.ready && ex.unwritten().is_some();
            let mut fds = vec![PollFd::new(self.stdout.as_fd(), PollFlags::POLLIN)];
            if writing {
                fds.push(PollFd::new(self.stdin.as_fd(), PollFlags::POLLOUT));
            }
            let ready = match poll(&mut fds, poll_timeout(wake_at)) {
                Ok(_) => fds
                    .iter()
                    .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                    .collect(),
                Err(Errno::EINTR) => vec![false; fds.len()],
                Err(e) => return self.broken(format!("polling the worker failed: {e}")),
            };
            drop(fds);
            if ready[0] {
                match self.stdout.read(&mut buf) {
                    Ok(0) => {
                        let status = self.reap();
                        return self.broken(format!("worker ended ({status})"));
                    }
                    Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return self.broken(format!("reading from the worker: {e}")),
                }
            }
            if writing && ready.get(1) == Some(&true) {
                let Some(rest) = ex.unwritten() else { continue };
                match self.stdin.write(rest) {
                    Ok(n) => ex.written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Answer::Broken(format!("writing to the worker: {e}")),
                }
            }
            let now = Instant::now();
            if ex.deadline.is_some_and(|at| at <= now) {
                control.stop(Stop::TimedOut);
                ex.deadline = None;
            }
            if ex.ready_by.is_some_and(|at| at <= now) {
                return Answer::NeverReady(format!(
                    "worker not ready after {}s",
                    READY_TIMEOUT.as_secs()
                ));
            }
            if report_at.is_some_and(|at| at <= now) {
                *report_at = ring().filter(|next| *next > now);
            }
        }
    }

    /// The next complete frame in the inbox, as the answer it is, or `None` to read on.
    /// READY is taken here and the exchange goes on.
    fn take_frame(&mut self, ex: &mut Exchange<'_>) -> Option<Answer> {
        loop {
            let len = u32::from_le_bytes(self.inbox.get(..4)?.try_into().ok()?) as usize;
            let limit = if self.ready {
                MAX_FUNCTION_BYTES + (64 << 10)
            } else {
                MAX_READY
            };
            if len == 0 {
                return Some(self.garbage("an empty frame"));
            }
            if len > limit {
                if self.ready && matches!(self.inbox.get(4), Some(&RETURNED | &RAISED)) {
                    return Some(Answer::TooLarge { bytes: len });
                }
                return Some(self.garbage(&format!("a frame of {len} bytes")));
            }
            if self.inbox.len() < 4 + len {
                return None;
            }
            let frame: Vec<u8> = self.inbox.drain(..4 + len).skip(4).collect();
            let (kind, body) = (frame[0], &frame[1..]);
            if !self.ready {
                if kind != READY || body.len() < 4 {
                    return Some(self.garbage(&format!("frame type {kind} before READY")));
                }
                let version = u32::from_le_bytes(body[..4].try_into().ok()?);
                if version != WORKER_PROTOCOL {
                    return Some(Answer::NeverReady(format!(
                        "worker speaks protocol {version}, this agent {WORKER_PROTOCOL}"
                    )));
                }
                self.ready = true;
                ex.ready_by = None;
                continue;
            }
            return Some(match parse_answer(kind, body) {
                Some(answer) => answer,
                None => self.garbage(&format!("a malformed frame of type {kind}")),
            });
        }
    }

    fn garbage(&self, what: &str) -> Answer {
        self.broken(format!("worker sent {what}"))
    }

    /// The worker failed the call: before READY it never got ready.
    fn broken(&self, why: String) -> Answer {
        if self.ready {
            Answer::Broken(why)
        } else {
            Answer::NeverReady(why)
        }
    }

    /// Kills and reaps the worker, and says why it was lost with the end of its log.
    fn lost(&mut self, why: &str) -> String {
        let status = self.reap();
        let tail = log_tail(&self.log);
        let mut reason = format!("{} worker (pid {}): {why}", self.kind, self.pid);
        if !why.contains("ended (") {
            reason.push_str(&format!(" ({status})"));
        }
        if let Some(tail) = tail {
            reason.push_str(&format!("; its log {} ends: {tail}", self.log.display()));
        }
        reason
    }

    /// Reaps the worker, killing its group (after a moment's grace for one whose
    /// output just closed, so its own exit status is what is told); how it ended.
    fn reap(&mut self) -> String {
        let grace = Instant::now() + Duration::from_millis(200);
        let mut status = self.child.try_wait();
        while matches!(status, Ok(None)) && Instant::now() < grace {
            std::thread::sleep(Duration::from_millis(2));
            status = self.child.try_wait();
        }
        // Dropped unfinished, the group is killed and released from the reaper.
        drop(self.group.take());
        let status = match status {
            Ok(Some(status)) => Ok(status),
            _ => self.child.wait(),
        };
        match status {
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => format!("exit status {code}"),
                (_, Some(signal)) => format!("killed by signal {signal}"),
                _ => status.to_string(),
            },
            Err(e) => format!("could not reap it: {e}"),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // An idle worker ends with its slot: its group is killed and reaped.
        if self.group.take().is_some() {
            let _ = self.child.wait();
        }
    }
}

fn parse_answer(kind: u8, body: &[u8]) -> Option<Answer> {
    let task = TaskId(u64::from_le_bytes(body.get(..8)?.try_into().ok()?));
    let attempt = AttemptId(u64::from_le_bytes(body.get(8..16)?.try_into().ok()?));
    let rest = body.get(16..)?;
    match kind {
        RETURNED => Some(Answer::Returned {
            task,
            attempt,
            output: rest.to_vec(),
        }),
        RAISED => {
            let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let message = rest.get(4..4 + len)?;
            Some(Answer::Raised {
                task,
                attempt,
                message: String::from_utf8_lossy(message).into_owned(),
                output: rest.get(4 + len..)?.to_vec(),
            })
        }
        _ => None,
    }
}

/// The last non-empty line of a worker's log, shortened.
fn log_tail(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(4096);
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    Some(line.chars().take(300).collect())
}

fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let fd = fd.as_fd();
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

#[cfg(test)]
#[path = "worker/tests.rs"]
mod tests;
