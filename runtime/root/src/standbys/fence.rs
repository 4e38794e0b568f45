//! A waiting standby's watch on the root it would replace: a root that answers
//! nothing is fenced (killed) so that its lock, and the pilot, come free.

use std::path::{Path, PathBuf};

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
            let client = saker_client::Client::connect(&dir, "saker standby").await?;
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
