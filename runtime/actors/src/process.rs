//! Running one attempt as a child process: spawn, capture output, enforce the time
//! limit, kill on cancel.
//!
//! Each attempt runs in its own process group so that a time limit or cancel kills
//! everything the task started, not only its first process. The group is registered
//! with this process's [reaper](crate::reaper), if any, for as long as it runs, so it
//! dies with the agent too.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use saker_wire::messages::{Outcome, Output};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::oneshot;

/// Everything needed to start one attempt.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<String>,
    /// Overrides applied on top of the agent's own environment.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    pub time_limit: Option<Duration>,
    /// Bytes of each stream kept in memory and returned inline.
    pub inline_limit: usize,
    /// Where a stream longer than `inline_limit` is written in full.
    pub spill_dir: PathBuf,
    /// File stem for spill files, unique per attempt (e.g. `t42.a7`).
    pub spill_stem: String,
}

/// How an attempt ended, with its captured output.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub outcome: Outcome,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    pub stdout: Output,
    pub stderr: Output,
}

/// Sent through the cancel channel to stop a running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelRequest;

pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Runs `launch` to completion. Never panics on anything the task does; every failure
/// becomes an [`Outcome`].
pub async fn run(launch: Launch, cancel: oneshot::Receiver<CancelRequest>) -> Finished {
    let start = unix_micros();
    let failed = |reason: String| Finished {
        outcome: Outcome::SpawnFailed { reason },
        start_unix_us: start,
        end_unix_us: unix_micros(),
        stdout: Output::default(),
        stderr: Output::default(),
    };
    let Some((program, args)) = launch.argv.split_first() else {
        return failed("empty command line".to_string());
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &launch.cwd {
        command.current_dir(cwd);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return failed(spawn_reason(program, launch.cwd.as_deref(), &error)),
    };
    let pid = child.id();
    let mut group = Group::register(pid);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let capture_out = capture(stdout, &launch, "stdout");
    let capture_err = capture(stderr, &launch, "stderr");

    let waiter = async {
        let limit = async {
            match launch.time_limit {
                Some(limit) => tokio::time::sleep(limit).await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            status = child.wait() => Ended::Status(status),
            _ = limit => Ended::TimedOut,
            request = cancel => match request {
                Ok(CancelRequest) => Ended::Cancelled,
                // The executor that owned this attempt is gone (it crashed and its
                // state was dropped): kill rather than leave an orphan holding the slot.
                Err(_) => Ended::Detached,
            },
        };
        match ended {
            Ended::Status(status) => Ended::Status(status),
            other => {
                kill_group(pid);
                // Reap the child; output pipes close once the whole group is gone.
                let _ = child.wait().await;
                other
            }
        }
    };
    let (ended, stdout, stderr) = tokio::join!(waiter, capture_out, capture_err);
    group.finished();
    let outcome = match ended {
        Ended::Status(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited { code },
            (None, Some(signal)) => Outcome::Signaled { signal },
            (None, None) => Outcome::Lost {
                reason: format!("unrecognised exit status {status:?}"),
            },
        },
        Ended::Status(Err(error)) => Outcome::Lost {
            reason: format!("waiting for the task failed: {error}"),
        },
        Ended::TimedOut => Outcome::TimedOut,
        Ended::Cancelled => Outcome::Cancelled,
        Ended::Detached => Outcome::Lost {
            reason: "attempt detached from its agent".to_string(),
        },
    };
    Finished {
        outcome,
        start_unix_us: start,
        end_unix_us: unix_micros(),
        stdout,
        stderr,
    }
}

enum Ended {
    Status(io::Result<std::process::ExitStatus>),
    TimedOut,
    Cancelled,
    Detached,
}

/// An attempt's process group while it is registered with the reaper. Dropped before
/// [`Group::finished`] (the attempt's future was dropped: executor gone, runtime
/// shutting down) it kills the group first, as `kill_on_drop` only kills the leader.
struct Group {
    pgid: Option<u32>,
    done: bool,
}

impl Group {
    fn register(pgid: Option<u32>) -> Group {
        // A kill of the agent between spawn and this write leaves the group unprotected;
        // the window is a few microseconds.
        if let (Some(reaper), Some(pgid)) = (crate::reaper::installed(), pgid) {
            reaper.register(pgid);
        }
        Group { pgid, done: false }
    }

    /// The leader is reaped and the output pipes are closed (the group was killed, or
    /// every process of it ended or let go of its output), so the group is over.
    /// Remaining window: a member that closed its output and lives on is no longer
    /// covered; and once the group is empty its id could be reused before the reaper
    /// reads the release, which needs the pid space to wrap meanwhile.
    fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.done {
            kill_group(self.pgid);
        }
        if let (Some(reaper), Some(pgid)) = (crate::reaper::installed(), self.pgid) {
            reaper.release(pgid);
        }
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // ESRCH (already gone) is expected and harmless.
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
}

fn spawn_reason(program: &str, cwd: Option<&Path>, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => match cwd {
            Some(cwd) if !cwd.is_dir() => {
                format!("working directory {} does not exist", cwd.display())
            }
            _ => format!("program not found: {program}"),
        },
        io::ErrorKind::PermissionDenied => format!("permission denied running {program}"),
        _ => format!("could not start {program}: {error}"),
    }
}

/// Reads a stream to its end: the first `inline_limit` bytes are kept; if the stream
/// is longer, all of it goes to a spill file and the path is reported.
async fn capture<R: AsyncRead + Unpin>(stream: Option<R>, launch: &Launch, name: &str) -> Output {
    let Some(mut stream) = stream else {
        return Output::default();
    };
    let mut inline = Vec::new();
    let mut total: u64 = 0;
    let mut spill: Option<(tokio::fs::File, PathBuf)> = None;
    let mut spill_failed: Option<String> = None;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += n as u64;
        let chunk = &buf[..n];
        if spill.is_none() && spill_failed.is_none() && inline.len() + n <= launch.inline_limit {
            inline.extend_from_slice(chunk);
            continue;
        }
        if spill.is_none() && spill_failed.is_none() {
            let path = launch
                .spill_dir
                .join(format!("{}.{name}", launch.spill_stem));
            match open_spill(&path, &inline).await {
                Ok(file) => spill = Some((file, path)),
                Err(error) => spill_failed = Some(format!("{}: {error}", path.display())),
            }
            let room = launch.inline_limit.saturating_sub(inline.len());
            inline.extend_from_slice(&chunk[..room.min(n)]);
        }
        if let Some((file, path)) = &mut spill
            && let Err(error) = file.write_all(chunk).await
        {
            spill_failed = Some(format!("{}: {error}", path.display()));
            spill = None;
        }
    }
    let spill_path = match (spill, spill_failed) {
        (Some((mut file, path)), None) => {
            let _ = file.flush().await;
            Some(path.display().to_string())
        }
        (_, Some(reason)) => {
            tracing::warn!(%reason, "could not spill task output; only the inline part is kept");
            None
        }
        (None, None) => None,
    };
    Output {
        inline,
        total_bytes: total,
        spill_path,
    }
}

async fn open_spill(path: &Path, already: &[u8]) -> io::Result<tokio::fs::File> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut file = tokio::fs::File::create(path).await?;
    file.write_all(already).await?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(argv: &[&str], dir: &Path) -> Launch {
        Launch {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![("SAKER_TEST_VALUE".into(), "forty-two".into())],
            cwd: None,
            time_limit: None,
            inline_limit: 16,
            spill_dir: dir.to_path_buf(),
            spill_stem: "t1.a1".into(),
        }
    }

    async fn run_now(launch: Launch) -> Finished {
        let (_keep, cancel) = oneshot::channel();
        let finished = run(launch, cancel).await;
        drop(_keep);
        finished
    }

    #[tokio::test]
    async fn exit_codes_signals_and_environment_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run_now(launch(
            &["sh", "-c", "printf %s \"$SAKER_TEST_VALUE\""],
            dir.path(),
        ))
        .await;
        assert_eq!(ok.outcome, Outcome::Exited { code: 0 });
        assert_eq!(ok.stdout.inline, b"forty-two");
        assert_eq!(ok.stdout.spill_path, None);
        let failed = run_now(launch(&["sh", "-c", "echo oops >&2; exit 7"], dir.path())).await;
        assert_eq!(failed.outcome, Outcome::Exited { code: 7 });
        assert_eq!(failed.stderr.inline, b"oops\n");
        let killed = run_now(launch(&["sh", "-c", "kill -9 $$"], dir.path())).await;
        assert_eq!(killed.outcome, Outcome::Signaled { signal: 9 });
    }

    #[tokio::test]
    async fn a_missing_program_fails_with_that_reason() {
        let dir = tempfile::tempdir().unwrap();
        let finished = run_now(launch(&["/no/such/program-xyz"], dir.path())).await;
        assert_eq!(
            finished.outcome,
            Outcome::SpawnFailed {
                reason: "program not found: /no/such/program-xyz".into()
            }
        );
        let mut bad_cwd = launch(&["true"], dir.path());
        bad_cwd.cwd = Some(dir.path().join("missing"));
        let finished = run_now(bad_cwd).await;
        let Outcome::SpawnFailed { reason } = finished.outcome else {
            panic!("spawned")
        };
        assert!(reason.contains("working directory"), "{reason}");
    }

    #[tokio::test]
    async fn long_output_is_kept_inline_up_to_the_limit_and_spilled_whole() {
        let dir = tempfile::tempdir().unwrap();
        let finished = run_now(launch(&["sh", "-c", "seq 1 10000"], dir.path())).await;
        let expected: String = (1..=10000).map(|i| format!("{i}\n")).collect();
        assert_eq!(finished.stdout.total_bytes, expected.len() as u64);
        assert_eq!(finished.stdout.inline, &expected.as_bytes()[..16]);
        let path = finished.stdout.spill_path.expect("spilled");
        assert_eq!(std::fs::read_to_string(path).unwrap(), expected);
    }

    #[tokio::test]
    async fn time_limit_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        // The background child holds stdout open: if it survived the kill, capturing
        // output would not finish for 30 s.
        let mut limited = launch(&["sh", "-c", "(sleep 30) & sleep 30"], dir.path());
        limited.time_limit = Some(Duration::from_millis(200));
        let started = std::time::Instant::now();
        let finished = run_now(limited).await;
        assert_eq!(finished.outcome, Outcome::TimedOut);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    /// Whether `pid` runs (a zombie has finished).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.trim().chars().next());
            !matches!(state, None | Some('Z' | 'X'))
        })
    }

    #[tokio::test]
    async fn a_dropped_attempt_kills_its_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("background.pid");
        let script = format!(
            "sleep 30 & echo $! > {f}.tmp; mv {f}.tmp {f}; wait",
            f = pid_file.display()
        );
        let (_keep, cancel) = oneshot::channel();
        let mut attempt = Box::pin(run(launch(&["sh", "-c", &script], dir.path()), cancel));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let background: u32 = loop {
            tokio::select! {
                finished = &mut attempt => panic!("the attempt ended: {finished:?}"),
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            if let Ok(text) = std::fs::read_to_string(&pid_file) {
                break text.trim().parse().unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the task never started"
            );
        };
        assert!(alive(background));
        drop(attempt);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(background) {
            assert!(
                std::time::Instant::now() < deadline,
                "the background process outlived its dropped attempt"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// With a reaper installed, every attempt's group is registered after the spawn and
    /// released at its end. (Process-wide: other tests' attempts may show up too.)
    #[tokio::test]
    async fn an_attempt_registers_its_group_with_the_reaper_for_its_lifetime() {
        use std::io::BufRead;
        let (read, write) = std::io::pipe().unwrap();
        if !crate::reaper::install(crate::reaper::Reaper::from_pipe(write)) {
            return; // Another test of this process installed one first.
        }
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(read).lines() {
                if lines_tx.send(line.unwrap()).is_err() {
                    return;
                }
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let finished = run_now(launch(&["sh", "-c", "echo $$"], dir.path())).await;
        let pid = String::from_utf8(finished.stdout.inline).unwrap();
        let pid = pid.trim();
        let expected = [format!("+{pid}"), format!("-{pid}")];
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let line = lines_rx.recv_timeout(Duration::from_secs(10)).unwrap();
            if line.get(1..) == Some(pid) {
                seen.push(line);
            }
        }
        assert_eq!(seen, expected);
    }

    #[tokio::test]
    async fn cancel_kills_and_a_dropped_owner_kills_too() {
        let dir = tempfile::tempdir().unwrap();
        let (cancel_tx, cancel_rx) = oneshot::channel();
        let task = tokio::spawn(run(launch(&["sleep", "30"], dir.path()), cancel_rx));
        cancel_tx.send(CancelRequest).unwrap();
        assert_eq!(task.await.unwrap().outcome, Outcome::Cancelled);

        let (owner, detached_rx) = oneshot::channel::<CancelRequest>();
        let task = tokio::spawn(run(launch(&["sleep", "30"], dir.path()), detached_rx));
        drop(owner);
        let finished = task.await.unwrap();
        assert!(
            matches!(finished.outcome, Outcome::Lost { .. }),
            "{:?}",
            finished.outcome
        );
    }
}
