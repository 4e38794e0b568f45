//! Why a pilot could not start or go on. Each variant names what was being done and
//! keeps the cause in `source`, so the CLI can print the whole chain.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use saker_transport::ConfigError;
use saker_transport::credentials::CredentialError;
use saker_transport::crypto::CryptoError;
use saker_transport::pilot_dir::DirError;
use saker_transport::quic::EndpointError as QuicEndpointError;

use saker_client::EndpointError;

/// An error starting or driving a pilot (see [`crate::pilot::Pilot`]).
#[derive(Debug, thiserror::Error)]
pub enum PilotError {
    #[error("installing the rustls crypto provider")]
    Crypto(#[from] CryptoError),
    #[error("opening pilot directory {} to resume", path.display())]
    OpenDir {
        path: PathBuf,
        #[source]
        source: DirError,
    },
    #[error("preparing pilot directory {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: DirError,
    },
    #[error(
        "{} already holds a pilot's journal; resume it, or use a new directory",
        path.display()
    )]
    JournalExists { path: PathBuf },
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    /// A standby got the lock of a root that stopped on purpose: nothing to take over.
    #[error("the pilot's root stopped on purpose; a standby has nothing to take over")]
    Ended,
    #[error("reading the journal in {}", path.display())]
    ReadJournal {
        path: PathBuf,
        #[source]
        source: saker_journal::JournalError,
    },
    #[error("opening the journal")]
    OpenJournal(#[source] saker_journal::JournalError),
    #[error("generating the pilot's certificates")]
    GenerateCredentials(#[source] CredentialError),
    #[error("loading the root's credentials")]
    LoadCredentials(#[source] CredentialError),
    #[error("renewing the credentials of the pilot directory to resume")]
    RenewCredentials(#[source] CredentialError),
    #[error("starting the root actor (restoring the journal)")]
    StartRoot(#[source] ractor::SpawnErr),
    /// The address agents on other nodes dial.
    #[error(transparent)]
    Address(#[from] saker_node::address::AddressError),
    #[error("configuring TLS for the pilot's sockets")]
    TlsConfig(#[from] ConfigError),
    #[error("binding the agents' QUIC endpoint")]
    Endpoint(#[from] QuicEndpointError),
    #[error("reading the local address of the agents' endpoint")]
    LocalAddress(#[source] io::Error),
    #[error("publishing the root's address in {}", path.display())]
    PublishAddress {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("binding the client socket")]
    ClientSocket(#[source] io::Error),
    #[error("writing the client endpoint file")]
    ClientEndpoint(#[from] EndpointError),
    #[error("cannot list this standby root in the pilot directory")]
    ListStandby(#[source] io::Error),
    #[error(transparent)]
    Standbys(#[from] crate::standbys::StandbyError),
    #[error("starting agent processes")]
    StartAgents(#[source] io::Error),
    #[error("starting the agents' srun step")]
    StartSrun(#[source] io::Error),
    #[error("the root actor has stopped")]
    RootStopped,
    #[error(
        "no time to run anything: the pilot must end in {left:.0?}, and the walltime margin \
         is {margin:?}"
    )]
    NoTime { left: Duration, margin: Duration },
}
