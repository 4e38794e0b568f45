//! The one crypto provider of the workspace: *ring*.
//!
//! rustls panics when it has to pick a process-default provider and finds more
//! than one compiled in, and mixing providers between configs is a source of
//! subtle failures. The workspace therefore enables only rustls' `ring`
//! feature (in rustls, quinn, tokio-rustls and rcgen), and every config this
//! crate builds names [`provider`] explicitly, so it does not depend on the
//! process default at all. [`install_crypto_provider`] is for the rest of the
//! process (anything calling `rustls::ClientConfig::builder()` and friends):
//! call it early in `main`.

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

/// Another crypto provider was already installed as the process default.
#[derive(Debug, thiserror::Error)]
#[error(
    "a crypto provider other than ring is installed as the process default (key provider {installed}); \
     saker uses ring only"
)]
pub struct CryptoError {
    /// `Debug` rendering of the installed provider's key provider.
    pub installed: String,
}

/// The *ring* provider used by every config in this crate (built once, shared).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Installs *ring* as the process-default rustls provider.
///
/// Idempotent and safe to race: rustls installs at most once per process, and
/// finding *ring* already installed (by us or anyone) is success. Finding
/// another provider is an error, because the process would then mix providers.
pub fn install_crypto_provider() -> Result<(), CryptoError> {
    let installed = match CryptoProvider::get_default() {
        Some(installed) => installed.clone(),
        None => match provider().as_ref().clone().install_default() {
            Ok(()) => return Ok(()),
            Err(installed) => installed,
        },
    };
    if is_ring(&installed) {
        Ok(())
    } else {
        Err(CryptoError {
            installed: format!("{:?}", installed.key_provider),
        })
    }
}

/// rustls gives providers no identity; *ring*'s key provider is a unit struct
/// whose `Debug` output names it, which distinguishes it from aws-lc-rs.
fn is_ring(candidate: &CryptoProvider) -> bool {
    format!("{:?}", candidate.key_provider) == format!("{:?}", provider().key_provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installing_twice_succeeds_and_leaves_ring_installed() {
        install_crypto_provider().unwrap();
        install_crypto_provider().unwrap();
        let installed = CryptoProvider::get_default().expect("installed above");
        assert!(is_ring(installed));
    }
}
