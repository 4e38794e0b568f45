//! One live agent per node of a pilot directory, as the kernel sees it: an agent
//! holds an open-file-description lock on `DIR/agents/node-N.lock` for as long as its
//! process lives (the kernel drops it however the process ends). A root resuming a
//! local pilot asks whether each node's agent still lives ([`held`]) and starts only
//! the missing ones: the others are adopted with the work they run.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};

/// The lock file of node `node`.
pub fn path(dir: &Path, node: u32) -> PathBuf {
    dir.join("agents").join(format!("node-{node}.lock"))
}

/// A node's lock, held until dropped or the process ends.
#[derive(Debug)]
pub struct NodeLock {
    file: File,
}

impl NodeLock {
    /// Writes `stamp` (the allocation the holder runs in) into the lock file: a
    /// supervisor that never saw the lock held still learns that this allocation's
    /// agent took it, and has ended if the lock is free ([`stamp_of`]).
    pub fn stamp(&mut self, stamp: &str) -> std::io::Result<()> {
        use std::io::{Seek, Write};
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(stamp.as_bytes())
    }
}

/// What the last holder of node `node`'s lock wrote into it ([`NodeLock::stamp`]);
/// empty if nothing, or no lock file.
pub fn stamp_of(dir: &Path, node: u32) -> std::io::Result<String> {
    match std::fs::read_to_string(path(dir, node)) {
        Ok(stamp) => Ok(stamp),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(error) => Err(error),
    }
}

/// Takes node `node`'s lock; `None` if another process holds it.
pub fn take(dir: &Path, node: u32) -> std::io::Result<Option<NodeLock>> {
    let file = open(dir, node)?;
    let request = whole_file();
    match fcntl(&file, FcntlArg::F_OFD_SETLK(&request)) {
        Ok(_) => Ok(Some(NodeLock { file })),
        Err(Errno::EAGAIN | Errno::EACCES) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// Whether a live process holds node `node`'s lock (asked without taking it).
pub fn held(dir: &Path, node: u32) -> std::io::Result<bool> {
    let path = path(dir, node);
    if !path.exists() {
        return Ok(false);
    }
    let file = OpenOptions::new().read(true).write(true).open(&path)?;
    let mut request = whole_file();
    fcntl(&file, FcntlArg::F_OFD_GETLK(&mut request))?;
    Ok(request.l_type != libc::F_UNLCK as libc::c_short)
}

fn open(dir: &Path, node: u32) -> std::io::Result<File> {
    let path = path(dir, node);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// A write lock on the whole file; `l_pid` must be 0 for OFD locks.
fn whole_file() -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_lock_is_held_while_its_holder_lives_and_free_after() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!held(dir.path(), 3).unwrap(), "no agent ever ran");
        let lock = take(dir.path(), 3).unwrap().expect("free");
        // OFD locks conflict between open file descriptions, even in one process.
        assert!(
            take(dir.path(), 3).unwrap().is_none(),
            "one holder at a time"
        );
        assert!(held(dir.path(), 3).unwrap());
        assert!(!held(dir.path(), 4).unwrap(), "per node");
        let mut lock = lock;
        lock.stamp("77").unwrap();
        lock.stamp("4242").unwrap();
        drop(lock);
        assert!(
            !held(dir.path(), 3).unwrap(),
            "free once its holder is gone"
        );
        assert_eq!(stamp_of(dir.path(), 3).unwrap(), "4242", "its stamp stays");
        assert_eq!(stamp_of(dir.path(), 5).unwrap(), "", "no lock file");
    }
}
