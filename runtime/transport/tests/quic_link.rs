//! Real QUIC links on 127.0.0.1: mutual TLS against the pilot CA, frame I/O.

mod common;

use std::error::Error;
use std::net::SocketAddr;
use std::time::Duration;

use common::{TestPilot, frames, payload, rogue_quic_client_config, rogue_quic_server_config};
use saker_transport::quic::{self, ConnectError};
use saker_transport::{
    ConfigError, FrameReader, FrameWriter, LinkKind, LinkTimeouts, Role, RoleRefused, StreamError,
};

type TestResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Guard against a hang turning into a stuck test run; never expected to fire.
const DEADLINE: Duration = Duration::from_secs(20);

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A server endpoint presenting the root certificate of `pilot`.
fn root_server(pilot: &TestPilot) -> quinn::Endpoint {
    server(pilot, Role::Root)
}

/// A server endpoint accepting agent links, presenting `role`'s certificate.
fn server(pilot: &TestPilot, role: Role) -> quinn::Endpoint {
    let credentials = pilot.credentials(role);
    let timeouts = LinkTimeouts::default();
    quic::bind_endpoint(
        any_port(),
        Some(quic::server_config(&credentials, &timeouts).unwrap()),
        quic::client_config(&credentials, &timeouts).unwrap(),
    )
    .unwrap()
}

/// Echoes every frame of the first bi stream back, raw; returns the frame count
/// and the number of reads the server's reader needed.
async fn echo_one_stream(connection: &quinn::Connection) -> TestResult<(u32, u64)> {
    let (send, recv) = connection.accept_bi().await?;
    let mut reader = FrameReader::new(recv);
    let mut writer = FrameWriter::new(send);
    reader.read_preamble().await?;
    writer.write_preamble().await?;
    let mut count = 0;
    while let Some(frame) = reader.read_frame().await? {
        writer.write_frames(frame.raw()).await?;
        count += 1;
    }
    writer.finish().await?;
    Ok((count, reader.read_calls()))
}

/// Opens a stream, sends a preamble and waits for the peer's: fails if the
/// server refused us at any point of the handshake or after it.
async fn use_link(
    endpoint: &quinn::Endpoint,
    address: SocketAddr,
    expected: Role,
) -> TestResult<()> {
    let connection = quic::connect(endpoint, address, expected).await?;
    let (send, recv) = connection.open_bi().await?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await?;
    writer.finish().await?;
    FrameReader::new(recv).read_preamble().await?;
    Ok(())
}

#[tokio::test]
async fn agent_and_root_exchange_a_thousand_frames_each_way() {
    let pilot = TestPilot::new();
    let server = root_server(&pilot);
    let address = server.local_addr().unwrap();
    let agent = pilot.credentials(Role::Agent);
    let client = quic::bind_endpoint(
        any_port(),
        None,
        quic::client_config(&agent, &LinkTimeouts::default()).unwrap(),
    )
    .unwrap();
    let sent = frames(1000);

    let serve = async {
        let connection = server.accept().await.expect("endpoint open").await?;
        let echoed = echo_one_stream(&connection).await?;
        connection.closed().await;
        TestResult::Ok(echoed)
    };
    let talk = async {
        let connection = quic::connect(&client, address, Role::Root).await?;
        let (send, recv) = connection.open_bi().await?;
        let mut writer = FrameWriter::new(send);
        writer.write_preamble().await?;
        writer.write_frames(&sent).await?; // all 1000 frames in one write
        writer.finish().await?;
        let mut reader = FrameReader::new(recv);
        reader.read_preamble().await?;
        let mut received = Vec::new();
        let mut index = 0;
        while let Some(frame) = reader.read_frame().await? {
            assert_eq!(frame.route(), index);
            assert_eq!(frame.payload(), payload(index));
            assert_eq!(frame.payload().as_ptr().addr() % 8, 0);
            received.extend_from_slice(frame.raw());
            index += 1;
        }
        connection.close(0u32.into(), b"done");
        TestResult::Ok(received)
    };
    let (served, talked) = tokio::time::timeout(DEADLINE, async { tokio::join!(serve, talk) })
        .await
        .expect("link test finished in time");
    let (count, server_reads) = served.unwrap();
    let received = talked.unwrap();
    assert_eq!(count, 1000);
    assert_eq!(received, sent.as_slice());
    // ~40 KB arrive in a few dozen packets; one read per frame would be 1000.
    assert!(
        server_reads < 100,
        "server needed {server_reads} reads for 1000 frames"
    );
}

/// Runs one connection attempt against `server` and returns (server side, client side).
async fn attempt(
    server: &quinn::Endpoint,
    client_config: quinn::ClientConfig,
) -> (TestResult<()>, TestResult<()>) {
    attempt_as(server, client_config, Role::Root).await
}

/// [`attempt`], the client expecting the server to be `expected`.
async fn attempt_as(
    server: &quinn::Endpoint,
    client_config: quinn::ClientConfig,
    expected: Role,
) -> (TestResult<()>, TestResult<()>) {
    let address = server.local_addr().unwrap();
    let client = quic::bind_endpoint(any_port(), None, client_config).unwrap();
    let serve = async {
        let connection = server.accept().await.expect("endpoint open").await?;
        echo_one_stream(&connection).await?;
        // Held until the dialer is done with it, which then closes it.
        connection.closed().await;
        Ok(())
    };
    let talk = use_link(&client, address, expected);
    tokio::time::timeout(DEADLINE, async { tokio::join!(serve, talk) })
        .await
        .expect("refusal happened in time")
}

#[tokio::test]
async fn a_certificate_from_another_pilots_ca_is_refused_by_the_server() {
    let pilot = TestPilot::new();
    let other = TestPilot::new();
    let server = root_server(&pilot);
    // Trusts our server (so the client side would be happy) but presents a
    // certificate signed by the other pilot's CA: only the server can object.
    let config = rogue_quic_client_config(
        &pilot.credentials(Role::Agent),
        Some(&other.credentials(Role::Agent)),
    );
    let (served, talked) = attempt(&server, config).await;
    let server_error = served.expect_err("server must refuse a foreign client certificate");
    assert!(
        matches!(
            server_error.downcast_ref::<quinn::ConnectionError>(),
            Some(quinn::ConnectionError::TransportError(_))
        ),
        "{server_error:?}"
    );
    talked.expect_err("client must not get a working link");
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let pilot = TestPilot::new();
    let server = root_server(&pilot);
    let config = rogue_quic_client_config(&pilot.credentials(Role::Client), None);
    let (served, talked) = attempt(&server, config).await;
    let server_error = served.expect_err("server must require a client certificate");
    assert!(
        matches!(
            server_error.downcast_ref::<quinn::ConnectionError>(),
            Some(quinn::ConnectionError::TransportError(_))
        ),
        "{server_error:?}"
    );
    talked.expect_err("client must not get a working link");
}

#[tokio::test]
async fn a_client_of_another_pilot_refuses_our_server() {
    let pilot = TestPilot::new();
    let other = TestPilot::new();
    let server = root_server(&pilot);
    let config =
        quic::client_config(&other.credentials(Role::Client), &LinkTimeouts::default()).unwrap();
    let (served, talked) = attempt(&server, config).await;
    served.expect_err("the handshake must fail on the server too");
    let client_error = talked.expect_err("client must refuse a server of another pilot");
    assert!(
        matches!(
            client_error.downcast_ref::<ConnectError>(),
            Some(ConnectError::Handshake { .. })
        ),
        "{client_error:?}"
    );
}

#[tokio::test]
async fn a_client_certificate_cannot_serve() {
    let pilot = TestPilot::new();
    let error = quic::server_config(&pilot.credentials(Role::Client), &LinkTimeouts::default())
        .expect_err("client certificates lack server auth");
    assert!(matches!(
        error,
        ConfigError::RoleCannotServe {
            role: Role::Client,
            link: LinkKind::Agent
        }
    ));
}

/// The root's endpoint and every agent's endpoint admit only agent certificates:
/// a client's (or the root's) is refused inside the handshake, the server side
/// fails with the refusal, and the dialer never gets a working link.
#[tokio::test]
async fn only_an_agent_certificate_opens_an_agent_link() {
    let pilot = TestPilot::new();
    for serving in [Role::Root, Role::Agent] {
        for presented in [Role::Client, Role::Root] {
            let server = server(&pilot, serving);
            let config =
                quic::client_config(&pilot.credentials(presented), &LinkTimeouts::default())
                    .unwrap();
            let (served, talked) = attempt_as(&server, config, serving).await;
            let server_error = served.expect_err("the server must refuse the certificate");
            let Some(quinn::ConnectionError::TransportError(error)) = server_error.downcast_ref()
            else {
                panic!("{serving} refusing {presented}: {server_error:?}");
            };
            let refused = RoleRefused {
                link: LinkKind::Agent,
                presented: Some(presented),
            };
            // A TLS alert (certificate_unknown), and quinn keeps the TLS error as
            // text: the typed refusal, fields and all.
            assert_eq!(error.code, quinn::TransportErrorCode::crypto(46));
            assert!(
                error.reason.contains(&format!("{refused:?}")),
                "{serving} refusing {presented}: {error:?}"
            );
            talked.expect_err("the dialer must not get a working link");
        }
        // The same endpoint still serves an agent.
        let server = server(&pilot, serving);
        let config =
            quic::client_config(&pilot.credentials(Role::Agent), &LinkTimeouts::default()).unwrap();
        // The dialer reads the server's preamble: the server accepted the link.
        let (_served, talked) = attempt_as(&server, config, serving).await;
        talked.unwrap();
    }
}

/// An agent dialing its parent checks the parent's role: the root when it dials
/// the root, an agent when it dials an agent; anything else it refuses.
#[tokio::test]
async fn a_dialing_agent_accepts_only_the_role_it_dials() {
    let pilot = TestPilot::new();
    let agent = || quic::client_config(&pilot.credentials(Role::Agent), &LinkTimeouts::default());
    let name = |role: Role| format!("certificate not valid for name \"{}\"", role.dns_name());
    let cases = [
        (server(&pilot, Role::Agent), Role::Root, name(Role::Root)),
        (server(&pilot, Role::Root), Role::Agent, name(Role::Agent)),
        // A client certificate cannot serve at all (no server-auth purpose).
        (
            quic::bind_endpoint(
                any_port(),
                Some(rogue_quic_server_config(&pilot.credentials(Role::Client))),
                agent().unwrap(),
            )
            .unwrap(),
            Role::Agent,
            "server authentication".to_owned(),
        ),
    ];
    for (server, expected, why) in cases {
        let (_served, talked) = attempt_as(&server, agent().unwrap(), expected).await;
        let client_error = talked.expect_err("the dialer must refuse the server");
        let Some(ConnectError::Handshake { source, .. }) = client_error.downcast_ref() else {
            panic!("expecting {expected}: {client_error:?}");
        };
        let quinn::ConnectionError::TransportError(error) = source else {
            panic!("expecting {expected}: {source:?}");
        };
        assert!(
            error.reason.contains(&why),
            "expecting {expected}: {error:?}"
        );
    }
}

#[test]
fn keep_alive_must_be_shorter_than_the_idle_timeout() {
    let pilot = TestPilot::new();
    let timeouts = LinkTimeouts {
        keep_alive_interval: Duration::from_secs(15),
        max_idle_timeout: Duration::from_secs(15),
    };
    let error = quic::client_config(&pilot.credentials(Role::Agent), &timeouts).unwrap_err();
    assert!(matches!(
        error,
        ConfigError::KeepAliveNotBelowIdleTimeout { .. }
    ));
}

/// Connects a root server and an agent client, and hands the test one stream:
/// the client's send side and the server's receive side.
async fn one_way_stream(
    pilot: &TestPilot,
) -> (
    quinn::Endpoint,
    quinn::Connection,
    FrameWriter,
    quinn::Connection,
    FrameReader,
) {
    let server = root_server(pilot);
    let address = server.local_addr().unwrap();
    let agent = pilot.credentials(Role::Agent);
    let client = quic::bind_endpoint(
        any_port(),
        None,
        quic::client_config(&agent, &LinkTimeouts::default()).unwrap(),
    )
    .unwrap();
    let (server_connection, client_connection) = tokio::join!(
        async { server.accept().await.unwrap().await.unwrap() },
        async { quic::connect(&client, address, Role::Root).await.unwrap() }
    );
    let send = client_connection.open_uni().await.unwrap();
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await.unwrap();
    let recv = server_connection.accept_uni().await.unwrap();
    let mut reader = FrameReader::with_max_payload_len(recv, 1024);
    reader.read_preamble().await.unwrap();
    (client, client_connection, writer, server_connection, reader)
}

#[tokio::test]
async fn an_oversized_frame_over_quic_is_an_error() {
    let pilot = TestPilot::new();
    let (_client, _client_connection, mut writer, _server_connection, mut reader) =
        one_way_stream(&pilot).await;
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&2048u32.to_le_bytes());
    writer.write_frames(&header).await.unwrap();
    let error = tokio::time::timeout(DEADLINE, reader.read_frame())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(error, StreamError::Header(_)), "{error:?}");
}

#[tokio::test]
async fn a_stream_finished_mid_frame_is_truncated() {
    let pilot = TestPilot::new();
    let (_client, _client_connection, mut writer, _server_connection, mut reader) =
        one_way_stream(&pilot).await;
    let whole = frames(3);
    let cut = whole.len() - 8; // inside the last frame's payload
    writer.write_frames(&whole[..cut]).await.unwrap();
    writer.finish().await.unwrap();
    let mut complete = 0;
    let error = loop {
        match tokio::time::timeout(DEADLINE, reader.read_frame())
            .await
            .unwrap()
        {
            Ok(Some(_)) => complete += 1,
            Ok(None) => panic!("a cut stream must not end cleanly"),
            Err(error) => break error,
        }
    };
    assert_eq!(complete, 2);
    assert!(matches!(error, StreamError::Truncated { .. }), "{error:?}");
}

#[tokio::test]
async fn a_closed_connection_mid_frame_is_a_read_error() {
    let pilot = TestPilot::new();
    let (_client, client_connection, mut writer, _server_connection, mut reader) =
        one_way_stream(&pilot).await;
    writer.write_frames(&frames(3)[..16]).await.unwrap(); // frame 0 and a header
    client_connection.close(1u32.into(), b"gone");
    let error = loop {
        match tokio::time::timeout(DEADLINE, reader.read_frame())
            .await
            .unwrap()
        {
            Ok(Some(_)) => {}
            Ok(None) => panic!("a closed connection must not look like a clean end"),
            Err(error) => break error,
        }
    };
    assert!(matches!(error, StreamError::Read(_)), "{error:?}");
}

#[tokio::test]
async fn keep_alives_hold_an_idle_link_open_past_its_idle_timeout() {
    let pilot = TestPilot::new();
    let timeouts = LinkTimeouts {
        keep_alive_interval: Duration::from_millis(100),
        max_idle_timeout: Duration::from_millis(800),
    };
    let root = pilot.credentials(Role::Root);
    let server = quic::bind_endpoint(
        any_port(),
        Some(quic::server_config(&root, &timeouts).unwrap()),
        quic::client_config(&root, &timeouts).unwrap(),
    )
    .unwrap();
    let agent = pilot.credentials(Role::Agent);
    let client = quic::bind_endpoint(
        any_port(),
        None,
        quic::client_config(&agent, &timeouts).unwrap(),
    )
    .unwrap();
    let address = server.local_addr().unwrap();
    let (server_connection, client_connection) = tokio::join!(
        async { server.accept().await.unwrap().await.unwrap() },
        async { quic::connect(&client, address, Role::Root).await.unwrap() }
    );
    // Without keep-alives both ends would time out after 0.8 s of silence.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        client_connection.close_reason().is_none(),
        "{:?}",
        client_connection.close_reason()
    );
    assert!(
        server_connection.close_reason().is_none(),
        "{:?}",
        server_connection.close_reason()
    );
}
