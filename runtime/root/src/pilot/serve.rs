//! The root's listeners: the client socket's server (TCP with TLS, and the local
//! socket) and the QUIC endpoint's agent links, each handing what it reads to the
//! root's mailbox.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ractor::ActorRef;
use saker_actors::link::serve_child_link;
use saker_actors::liveness::Liveness;
use saker_actors::node::{next_link_id, reachable};
use saker_transport::credentials::Credentials;
use saker_transport::pilot_dir::PilotDir;
use saker_wire::messages::Link;
use tokio::task::JoinHandle;

use super::Result;
use crate::actor::{FRAME_BUDGET, FrameBudget, RootMsg};
use crate::client::{self, ClientRequest};
use crate::error::PilotError;
use saker_client::ClientEndpoint;

/// The client socket's server.
#[derive(Debug)]
pub(super) struct ClientServer {
    pub(super) server: JoinHandle<()>,
    /// Dropped once the root has stopped: tells the server that the root is gone.
    pub(super) root_gone: Option<tokio::sync::watch::Sender<()>>,
}

/// The root's mailbox, as the client server hands requests to it.
#[derive(Debug, Clone)]
struct RootMailbox {
    root: ActorRef<RootMsg>,
    /// Its sender is dropped once the root has stopped.
    gone: tokio::sync::watch::Receiver<()>,
}

impl client::ToRoot for RootMailbox {
    fn send(&self, request: ClientRequest) -> bool {
        self.root.send_message(RootMsg::Client(request)).is_ok()
    }

    async fn closed(&self) {
        let mut gone = self.gone.clone();
        while gone.changed().await.is_ok() {}
    }
}

pub(super) async fn start_client_server(
    dir: &PilotDir,
    credentials: &Credentials,
    pilot_id: &str,
    bind: IpAddr,
    advertise: Option<IpAddr>,
    root: ActorRef<RootMsg>,
) -> Result<ClientServer> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(bind, 0))
        .await
        .map_err(PilotError::ClientSocket)?;
    let address = reachable(
        listener.local_addr().map_err(PilotError::ClientSocket)?,
        advertise,
    );
    let tls =
        tokio_rustls::TlsAcceptor::from(saker_transport::tls::tls_server_config(credentials)?);
    let (local, socket) = match bind_local_socket(dir) {
        Some((listener, name)) => (Some(listener), Some(name)),
        None => (None, None),
    };
    let (root_gone, gone) = tokio::sync::watch::channel(());
    let mailbox = RootMailbox { root, gone };
    let config = Arc::new(client::ServerConfig::new(pilot_id));
    let listeners = client::Listeners {
        tcp: listener,
        tls,
        local,
    };
    let server = tokio::spawn(client::serve(listeners, config, mailbox));
    let host = nix::unistd::gethostname()
        .ok()
        .map(|host| host.to_string_lossy().into_owned());
    ClientEndpoint {
        addr: address.to_string(),
        protocol: saker_client::PROTOCOL_VERSION,
        protocols: saker_client::PROTOCOLS.to_vec(),
        pid: std::process::id(),
        pilot_id: pilot_id.to_string(),
        socket,
        host,
    }
    .write(dir)?;
    Ok(ClientServer {
        server,
        root_gone: Some(root_gone),
    })
}

/// Listens on the pilot directory's local client socket (see `client::serve`), if
/// it can: a path too long for a socket address, or a file system that takes no
/// sockets, leaves clients the TCP socket alone.
fn bind_local_socket(dir: &PilotDir) -> Option<(tokio::net::UnixListener, String)> {
    use std::os::unix::fs::PermissionsExt;
    let name = saker_client::CLIENT_SOCKET_FILE_NAME;
    let path = dir.file_path(name);
    // A root that crashed left its socket behind; nothing listens on it any more.
    let _ = std::fs::remove_file(&path);
    let listener = match tokio::net::UnixListener::bind(&path) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::info!(path = %path.display(), %error, "no local client socket; clients use TCP");
            return None;
        }
    };
    // The directory admits only its owner already; the socket says so too.
    if let Err(error) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        tracing::warn!(path = %path.display(), %error, "cannot restrict the local client socket");
    }
    Some((listener, name.to_owned()))
}

/// Accepts agent links: each becomes a writer task plus a reader loop that hands
/// frames to the root.
pub(super) async fn accept_agents(
    endpoint: quinn::Endpoint,
    root: ActorRef<RootMsg>,
    hello: Link,
    liveness: Liveness,
) {
    let budget = FrameBudget::new(FRAME_BUDGET);
    while let Some(incoming) = endpoint.accept().await {
        let root = root.clone();
        let hello = hello.clone();
        let budget = budget.clone();
        tokio::spawn(async move {
            let link = next_link_id();
            let served = serve_agent_link(incoming, link, &root, &budget, &hello, liveness);
            let reason = match served.await {
                Ok(()) => "agent closed the link".to_string(),
                Err(error) => saker_actors::error_chain(&error),
            };
            let _ = root.send_message(RootMsg::LinkDown { link, reason });
        });
    }
}

async fn serve_agent_link(
    incoming: quinn::Incoming,
    link: saker_actors::link::LinkId,
    root: &ActorRef<RootMsg>,
    budget: &FrameBudget,
    hello: &Link,
    liveness: Liveness,
) -> std::result::Result<(), saker_actors::link::LinkError> {
    use saker_actors::link::ReceiverStopped;
    let stopped = |_| ReceiverStopped;
    serve_child_link(
        incoming,
        hello,
        liveness,
        |tx, node| {
            root.send_message(RootMsg::LinkUp { link, tx, node })
                .map_err(stopped)
        },
        |frame| async move {
            let permit = budget.reserve().await.ok_or(ReceiverStopped)?;
            root.send_message(RootMsg::AgentFrame {
                link,
                frame,
                permit,
            })
            .map_err(stopped)
        },
    )
    .await
}
