//! A waiting standby's watch on the root it would replace: a root that answers
//! nothing is fenced (killed) so that its lock, and the pilot, come free.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lock::Holder;
use crate::notice::{Notice, Notices};

/// While this standby waits for the lock, asks the root of `dir` for its `status`
/// every `every`. A root that answers nothing for `silent_for` (stopped, deadlocked,
/// its machine thrashing) is fenced: SIGKILLed, when it runs on this host and is
/// still that root, which frees its lock for the standby. A starved root killed by
/// mistake costs a takeover and the replay of what ran, never a result; `notices`
/// hears of each fence. Never returns: the caller races it against taking the lock.
pub async fn fence_when_silent(
    dir: PathBuf,
    every: Duration,
    silent_for: Duration,
    notices: Notices,
) -> std::convert::Infallible {
    let mut heard = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let probe = async {
            let client = saker_client::Client::connect(&dir, "saker standby").await?;
            client.status().await
        };
        let patience = every.max(Duration::from_secs(1));
        if let Ok(Ok(_)) = tokio::time::timeout(patience, probe).await {
            heard = Instant::now();
            continue;
        }
        if heard.elapsed() < silent_for {
            continue;
        }
        heard = Instant::now();
        let Some(holder) = crate::lock::holder(&dir) else {
            continue;
        };
        if holder.host == crate::lock::this_host() {
            fence_here(&dir, &holder, silent_for, &notices);
        } else if std::env::var_os("SLURM_JOB_ID").is_some() {
            fence_on_node(&dir, &holder, silent_for, &notices).await;
        } else {
            tracing::error!(host = %holder.host, pid = holder.pid,
                "the root answers nothing, and runs on another host outside an allocation: \
                 this standby cannot fence it");
        }
    }
}

/// SIGKILLs the silent root `holder` on this host, if its pid is still that root
/// (not reused since): its command line names the directory.
fn fence_here(dir: &Path, holder: &Holder, silent_for: Duration, notices: &Notices) {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", holder.pid)).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    if holder.pid == std::process::id() || !cmdline.contains(&dir.display().to_string()) {
        return;
    }
    tracing::warn!(pid = holder.pid, silent_for = ?silent_for,
        "the root has answered nothing; killing it so that a standby takes over");
    notices.tell(Notice::Fencing {
        pid: holder.pid,
        node: None,
        silent_for,
    });
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The same on the root's node of this allocation, through a one-task step there.
async fn fence_on_node(dir: &Path, holder: &Holder, silent_for: Duration, notices: &Notices) {
    tracing::warn!(pid = holder.pid, node = %holder.node, silent_for = ?silent_for,
        "the root has answered nothing; killing it on its node so that a standby takes over");
    notices.tell(Notice::Fencing {
        pid: holder.pid,
        node: Some(holder.node.clone()),
        silent_for,
    });
    let script = r#"tr '\0' ' ' < "/proc/$2/cmdline" | grep -qF -- "$1" && kill -KILL "$2""#;
    let fenced = crate::slurm::srun_one("saker-fence")
        .arg(format!("--nodelist={}", holder.node))
        .args(["sh", "-c", script, "saker-fence"])
        .arg(dir)
        .arg(holder.pid.to_string())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .status();
    match tokio::time::timeout(Duration::from_secs(60), fenced).await {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => tracing::error!(%status, "fencing the root on its node failed"),
        Ok(Err(error)) => tracing::error!(%error, "cannot start srun to fence the root"),
        Err(_) => tracing::error!("fencing the root on its node took over a minute"),
    }
}
