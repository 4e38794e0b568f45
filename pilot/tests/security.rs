//! Certificate roles on a running pilot: real `saker pilot` processes, real QUIC. A
//! client certificate cannot open an agent link, neither at the root nor at an agent
//! serving its children; each refusal is logged by the side that refused, and
//! disturbs nothing: the agents stay registered and work still runs.
//! (The client socket's refusal of an agent certificate: `saker-root`'s
//! `only_a_client_certificate_opens_a_session`, and Python's
//! `test_an_agent_certificate_cannot_open_a_session`.)

mod common;

use std::error::Error;
use std::path::Path;
use std::time::Duration;

use common::{Service, run, saker, wait_for};
use saker_actors::liveness::link_frame;
use saker_actors::node::{Position, address_file};
use saker_transport::{Credentials, FrameReader, FrameWriter, LinkTimeouts, PilotDir, Role, quic};
use saker_wire::messages::Link;

type TestResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Dials `position` as a child agent does (preamble, then "I am node `node`") with
/// `presented`'s certificate; `Ok` once the parent's hello arrived, i.e. the link is
/// open. Closes it then.
async fn open_agent_link(
    pilot: &Path,
    presented: Role,
    position: Position,
    node: u32,
) -> TestResult<()> {
    let credentials = Credentials::load(&PilotDir::open(pilot)?, presented)?;
    let client = quic::client_config(&credentials, &LinkTimeouts::default())?;
    let endpoint = quic::bind_endpoint("127.0.0.1:0".parse()?, None, client)?;
    let address = std::fs::read_to_string(address_file(pilot, position))?
        .trim()
        .parse()?;
    let connection = quic::connect(&endpoint, address, position.role()).await?;
    let (send, recv) = connection.open_bi().await?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await?;
    writer
        .write_frames(&link_frame(&Link::Child { node }))
        .await?;
    let mut reader = FrameReader::new(recv);
    reader.read_preamble().await?;
    let hello = reader
        .read_frame()
        .await?
        .ok_or("closed before its hello")?;
    hello.decode::<Link>()?;
    connection.close(0u32.into(), b"done");
    Ok(())
}

fn status_line(pilot: &Path) -> String {
    let status = run(saker().args(["status", "--dir"]).arg(pilot));
    String::from_utf8_lossy(&status.stdout).into_owned()
}

#[test]
fn a_client_certificate_cannot_open_an_agent_link() {
    let dir = tempfile::tempdir().unwrap();
    let root_log = dir.path().join("root.log");
    // Fan-out 1: the root serves agent 0, and agent 0 serves agent 1.
    let service = Service::start_logged(
        dir.path(),
        &["--agents", "2", "--slots", "2", "--fanout", "1"],
        &root_log,
    );
    let pilot = service.pilot.clone();
    wait_for("two agents", Duration::from_secs(30), || {
        status_line(&pilot).contains("agents    2")
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dial = |presented, position| {
        runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                open_agent_link(&pilot, presented, position, 7),
            )
            .await
            .expect("the dial ended in time")
        })
    };

    for position in [Position::Root, Position::Agent(0)] {
        let error = dial(Role::Client, position).expect_err("a client opened an agent link");
        eprintln!("{position} refused the client: {error}");
    }
    // The same dial with the agent certificate opens the link: the refusal was the
    // role's, not the dial's.
    for position in [Position::Root, Position::Agent(0)] {
        dial(Role::Agent, position).unwrap();
    }

    let refused = |log: &Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains("a client certificate cannot open an agent link")
    };
    wait_for(
        "the root's log of the refusal",
        Duration::from_secs(10),
        || refused(&root_log),
    );
    wait_for(
        "agent 0's log of the refusal",
        Duration::from_secs(10),
        || refused(&pilot.join("logs").join("agent-0.log")),
    );
    // Both agents are still registered and run work.
    assert!(status_line(&pilot).contains("agents    2"));
    let submitted = run(saker()
        .args(["submit", "--array", "1-4", "--dir"])
        .arg(&pilot)
        .args(["--", "true"]));
    assert!(submitted.status.success());
    let waited = run(saker().args(["wait", "--dir"]).arg(&pilot));
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout),
        "succeeded 4 failed 0 cancelled 0\n"
    );
}
