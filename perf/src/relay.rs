//! The floor a pilot's latency sits on: the same spawn+wait, asked for through the
//! same number of processes. A task's way through a pilot crosses four process
//! boundaries (client → root → agent, and back) besides the spawn, and on some
//! machines (a VM whose idle vCPUs halt) each wake-up that crosses CPUs costs tens of
//! µs. This baseline pays exactly those: three processes, this one as the client, a
//! middle one relaying each request, and a worker that spawns and waits, joined by
//! Unix sockets and doing nothing else (blocking reads, one byte a message).
//!
//! The middle and the worker are this binary started again with [`ROLE_ARGUMENT`]
//! (see [`serve`]), each in its own process group owned by a guard.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;

use crate::process::{ProcessGroup, TempDir};
use crate::raw;

/// The first argument that makes `saker-perf` serve a relay role instead of running
/// benchmarks.
pub const ROLE_ARGUMENT: &str = "__relay";

/// Serves one role of the relay, from the arguments after [`ROLE_ARGUMENT`]:
/// `worker SOCKET PROGRAM` or `middle SOCKET WORKER_SOCKET`.
pub fn serve(arguments: &[String]) -> Result<()> {
    match arguments {
        [role, socket, program] if role == "worker" => {
            let mut client = accept_one(Path::new(socket))?;
            relay_loop(&mut client, |_| {
                raw::spawn_and_wait(Path::new(program), &[])
            })
        }
        [role, socket, worker] if role == "middle" => {
            let mut upstream = connect(Path::new(worker))?;
            let mut client = accept_one(Path::new(socket))?;
            relay_loop(&mut client, |byte| {
                upstream.write_all(&[byte])?;
                let mut answer = [0u8];
                upstream.read_exact(&mut answer)?;
                Ok(())
            })
        }
        _ => bail!(
            "usage: saker-perf {ROLE_ARGUMENT} (worker SOCKET PROGRAM | middle SOCKET WORKER_SOCKET)"
        ),
    }
}

/// Answers each byte read from `client` once `handle` is done with it, until the
/// client hangs up.
fn relay_loop(client: &mut UnixStream, mut handle: impl FnMut(u8) -> Result<()>) -> Result<()> {
    let mut byte = [0u8];
    loop {
        match client.read_exact(&mut byte) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error).context("reading a request"),
        }
        handle(byte[0])?;
        client.write_all(&byte).context("answering")?;
    }
}

fn accept_one(socket: &Path) -> Result<UnixStream> {
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    let (stream, _) = listener.accept().context("accepting the relay's client")?;
    Ok(stream)
}

/// Connects to `socket`, waiting up to 10 s for its process to bind it.
fn connect(socket: &Path) -> Result<UnixStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(error) => {
                return Err(error).with_context(|| format!("connecting to {}", socket.display()));
            }
        }
    }
}

/// Round trips of `program` spawned and awaited by a worker process, asked through a
/// middle process: `samples` of them, after a few to warm up. `relay_binary` is the
/// binary that serves the roles (this `saker-perf`).
pub fn latency(relay_binary: &Path, program: &Path, samples: u64) -> Result<Histogram<u64>> {
    let directory = TempDir::new("relay").context("a directory for the relay's sockets")?;
    let worker_socket = directory.path().join("worker.sock");
    let middle_socket = directory.path().join("middle.sock");
    let start = |arguments: [&Path; 3]| -> Result<ProcessGroup> {
        let mut command = Command::new(relay_binary);
        command
            .arg(ROLE_ARGUMENT)
            .args(arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        ProcessGroup::spawn(&mut command).context("starting a relay process")
    };
    let _worker = start([Path::new("worker"), &worker_socket, program])?;
    let _middle = start([Path::new("middle"), &middle_socket, &worker_socket])?;
    let mut relay = connect(&middle_socket)?;
    let mut histogram = raw::latency_histogram();
    let mut byte = [1u8];
    for sample in 0..samples + 20 {
        let started = Instant::now();
        relay.write_all(&byte).context("asking the relay")?;
        relay.read_exact(&mut byte).context("the relay's answer")?;
        if sample >= 20 {
            raw::record(&mut histogram, started.elapsed());
        }
    }
    Ok(histogram)
}

/// This process's binary, which serves the relay's roles when it is `saker-perf`.
pub fn this_binary() -> Result<PathBuf> {
    std::env::current_exe().context("finding this binary")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The roles, run on threads of this process: each request is answered only after
    /// the worker's spawn ended, and a failing program fails the worker.
    #[test]
    fn a_request_is_answered_after_the_worker_spawned_and_waited() {
        let directory = TempDir::new("relay-test").unwrap();
        let log = directory.path().join("log");
        let script = directory.path().join("append.sh");
        std::fs::write(&script, format!("#!/bin/sh\necho x >> {}\n", log.display())).unwrap();
        let chmod = Command::new("chmod")
            .arg("+x")
            .arg(&script)
            .status()
            .unwrap();
        assert!(chmod.success());
        let worker_socket = directory.path().join("w.sock");
        let middle_socket = directory.path().join("m.sock");
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let worker_args = vec!["worker".to_owned(), path(&worker_socket), path(&script)];
        let middle_args = vec![
            "middle".to_owned(),
            path(&middle_socket),
            path(&worker_socket),
        ];
        let worker = std::thread::spawn(move || serve(&worker_args));
        let middle = std::thread::spawn(move || serve(&middle_args));
        let mut client = connect(&middle_socket).unwrap();
        for round in 1..=3 {
            client.write_all(&[7]).unwrap();
            let mut answer = [0u8];
            client.read_exact(&mut answer).unwrap();
            assert_eq!(answer, [7]);
            let lines = std::fs::read_to_string(&log).unwrap().lines().count();
            assert_eq!(lines, round, "answered before the spawn ended");
        }
        drop(client);
        middle.join().unwrap().unwrap();
        worker.join().unwrap().unwrap();

        let failing = directory.path().join("f.sock");
        let args = vec!["worker".to_owned(), path(&failing), "/bin/false".to_owned()];
        let worker = std::thread::spawn(move || serve(&args));
        let mut client = connect(&failing).unwrap();
        client.write_all(&[1]).unwrap();
        assert!(worker.join().unwrap().is_err());
        assert!(serve(&["nonsense".to_owned()]).is_err());
    }
}
