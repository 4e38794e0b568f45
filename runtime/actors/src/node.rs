//! One agent process: finds its parent through the pilot directory, links to it over
//! QUIC, serves its own children, relays frames for its subtree and runs the [`Agent`]
//! actor for its own node.
//!
//! Tree shape: the root sits at position 0 and agent `n` at position `n + 1` of a
//! k-ary heap, so agent `n`'s parent is position `n / k`. Each process learns its
//! parent from that rule alone; addresses are exchanged through small files in the
//! pilot directory (written atomically), which works the same on one machine and on
//! a shared filesystem across nodes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use saker_transport::stream::{FrameReader, FrameWriter};
use saker_wire::messages::PROTOCOL_VERSION;

use crate::agent::{Agent, AgentArgs, AgentConfig, AgentExit, AgentMsg};
use crate::link::{LinkId, LinkTx, Router, spawn_writer};

/// Where a process sits in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Root,
    Agent(u32),
}

/// The parent of agent `node` in a tree with fan-out `fanout`.
pub fn parent_of(node: u32, fanout: u32) -> Position {
    let parent = node / fanout.max(1);
    if parent == 0 {
        Position::Root
    } else {
        Position::Agent(parent - 1)
    }
}

/// The file in which `position` publishes the address it accepts children on.
pub fn address_file(pilot_dir: &Path, position: Position) -> PathBuf {
    match position {
        Position::Root => pilot_dir.join("addr").join("root"),
        Position::Agent(n) => pilot_dir.join("addr").join(format!("agent-{n}")),
    }
}

/// Publishes an address atomically (temp file + rename), so readers never see half.
pub fn publish_address(file: &Path, address: SocketAddr) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(
        ".{}.tmp",
        file.file_name().and_then(|n| n.to_str()).unwrap_or("addr")
    ));
    std::fs::write(&temp, address.to_string())?;
    std::fs::rename(&temp, file)
}

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("parent address file {path} did not appear within {waited:?}")]
    ParentNotFound { path: PathBuf, waited: Duration },
    #[error("parent address file {path} is not a socket address")]
    BadAddress {
        path: PathBuf,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("could not publish this agent's address in {path}")]
    Publish {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("transport setup failed")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("link to the parent failed")]
    ParentLink(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the agent actor could not start")]
    Spawn(#[source] ractor::SpawnErr),
}

/// Waits for a published address. Bootstrap only: polls the shared filesystem, which
/// is what works across nodes without any other service.
pub async fn wait_for_address(file: &Path, timeout: Duration) -> Result<SocketAddr, NodeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(5);
    loop {
        if let Ok(text) = tokio::fs::read_to_string(file).await {
            return text.trim().parse().map_err(|source| NodeError::BadAddress {
                path: file.to_path_buf(),
                source,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(NodeError::ParentNotFound {
                path: file.to_path_buf(),
                waited: timeout,
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub config: AgentConfig,
    pub pilot_dir: PathBuf,
    pub fanout: u32,
    /// Address to accept children on (port 0: any free port).
    pub bind: SocketAddr,
    /// The address children should dial; needed when `bind` is a wildcard.
    pub advertise: Option<std::net::IpAddr>,
    pub parent_wait: Duration,
}

/// The address to publish for an endpoint bound to `local`: the advertised IP when the
/// socket is bound to a wildcard (other nodes cannot dial 0.0.0.0), else `local`.
pub fn reachable(local: SocketAddr, advertise: Option<std::net::IpAddr>) -> SocketAddr {
    match advertise {
        Some(ip) if local.ip().is_unspecified() => SocketAddr::new(ip, local.port()),
        _ => local,
    }
}

static NEXT_LINK: AtomicU64 = AtomicU64::new(1);

pub fn next_link_id() -> LinkId {
    LinkId(NEXT_LINK.fetch_add(1, Ordering::Relaxed))
}

fn transport<E: std::error::Error + Send + Sync + 'static>(error: E) -> NodeError {
    NodeError::Transport(Box::new(error))
}

fn parent_link<E: std::error::Error + Send + Sync + 'static>(error: E) -> NodeError {
    NodeError::ParentLink(Box::new(error))
}

/// Runs one agent until it is shut down or loses its parent.
pub async fn run_agent(options: AgentOptions) -> Result<AgentExit, NodeError> {
    use saker_transport::{credentials, pilot_dir, quic};
    saker_transport::crypto::install_crypto_provider().map_err(transport)?;
    let dir = pilot_dir::PilotDir::open(&options.pilot_dir).map_err(transport)?;
    let creds =
        credentials::Credentials::load(&dir, credentials::Role::Agent).map_err(transport)?;
    let timeouts = quic::LinkTimeouts::default();
    let endpoint = quic::bind_endpoint(
        options.bind,
        Some(quic::server_config(&creds, &timeouts).map_err(transport)?),
        quic::client_config(&creds, &timeouts).map_err(transport)?,
    )
    .map_err(transport)?;
    let local = endpoint.local_addr().map_err(transport)?;
    let node = options.config.node;
    let own_file = address_file(&options.pilot_dir, Position::Agent(node));
    publish_address(&own_file, reachable(local, options.advertise)).map_err(|source| {
        NodeError::Publish {
            path: own_file.clone(),
            source,
        }
    })?;

    let parent_file = address_file(&options.pilot_dir, parent_of(node, options.fanout));
    let connection = connect_parent(&endpoint, &parent_file, options.parent_wait).await?;
    let (send, recv) = connection.open_bi().await.map_err(parent_link)?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await.map_err(parent_link)?;
    let mut reader = FrameReader::new(recv);
    reader.read_preamble().await.map_err(parent_link)?;
    let (parent_tx, _writer_task) = spawn_writer(writer);

    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let (agent, agent_handle) = Actor::spawn(
        None,
        Agent,
        AgentArgs {
            config: options.config.clone(),
            parent: parent_tx.clone(),
            exit: Some(exit_tx),
        },
    )
    .await
    .map_err(NodeError::Spawn)?;

    let router = Router::new();
    tokio::spawn(read_parent(reader, node, agent.clone(), router.clone()));
    tokio::spawn(accept_children(
        endpoint.clone(),
        router,
        parent_tx,
        agent.clone(),
    ));

    let _ = agent_handle.await;
    let _ = std::fs::remove_file(&own_file);
    // Give the writer a moment to put the goodbye on the wire before the endpoint goes.
    endpoint.close(0u32.into(), b"agent exiting");
    tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle())
        .await
        .ok();
    // No exit reason means the actor failed (e.g. too many executor restarts).
    Ok(exit_rx
        .await
        .unwrap_or_else(|_| AgentExit::Failed("agent actor failed".to_string())))
}

/// Connects to the parent named in `file`, re-reading the file after a failed attempt:
/// the address there may be stale (a parent from before a restart) until the new
/// parent publishes its own.
async fn connect_parent(
    endpoint: &quinn::Endpoint,
    file: &Path,
    wait: Duration,
) -> Result<quinn::Connection, NodeError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let address = wait_for_address(file, left).await?;
        match saker_transport::quic::connect(endpoint, address).await {
            Ok(connection) => return Ok(connection),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(%error, %address, "parent not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => return Err(parent_link(error)),
        }
    }
}

/// Frames from the parent: ours are decoded and handed to the agent, the rest are
/// forwarded raw to the child link that leads to their destination.
async fn read_parent(
    mut reader: FrameReader,
    node: u32,
    agent: ActorRef<AgentMsg>,
    router: Arc<Router>,
) {
    let reason = loop {
        match reader.read_frame().await {
            Ok(Some(frame))
                if frame.route() == node || frame.route() == saker_wire::messages::ROUTE_PEER =>
            {
                match saker_wire::frame::decode_to_agent(frame.payload()) {
                    Ok(message) => {
                        if agent.send_message(AgentMsg::Down(message)).is_err() {
                            return;
                        }
                    }
                    Err(error) => break format!("invalid frame from parent: {error}"),
                }
            }
            Ok(Some(frame)) => match router.route(frame.route()) {
                Some(child) => {
                    let _ = child.send_raw(frame.raw());
                }
                None => tracing::debug!(route = frame.route(), "dropping frame for unknown node"),
            },
            Ok(None) => break "parent closed the link".to_string(),
            Err(error) => break format!("parent link failed: {error}"),
        }
    };
    let _ = agent.send_message(AgentMsg::ParentClosed { reason });
}

/// Accepts child agents; their frames are forwarded upward unchanged.
async fn accept_children(
    endpoint: quinn::Endpoint,
    router: Arc<Router>,
    parent: LinkTx,
    agent: ActorRef<AgentMsg>,
) {
    while let Some(incoming) = endpoint.accept().await {
        let router = router.clone();
        let parent = parent.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            let link = next_link_id();
            let reason = match serve_child(incoming, link, &router, &parent).await {
                Ok(()) => "child closed the link".to_string(),
                Err(error) => error,
            };
            let nodes = router.remove_link(link);
            if !nodes.is_empty() {
                let _ = agent.send_message(AgentMsg::ChildLost { nodes, reason });
            }
        });
    }
}

async fn serve_child(
    incoming: quinn::Incoming,
    link: LinkId,
    router: &Router,
    parent: &LinkTx,
) -> Result<(), String> {
    let connection = incoming
        .await
        .map_err(|e| format!("child handshake failed: {e}"))?;
    let (send, recv) = connection
        .accept_bi()
        .await
        .map_err(|e| format!("child opened no stream: {e}"))?;
    let mut reader = FrameReader::new(recv);
    reader.read_preamble().await.map_err(|e| e.to_string())?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await.map_err(|e| e.to_string())?;
    let (tx, _writer_task) = spawn_writer(writer);
    router.add_link(link, tx);
    loop {
        match reader.read_frame().await {
            Ok(Some(frame)) => {
                router.learn(frame.route(), link);
                if parent.send_raw(frame.raw()).is_err() {
                    return Err("parent link closed".to_string());
                }
            }
            Ok(None) => return Ok(()),
            Err(error) => return Err(format!("child link failed: {error}")),
        }
    }
}

/// The protocol version this build speaks, for `saker --version` style reporting.
pub const fn protocol_version() -> u32 {
    PROTOCOL_VERSION
}
