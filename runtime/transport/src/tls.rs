//! TLS over TCP for the client socket (Python, Parsl, other non-Rust clients).
//!
//! The same mutual authentication as the QUIC links: the server presents the
//! root certificate and admits only a client certificate (role `client`) signed
//! by the pilot CA; clients verify the server against the pilot CA for the
//! root's name, [`server_name`]. TLS 1.2
//! is allowed as well as 1.3 so that older client TLS stacks can connect; both
//! use only *ring*'s modern AEAD suites. Use the configs with
//! `tokio_rustls::{TlsAcceptor, TlsConnector}`; frames then flow through
//! [`FrameReader`](crate::FrameReader) / [`FrameWriter`](crate::FrameWriter)
//! on the stream halves.

use std::sync::Arc;

use crate::config::{self, ConfigError};
use crate::credentials::Credentials;
use crate::roles::LinkKind;

pub use crate::config::server_name;

/// A rustls server config for the client socket: `credentials` must be the
/// root's; only client certificates are admitted ([`LinkKind::Client`]).
pub fn tls_server_config(
    credentials: &Credentials,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    config::server_config(credentials, rustls::ALL_VERSIONS, LinkKind::Client).map(Arc::new)
}

/// A rustls client config for connecting to the client socket.
pub fn tls_client_config(
    credentials: &Credentials,
) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    config::client_config(credentials, rustls::ALL_VERSIONS).map(Arc::new)
}
