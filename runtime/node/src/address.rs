//! The address other nodes dial this one at: its host name, resolved to IPv4. The
//! root advertises it when its agents are on other nodes, and so does an agent that
//! listens on every interface for its children.

use std::io;
use std::net::IpAddr;

/// Why a host name gave no address to advertise.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error("resolving this node's host name {host:?}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("{host:?} has no IPv4 address")]
    NoIpv4 { host: String },
}

/// The address of `hostname` as other nodes would dial it.
pub async fn host_address(hostname: &str) -> Result<IpAddr, AddressError> {
    let mut addresses = tokio::net::lookup_host((hostname, 0))
        .await
        .map_err(|source| AddressError::Resolve {
            host: hostname.to_owned(),
            source,
        })?;
    addresses
        .find(|a| a.is_ipv4())
        .map(|a| a.ip())
        .ok_or_else(|| AddressError::NoIpv4 {
            host: hostname.to_owned(),
        })
}
