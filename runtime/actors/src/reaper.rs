//! The reaper: a small watchdog process per agent that kills the agent's running tasks
//! when the agent dies, however it dies (SIGKILL, crash, OOM killer).
//!
//! Every attempt runs in its own process group, so nothing the kernel does on the
//! agent's death reaches it; the root meanwhile replays the attempt elsewhere, and a
//! non-idempotent task would run twice at once. Inside Slurm the step's cgroup cleans
//! up when the step ends; the reaper covers every agent, local or in Slurm, and acts
//! the moment the agent dies.
//!
//! Protocol: the reaper's stdin is the read end of a pipe whose only write end the
//! agent holds (close-on-exec, so no task inherits it). The agent writes `+PGID\n`
//! after spawning an attempt and `-PGID\n` once that group is gone. Writes of a few
//! bytes to a pipe are atomic, so concurrent executors need no lock. When the agent
//! dies the kernel closes its end; the reaper reads EOF, SIGKILLs every group still
//! registered and exits.
//!
//! The reaper waits for the hang-up only, never for data, and reads what has piled up
//! every [`DRAIN_PERIOD`]: a write then wakes nobody. Woken per line, the reaper cost
//! every task two context switches (about 3 % of no-op throughput on 2 cores). The
//! order of lines is all that matters, and the pipe keeps it; the agent enlarges the
//! pipe so that it never waits for a drain.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::unistd::{Pid, getpgrp};

/// The hidden `saker` subcommand that runs [`serve_stdin`].
pub const SUBCOMMAND: &str = "reaper";

/// How often the reaper reads the lines that piled up in its pipe.
pub const DRAIN_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// The pipe size the agent asks for: room for about 100,000 lines, so that even at
/// tens of thousands of tasks per second a write never waits for the next drain.
const PIPE_BYTES: i32 = 1 << 20;

/// The agent's end of the pipe to its reaper. Cheap to clone; every clone writes to
/// the same pipe.
#[derive(Debug, Clone)]
pub struct Reaper {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pipe: io::PipeWriter,
    /// Set on the first failed write: the reaper is gone, stop writing.
    broken: AtomicBool,
    /// The reaper process, when this handle started it; reaped if it dies early.
    child: Mutex<Option<Child>>,
}

impl Reaper {
    /// Starts `command` (a program that runs [`serve_stdin`]) as the reaper, with its
    /// stdin the read end of a fresh pipe, in a process group of its own so that a
    /// Ctrl-C to the terminal's group stops the agent but not the reaper.
    pub fn start(mut command: std::process::Command) -> io::Result<Reaper> {
        // std's pipe is close-on-exec at both ends: task processes inherit neither.
        // spawn dup2's the read end onto the reaper's stdin (which clears the flag there).
        let (read, write) = io::pipe()?;
        let child = command
            .stdin(read)
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        // Drop our copy of the read end (the Command holds it): if the reaper dies, our
        // writes must fail with EPIPE instead of filling a pipe nobody reads.
        drop(command);
        // Best effort: the system's limit may be lower (`fs.pipe-max-size`); a smaller
        // pipe only means a write may wait up to one drain period now and then.
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
        let reaper = Reaper::from_pipe(write);
        *reaper.lock_child() = Some(child?);
        Ok(reaper)
    }

    /// A handle writing to `pipe`, whose read end some reaper serves.
    pub fn from_pipe(pipe: io::PipeWriter) -> Reaper {
        Reaper {
            inner: Arc::new(Inner {
                pipe,
                broken: AtomicBool::new(false),
                child: Mutex::new(None),
            }),
        }
    }

    /// The reaper's pid, when this handle started it.
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// Asks the reaper to kill process group `pgid` should this process die.
    pub fn register(&self, pgid: u32) {
        self.send(b'+', pgid);
    }

    /// The group `pgid` is gone: forget it.
    pub fn release(&self, pgid: u32) {
        self.send(b'-', pgid);
    }

    fn send(&self, sign: u8, pgid: u32) {
        if self.inner.broken.load(Ordering::Relaxed) {
            return;
        }
        let mut line = [0u8; 12];
        let len = encode(sign, pgid, &mut line);
        // One write of ≤ PIPE_BUF bytes to a blocking pipe is atomic and whole. It may
        // block only while the reaper is behind, which it never is for long.
        let written = loop {
            match (&self.inner.pipe).write(&line[..len]) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let error = match written {
            Ok(n) if n == len => return,
            Ok(n) => io::Error::other(format!("short write of {n} bytes")),
            Err(error) => error,
        };
        if !self.inner.broken.swap(true, Ordering::Relaxed) {
            let status = self
                .lock_child()
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            tracing::warn!(
                %error,
                ?status,
                "the reaper is gone; tasks of this agent will outlive it if it dies"
            );
        }
    }

    fn lock_child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.inner
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `+1234\n` into `buf`, without allocating; returns the length.
fn encode(sign: u8, mut value: u32, buf: &mut [u8; 12]) -> usize {
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (value % 10) as u8;
        n += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    buf[0] = sign;
    for i in 0..n {
        buf[1 + i] = digits[n - 1 - i];
    }
    buf[1 + n] = b'\n';
    n + 2
}

static INSTALLED: OnceLock<Reaper> = OnceLock::new();

/// Makes `reaper` the one every attempt of this process registers with
/// ([`crate::process::run`]). Returns false if one was installed already.
pub fn install(reaper: Reaper) -> bool {
    INSTALLED.set(reaper).is_ok()
}

/// The reaper of this process, if one was installed.
pub fn installed() -> Option<&'static Reaper> {
    INSTALLED.get()
}

/// The reaper's main: shields it from the signals that end an agent's session, then
/// serves stdin. Call before any other thread exists (signal masks are per thread).
pub fn serve_stdin() -> io::Result<()> {
    // Blocked, never unblocked: as good as ignored for a single-threaded process, and
    // needs no unsafe signal handler change. SIGTTOU: it may write to a terminal from
    // a background group.
    let mut shield = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGPIPE,
        Signal::SIGTTOU,
    ] {
        shield.add(signal);
    }
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&shield), None).map_err(io::Error::from)?;
    let stdin = std::fs::File::from(io::stdin().as_fd().try_clone_to_owned()?);
    run_reaper(stdin)
}

/// The reaper loop: keeps the set of registered groups; at the end of `input` (the
/// agent is gone) SIGKILLs each of them and returns. Malformed lines are reported on
/// stderr and skipped. A read error counts as the end too: the agent can no longer
/// tell us anything. `input` is switched to non-blocking reads.
pub fn run_reaper(mut input: impl Read + AsFd) -> io::Result<()> {
    fcntl(&input, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    let own_group = getpgrp().as_raw();
    let mut live = std::collections::HashSet::new();
    let mut partial = Vec::with_capacity(64);
    let mut buf = vec![0u8; 64 * 1024];
    let timeout = PollTimeout::try_from(DRAIN_PERIOD).unwrap_or(PollTimeout::MAX);
    let ended = 'serve: loop {
        // No events asked for: poll still reports the hang-up, but a write does not
        // wake it (see the module docs).
        let mut fds = [PollFd::new(input.as_fd(), PollFlags::empty())];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(error) => break Err(io::Error::from(error)),
        }
        // Drain: to `WouldBlock` (the agent is alive, wait again) or to EOF (it is gone).
        loop {
            match input.read(&mut buf) {
                Ok(0) => break 'serve Ok(()),
                Ok(n) => take_lines(&mut partial, &buf[..n], |line| {
                    apply(line, own_group, &mut live)
                }),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => break 'serve Err(error),
            }
        }
    };
    let mut killed = 0;
    for &pgid in &live {
        match killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
            // Already gone (it ended as the agent died): nothing to do.
            Ok(()) | Err(Errno::ESRCH) => killed += 1,
            Err(error) => eprintln!("saker reaper: could not kill group {pgid}: {error}"),
        }
    }
    if killed > 0 {
        eprintln!("saker reaper: the agent is gone; killed {killed} task process group(s)");
    }
    ended
}

/// Appends `bytes` to `partial` and hands every complete line (with its `\n`) to `each`.
fn take_lines(partial: &mut Vec<u8>, bytes: &[u8], mut each: impl FnMut(&[u8])) {
    let mut rest = bytes;
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let (line, tail) = rest.split_at(end + 1);
        if partial.is_empty() {
            each(line);
        } else {
            partial.extend_from_slice(line);
            each(partial);
            partial.clear();
        }
        rest = tail;
    }
    // A line longer than any valid one is garbage: keep its tail only, so a writer
    // gone wrong cannot grow this without bound.
    if partial.len() + rest.len() > 64 {
        partial.clear();
    }
    partial.extend_from_slice(rest);
}

fn apply(line: &[u8], own_group: i32, live: &mut std::collections::HashSet<i32>) {
    match parse(line) {
        Some((_, pgid)) if pgid == own_group => {
            eprintln!("saker reaper: refusing to register its own group {pgid}");
        }
        Some((true, pgid)) => {
            live.insert(pgid);
        }
        Some((false, pgid)) => {
            live.remove(&pgid);
        }
        None => eprintln!(
            "saker reaper: ignoring malformed line {:?}",
            String::from_utf8_lossy(line)
        ),
    }
}

/// `+N\n` → (true, N), `-N\n` → (false, N). Groups 0 and 1 are refused: killpg would
/// hit our own group, or init's.
fn parse(line: &[u8]) -> Option<(bool, i32)> {
    let line = line.strip_suffix(b"\n")?;
    let (&sign, digits) = line.split_first()?;
    let add = match sign {
        b'+' => true,
        b'-' => false,
        _ => return None,
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let pgid: i32 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    (pgid > 1).then_some((add, pgid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn group_of_sleep() -> Child {
        std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .expect("sleep starts")
    }

    /// Polls until `child` has exited (it is ours, so reaping it is how we know).
    fn exits_within(child: &mut Child, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn lines_are_encoded_and_parsed() {
        let mut buf = [0u8; 12];
        for (sign, value, text) in [
            (b'+', 0, "+0\n"),
            (b'-', 7, "-7\n"),
            (b'+', 4_194_304, "+4194304\n"),
            (b'+', u32::MAX, "+4294967295\n"),
        ] {
            let len = encode(sign, value, &mut buf);
            assert_eq!(&buf[..len], text.as_bytes());
        }
        assert_eq!(parse(b"+4194304\n"), Some((true, 4_194_304)));
        assert_eq!(parse(b"-12\n"), Some((false, 12)));
        for bad in [
            &b"+0\n"[..],
            b"+1\n",
            b"+\n",
            b"12\n",
            b"+12",
            b"+-3\n",
            b"+ 3\n",
            b"+4294967295\n",
            b"+99999999999\n",
            b"\xff\xfe\n",
            b"\n",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn lines_split_across_reads_are_joined_and_overlong_ones_dropped() {
        let mut partial = Vec::new();
        let mut lines = Vec::new();
        for chunk in [&b"+12"[..], b"3\n-4", b"5\n+6\n", b"+7"] {
            take_lines(&mut partial, chunk, |line| lines.push(line.to_vec()));
        }
        assert_eq!(lines, [&b"+123\n"[..], b"-45\n", b"+6\n"]);
        assert_eq!(partial, b"+7");
        lines.clear();
        take_lines(&mut partial, &[b'9'; 100], |line| lines.push(line.to_vec()));
        take_lines(&mut partial, b"\n+8\n", |line| lines.push(line.to_vec()));
        assert!(partial.is_empty());
        assert_eq!(lines.len(), 2);
        assert_eq!(parse(&lines[0]), None, "the overlong line stays garbage");
        assert_eq!(parse(&lines[1]), Some((true, 8)));
    }

    #[test]
    fn at_end_of_input_registered_groups_are_killed_and_released_ones_spared() {
        let mut registered = group_of_sleep();
        let mut released = group_of_sleep();
        let (read, write) = io::pipe().unwrap();
        let mut raw = write.try_clone().unwrap();
        let reaper_thread = std::thread::spawn(move || run_reaper(read));
        let reaper = Reaper::from_pipe(write);
        reaper.register(registered.id());
        raw.write_all(b"garbage\n+\n+0\n\xff\n").unwrap();
        reaper.register(released.id());
        raw.write_all(b"-notanumber\n").unwrap();
        reaper.release(released.id());
        // Still serving after all that: both groups alive.
        assert!(registered.try_wait().unwrap().is_none());
        assert!(released.try_wait().unwrap().is_none());

        drop(raw);
        drop(reaper);
        reaper_thread.join().unwrap().unwrap();
        assert!(
            exits_within(&mut registered, Duration::from_secs(10)),
            "the registered group was killed"
        );
        assert!(
            released.try_wait().unwrap().is_none(),
            "the released group was left alone"
        );
        released.kill().unwrap();
        released.wait().unwrap();
    }

    #[test]
    fn a_dead_reaper_makes_writes_a_quiet_no_op() {
        let (read, write) = io::pipe().unwrap();
        drop(read);
        let reaper = Reaper::from_pipe(write);
        // EPIPE (SIGPIPE is ignored in Rust programs): noted once, then no more writes.
        reaper.register(1234);
        assert!(reaper.inner.broken.load(Ordering::Relaxed));
        reaper.release(1234);
    }

    #[test]
    fn a_started_reaper_sees_end_of_input_when_the_handle_is_dropped() {
        // `cat` stands in for the reaper: it exits at EOF, which it only sees if no
        // other copy of the write end exists (in this process or in the child).
        let reaper = Reaper::start(std::process::Command::new("cat")).unwrap();
        reaper.register(4242);
        let mut child = reaper.lock_child().take().unwrap();
        drop(reaper);
        assert!(exits_within(&mut child, Duration::from_secs(10)));
    }
}
