//! Child processes that cannot outlive the benchmark, temporary directories, and
//! what `/proc` says about a process and the machine.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;

/// How often a wait with a deadline looks at the child again, if it has no pidfd.
const WAIT_POLL: Duration = Duration::from_millis(1);

/// A child started as the leader of its own process group, so that everything it
/// starts (a pilot's agents, their tasks) can be ended with it.
///
/// The group is only ever signalled while the leader is unreaped (alive or a
/// zombie): its pid then still names this group and nothing else. When the leader
/// exits, members left in its group are killed before it is reaped; dropping the
/// guard kills the whole group.
#[derive(Debug)]
pub struct ProcessGroup {
    child: Child,
    status: Option<ExitStatus>,
}

impl ProcessGroup {
    /// Spawns `command` as a new process group leader.
    pub fn spawn(command: &mut Command) -> io::Result<ProcessGroup> {
        let child = command.process_group(0).spawn()?;
        Ok(ProcessGroup {
            child,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn leader(&self) -> Pid {
        // Linux pids fit an i32 (pid_max is at most 2^22).
        Pid::from_raw(self.child.id() as i32)
    }

    /// Whether the leader has exited, without reaping it.
    fn leader_exited(&self) -> io::Result<bool> {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.leader()), flags) {
            Ok(WaitStatus::StillAlive) => Ok(false),
            Ok(_) => Ok(true),
            Err(errno) => Err(io::Error::from(errno)),
        }
    }

    /// Kills what is left of the group, then reaps the (exited or killed) leader.
    fn kill_group_and_reap(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        // ESRCH only means the group is already empty but for the zombie leader.
        let _ = killpg(self.leader(), Signal::SIGKILL);
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(status)
    }

    /// Waits up to `timeout` for the leader to exit; `None` if it is still running.
    /// Once it has exited, stragglers in its group are killed.
    pub fn wait_timeout(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let deadline = Instant::now() + timeout;
        // The pidfd turns readable when the leader exits, so the wait sleeps instead
        // of polling: a poll every millisecond takes its share of a 2-core machine
        // from the very run being measured.
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::PidfdFlags::empty(),
        )
        .ok();
        loop {
            if self.leader_exited()? {
                return self.kill_group_and_reap().map(Some);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match &pidfd {
                Some(fd) => {
                    let millis = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
                    // An interrupted or failed poll only means looking again.
                    let _ = poll(&mut [PollFd::new(fd.as_fd(), PollFlags::POLLIN)], timeout);
                }
                None => std::thread::sleep(WAIT_POLL),
            }
        }
    }

    /// Sends `signal` to the leader only, if it has not been reaped.
    pub fn signal_leader(&self, signal: Signal) {
        if self.status.is_none() {
            let _ = kill(self.leader(), signal);
        }
    }

    /// Asks the leader to stop with SIGTERM, waits `grace`, then kills the group.
    pub fn stop(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        self.signal_leader(Signal::SIGTERM);
        match self.wait_timeout(grace)? {
            Some(status) => Ok(status),
            None => self.kill_group_and_reap(),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let _ = self.kill_group_and_reap();
    }
}

/// A directory under the system temporary directory, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> io::Result<TempDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "saker-perf-{}-{}-{label}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
        ));
        fs::create_dir(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Resident set size of process `pid`, in bytes (`VmRSS` of `/proc/PID/status`).
pub fn resident_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS line in {path}"))
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let kibibytes: u64 = fields.next()?.parse().ok()?;
    (fields.next()? == "kB").then_some(kibibytes * 1024)
}

/// Every process id in `/proc`.
pub fn process_ids() -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// The command line of process `pid`, its arguments joined by spaces (`None` once
/// it is gone; empty for a zombie).
pub fn command_line(pid: u32) -> Option<String> {
    let bytes = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let arguments: Vec<String> = bytes
        .split(|&byte| byte == 0)
        .filter(|argument| !argument.is_empty())
        .map(|argument| String::from_utf8_lossy(argument).into_owned())
        .collect();
    Some(arguments.join(" "))
}

/// The process group of process `pid` (field 5 of `/proc/PID/stat`).
pub fn process_group_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_process_group(&stat)
}

fn parse_process_group(stat: &str) -> Option<u32> {
    // The command name is parenthesised and may hold spaces; state, ppid, pgrp follow.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The last `count` lines of a log file, for error messages.
pub fn tail(path: &Path, count: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// Finds `program` in `PATH`, so that saker and the baseline run the same file.
pub fn find_in_path(program: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for directory in std::env::split_paths(&path) {
        let candidate = directory.join(program);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!("`{program}` is not in PATH")
}

/// Runs `command` (a `saker run`, its stderr going to `log`) as a process group to
/// its end, at most `timeout`; returns its wall time. A run that fails or overstays
/// is an error quoting the end of its log, and its group is killed.
pub fn run_to_completion(
    command: &mut Command,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    use anyhow::{Context, bail};
    let program = command.get_program().to_string_lossy().into_owned();
    let started = Instant::now();
    let mut process =
        ProcessGroup::spawn(command).with_context(|| format!("starting {program}"))?;
    let status = process.wait_timeout(timeout)?;
    let elapsed = started.elapsed();
    match status {
        None => {
            process.stop(Duration::from_secs(5))?;
            bail!("saker run did not finish within {timeout:?}");
        }
        Some(status) if !status.success() => {
            bail!("saker run exited with {status}:\n{}", tail(log, 20))
        }
        Some(_) => Ok(elapsed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// Whether `pid` exists and is not a zombie (an orphan killed by the guard may
    /// wait a moment for its new parent to reap it).
    fn alive(pid: u32) -> bool {
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // The state follows the parenthesised command name.
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !state.is_some_and(|rest| rest.starts_with('Z') || rest.starts_with('X'))
    }

    /// A shell that starts a background `sleep` in its group and prints its pid.
    fn shell_with_grandchild(script_tail: &str) -> (ProcessGroup, u32) {
        let directory = TempDir::new("test").expect("temporary directory");
        let pid_file = directory.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; {script_tail}", pid_file.display());
        let group = ProcessGroup::spawn(
            Command::new("/bin/sh")
                .args(["-c", &script])
                .stdin(Stdio::null()),
        )
        .expect("spawning sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            if let Ok(text) = fs::read_to_string(&pid_file)
                && let Ok(pid) = text.trim().parse::<u32>()
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "sh never wrote the pid");
            std::thread::sleep(Duration::from_millis(5));
        };
        (group, grandchild)
    }

    #[test]
    fn dropping_the_guard_kills_the_whole_group() {
        let (group, grandchild) = shell_with_grandchild("wait");
        let leader = group.pid();
        drop(group);
        assert!(!alive(leader));
        // The grandchild is reparented to init, which reaps it once it is killed.
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(grandchild) {
            assert!(
                Instant::now() < deadline,
                "grandchild {grandchild} survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn stragglers_are_killed_when_the_leader_exits() {
        let (mut group, grandchild) = shell_with_grandchild("exit 3");
        let status = group
            .wait_timeout(Duration::from_secs(10))
            .expect("waiting")
            .expect("sh exits at once");
        assert_eq!(status.code(), Some(3));
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(grandchild) {
            assert!(
                Instant::now() < deadline,
                "grandchild {grandchild} survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn wait_timeout_reports_a_running_child() {
        let mut group =
            ProcessGroup::spawn(Command::new("/bin/sleep").arg("30")).expect("spawning sleep");
        assert_eq!(group.wait_timeout(Duration::from_millis(20)).unwrap(), None);
        let status = group.stop(Duration::from_secs(5)).unwrap();
        assert!(!status.success());
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tsaker\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert!(resident_bytes(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn process_group_and_command_line_are_read_from_proc() {
        let stat = "4242 (a (b) c) S 1 4200 4200 0 -1 4194560 0 0";
        assert_eq!(parse_process_group(stat), Some(4200));
        assert_eq!(parse_process_group("garbage"), None);
        let mut group =
            ProcessGroup::spawn(Command::new("/bin/sleep").arg("30")).expect("spawning sleep");
        let pid = group.pid();
        assert_eq!(process_group_of(pid), Some(pid));
        // The parent resumes once exec has swapped the memory map, before the
        // kernel has set the new argument area: until then cmdline reads empty.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut line = command_line(pid);
        while line.as_deref() == Some("") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            line = command_line(pid);
        }
        assert_eq!(line.as_deref(), Some("/bin/sleep 30"));
        assert!(process_ids().contains(&pid));
        group.stop(Duration::from_secs(5)).unwrap();
        assert_eq!(command_line(pid), None);
    }

    #[test]
    fn temporary_directory_is_removed_on_drop() {
        let directory = TempDir::new("drop").unwrap();
        let path = directory.path().to_owned();
        fs::write(path.join("file"), b"x").unwrap();
        drop(directory);
        assert!(!path.exists());
    }
}
