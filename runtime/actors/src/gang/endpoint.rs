//! The gang leader's remote-shell endpoint, and the remote shell itself.
//!
//! An MPI launcher starts its daemons on other hosts through a remote shell
//! (`rsh`/`ssh`): it runs `AGENT [options] HOST COMMAND…` and takes the agent's exit
//! as the daemon's. On a gang's leader the launcher's agent is Saker's
//! ([`rsh_agent_main`], behind a small script per attempt): it hands HOST and
//! COMMAND to this endpoint, a Unix socket the leader's agent listens on in a
//! directory only its user may enter. The endpoint sends the command up the tree
//! ([`FromAgent::GangLaunch`]); the root relays it to the member, which runs it in its
//! part and answers with its exit code ([`FromAgent::GangLaunchEnded`]), relayed back
//! here and written to the waiting remote shell, which exits with it. No ssh, no srun:
//! the daemons start in the slots the gang holds, as children of Saker's agents.
//!
//! The endpoint reaches the agent through [`Relay`], which the agent implements: it
//! sends the request up and keeps the waiting remote shell's answer channel.
//!
//! [`FromAgent::GangLaunch`]: saker_wire::messages::FromAgent::GangLaunch
//! [`FromAgent::GangLaunchEnded`]: saker_wire::messages::FromAgent::GangLaunchEnded

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use std::sync::mpsc;

use saker_wire::messages::{AttemptId, GangLaunch, GangLaunchEnded, LaunchRanks};

use super::mpiexec::{self, REQUEST_TAG, Request};

/// The variable that tells the remote shell where the endpoint is.
pub const SOCKET_VAR: &str = "SAKER_GANG_SOCKET";

/// Most bytes a remote shell may send (a host and a daemon's command line).
const MAX_REQUEST: u64 = 1 << 20;

/// The endpoint's socket for `attempt`: short (a socket path has a ~100-byte limit),
/// in a directory of this user's that nobody else may enter (whoever can connect can
/// run commands on the gang's nodes as this user).
pub fn socket_path(attempt: AttemptId) -> PathBuf {
    private_dir().join(format!("g{}-{attempt}.sock", std::process::id()))
}

/// The script the launcher runs as its remote shell for `attempt`.
pub fn shim_path(spill_dir: &Path, attempt: AttemptId) -> PathBuf {
    spill_dir.join(format!("a{attempt}.rsh"))
}

fn private_dir() -> PathBuf {
    let uid = rustix::process::getuid().as_raw();
    std::env::temp_dir().join(format!("saker-{uid}"))
}

/// Creates the private directory (mode 0700) if needed and checks it is ours alone.
fn ensure_private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = private_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    let uid = rustix::process::getuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a directory private to this user",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The name a gang member goes by on an MPI launcher's command line. Not the node's
/// host name: several agents may share a machine (local mode, tests), and a launcher
/// must see each member as a host of its own, never as itself (which it would start
/// without its remote shell).
pub fn member_host(member: usize) -> String {
    format!("saker-m{member}")
}

/// The member a [`member_host`] name stands for.
pub fn member_of_host(host: &str) -> Option<u32> {
    host.strip_prefix("saker-m")?.parse().ok()
}

/// Where the endpoint's requests go: the agent, which sends each up the tree and keeps
/// its waiter until the launch's end comes back, or drops it when the part ends (the
/// remote shell then sees a failed daemon).
pub trait Relay: Send + Sync + 'static {
    /// Sends `launch` up, with `waiter` to answer when it ends, at once with the check
    /// that its part still runs (else a part that ended meanwhile would leave the
    /// waiter hanging).
    fn relay(
        &self,
        launch: GangLaunch,
        waiter: mpsc::Sender<GangLaunchEnded>,
    ) -> Result<(), RelayError>;

    /// A script's `saker mpiexec` is about to start world `world` over `members`
    /// members: this node (the leader) gathers its fences from now on, before any
    /// member can send one.
    fn open_world(&self, attempt: AttemptId, world: u32, members: u32) -> Result<(), RelayError>;
}

/// Why a remote shell's request was not sent on.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("the gang's part has ended")]
    PartEnded,
    #[error("could not encode the request")]
    Encode(#[source] saker_wire::WireError),
    #[error("the queue to the parent is closed")]
    Parent(#[source] crate::link::LinkClosed),
}

/// A listening endpoint; dropping it stops it and removes its files.
#[derive(Debug)]
pub struct Endpoint {
    socket: PathBuf,
    shim: PathBuf,
    closed: Arc<AtomicBool>,
}

impl Endpoint {
    /// Opens the endpoint of gang `attempt` (with `members` members) and writes its
    /// remote-shell script, which runs `program rsh-agent`.
    pub fn open(
        relay: Arc<dyn Relay>,
        attempt: AttemptId,
        members: u32,
        spill_dir: &Path,
        program: &Path,
    ) -> io::Result<Endpoint> {
        ensure_private_dir()?;
        let socket = socket_path(attempt);
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        let shim = shim_path(spill_dir, attempt);
        std::fs::create_dir_all(spill_dir)?;
        write_shim(&shim, program)?;
        let closed = Arc::new(AtomicBool::new(false));
        let serve = Serve {
            relay,
            attempt,
            members,
            launches: Arc::new(AtomicU32::new(0)),
            worlds: Arc::new(AtomicU32::new(0)),
            running: Arc::new(AtomicBool::new(false)),
        };
        let stop = Arc::clone(&closed);
        std::thread::Builder::new()
            .name(format!("gang-{attempt}"))
            .spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let serve = serve.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("gang-{attempt}-rsh"))
                        .spawn(move || serve.answer(stream));
                    if let Err(error) = spawned {
                        tracing::warn!(%error, "no thread for a remote-shell request");
                    }
                }
            })?;
        Ok(Endpoint {
            socket,
            shim,
            closed,
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        // Wakes the accept loop, which then sees it is closed.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.shim);
    }
}

fn write_shim(path: &Path, program: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let quote = |text: &str| format!("'{}'", text.replace('\'', r"'\''"));
    let mut line = quote(&program.display().to_string());
    for argument in crate::self_exe::prefix() {
        line.push(' ');
        line.push_str(&quote(argument));
    }
    std::fs::write(path, format!("#!/bin/sh\nexec {line} rsh-agent \"$@\"\n"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

#[derive(Clone)]
struct Serve {
    relay: Arc<dyn Relay>,
    attempt: AttemptId,
    members: u32,
    launches: Arc<AtomicU32>,
    /// `saker mpiexec` worlds started, and whether one runs.
    worlds: Arc<AtomicU32>,
    running: Arc<AtomicBool>,
}

impl Serve {
    /// One remote-shell request: relay it, wait for its end, answer with the code.
    /// Or a `saker mpiexec`'s: its ranks' code and output.
    fn answer(self, mut stream: UnixStream) {
        let mut request = Vec::new();
        if (&mut stream)
            .take(MAX_REQUEST)
            .read_to_end(&mut request)
            .is_err()
        {
            return;
        }
        if request.starts_with(format!("{REQUEST_TAG}\0").as_bytes()) {
            let (code, stdout, stderr) = self.launch_ranks(&request).unwrap_or_else(|problem| {
                let problem = crate::error_chain(&problem);
                tracing::warn!(attempt = %self.attempt, %problem, "saker mpiexec refused");
                (
                    255,
                    Vec::new(),
                    format!("saker mpiexec: {problem}\n").into_bytes(),
                )
            });
            let _ = stream.write_all(&mpiexec::encode_answer(code, &stdout, &stderr));
            return;
        }
        let code = self.relay(&request).unwrap_or_else(|problem| {
            let problem = crate::error_chain(&problem);
            tracing::warn!(attempt = %self.attempt, %problem, "remote-shell request refused");
            255
        });
        let _ = stream.write_all(format!("{code}\n").as_bytes());
    }

    fn relay(&self, request: &[u8]) -> Result<i32, Refused> {
        let text = std::str::from_utf8(request).map_err(|_| Refused::NotUtf8)?;
        let (host, command) = text.split_once('\n').ok_or(Refused::NoHostLine)?;
        let member = member_of_host(host)
            .filter(|member| *member < self.members)
            .ok_or_else(|| Refused::NotAMember {
                host: host.to_owned(),
            })?;
        // 0 stands for the launcher itself among the part's processes.
        let launch = self.launches.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = mpsc::channel();
        tracing::debug!(attempt = %self.attempt, member, launch, "relaying a remote-shell request");
        let request = GangLaunch {
            attempt: self.attempt,
            member,
            launch,
            command: command.to_owned(),
            ranks: None,
        };
        self.relay.relay(request, tx)?;
        // The part's end drops the sender: the launcher then sees a failed daemon.
        rx.recv()
            .map(|end| end.code)
            .map_err(|_| Refused::EndedFirst)
    }

    /// A `saker mpiexec`: its ranks start on each member they fit on; once every
    /// member's have ended, their first failure's code and their output, in rank
    /// order.
    fn launch_ranks(&self, request: &[u8]) -> Result<(i32, Vec<u8>, Vec<u8>), Refused> {
        let text = std::str::from_utf8(request).map_err(|_| Refused::NotUtf8)?;
        let request = Request::decode(text).map_err(Refused::Unreadable)?;
        let members = request.members();
        if members > self.members {
            return Err(Refused::TooFewMembers {
                ranks: request.ranks,
                per_node: request.ranks_per_node,
                members: self.members,
            });
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(Refused::OneAtATime);
        }
        let running = Arc::clone(&self.running);
        let _running = Running(running);
        let world = self.worlds.fetch_add(1, Ordering::Relaxed) + 1;
        self.relay.open_world(self.attempt, world, members)?;
        let ranks = LaunchRanks {
            world,
            ranks: request.ranks,
            ranks_per_node: request.ranks_per_node,
            cwd: request.cwd,
            env: request.env,
        };
        let mut ends = Vec::new();
        for member in 0..members {
            let launch = self.launches.fetch_add(1, Ordering::Relaxed) + 1;
            let (tx, rx) = mpsc::channel();
            let request = GangLaunch {
                attempt: self.attempt,
                member,
                launch,
                command: request.command.clone(),
                ranks: Some(ranks.clone()),
            };
            self.relay.relay(request, tx)?;
            ends.push(rx);
        }
        let (mut code, mut stdout, mut stderr) = (0, Vec::new(), Vec::new());
        for end in ends {
            let end = end.recv().map_err(|_| Refused::EndedFirst)?;
            if code == 0 {
                code = end.code;
            }
            stdout.extend_from_slice(&end.stdout);
            stderr.extend_from_slice(&end.stderr);
        }
        Ok((code, stdout, stderr))
    }
}

/// Marks the script's launch as over when dropped, however it ended.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Why a remote shell's request got no code of its own (it is answered 255).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("request is not UTF-8")]
    NotUtf8,
    #[error("request without a host line")]
    NoHostLine,
    #[error("{host:?} is not a member of this gang")]
    NotAMember { host: String },
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error("the gang's part ended first")]
    EndedFirst,
    #[error("an unreadable request: {0}")]
    Unreadable(String),
    #[error("{ranks} ranks at {per_node} per node need more than the job's {members} nodes")]
    TooFewMembers {
        ranks: u32,
        per_node: u32,
        members: u32,
    },
    #[error("another `saker mpiexec` of this job runs: they run one at a time")]
    OneAtATime,
}

/// The remote shell an MPI launcher runs (`saker rsh-agent [ssh options] HOST
/// COMMAND…`): asks the gang's endpoint to run COMMAND on member HOST and exits with
/// its code (255 when it could not). Returns the exit code.
pub fn rsh_agent_main(args: &[String]) -> i32 {
    let Some((host, command)) = split_remote_command(args) else {
        eprintln!("saker rsh-agent: usage: rsh-agent [ssh options] HOST COMMAND...");
        return 255;
    };
    let Some(socket) = std::env::var_os(SOCKET_VAR) else {
        eprintln!("saker rsh-agent: {SOCKET_VAR} is not set: run only by a gang's MPI launcher");
        return 255;
    };
    match ask(Path::new(&socket), host, &command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("saker rsh-agent: {host}: {error}");
            255
        }
    }
}

fn ask(socket: &Path, host: &str, command: &str) -> io::Result<i32> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(format!("{host}\n{command}").as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    answer
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("unreadable answer {answer:?}")))
}

/// HOST and the command line of an `ssh`/`rsh`-style argument list: options before
/// HOST are skipped (those that take a value, with it); the rest is joined by spaces,
/// as a remote shell would.
pub fn split_remote_command(args: &[String]) -> Option<(&str, String)> {
    const WITH_VALUE: &[&str] = &[
        "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-p",
        "-Q", "-R", "-S", "-W", "-w",
    ];
    let mut rest = args.iter();
    let host = loop {
        let arg = rest.next()?;
        if WITH_VALUE.contains(&arg.as_str()) {
            rest.next()?;
        } else if !arg.starts_with('-') {
            break arg;
        }
    };
    let command: Vec<&str> = rest.map(String::as_str).collect();
    if command.is_empty() {
        return None;
    }
    Some((host.as_str(), command.join(" ")))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::mpiexec::{ask, decode_answer};
    use super::*;

    /// A relay that keeps what it is asked, for the test to answer, and says so on
    /// `told`.
    struct Recorder {
        opened: Mutex<Vec<(u32, u32)>>,
        asked: Mutex<Vec<(GangLaunch, mpsc::Sender<GangLaunchEnded>)>>,
        told: Mutex<mpsc::Sender<()>>,
    }

    impl Relay for Recorder {
        fn relay(
            &self,
            launch: GangLaunch,
            waiter: mpsc::Sender<GangLaunchEnded>,
        ) -> Result<(), RelayError> {
            self.asked.lock().unwrap().push((launch, waiter));
            let _ = self.told.lock().unwrap().send(());
            Ok(())
        }

        fn open_world(&self, _: AttemptId, world: u32, members: u32) -> Result<(), RelayError> {
            self.opened.lock().unwrap().push((world, members));
            Ok(())
        }
    }

    fn ranks(ranks: u32, ranks_per_node: u32) -> Request {
        Request {
            ranks,
            ranks_per_node,
            cwd: "/".into(),
            command: "./ring".into(),
            env: Vec::new(),
        }
    }

    /// A `saker mpiexec` run opens its world, then asks each member it needs; a
    /// second meanwhile is refused; the members' ends come back as one answer, in
    /// member (so rank) order, with the first failure's code.
    #[test]
    fn mpiexec_runs_open_a_world_ask_each_member_and_go_one_at_a_time() {
        let (told, asked) = mpsc::channel();
        let relay = Arc::new(Recorder {
            opened: Mutex::default(),
            asked: Mutex::default(),
            told: Mutex::new(told),
        });
        let spill = tempfile::tempdir().unwrap();
        let attempt = AttemptId(917_000 + u64::from(std::process::id() % 1000));
        let _endpoint = Endpoint::open(
            Arc::clone(&relay) as Arc<dyn Relay>,
            attempt,
            3,
            spill.path(),
            Path::new("/bin/false"),
        )
        .unwrap();
        let socket = socket_path(attempt);
        let first = {
            let socket = socket.clone();
            std::thread::spawn(move || ask(&socket, &ranks(4, 2)).unwrap())
        };
        for member in 0..2 {
            let heard = asked.recv_timeout(Duration::from_secs(20));
            assert!(heard.is_ok(), "member {member} asked");
        }
        assert_eq!(*relay.opened.lock().unwrap(), [(1, 2)]);
        let members: Vec<u32> = relay
            .asked
            .lock()
            .unwrap()
            .iter()
            .map(|(l, _)| l.member)
            .collect();
        assert_eq!(members, [0, 1], "the third member holds no rank");

        let second = ask(&socket, &ranks(2, 1)).unwrap();
        let (code, _, stderr) = decode_answer(&second).unwrap();
        assert_eq!(code, 255);
        assert!(String::from_utf8_lossy(stderr).contains("one at a time"));
        let too_many = ranks(8, 2);

        let asked: Vec<_> = relay.asked.lock().unwrap().drain(..).collect();
        for (launch, waiter) in asked.into_iter().rev() {
            let ranks = launch.ranks.expect("a run's ranks");
            assert_eq!((ranks.world, ranks.ranks, ranks.ranks_per_node), (1, 4, 2));
            let end = GangLaunchEnded {
                attempt,
                launch: launch.launch,
                code: if launch.member == 1 { 3 } else { 0 },
                stdout: format!("m{}\n", launch.member).into_bytes(),
                stderr: Vec::new(),
            };
            waiter.send(end).unwrap();
        }
        let answer = first.join().unwrap();
        assert_eq!(
            decode_answer(&answer),
            Some((3, &b"m0\nm1\n"[..], &b""[..]))
        );

        // Done: the next run may start, and one that needs more members is refused.
        let refused = ask(&socket, &too_many).unwrap();
        let (code, _, stderr) = decode_answer(&refused).unwrap();
        assert_eq!(code, 255);
        assert!(String::from_utf8_lossy(stderr).contains("more than the job's 3 nodes"));
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn ssh_options_before_the_host_are_skipped() {
        let args = strings(&[
            "-x",
            "-l",
            "me",
            "-o",
            "A=b",
            "saker-m2",
            "hydra_pmi_proxy",
            "--x",
        ]);
        let (host, command) = split_remote_command(&args).expect("a command");
        assert_eq!(host, "saker-m2");
        assert_eq!(command, "hydra_pmi_proxy --x");
        let args = strings(&["saker-m1", " orted", "-mca", "ess", "\"env\""]);
        assert_eq!(
            split_remote_command(&args),
            Some(("saker-m1", " orted -mca ess \"env\"".to_owned()))
        );
        assert_eq!(split_remote_command(&strings(&["-x", "saker-m1"])), None);
        assert_eq!(split_remote_command(&strings(&["-l"])), None);
    }

    #[test]
    fn member_names_round_trip() {
        assert_eq!(member_of_host(&member_host(7)), Some(7));
        assert_eq!(member_of_host("node7"), None);
        assert_eq!(member_of_host("saker-mx"), None);
    }
}
