//! rustls configs shared by the QUIC links and the TCP+TLS client socket.
//!
//! Both sides authenticate: servers require a client certificate signed by
//! the pilot CA and carrying the one role their [`LinkKind`] admits; clients
//! accept only a server certificate signed by the pilot CA for the role they
//! dial ([`Role::server_name`]). No system roots are ever consulted.

use std::sync::Arc;
use std::time::Duration;

use rustls::SupportedProtocolVersion;
use rustls::server::{VerifierBuilderError, WebPkiClientVerifier};

use crate::credentials::{Credentials, Role};
use crate::crypto;
use crate::roles::{LinkKind, RoleVerifier};

/// ALPN protocol id offered and required on every Saker connection.
pub const ALPN: &[u8] = b"saker/1";

/// ALPN protocol id of an agent-to-agent data connection (items fetched node to
/// node). An agent's endpoint offers it beside [`ALPN`]: what a dialer asks for says
/// whether it opens a child link or a data connection.
pub const DATA_ALPN: &[u8] = b"saker-data/1";

/// Errors turning [`Credentials`] into a TLS or QUIC configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A server config was asked for with credentials that may not serve it.
    #[error("the {role} certificate cannot serve {link}")]
    RoleCannotServe {
        /// The role of the credentials given.
        role: Role,
        /// What the server was to accept.
        link: LinkKind,
    },
    /// The crypto provider rejected the protocol versions.
    #[error("the crypto provider does not support the required tls versions")]
    ProtocolVersions(#[source] rustls::Error),
    /// The client-certificate verifier could not be built from the pilot CA.
    #[error("cannot build the client certificate verifier from the pilot ca")]
    ClientVerifier(#[source] VerifierBuilderError),
    /// rustls refused the role's certificate and key.
    #[error("the {role} certificate and key are not a usable tls identity")]
    Identity {
        /// The role of the credentials given.
        role: Role,
        /// The underlying failure.
        #[source]
        source: rustls::Error,
    },
    /// The TLS config has no cipher suite QUIC can use for its initial packets.
    #[error("the tls configuration has no cipher suite usable by quic")]
    QuicCipherSuite(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    /// The idle timeout does not fit QUIC's encoding.
    #[error("idle timeout {timeout:?} is too large for quic")]
    IdleTimeout {
        /// The requested timeout.
        timeout: Duration,
        /// The underlying failure.
        #[source]
        source: quinn::VarIntBoundsExceeded,
    },
    /// Keep-alives at or above the idle timeout would let an idle link die.
    #[error(
        "keep-alive interval {keep_alive_interval:?} must be shorter than the idle timeout {max_idle_timeout:?}"
    )]
    KeepAliveNotBelowIdleTimeout {
        /// The requested keep-alive interval.
        keep_alive_interval: Duration,
        /// The requested idle timeout.
        max_idle_timeout: Duration,
    },
}

/// A server config for `link`: requires a client certificate from the pilot CA
/// carrying the role `link` admits.
pub(crate) fn server_config(
    credentials: &Credentials,
    versions: &[&'static SupportedProtocolVersion],
    link: LinkKind,
) -> Result<rustls::ServerConfig, ConfigError> {
    let role = credentials.role();
    if !role.can_serve() || !link.may_serve(role) {
        return Err(ConfigError::RoleCannotServe { role, link });
    }
    let provider = crypto::provider();
    let chain =
        WebPkiClientVerifier::builder_with_provider(credentials.roots().clone(), provider.clone())
            .build()
            .map_err(ConfigError::ClientVerifier)?;
    let verifier = Arc::new(RoleVerifier::new(chain, link));
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(ConfigError::ProtocolVersions)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            credentials.certificate_chain().to_vec(),
            credentials.private_key().clone_key(),
        )
        .map_err(|source| ConfigError::Identity { role, source })?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// A client config trusting only the pilot CA and presenting the role's certificate.
pub(crate) fn client_config(
    credentials: &Credentials,
    versions: &[&'static SupportedProtocolVersion],
) -> Result<rustls::ClientConfig, ConfigError> {
    let role = credentials.role();
    let mut config = rustls::ClientConfig::builder_with_provider(crypto::provider())
        .with_protocol_versions(versions)
        .map_err(ConfigError::ProtocolVersions)?
        .with_root_certificates(credentials.roots().clone())
        .with_client_auth_cert(
            credentials.certificate_chain().to_vec(),
            credentials.private_key().clone_key(),
        )
        .map_err(|source| ConfigError::Identity { role, source })?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The name a client of the client socket verifies the server against: the
/// root's ([`Role::server_name`] of [`Role::Root`]), as only the root serves it.
pub fn server_name() -> rustls_pki_types::ServerName<'static> {
    Role::Root.server_name()
}
