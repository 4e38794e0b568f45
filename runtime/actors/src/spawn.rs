//! Starting a task's process and reaping it.
//!
//! Tasks start with `posix_spawn` (a `vfork`-style clone and `exec`), like std's
//! `Command` does, but with the environment built from a copy of this process's own,
//! taken once: `Command` reads and sorts the whole environment again for every spawn
//! that sets a variable, and every task gets `SAKER_*` variables. That cost grows with
//! the environment, and HPC login environments are large. Launches that `posix_spawn`
//! cannot express here (a working directory; a `PATH` of the task's own, which must
//! guide the program's lookup) go through `Command`.
//!
//! The command line and the task's variables arrive as the C strings `posix_spawn`
//! takes, built once with the [`Launch`], and are passed on by reference: a spawn
//! copies no argument or variable, it only gathers pointers to them (and to the
//! inherited entries). `Command`, the rare way, copies them again.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
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

use crate::process::launch::{Launch, sets};

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
    let Some(program) = launch.program() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "empty command line",
        ));
    };
    if launch.has_nul() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in the command line or environment",
        ));
    }
    let named_by_path = program.to_bytes().contains(&b'/');
    let own_path = !named_by_path && launch.env().iter().any(|entry| sets(entry, b"PATH"));
    if let Some(socket) = &launch.pmi_socket {
        let socket = socket
            .as_ref()
            .map_err(|reason| io::Error::other(reason.clone()))?;
        return start_with_socket(launch, program, named_by_path, own_path, null, socket);
    }
    match null {
        Some(null) if launch.cwd.is_none() && !own_path => {
            spawn(launch, program, named_by_path, null, None)
        }
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

/// Starts `launch` with `socket` as its descriptor 3, always by `posix_spawn` (only
/// its file actions hand a descriptor to the child alone). A working directory or a
/// `PATH` of the task's own, which `posix_spawn` cannot apply here, are a shell's:
/// it changes to the directory and `exec`s the program, looked up on that `PATH`.
fn start_with_socket(
    launch: &Launch,
    program: &CStr,
    named_by_path: bool,
    own_path: bool,
    null: Option<&File>,
    socket: &OwnedFd,
) -> io::Result<Started> {
    let opened;
    let null = match null {
        Some(null) => null,
        None => {
            opened = File::open("/dev/null")?;
            &opened
        }
    };
    if launch.cwd.is_none() && !own_path {
        return spawn(launch, program, named_by_path, null, Some(socket));
    }
    let dir = launch
        .cwd
        .as_ref()
        .map_or_else(|| b".".to_vec(), |dir| dir.as_os_str().as_bytes().to_vec());
    let shell = b"/bin/sh".to_vec();
    let script = b"cd -- \"$0\" && exec \"$@\"".to_vec();
    let wrapped = launch.wrapped([shell, b"-c".to_vec(), script, dir]);
    spawn(&wrapped, c"/bin/sh", true, null, Some(socket))
}

/// Starts `launch` by `posix_spawn`, passing its command line and variables as they
/// are (and `socket`, if any, as descriptor 3).
fn spawn(
    launch: &Launch,
    program: &CStr,
    named_by_path: bool,
    null: &File,
    socket: Option<&OwnedFd>,
) -> io::Result<Started> {
    let envp = environment(launch);
    let (stdout, stdout_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (stderr, stderr_w) = pipe2(OFlag::O_CLOEXEC)?;
    let mut actions = PosixSpawnFileActions::init()?;
    actions.add_dup2(null.as_raw_fd(), 0)?;
    actions.add_dup2(stdout_w.as_raw_fd(), 1)?;
    actions.add_dup2(stderr_w.as_raw_fd(), 2)?;
    // A socket that is descriptor 3 already is copied first: a dup2 onto itself
    // would leave it closed on exec.
    let moved = match socket {
        Some(socket) if socket.as_raw_fd() == 3 => {
            Some(rustix::io::fcntl_dupfd_cloexec(socket, 4)?)
        }
        _ => None,
    };
    if let Some(socket) = moved.as_ref().or(socket) {
        actions.add_dup2(socket.as_raw_fd(), 3)?;
    }
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
    let argv = launch.argv();
    let pid = if named_by_path {
        posix_spawn(program, &actions, &attr, argv, &envp)?
    } else {
        posix_spawnp(program, &actions, &attr, argv, &envp)?
    };
    Ok(Started {
        pid: pid.as_raw() as u32,
        stdout: File::from(stdout),
        stderr: File::from(stderr),
    })
}

/// The task's whole environment: this process's, as it was when first read, under the
/// launch's own variables.
fn environment(launch: &Launch) -> Vec<&CStr> {
    let own = launch.env();
    let mut envp: Vec<&CStr> = Vec::with_capacity(inherited().len() + own.len());
    envp.extend(
        inherited()
            .iter()
            .filter(|(key, _)| !own.iter().any(|entry| sets(entry, key)))
            .map(|(_, entry)| entry.as_c_str()),
    );
    envp.extend(own.iter().map(CString::as_c_str));
    envp
}

/// Starts `launch` by std's `Command` (the rare way: see the module's docs), which
/// copies its command line and variables again.
fn command(launch: &Launch, program: &CStr) -> io::Result<Started> {
    let mut command = Command::new(OsStr::from_bytes(program.to_bytes()));
    command
        .args(
            launch.argv()[1..]
                .iter()
                .map(|arg| OsStr::from_bytes(arg.to_bytes())),
        )
        .envs(launch.env().iter().map(|entry| {
            let entry = entry.to_bytes();
            let (key, value) = match entry.iter().position(|&b| b == b'=') {
                Some(at) => (&entry[..at], &entry[at + 1..]),
                None => (entry, &[][..]),
            };
            (OsStr::from_bytes(key), OsStr::from_bytes(value))
        }))
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

/// Whether this process's environment (as tasks inherit it) sets `key`.
pub(crate) fn inherits(key: &[u8]) -> bool {
    inherited().iter().any(|(known, _)| known == key)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::Path;

    fn launch(argv: &[&str], env: &[(&str, &str)]) -> Launch {
        let mut launch = Launch::of(argv, env, &std::env::temp_dir());
        launch.inline_limit = 1024;
        launch
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
        assert_eq!(task.env().len(), 2, "one entry per key");
    }

    /// The environment handed to `posix_spawn`: of a variable given twice, the last
    /// value; a task's variable in place of the inherited one; the rest inherited.
    #[test]
    fn a_tasks_variables_override_inherited_ones_and_the_last_value_wins() {
        let (key, _) = inherited().first().expect("an inherited variable");
        let key = std::str::from_utf8(key).unwrap();
        let task = launch(
            &["true"],
            &[("SAKER_Y", "first"), (key, "mine"), ("SAKER_Y", "last")],
        );
        let own = format!("{key}=mine");
        assert_eq!(task.env_strs(), [own.as_str(), "SAKER_Y=last"]);
        let envp: Vec<&str> = environment(&task)
            .iter()
            .map(|entry| entry.to_str().unwrap())
            .collect();
        let of = |key: &str| {
            envp.iter()
                .filter(|entry| entry.split_once('=').is_some_and(|(k, _)| k == key))
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(of(key), [own.as_str()], "{envp:?}");
        assert_eq!(of("SAKER_Y"), ["SAKER_Y=last"]);
        assert_eq!(envp.len(), inherited().len() + 1, "the rest is inherited");
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
        let mut nul = launch(&["echo", "a\0b"], &[]);
        nul.cwd = Some(std::env::temp_dir()); // `Command`'s way
        assert_eq!(
            start(&nul, Some(&null)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
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
