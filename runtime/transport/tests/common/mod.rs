//! Shared set-up for the integration tests: throwaway pilots and rogue configs.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;

use saker_transport::{ALPN, Credentials, PilotDir, Role, crypto};
use saker_wire::AlignedVec;
use tempfile::TempDir;

/// A pilot directory with generated credentials, deleted on drop.
pub struct TestPilot {
    pub dir: PilotDir,
    _temporary: TempDir,
}

impl TestPilot {
    pub fn new() -> TestPilot {
        let temporary = tempfile::tempdir().unwrap();
        let dir = PilotDir::create(temporary.path().join("pilot")).unwrap();
        Credentials::generate_into(&dir).unwrap();
        TestPilot {
            dir,
            _temporary: temporary,
        }
    }

    pub fn credentials(&self, role: Role) -> Credentials {
        Credentials::load(&self.dir, role).unwrap()
    }
}

/// A rustls client config that trusts `trusted`'s CA and presents `presented`
/// (or no certificate at all): lets a test aim exactly at the server's check.
pub fn rogue_client_config(
    trusted: &Credentials,
    presented: Option<&Credentials>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let builder = rustls::ClientConfig::builder_with_provider(crypto::provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(trusted.roots().clone());
    let mut config = match presented {
        Some(presented) => builder
            .with_client_auth_cert(
                presented.certificate_chain().to_vec(),
                presented.private_key().clone_key(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    config
}

/// A rustls server config presenting `presented` (any role, even one that may
/// not serve) and admitting any client certificate of `presented`'s pilot: lets
/// a test aim exactly at the dialer's check of the server's role.
pub fn rogue_server_config(
    presented: &Credentials,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ServerConfig {
    let provider = crypto::provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        presented.roots().clone(),
        provider.clone(),
    )
    .build()
    .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            presented.certificate_chain().to_vec(),
            presented.private_key().clone_key(),
        )
        .unwrap();
    config.alpn_protocols = vec![ALPN.to_vec()];
    config
}

pub fn rogue_quic_server_config(presented: &Credentials) -> quinn::ServerConfig {
    let tls = rogue_server_config(presented, &[&rustls::version::TLS13]);
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls)).unwrap();
    quinn::ServerConfig::with_crypto(Arc::new(quic))
}

pub fn rogue_quic_client_config(
    trusted: &Credentials,
    presented: Option<&Credentials>,
) -> quinn::ClientConfig {
    let tls = rogue_client_config(trusted, presented, &[&rustls::version::TLS13]);
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls)).unwrap();
    quinn::ClientConfig::new(Arc::new(quic))
}

/// Payload of test frame `index`: varied lengths (0..=40) so padding is exercised.
pub fn payload(index: u32) -> Vec<u8> {
    (0..index % 41).map(|byte| (byte ^ index) as u8).collect()
}

/// `count` frames routed to their index, in one buffer as saker-wire encodes them.
pub fn frames(count: u32) -> AlignedVec {
    let mut bytes = AlignedVec::new();
    for index in 0..count {
        saker_wire::encode_raw_into(&mut bytes, index, &payload(index)).unwrap();
    }
    bytes
}
