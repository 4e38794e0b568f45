//! `client.json` in the pilot directory: where a running pilot's client socket is.
//!
//! Written by the root once its socket listens (mode 0600, atomically, through
//! [`PilotDir::write_secret_file`]); read by every client before connecting.

use std::path::PathBuf;

use saker_transport::{DirError, PilotDir};
use serde::{Deserialize, Serialize};

/// The variable that names a pilot directory to a program started to drive it
/// (`saker run --app`, `saker pilot --app`).
pub const PILOT_DIR_VAR: &str = "SAKER_PILOT_DIR";

/// File name of the endpoint file inside the pilot directory.
pub const CLIENT_ENDPOINT_FILE_NAME: &str = "client.json";

/// File name of the local client socket inside the pilot directory.
pub const CLIENT_SOCKET_FILE_NAME: &str = "client.sock";

/// Contents of `client.json`:
/// `{"addr": "10.1.2.3:40123", "protocol": 3, "pid": 4242, "pilot_id": "…",
/// "socket": "client.sock", "host": "node001"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEndpoint {
    /// `host:port` to connect to: an address other nodes (the login node) can reach,
    /// not the wildcard the socket may be bound to. IPv6 hosts are in brackets.
    pub addr: String,
    /// The newest client protocol version the pilot speaks.
    pub protocol: u32,
    /// Every version it speaks.
    #[serde(default)]
    pub protocols: Vec<u32>,
    /// Process id of the root, for diagnostics (the root may be on another host).
    pub pid: u32,
    #[serde(default)]
    pub pilot_id: String,
    /// The local socket's file name in the pilot directory, when the root listens on
    /// one: a client on the root's host connects there, without TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// The root's host name: a client on another host skips the local socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl ClientEndpoint {
    /// The local socket's path, if this endpoint has one and this is the root's host.
    pub fn local_socket(&self, pilot_dir: &PilotDir) -> Option<PathBuf> {
        let socket = self.socket.as_deref()?;
        let here = nix::unistd::gethostname().ok()?;
        (self.host.as_deref() == Some(&*here.to_string_lossy()))
            .then(|| pilot_dir.file_path(socket))
    }

    /// Reads the endpoint file of `pilot_dir`.
    pub fn read(pilot_dir: &PilotDir) -> Result<Self, EndpointError> {
        let path = pilot_dir.file_path(CLIENT_ENDPOINT_FILE_NAME);
        let text = std::fs::read(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => EndpointError::NotRunning { path: path.clone() },
            _ => EndpointError::Read {
                path: path.clone(),
                source,
            },
        })?;
        serde_json::from_slice(&text).map_err(|source| EndpointError::Parse { path, source })
    }

    /// Writes this endpoint into `pilot_dir`, replacing any previous one.
    pub fn write(&self, pilot_dir: &PilotDir) -> Result<PathBuf, EndpointError> {
        // Serializing a struct of strings and integers cannot fail.
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_default();
        text.push(b'\n');
        pilot_dir
            .write_secret_file(CLIENT_ENDPOINT_FILE_NAME, &text)
            .map_err(EndpointError::Write)
    }

    /// Removes the endpoint file (pilot shutdown); a missing file is not an error.
    pub fn remove(pilot_dir: &PilotDir) -> Result<(), EndpointError> {
        let path = pilot_dir.file_path(CLIENT_ENDPOINT_FILE_NAME);
        match std::fs::remove_file(&path) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(EndpointError::Remove { path, source })
            }
            _ => Ok(()),
        }
    }
}

/// The endpoint file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("no pilot is serving clients from this directory ({path} does not exist)")]
    NotRunning { path: PathBuf },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid endpoint file")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write the endpoint file")]
    Write(#[source] DirError),
    #[error("cannot remove {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn endpoint_file_round_trips_with_private_mode() {
        let temporary = tempfile::tempdir().unwrap();
        let pilot_dir = PilotDir::create(temporary.path().join("pilot")).unwrap();
        assert!(matches!(
            ClientEndpoint::read(&pilot_dir),
            Err(EndpointError::NotRunning { .. })
        ));
        let endpoint = ClientEndpoint {
            addr: "127.0.0.1:4567".to_owned(),
            protocol: 1,
            protocols: vec![1, 2],
            pid: 42,
            pilot_id: pilot_dir.pilot_id().to_string(),
            socket: Some(CLIENT_SOCKET_FILE_NAME.to_owned()),
            host: Some("node001".to_owned()),
        };
        let path = endpoint.write(&pilot_dir).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(ClientEndpoint::read(&pilot_dir).unwrap(), endpoint);
        ClientEndpoint::remove(&pilot_dir).unwrap();
        ClientEndpoint::remove(&pilot_dir).unwrap();
        assert!(matches!(
            ClientEndpoint::read(&pilot_dir),
            Err(EndpointError::NotRunning { .. })
        ));
    }

    #[test]
    fn garbage_endpoint_file_is_a_parse_error() {
        let temporary = tempfile::tempdir().unwrap();
        let pilot_dir = PilotDir::create(temporary.path().join("pilot")).unwrap();
        pilot_dir
            .write_secret_file(CLIENT_ENDPOINT_FILE_NAME, b"{\"addr\": 5}")
            .unwrap();
        assert!(matches!(
            ClientEndpoint::read(&pilot_dir),
            Err(EndpointError::Parse { .. })
        ));
    }

    #[test]
    fn only_a_client_on_the_roots_host_takes_the_local_socket() {
        let temporary = tempfile::tempdir().unwrap();
        let pilot_dir = PilotDir::create(temporary.path().join("pilot")).unwrap();
        let here = nix::unistd::gethostname()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut endpoint = ClientEndpoint {
            addr: "127.0.0.1:1".into(),
            protocol: crate::PROTOCOL_VERSION,
            protocols: vec![crate::PROTOCOL_VERSION],
            pid: 1,
            pilot_id: String::new(),
            socket: Some("client.sock".into()),
            host: Some(here),
        };
        assert_eq!(
            endpoint.local_socket(&pilot_dir),
            Some(pilot_dir.file_path("client.sock"))
        );
        endpoint.host = Some("another-host".into());
        assert_eq!(endpoint.local_socket(&pilot_dir), None);
        endpoint.host = None;
        assert_eq!(
            endpoint.local_socket(&pilot_dir),
            None,
            "an older root says no host"
        );
    }
}
