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
