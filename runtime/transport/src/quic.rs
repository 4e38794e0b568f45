//! QUIC links between root, agents and Rust clients.
//!
//! Start here: [`server_config`] and [`client_config`] turn [`Credentials`]
//! into quinn configs (mutual TLS 1.3 against the pilot CA, ALPN
//! [`ALPN`](crate::ALPN), keep-alives on), [`bind_endpoint`] opens a UDP socket,
//! and [`connect`] dials a peer. Streams carry frames through
//! [`FrameReader`](crate::FrameReader) and [`FrameWriter`](crate::FrameWriter).
//!
//! Everything here needs a tokio runtime (quinn's I/O driver runs on it).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};

use crate::config::{self, ConfigError};
use crate::credentials::{Credentials, Role};
use crate::roles::LinkKind;

/// Liveness settings of a link.
///
/// The keep-alive makes an idle but healthy link send a packet every
/// `keep_alive_interval`; a link that hears nothing for `max_idle_timeout`
/// is closed with [`quinn::ConnectionError::TimedOut`]. That is how a lost
/// node is noticed even when no request is outstanding. QUIC uses the
/// smaller of the two peers' idle timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTimeouts {
    /// How often an idle link sends a keep-alive (default 2 s).
    pub keep_alive_interval: Duration,
    /// How long a silent link lives (default 10 s); must exceed the keep-alive. This
    /// is how long a dead agent goes unnoticed before its work is replayed.
    pub max_idle_timeout: Duration,
}

impl Default for LinkTimeouts {
    fn default() -> Self {
        LinkTimeouts {
            keep_alive_interval: Duration::from_secs(2),
            max_idle_timeout: Duration::from_secs(10),
        }
    }
}

impl LinkTimeouts {
    fn transport_config(&self) -> Result<Arc<quinn::TransportConfig>, ConfigError> {
        if self.keep_alive_interval >= self.max_idle_timeout {
            return Err(ConfigError::KeepAliveNotBelowIdleTimeout {
                keep_alive_interval: self.keep_alive_interval,
                max_idle_timeout: self.max_idle_timeout,
            });
        }
        let idle_timeout =
            quinn::IdleTimeout::try_from(self.max_idle_timeout).map_err(|source| {
                ConfigError::IdleTimeout {
                    timeout: self.max_idle_timeout,
                    source,
                }
            })?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .keep_alive_interval(Some(self.keep_alive_interval))
            .max_idle_timeout(Some(idle_timeout))
            .receive_window(quinn::VarInt::from_u32(RECEIVE_WINDOW));
        Ok(Arc::new(transport))
    }
}

/// A quinn server config for agent links: presents `credentials` (root or
/// agent) and admits only agent certificates signed by the pilot CA
/// ([`LinkKind::Agent`]).
pub fn server_config(
    credentials: &Credentials,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ServerConfig, ConfigError> {
    let tls = config::server_config(credentials, &[&rustls::version::TLS13], LinkKind::Agent)?;
    quinn_server(tls, timeouts)
}

/// An agent's server config: as [`server_config`], and it also accepts data
/// connections ([`DATA_ALPN`](crate::DATA_ALPN)) from other agents and from clients
/// ([`LinkKind::AgentEndpoint`]); see [`is_data_connection`]. The agent must refuse a
/// connection that is no data connection from a peer whose [`peer_role`] is not an
/// agent.
pub fn agent_server_config(
    credentials: &Credentials,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ServerConfig, ConfigError> {
    let mut tls = config::server_config(
        credentials,
        &[&rustls::version::TLS13],
        LinkKind::AgentEndpoint,
    )?;
    tls.alpn_protocols.push(config::DATA_ALPN.to_vec());
    quinn_server(tls, timeouts)
}

fn quinn_server(
    tls: rustls::ServerConfig,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ServerConfig, ConfigError> {
    let quic = QuicServerConfig::try_from(Arc::new(tls)).map_err(ConfigError::QuicCipherSuite)?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(quic));
    server.transport_config(timeouts.transport_config()?);
    Ok(server)
}

/// A quinn client config: presents `credentials` and accepts only a server
/// certificate signed by the pilot CA for the role given to [`connect`].
pub fn client_config(
    credentials: &Credentials,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ClientConfig, ConfigError> {
    let tls = config::client_config(credentials, &[&rustls::version::TLS13])?;
    quinn_client(tls, timeouts)
}

/// The client config of an agent's data connections to other agents: as
/// [`client_config`], asking for [`DATA_ALPN`](crate::DATA_ALPN). Use it with
/// [`connect_with`].
pub fn data_client_config(
    credentials: &Credentials,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ClientConfig, ConfigError> {
    let mut tls = config::client_config(credentials, &[&rustls::version::TLS13])?;
    tls.alpn_protocols = vec![config::DATA_ALPN.to_vec()];
    quinn_client(tls, timeouts)
}

fn quinn_client(
    tls: rustls::ClientConfig,
    timeouts: &LinkTimeouts,
) -> Result<quinn::ClientConfig, ConfigError> {
    let quic = QuicClientConfig::try_from(Arc::new(tls)).map_err(ConfigError::QuicCipherSuite)?;
    let mut client = quinn::ClientConfig::new(Arc::new(quic));
    client.transport_config(timeouts.transport_config()?);
    Ok(client)
}

/// Whether an accepted connection is a data connection (its dialer asked for
/// [`DATA_ALPN`](crate::DATA_ALPN)) rather than a link.
pub fn is_data_connection(connection: &quinn::Connection) -> bool {
    connection
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol)
        .is_some_and(|protocol| protocol == config::DATA_ALPN)
}

/// The role of the certificate the peer of `connection` presented (checked against
/// the pilot CA in the handshake); `None` if it presented none with a role.
pub fn peer_role(connection: &quinn::Connection) -> Option<Role> {
    let chain = connection
        .peer_identity()?
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    crate::roles::role_of(chain.first()?).ok().flatten()
}

/// Errors binding an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The UDP socket could not be bound (or no tokio runtime is running).
    #[error("cannot bind a quic endpoint on {address}")]
    Bind {
        /// The requested address.
        address: SocketAddr,
        /// The underlying failure.
        #[source]
        source: std::io::Error,
    },
}

/// Errors connecting to a peer.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// quinn refused to start the connection (bad address, endpoint stopping…).
    #[error("cannot start a connection to {address}")]
    Start {
        /// The peer's address.
        address: SocketAddr,
        /// The underlying failure.
        #[source]
        source: quinn::ConnectError,
    },
    /// The handshake failed: peer unreachable, refused our certificate, or
    /// presented one not signed by the pilot CA or not of the expected role.
    #[error("connection to {address} failed during the handshake")]
    Handshake {
        /// The peer's address.
        address: SocketAddr,
        /// The underlying failure.
        #[source]
        source: quinn::ConnectionError,
    },
}

/// Binds a UDP endpoint on `address` (port 0 picks a free port; read it back
/// with [`quinn::Endpoint::local_addr`]). With `server` it also accepts
/// connections; `client` is used for every outgoing [`connect`].
///
/// Must be called inside a tokio runtime.
pub fn bind_endpoint(
    address: SocketAddr,
    server: Option<quinn::ServerConfig>,
    client: quinn::ClientConfig,
) -> Result<quinn::Endpoint, EndpointError> {
    let bind = || {
        let socket = std::net::UdpSocket::bind(address)?;
        widen_buffers(&socket);
        let runtime = quinn::default_runtime()
            .ok_or_else(|| std::io::Error::other("no async runtime found"))?;
        quinn::Endpoint::new(quinn::EndpointConfig::default(), server, socket, runtime)
    };
    let mut endpoint = bind().map_err(|source| EndpointError::Bind { address, source })?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// Bytes a peer may send on a connection beyond what this side has read (QUIC's
/// connection-level window; quinn's default is unbounded). What is in flight towards
/// a busy receiver waits in its socket's buffer: bounded below [`SOCKET_BUFFER`], a
/// burst is not dropped.
pub const RECEIVE_WINDOW: u32 = 4 << 20;

/// Bytes of an endpoint's UDP receive and send buffers asked of the kernel, which
/// caps them at `net.core.rmem_max` / `wmem_max`. A transfer's burst must fit while
/// the receiving process is busy elsewhere (writing what came, say): a datagram the
/// socket has no room for is dropped, a loss to QUIC, whose window then shrinks.
/// The kernel's default (208 KiB) dropped 2 % of a fetch's datagrams here.
pub const SOCKET_BUFFER: usize = 8 << 20;

fn widen_buffers(socket: &std::net::UdpSocket) {
    let socket = socket2::SockRef::from(socket);
    // Best effort: a smaller buffer is slower, not wrong.
    if let Err(error) = socket.set_recv_buffer_size(SOCKET_BUFFER) {
        tracing::debug!(%error, "cannot widen a udp receive buffer");
    }
    if let Err(error) = socket.set_send_buffer_size(SOCKET_BUFFER) {
        tracing::debug!(%error, "cannot widen a udp send buffer");
    }
}

/// Connects to the peer at `address`, which must present a certificate of role
/// `expected` (the root when dialing the root, an agent when dialing an agent),
/// and completes the handshake.
///
/// With TLS 1.3 the server checks the client's certificate after the client
/// considers the handshake done, so a server refusing *our* certificate may
/// surface on first use of the connection rather than here.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    address: SocketAddr,
    expected: Role,
) -> Result<quinn::Connection, ConnectError> {
    let connecting = endpoint
        .connect(address, expected.dns_name())
        .map_err(|source| ConnectError::Start { address, source })?;
    connecting
        .await
        .map_err(|source| ConnectError::Handshake { address, source })
}

/// [`connect`] with a config of its own (say, [`data_client_config`]).
pub async fn connect_with(
    endpoint: &quinn::Endpoint,
    config: quinn::ClientConfig,
    address: SocketAddr,
    expected: Role,
) -> Result<quinn::Connection, ConnectError> {
    let connecting = endpoint
        .connect_with(config, address, expected.dns_name())
        .map_err(|source| ConnectError::Start { address, source })?;
    connecting
        .await
        .map_err(|source| ConnectError::Handshake { address, source })
}
