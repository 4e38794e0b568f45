//! The TCP+TLS client socket configs, driven through tokio-rustls on 127.0.0.1.

mod common;

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use common::{TestPilot, frames, rogue_client_config, rogue_server_config};
use saker_transport::tls::{server_name, tls_client_config, tls_server_config};
use saker_transport::{ConfigError, FrameReader, FrameWriter, LinkKind, Role, RoleRefused};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

type TestResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Guard against a hang turning into a stuck test run; never expected to fire.
const DEADLINE: Duration = Duration::from_secs(20);

/// Accepts one TLS connection presenting the root certificate and echoes
/// every frame back raw; returns the number of frames.
async fn echo_one_connection(listener: TcpListener, pilot: &TestPilot) -> TestResult<u32> {
    let acceptor = TlsAcceptor::from(tls_server_config(&pilot.credentials(Role::Root))?);
    echo_with(listener, acceptor).await
}

async fn echo_with(listener: TcpListener, acceptor: TlsAcceptor) -> TestResult<u32> {
    let (tcp, _) = listener.accept().await?;
    let tls = acceptor.accept(tcp).await?;
    let (read_half, write_half) = tokio::io::split(tls);
    let mut reader = FrameReader::new(read_half);
    let mut writer = FrameWriter::new(write_half);
    reader.read_preamble().await?;
    writer.write_preamble().await?;
    let mut count = 0;
    while let Some(frame) = reader.read_frame().await? {
        writer.write_frames(frame.raw()).await?;
        count += 1;
    }
    writer.finish().await?;
    Ok(count)
}

/// Connects with `config`, sends the preamble and `sent`, and returns the echo.
async fn exchange(
    listener_address: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
    sent: &[u8],
) -> TestResult<Vec<u8>> {
    let tcp = TcpStream::connect(listener_address).await?;
    let tls = TlsConnector::from(config)
        .connect(server_name(), tcp)
        .await?;
    let (read_half, write_half) = tokio::io::split(tls);
    let mut writer = FrameWriter::new(write_half);
    writer.write_preamble().await?;
    writer.write_frames(sent).await?;
    writer.finish().await?;
    let mut reader = FrameReader::new(read_half);
    reader.read_preamble().await?;
    let mut received = Vec::new();
    while let Some(frame) = reader.read_frame().await? {
        received.extend_from_slice(frame.raw());
    }
    Ok(received)
}

async fn attempt(
    pilot: &TestPilot,
    config: Arc<rustls::ClientConfig>,
    sent: &[u8],
) -> (TestResult<u32>, TestResult<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::time::timeout(DEADLINE, async {
        tokio::join!(
            echo_one_connection(listener, pilot),
            exchange(address, config, sent)
        )
    })
    .await
    .expect("tls exchange finished in time")
}

#[tokio::test]
async fn a_client_exchanges_a_thousand_frames_over_tls() {
    let pilot = TestPilot::new();
    let config = tls_client_config(&pilot.credentials(Role::Client)).unwrap();
    let sent = frames(1000);
    let (served, talked) = attempt(&pilot, config, &sent).await;
    assert_eq!(served.unwrap(), 1000);
    let received = talked.unwrap();
    assert_eq!(received, sent.as_slice());
}

/// The rustls error somewhere in `error`'s chain (tokio-rustls wraps it in an
/// `io::Error`, whose `source` skips the wrapped error, so look inside those too).
fn rustls_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        let wrapped = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io_error| io_error.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if wrapped.is_some() {
            return wrapped;
        }
        cause = current.source();
    }
    None
}

#[tokio::test]
async fn a_certificate_from_another_pilots_ca_is_refused_over_tls() {
    let pilot = TestPilot::new();
    let other = TestPilot::new();
    let config = rogue_client_config(
        &pilot.credentials(Role::Client),
        Some(&other.credentials(Role::Client)),
        rustls::ALL_VERSIONS,
    );
    let (served, talked) = attempt(&pilot, Arc::new(config), &frames(3)).await;
    let server_error = served.expect_err("server must refuse a foreign client certificate");
    assert!(
        matches!(
            rustls_error(server_error.as_ref()),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{server_error:?}"
    );
    talked.expect_err("client must not get an echo");
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused_over_tls() {
    let pilot = TestPilot::new();
    let config = rogue_client_config(&pilot.credentials(Role::Client), None, rustls::ALL_VERSIONS);
    let (served, talked) = attempt(&pilot, Arc::new(config), &frames(3)).await;
    let server_error = served.expect_err("server must require a client certificate");
    assert!(
        matches!(
            rustls_error(server_error.as_ref()),
            Some(rustls::Error::NoCertificatesPresented)
        ),
        "{server_error:?}"
    );
    talked.expect_err("client must not get an echo");
}

#[tokio::test]
async fn a_client_of_another_pilot_refuses_our_server_over_tls() {
    let pilot = TestPilot::new();
    let other = TestPilot::new();
    let config = tls_client_config(&other.credentials(Role::Client)).unwrap();
    let (served, talked) = attempt(&pilot, config, &frames(3)).await;
    served.expect_err("the handshake must fail on the server too");
    let client_error = talked.expect_err("client must refuse a server of another pilot");
    assert!(
        matches!(
            rustls_error(client_error.as_ref()),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            ))
        ),
        "{client_error:?}"
    );
}

#[tokio::test]
async fn tls_1_2_clients_are_served_too() {
    let pilot = TestPilot::new();
    let client = pilot.credentials(Role::Client);
    let config = rogue_client_config(&client, Some(&client), &[&rustls::version::TLS12]);
    let sent = frames(10);
    let (served, talked) = attempt(&pilot, Arc::new(config), &sent).await;
    assert_eq!(served.unwrap(), 10);
    assert_eq!(talked.unwrap(), sent.as_slice());
}

/// The client socket admits only client certificates: an agent's (or the root's)
/// is refused inside the handshake, with the typed refusal on the server side,
/// and the client gets no answer.
#[tokio::test]
async fn only_a_client_certificate_opens_a_client_session() {
    let pilot = TestPilot::new();
    for presented in [Role::Agent, Role::Root] {
        let config = rogue_client_config(
            &pilot.credentials(Role::Client),
            Some(&pilot.credentials(presented)),
            rustls::ALL_VERSIONS,
        );
        let (served, talked) = attempt(&pilot, Arc::new(config), &frames(3)).await;
        let server_error = served.expect_err("the server must refuse the certificate");
        assert_eq!(
            RoleRefused::find(server_error.as_ref()),
            Some(&RoleRefused {
                link: LinkKind::Client,
                presented: Some(presented)
            }),
            "{server_error:?}"
        );
        talked.expect_err("the client must not get an echo");
    }
}

#[test]
fn only_the_root_serves_the_client_socket() {
    let pilot = TestPilot::new();
    for role in [Role::Agent, Role::Client] {
        let error = tls_server_config(&pilot.credentials(role)).unwrap_err();
        assert!(
            matches!(error, ConfigError::RoleCannotServe { role: found, link: LinkKind::Client } if found == role),
            "{error}"
        );
    }
}

/// A client checks that the socket is served by the root: a server presenting
/// an agent certificate of the same pilot is refused.
#[tokio::test]
async fn a_client_refuses_a_socket_not_served_by_the_root() {
    let pilot = TestPilot::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(rogue_server_config(
        &pilot.credentials(Role::Agent),
        rustls::ALL_VERSIONS,
    )));
    let config = tls_client_config(&pilot.credentials(Role::Client)).unwrap();
    let sent = frames(3);
    let (served, talked) = tokio::time::timeout(DEADLINE, async {
        tokio::join!(
            echo_with(listener, acceptor),
            exchange(address, config, &sent)
        )
    })
    .await
    .expect("tls exchange finished in time");
    served.expect_err("the handshake must fail on the server too");
    let client_error = talked.expect_err("the client must refuse the server");
    assert!(
        matches!(
            rustls_error(client_error.as_ref()),
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "{client_error:?}"
    );
}
