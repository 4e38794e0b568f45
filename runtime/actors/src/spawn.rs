//! Starting a task's process and reaping it.
//!
//! Tasks start with `posix_spawn` (a `vfork`-style clone and `exec`), like std's
//! `Command` does, but with the environment built from a copy of this process's own,
//! taken once: `Command` reads and sorts the whole environment again for every spawn
//! that sets a variable, and every task gets `SAKER_*` variables. That cost grows with
//! the environment, and HPC login environments are large. Launches that `posix_spawn`
//! cannot express here (a working directory; a `PATH` of the task's own, which must
//! guide the program's lookup) go through `Command`.

use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::spawn::{
    PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn, posix_spawnp,
};
use nix::sys::signal::SigSet;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, pipe2};

use crate::process::Launch;

/// A started task: the leader of its own process group, and its output.
#[derive(Debug)]
pub struct Started {
    pub pid: u32,
    pub stdout: File,
    pub stderr: File,
}

/// How the leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

/// Starts `launch` in a new process group, stdin on `/dev/null` (`null`, when this
/// slot has it open) and both output streams on pipes.
pub fn start(launch: &Launch, null: Option<&File>) -> io::Result<Started> {
    let (program, _) = launch
        .argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command line"))?;
    let own_path = !program.contains('/') && launch.env.iter().any(|(key, _)| key == "PATH");
    match null {
        Some(null) if launch.cwd.is_none() && !own_path => spawn(launch, null),
        _ => command(launch, program),
    }
}

/// Waits for the leader to end and reaps it.
pub fn wait(pid: u32) -> io::Result<Ended> {
    let pid = Pid::from_raw(pid as i32);
    loop {
        return match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, code)) => Ok(Ended::Exited(code)),
            Ok(WaitStatus::Signaled(_, signal, _)) => Ok(Ended::Signaled(signal as i32)),
            Ok(other) => Err(io::Error::other(format!(
                "unexpected wait status {other:?}"
            ))),
            Err(Errno::EINTR) => continue,
            Err(errno) => Err(errno.into()),
        };
    }
}

fn spawn(launch: &Launch, null: &File) -> io::Result<Started> {
    let argv = launch
        .argv
        .iter()
        .map(|arg| c_string(arg.clone().into_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let own = overrides(launch)?;
    let mut envp: Vec<&CStr> = inherited()
        .iter()
        .filter(|(key, _)| {
            !launch
                .env
                .iter()
                .any(|(k, _)| k.as_bytes() == key.as_slice())
        })
        .map(|(_, entry)| entry.as_c_str())
        .collect();
    envp.extend(own.iter().map(CString::as_c_str));

    let (stdout, stdout_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (stderr, stderr_w) = pipe2(OFlag::O_CLOEXEC)?;
    let mut actions = PosixSpawnFileActions::init()?;
    actions.add_dup2(null.as_raw_fd(), 0)?;
    actions.add_dup2(stdout_w.as_raw_fd(), 1)?;
    actions.add_dup2(stderr_w.as_raw_fd(), 2)?;
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    attr.set_pgroup(Pid::from_raw(0))?;
    attr.set_sigmask(&SigSet::empty())?;
    // Rust ignores SIGPIPE in this process; a task starts with every default.
    attr.set_sigdefault(&SigSet::all())?;
    let program = &argv[0];
    let pid = if program.as_bytes().contains(&b'/') {
        posix_spawn(program.as_c_str(), &actions, &attr, &argv, &envp)?
    } else {
        posix_spawnp(program, &actions, &attr, &argv, &envp)?
    };
    Ok(Started {
        pid: pid.as_raw() as u32,
        stdout: File::from(stdout),
        stderr: File::from(stderr),
    })
}

fn command(launch: &Launch, program: &str) -> io::Result<Started> {
    let mut command = Command::new(program);
    command
        .args(&launch.argv[1..])
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &launch.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn()?;
    let pipe = |stream: Option<OwnedFd>| {
        stream
            .map(File::from)
            .ok_or_else(|| io::Error::other("a piped stream is missing"))
    };
    // The child is reaped through its pid (see `wait`); dropping the handle does not
    // touch the process.
    Ok(Started {
        pid: child.id(),
        stdout: pipe(child.stdout.take().map(OwnedFd::from))?,
        stderr: pipe(child.stderr.take().map(OwnedFd::from))?,
    })
}

/// The launch's variables as `KEY=value`; of a key given twice, the last.
fn overrides(launch: &Launch) -> io::Result<Vec<CString>> {
    let env = &launch.env;
    env.iter()
        .enumerate()
        .filter(|(i, (key, _))| !env[i + 1..].iter().any(|(later, _)| later == key))
        .map(|(_, (key, value))| c_string(format!("{key}={value}").into_bytes()))
        .collect()
}

/// This process's environment as `KEY=value` entries, by key. Read once: nothing in
/// Saker changes its own environment (`set_var` is unsafe, and unsafe code is denied).
fn inherited() -> &'static [(Vec<u8>, CString)] {
    static INHERITED: OnceLock<Vec<(Vec<u8>, CString)>> = OnceLock::new();
    INHERITED.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(key, value)| {
                let key = key.into_vec();
                let mut entry = key.clone();
                entry.push(b'=');
                entry.extend(OsString::into_vec(value));
                // An entry cannot hold a NUL; skipped rather than trusted.
                Some((key, CString::new(entry).ok()?))
            })
            .collect()
    })
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the command line or environment",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::Path;

    fn launch(argv: &[&str], env: &[(&str, &str)]) -> Launch {
        Launch {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cwd: None,
            time_limit: None,
            inline_limit: 1024,
            spill_dir: std::env::temp_dir(),
            spill_stem: "t".into(),
        }
    }

    /// Runs `launch` through `start` (with stdin open, so by `posix_spawn` where it
    /// can) and returns how it ended with its whole stdout and stderr.
    fn output(launch: &Launch) -> (Ended, String, String) {
        let null = File::open("/dev/null").unwrap();
        let mut started = start(launch, Some(&null)).unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        started.stdout.read_to_string(&mut out).unwrap();
        started.stderr.read_to_string(&mut err).unwrap();
        (wait(started.pid).unwrap(), out, err)
    }

    #[test]
    fn a_task_inherits_the_environment_under_its_own_variables() {
        let home = std::env::var("HOME").unwrap_or_default();
        let task = launch(
            &[
                "sh",
                "-c",
                "printf '%s|%s|%s' \"$SAKER_X\" \"$HOME\" \"${PATH:+set}\"",
            ],
            &[
                ("SAKER_X", "first"),
                ("HOME", "/elsewhere"),
                ("SAKER_X", "last"),
            ],
        );
        let (ended, out, _) = output(&task);
        assert_eq!(ended, Ended::Exited(0));
        assert_eq!(out, "last|/elsewhere|set", "inherited HOME was {home}");
        assert_eq!(overrides(&task).unwrap().len(), 2, "one entry per key");
    }

    #[test]
    fn a_task_starts_in_its_own_group_with_default_signals() {
        // With SIGPIPE ignored (as in this process) `yes` would complain of a broken
        // pipe; the task must see the default, and die of it quietly.
        let task = launch(
            &["sh", "-c", "yes | head -n 1; cut -d' ' -f5 /proc/$$/stat"],
            &[],
        );
        let null = File::open("/dev/null").unwrap();
        let mut started = start(&task, Some(&null)).unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        started.stdout.read_to_string(&mut out).unwrap();
        started.stderr.read_to_string(&mut err).unwrap();
        assert_eq!(wait(started.pid).unwrap(), Ended::Exited(0));
        assert_eq!(err, "");
        let pgid = out.lines().nth(1).map(str::trim);
        assert_eq!(pgid, Some(started.pid.to_string().as_str()), "{out}");
    }

    #[test]
    fn a_working_directory_or_a_path_of_its_own_is_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("hello-saker");
        std::fs::write(&script, "#!/bin/sh\necho hi from $(pwd)\n").unwrap();
        let chmod = std::process::Command::new("chmod")
            .arg("+x")
            .arg(&script)
            .status()
            .unwrap();
        assert!(chmod.success());
        let path = format!("{}:/bin:/usr/bin", dir.path().display());
        let mut task = launch(&["hello-saker"], &[("PATH", &path)]);
        task.cwd = Some(dir.path().to_path_buf());
        let (ended, out, _) = output(&task);
        assert_eq!(ended, Ended::Exited(0));
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(Path::new(out.trim().trim_start_matches("hi from ")), cwd);
    }

    #[test]
    fn bad_launches_are_errors_not_panics() {
        let null = File::open("/dev/null").unwrap();
        let missing = start(&launch(&["no-such-program-saker"], &[]), Some(&null));
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        let missing = start(&launch(&["/no/such/program"], &[]), Some(&null));
        assert_eq!(missing.unwrap_err().kind(), io::ErrorKind::NotFound);
        let nul = start(&launch(&["echo", "a\0b"], &[]), Some(&null));
        assert_eq!(nul.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let nul = start(&launch(&["true"], &[("K", "a\0b")]), Some(&null));
        assert_eq!(nul.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let empty = start(&launch(&[], &[]), Some(&null));
        assert_eq!(empty.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        // Without an open stdin the launch takes `Command`'s way, and still runs.
        let task = launch(&["sh", "-c", "echo $K"], &[("K", "v")]);
        let mut started = start(&task, None).unwrap();
        let mut out = String::new();
        started.stdout.read_to_string(&mut out).unwrap();
        assert_eq!(wait(started.pid).unwrap(), Ended::Exited(0));
        assert_eq!(out, "v\n");
    }
}
