//! Real MPICH ranks (Debian's `mpich`) wire up through `saker_actors::pmi`: two ranks
//! started with a socket each as `PMI_FD`, served by a minimal PMI-1 server over
//! the module's parser and replies (one key-value space, a barrier for both), pass
//! `MPI_Init`, find each other (an allreduce) and finalize. No mpiexec, no Hydra.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier, Mutex};

use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, posix_spawn};
use nix::sys::wait::{WaitStatus, waitpid};
use saker_actors::pmi::{MAXES, Reply, Request, Requests};

const SIZE: usize = 2;

/// Serves one rank's PMI-1 socket until it finalizes; returns the requests it made.
fn serve(
    mut socket: UnixStream,
    kvs: Arc<Mutex<HashMap<String, String>>>,
    barrier: Arc<Barrier>,
) -> Vec<String> {
    // A rank that stops speaking fails the test rather than hanging it.
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut requests = Requests::default();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = socket.read(&mut buffer).expect("reading the rank's socket");
        assert!(
            n > 0,
            "the rank closed its PMI socket before finalizing: {seen:?}"
        );
        for request in requests.push(&buffer[..n]).expect("a valid request") {
            seen.push(format!("{request:?}"));
            let reply = match request {
                Request::Init { version, .. } => Reply::Init {
                    version,
                    subversion: 1,
                },
                Request::GetMaxes => Reply::Maxes(MAXES),
                Request::GetUniverseSize => Reply::UniverseSize(SIZE as u32),
                Request::GetAppnum => Reply::Appnum(0),
                Request::GetMyKvsname => Reply::MyKvsname("saker-test".into()),
                Request::Put { key, value } => {
                    kvs.lock().unwrap().insert(key, value);
                    Reply::PutResult
                }
                Request::Get { key } => Reply::GetResult(kvs.lock().unwrap().get(&key).cloned()),
                Request::BarrierIn => {
                    barrier.wait();
                    Reply::BarrierOut
                }
                Request::Finalize => {
                    socket
                        .write_all(Reply::FinalizeAck.to_line().as_bytes())
                        .unwrap();
                    return seen;
                }
                Request::Abort { exitcode, message } => {
                    panic!("a rank aborted ({exitcode}): {message:?}")
                }
                Request::Unsupported { cmd, reply } => Reply::Refused {
                    reply,
                    msg: format!("{cmd} is not served"),
                },
                other => panic!("a PMI-2 request from a PMI-1 rank: {other:?}"),
            };
            socket.write_all(reply.to_line().as_bytes()).unwrap();
        }
    }
}

#[test]
fn mpich_ranks_wire_up_through_the_pmi_module() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("hello");
    let built = Command::new("mpicc.mpich")
        .arg("-o")
        .arg(&program)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pmi/hello.c"))
        .status()
        .expect("mpicc.mpich runs (the test command installs Debian's mpich)");
    assert!(built.success());

    // Both ranks on one node: MPICH finds its local peer from this mapping.
    let kvs = Arc::new(Mutex::new(HashMap::from([(
        "PMI_process_mapping".to_owned(),
        format!("(vector,(0,1,{SIZE}))"),
    )])));
    let barrier = Arc::new(Barrier::new(SIZE));
    let program = std::ffi::CString::new(program.as_os_str().as_encoded_bytes()).unwrap();
    let mut ranks = Vec::new();
    for rank in 0..SIZE {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let output = std::fs::File::create(dir.path().join(format!("out-{rank}"))).unwrap();
        let mut actions = PosixSpawnFileActions::init().unwrap();
        actions.add_dup2(theirs.as_raw_fd(), 3).unwrap();
        actions.add_dup2(output.as_raw_fd(), 1).unwrap();
        let mut env: Vec<std::ffi::CString> = std::env::vars()
            .filter(|(key, _)| !key.starts_with("PMI_") && !key.starts_with("HYDRA_"))
            .map(|(key, value)| std::ffi::CString::new(format!("{key}={value}")).unwrap())
            .collect();
        for (key, value) in [
            ("PMI_FD", "3".to_owned()),
            ("PMI_RANK", rank.to_string()),
            ("PMI_SIZE", SIZE.to_string()),
        ] {
            env.push(std::ffi::CString::new(format!("{key}={value}")).unwrap());
        }
        let pid = posix_spawn(
            program.as_c_str(),
            &actions,
            &PosixSpawnAttr::init().unwrap(),
            std::slice::from_ref(&program),
            &env,
        )
        .expect("the rank starts");
        drop(theirs);
        let (kvs, barrier) = (kvs.clone(), barrier.clone());
        let server = std::thread::spawn(move || serve(ours, kvs, barrier));
        ranks.push((pid, server));
    }
    for (rank, (pid, server)) in ranks.into_iter().enumerate() {
        let requests = server
            .join()
            .expect("the rank's server ends when it finalizes");
        eprintln!("rank {rank} asked: {requests:?}");
        assert!(
            requests.iter().any(|r| r.starts_with("Init")),
            "{requests:?}"
        );
        assert_eq!(
            waitpid(pid, None).unwrap(),
            WaitStatus::Exited(pid, 0),
            "rank {rank}"
        );
        let out = std::fs::File::open(dir.path().join(format!("out-{rank}"))).unwrap();
        let lines: Vec<String> = std::io::BufReader::new(out)
            .lines()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            lines,
            [format!("hello rank={rank} size={SIZE} sum=1")],
            "rank {rank}"
        );
    }
}
