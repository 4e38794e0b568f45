//! The standby roots waiting on a pilot directory, as they list themselves in
//! `DIR/standby/`: one file each (`HOST-PID`, holding `{"host", "node", "pid",
//! "since"}`), removed when they take over or stop. A root does not know every standby
//! (after a takeover, some were started by the root before it), so `saker status`
//! reads them here, and a root placing standbys on the nodes of an allocation spreads
//! them by it. Written and read in this one place, so the file's form cannot drift
//! between the standby that writes it and the clients that read it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{this_host, this_node};
use crate::results::Timestamp;

/// The directory of standby files, in the pilot directory.
pub const STANDBY_DIR: &str = "standby";

/// A standby root waiting, as its file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standby {
    pub host: String,
    /// Its Slurm node (its host name outside an allocation).
    #[serde(default)]
    pub node: String,
    pub pid: u32,
    pub since: Timestamp,
}

/// This process's standby file, removed when dropped.
#[derive(Debug)]
pub struct Listed(PathBuf);

impl Drop for Listed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Lists this process as a standby of `dir` until the returned guard is dropped.
pub fn list_self(dir: &Path) -> std::io::Result<Listed> {
    let host = this_host();
    let standby = Standby {
        host: host.clone(),
        node: this_node(),
        pid: std::process::id(),
        since: Timestamp::now(),
    };
    let directory = dir.join(STANDBY_DIR);
    std::fs::create_dir_all(&directory)?;
    let path = directory.join(format!("{host}-{}", standby.pid));
    let json = serde_json::to_vec(&standby).map_err(std::io::Error::other)?;
    std::fs::write(&path, json)?;
    Ok(Listed(path))
}

/// The standbys of `dir`, oldest first. One on this host whose process is gone (it
/// was killed before it could remove its file) is left out, and its file removed.
pub fn waiting(dir: &Path) -> Vec<Standby> {
    let this_host = this_host();
    let Ok(entries) = std::fs::read_dir(dir.join(STANDBY_DIR)) else {
        return Vec::new();
    };
    let mut standbys: Vec<Standby> = entries
        .flatten()
        .filter_map(|entry| {
            let standby: Standby =
                serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
            let here = standby.host == this_host;
            if here && !Path::new(&format!("/proc/{}", standby.pid)).exists() {
                let _ = std::fs::remove_file(entry.path());
                return None;
            }
            Some(standby)
        })
        .collect();
    standbys.sort_by_key(|standby| (standby.since, standby.pid));
    standbys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_listed_while_it_waits_and_a_dead_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let listed = list_self(dir.path()).unwrap();
        let waiting_now = waiting(dir.path());
        assert_eq!(waiting_now.len(), 1);
        assert_eq!(waiting_now[0].pid, std::process::id());
        // One of another host is listed as its file says; a dead one here is not.
        let other = Standby {
            host: "elsewhere".into(),
            node: "elsewhere".into(),
            pid: 7,
            since: Timestamp::now(),
        };
        let files = dir.path().join(STANDBY_DIR);
        std::fs::write(
            files.join("elsewhere-7"),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        let dead = Standby {
            host: this_host(),
            node: this_node(),
            pid: u32::MAX - 1,
            since: Timestamp::now(),
        };
        std::fs::write(files.join("here-dead"), serde_json::to_vec(&dead).unwrap()).unwrap();
        let pids: Vec<u32> = waiting(dir.path()).iter().map(|s| s.pid).collect();
        assert_eq!(pids, vec![std::process::id(), 7]);
        assert!(!files.join("here-dead").exists());
        drop(listed);
        assert_eq!(waiting(dir.path()).len(), 1);
    }
}
