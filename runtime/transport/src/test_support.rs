//! Helpers for tests of this crate and of the crates above it (feature
//! `test-support`): never part of a pilot.

use crate::credentials::{CA_CERTIFICATE_FILE_NAME, LEGACY_CA_KEY_FILE_NAME, Role};
use crate::pilot_dir::PilotDir;

/// Replaces the credentials of `dir` by ones as a saker older than certificate roles
/// wrote them: every certificate named `saker.pilot`, and a `ca.key`. Panics on any
/// failure (a test's setup).
pub fn write_legacy_credentials(dir: &PilotDir) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);
    for role in Role::ALL {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec!["saker.pilot".to_owned()]).unwrap();
        params.is_ca = IsCa::ExplicitNoCa;
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let certificate = params.signed_by(&key, &issuer).unwrap();
        dir.write_secret_file(role.key_file_name(), key.serialize_pem().as_bytes())
            .unwrap();
        dir.write_secret_file(role.certificate_file_name(), certificate.pem().as_bytes())
            .unwrap();
    }
    dir.write_secret_file(LEGACY_CA_KEY_FILE_NAME, ca_key_pem.as_bytes())
        .unwrap();
    dir.write_secret_file(CA_CERTIFICATE_FILE_NAME, ca.pem().as_bytes())
        .unwrap();
}
