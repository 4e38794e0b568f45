//! One root per pilot directory: the root holds an exclusive lock on
//! `<dir>/root.lock` for as long as it runs. A second root (a `--resume` while the
//! first still runs) is refused, and a standby root waits on the lock: the kernel
//! releases it the instant the holder dies, however it dies, so the standby takes
//! over then, and never while the holder lives.
//!
//! An open-file-description lock (`F_OFD_SETLK`): POSIX record-lock semantics, which
//! NFS and Lustre forward to their lock managers, without POSIX locks' habit of
//! dropping the lock when the process closes any other descriptor of the file.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};
pub use saker_client::host::{this_host, this_node};

/// The lock file, in the pilot directory.
pub const LOCK_FILE: &str = "root.lock";
/// Written by a root that stops on purpose, under its lock: its standbys must not
/// take over a pilot that ended. A root that starts (or resumes) removes it.
pub const STOPPED_FILE: &str = "root.stopped";

/// Marks the pilot of `dir` stopped on purpose (see [`STOPPED_FILE`]).
pub fn mark_stopped(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(STOPPED_FILE), b"")
}

/// Whether the last root of `dir` stopped on purpose.
pub fn stopped(dir: &Path) -> bool {
    dir.join(STOPPED_FILE).exists()
}

/// A root starting on `dir`: it has not stopped.
pub fn clear_stopped(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(STOPPED_FILE));
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another root ({holder}) runs on the pilot directory {}; stop it first, or resume once it has stopped", dir.display())]
    Held { dir: PathBuf, holder: String },
    #[error("cannot lock {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct RootLock {
    _file: File,
}

impl RootLock {
    /// Takes the lock, or says who holds it. A holder on this host that is dying (a
    /// zombie, or gone: a killed multi-threaded root releases its files only once its
    /// last thread exits) is waited for, at most [`DYING_HOLDER_WAIT`], so that
    /// `kill -9` followed at once by `--resume` resumes.
    pub fn take(dir: &Path) -> Result<RootLock, LockError> {
        let (path, mut file) = open(dir)?;
        let deadline = std::time::Instant::now() + DYING_HOLDER_WAIT;
        loop {
            match lock(&file, false) {
                Ok(()) => return RootLock::holding(file, &path),
                Err(Errno::EAGAIN | Errno::EACCES) => {
                    let mut text = String::new();
                    file.rewind().map_err(|source| LockError::Io {
                        path: path.clone(),
                        source,
                    })?;
                    let _ = file.read_to_string(&mut text);
                    let holder = parse_holder(&text);
                    let dying = holder
                        .as_ref()
                        .is_some_and(|h| h.host == this_host() && dying(h.pid));
                    if dying && std::time::Instant::now() < deadline {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        continue;
                    }
                    let holder = match holder {
                        Some(Holder { pid, host, .. }) => format!("pid {pid} on {host}"),
                        None => "pid unknown".to_owned(),
                    };
                    return Err(LockError::Held {
                        dir: dir.to_path_buf(),
                        holder,
                    });
                }
                Err(errno) => return Err(io_error(&path, errno)),
            }
        }
    }

    /// Waits for the lock (blocking the thread) and takes it.
    pub fn wait(dir: &Path) -> Result<RootLock, LockError> {
        let (path, file) = open(dir)?;
        loop {
            match lock(&file, true) {
                Ok(()) => return RootLock::holding(file, &path),
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(io_error(&path, errno)),
            }
        }
    }

    /// Writes this process's pid, host and Slurm node into the file: for the message
    /// of a refused root, and for a standby that fences a root that hangs.
    fn holding(mut file: File, path: &Path) -> Result<RootLock, LockError> {
        let io = |source| LockError::Io {
            path: path.to_path_buf(),
            source,
        };
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        let line = format!("{} {} {}\n", std::process::id(), this_host(), this_node());
        file.write_all(line.as_bytes()).map_err(io)?;
        Ok(RootLock { _file: file })
    }
}

/// How long [`RootLock::take`] waits for a dying holder to let go (a tuning constant).
pub const DYING_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether process `pid` of this host is gone or a zombie.
fn dying(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| matches!(state, 'Z' | 'X')),
    }
}

/// The root holding a directory's lock, as it wrote itself into the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub host: String,
    /// Its Slurm node name (its host name outside an allocation).
    pub node: String,
}

/// Who holds (or last held) the lock of `dir`.
pub fn holder(dir: &Path) -> Option<Holder> {
    parse_holder(&std::fs::read_to_string(dir.join(LOCK_FILE)).ok()?)
}

fn parse_holder(text: &str) -> Option<Holder> {
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let host = words.next().unwrap_or_default().to_owned();
    let node = words.next().map_or_else(|| host.clone(), str::to_owned);
    Some(Holder { pid, host, node })
}

/// Whether some process holds the lock of `dir` now (asked without taking it).
pub fn held(dir: &Path) -> Result<bool, LockError> {
    let (path, file) = open(dir)?;
    let mut request = whole_file();
    fcntl(&file, FcntlArg::F_OFD_GETLK(&mut request)).map_err(|errno| io_error(&path, errno))?;
    Ok(request.l_type != libc::F_UNLCK as libc::c_short)
}

fn open(dir: &Path) -> Result<(PathBuf, File), LockError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| LockError::Io {
            path: path.clone(),
            source,
        })?;
    Ok((path, file))
}

/// A write lock on the whole file (length 0: to its end, however long); l_pid must
/// be 0 for OFD locks.
fn whole_file() -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

fn lock(file: &File, wait: bool) -> Result<(), Errno> {
    let request = whole_file();
    let arg = if wait {
        FcntlArg::F_OFD_SETLKW(&request)
    } else {
        FcntlArg::F_OFD_SETLK(&request)
    };
    fcntl(file, arg).map(drop)
}

fn io_error(path: &Path, errno: Errno) -> LockError {
    LockError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_that_is_gone_or_a_zombie_is_dying_and_a_live_one_is_not() {
        assert!(!dying(std::process::id()));
        assert!(dying(u32::MAX), "no such process");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it exits.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dying(pid) {
            assert!(std::time::Instant::now() < deadline, "true never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
    }

    #[test]
    fn a_second_root_is_refused_naming_the_first_and_a_waiter_gets_it_once_freed() {
        let dir = tempfile::tempdir().unwrap();
        let first = RootLock::take(dir.path()).unwrap();
        let refused = RootLock::take(dir.path()).unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains(&format!("pid {} on {}", std::process::id(), this_host())),
            "{message}"
        );
        assert_eq!(holder(dir.path()).unwrap().pid, std::process::id());
        assert!(held(dir.path()).unwrap());
        let path = dir.path().to_path_buf();
        let (taken, waiter) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let lock = RootLock::wait(&path).unwrap();
            taken.send(()).unwrap();
            lock
        });
        assert!(
            waiter
                .recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "not while the first holds it"
        );
        drop(first);
        waiter
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("taken once freed");
        drop(thread.join().unwrap());
        assert!(!held(dir.path()).unwrap());
        RootLock::take(dir.path()).expect("free again");
    }
}
