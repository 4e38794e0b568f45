//! Standby roots waiting on a pilot directory list themselves in `DIR/standby/`, one
//! file each (`HOST-PID`, holding `{"host", "node", "pid", "since"}`), removed when
//! they take over or stop. A root does not know every standby (after a takeover, some
//! were started by the root before it), so `saker status` reads them here, and a root
//! placing standbys on the nodes of an allocation spreads them by it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    let host = crate::lock::this_host();
    let standby = Standby {
        host: host.clone(),
        node: crate::lock::this_node(),
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
    let this_host = crate::lock::this_host();
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

/// The nodes of an allocation (`nodes`, in order) for `count` new standbys of a root on
/// `this`: never its own node (a standby there dies with it), and first the nodes
/// no standby waits on (`taken`). None when the allocation has no other node.
pub fn place(nodes: &[String], this: &str, taken: &[String], count: usize) -> Vec<String> {
    let others: Vec<&String> = nodes.iter().filter(|node| *node != this).collect();
    if others.is_empty() {
        return Vec::new();
    }
    let mut load: Vec<(usize, &String)> = others
        .iter()
        .map(|node| (taken.iter().filter(|t| t == node).count(), *node))
        .collect();
    (0..count)
        .map(|_| {
            // The least loaded, the first in allocation order among equals.
            let (load, node) = load
                .iter_mut()
                .min_by_key(|(load, _)| *load)
                .expect("some other node");
            *load += 1;
            (*node).clone()
        })
        .collect()
}

/// While this standby waits for the lock, asks the root of `dir` for its `status`
/// every `every`. A root that answers nothing for `silent_for` (stopped, deadlocked,
/// its machine thrashing) is fenced: SIGKILLed, when it runs on this host and is
/// still that root, which frees its lock for the standby. A starved root killed by
/// mistake costs a takeover and the replay of what ran, never a result. Never
/// returns: the caller races it against taking the lock.
pub async fn fence_when_silent(
    dir: PathBuf,
    every: std::time::Duration,
    silent_for: std::time::Duration,
) -> std::convert::Infallible {
    let mut heard = std::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let probe = async {
            let client = crate::client::Client::connect(&dir, "saker standby").await?;
            client.status().await
        };
        let patience = every.max(std::time::Duration::from_secs(1));
        if let Ok(Ok(_)) = tokio::time::timeout(patience, probe).await {
            heard = std::time::Instant::now();
            continue;
        }
        if heard.elapsed() < silent_for {
            continue;
        }
        heard = std::time::Instant::now();
        let Some(holder) = crate::lock::holder(&dir) else {
            continue;
        };
        if holder.host == crate::lock::this_host() {
            fence_here(&dir, &holder, silent_for);
        } else if std::env::var_os("SLURM_JOB_ID").is_some() {
            fence_on_node(&dir, &holder, silent_for).await;
        } else {
            tracing::error!(host = %holder.host, pid = holder.pid,
                "the root answers nothing, and runs on another host outside an allocation: \
                 this standby cannot fence it");
        }
    }
}

/// SIGKILLs the silent root `holder` on this host, if its pid is still that root
/// (not reused since): its command line names the directory.
fn fence_here(dir: &Path, holder: &crate::lock::Holder, silent_for: std::time::Duration) {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid)).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    if holder.pid == std::process::id() || !cmdline.contains(&dir.display().to_string()) {
        return;
    }
    tracing::warn!(pid = holder.pid, silent_for = ?silent_for,
        "the root has answered nothing; killing it so that a standby takes over");
    eprintln!(
        "saker: the root (pid {}) answered nothing for {silent_for:?}; fencing it",
        holder.pid
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The same on the root's node of this allocation, through a one-task step there.
async fn fence_on_node(dir: &Path, holder: &crate::lock::Holder, silent_for: std::time::Duration) {
    tracing::warn!(pid = holder.pid, node = %holder.node, silent_for = ?silent_for,
        "the root has answered nothing; killing it on its node so that a standby takes over");
    eprintln!(
        "saker: the root (pid {} on {}) answered nothing for {silent_for:?}; fencing it",
        holder.pid, holder.node
    );
    let script = r#"tr '\0' ' ' < "/proc/$2/cmdline" | grep -qF -- "$1" && kill -KILL "$2""#;
    let fenced = crate::slurm::srun_one("saker-fence")
        .arg(format!("--nodelist={}", holder.node))
        .args(["sh", "-c", script, "saker-fence"])
        .arg(dir)
        .arg(holder.pid.to_string())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(std::time::Duration::from_secs(60), fenced).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => tracing::error!(%status, "fencing the root on its node failed"),
        Ok(Err(error)) => tracing::error!(%error, "cannot start srun to fence the root"),
        Err(_) => tracing::error!("fencing the root on its node took over a minute"),
    }
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
            host: crate::lock::this_host(),
            node: crate::lock::this_node(),
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

    #[test]
    fn standbys_go_to_other_nodes_the_least_used_first() {
        let nodes: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        assert_eq!(place(&nodes, "n1", &[], 1), ["n2"]);
        assert_eq!(place(&nodes, "n1", &[], 3), ["n2", "n3", "n2"]);
        // After a takeover on n2: n3 already has one.
        assert_eq!(place(&nodes, "n2", &["n3".into()], 1), ["n1"]);
        assert!(place(&["n1".into()], "n1", &[], 2).is_empty());
    }
}
