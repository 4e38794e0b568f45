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
use saker_wire::messages::{Link, POSITION_ROOT, PROTOCOL_VERSION, ROUTE_PEER};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::agent::{Agent, AgentArgs, AgentConfig, AgentExit, AgentFailure, AgentMsg};
use crate::link::{
    FrameBuf, LinkError, LinkId, LinkTx, ReceiverStopped, Router, serve_child_connection,
};
use crate::liveness::{Incoming, Liveness, link_frame, next_incoming, write_queue};
pub use crate::tree::{DialError, DialErrorKind, NodeError, ParentLinkError, ParentLost, Position};

/// The parent of agent `node` in a tree with fan-out `fanout`.
pub fn parent_of(node: u32, fanout: u32) -> Position {
    let parent = node / fanout.max(1);
    if parent == 0 {
        Position::Root
    } else {
        Position::Agent(parent - 1)
    }
}

/// The parent of agent `node` in a tree with fan-out `fanout`, or, with `base`, in the
/// subtree of agents `base..` that hangs from the root on its own (one per batch
/// allocation of an elastic pilot): agent `base` links to the root, and agent
/// `base + i` to agent `base + (i - 1) / fanout`, so a subtree never depends on
/// another allocation's nodes.
pub fn parent_in(node: u32, fanout: u32, base: Option<u32>) -> Position {
    match base {
        None => parent_of(node, fanout),
        Some(base) => match node.saturating_sub(base) {
            0 => Position::Root,
            local => Position::Agent(base + (local - 1) / fanout.max(1)),
        },
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
    /// The first node of this agent's own subtree under the root (an elastic pilot's
    /// allocation, see [`parent_in`]); `None`: the pilot's one tree.
    pub subtree_base: Option<u32>,
    /// After losing the root, join any later root of the pilot (a standby that took
    /// over), as an elastic allocation's agents do; `false`: only its own tree.
    pub any_root: bool,
    /// Address to accept children on (port 0: any free port).
    pub bind: SocketAddr,
    /// The address children should dial; needed when `bind` is a wildcard.
    pub advertise: Option<std::net::IpAddr>,
    /// How long to wait for the parent at start-up.
    pub parent_wait: Duration,
    /// Heartbeats on every link of this agent.
    pub liveness: Liveness,
    /// How long an agent that lost its parent keeps looking for a live ancestor of
    /// the same root before it gives up and exits.
    pub reattach_wait: Duration,
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

/// The close code of a link refused to a peer that is no agent.
const LINK_REFUSED: quinn::VarInt = quinn::VarInt::from_u32(2);

pub fn next_link_id() -> LinkId {
    LinkId(NEXT_LINK.fetch_add(1, Ordering::Relaxed))
}

fn transport<E: std::error::Error + Send + Sync + 'static>(error: E) -> NodeError {
    NodeError::Transport(Box::new(error))
}

/// The value a [`Position`] has in [`Link::Hello`].
pub fn position_code(position: Position) -> u32 {
    match position {
        Position::Root => POSITION_ROOT,
        Position::Agent(n) => n + 1,
    }
}

/// The ancestors of agent `node`, nearest first, ending with the root: where an agent
/// whose parent died looks for a new one. Always an ancestor, so the tree never loops.
pub fn ancestors(node: u32, fanout: u32, base: Option<u32>) -> Vec<Position> {
    let mut chain = Vec::new();
    let mut position = parent_in(node, fanout, base);
    loop {
        chain.push(position);
        match position {
            Position::Root => return chain,
            Position::Agent(n) => position = parent_in(n, fanout, base),
        }
    }
}

/// Runs one agent until it is shut down, or loses its parent and finds no live
/// ancestor within `reattach_wait`.
pub async fn run_agent(options: AgentOptions) -> Result<AgentExit, NodeError> {
    use saker_transport::{credentials, pilot_dir, quic};
    saker_transport::crypto::install_crypto_provider().map_err(transport)?;
    crate::actor_host::set_pilot_dir(&options.pilot_dir);
    let dir = pilot_dir::PilotDir::open(&options.pilot_dir).map_err(transport)?;
    let creds =
        credentials::Credentials::load(&dir, credentials::Role::Agent).map_err(transport)?;
    let timeouts = options.liveness.quic_timeouts();
    let endpoint = quic::bind_endpoint(
        options.bind,
        Some(quic::agent_server_config(&creds, &timeouts).map_err(transport)?),
        quic::client_config(&creds, &timeouts).map_err(transport)?,
    )
    .map_err(transport)?;
    let local = endpoint.local_addr().map_err(transport)?;
    let node = options.config.node;
    let own_file = address_file(&options.pilot_dir, Position::Agent(node));
    // Held for the life of the process: a resumed root sees this node's agent lives.
    // Another agent of the same node (a stale copy) is the root's to supersede.
    let _node_lock = match crate::node_lock::take(&options.pilot_dir, node) {
        Ok(Some(mut lock)) => {
            // In an allocation, the root's supervisor reads which allocation's agent
            // took the lock last (it may never see it held: an agent killed at once).
            let allocation = std::env::var("SLURM_JOB_ID").unwrap_or_default();
            if let Err(error) = lock.stamp(&allocation) {
                tracing::debug!(%error, "could not stamp this node's lock");
            }
            Some(lock)
        }
        Ok(None) => None,
        Err(error) => {
            tracing::debug!(%error, "could not take this node's lock");
            None
        }
    };

    let dialer = Dialer {
        endpoint: endpoint.clone(),
        pilot_dir: options.pilot_dir.clone(),
        node,
        fanout: options.fanout,
        base: options.subtree_base,
        any_root: options.any_root,
        liveness: options.liveness,
    };
    let first = dialer.attach_first(options.parent_wait).await?;
    let session = first.session;
    // Publish only once attached: a child must not hang under an agent that never
    // joins the tree.
    publish_address(&own_file, reachable(local, options.advertise)).map_err(|source| {
        NodeError::Publish {
            path: own_file.clone(),
            source,
        }
    })?;

    // One queue upward for the life of the process: frames queued while the parent is
    // away (results, children's reports) go out on the next link.
    let (up, queue) = crate::link::channel();
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let direct = crate::transfer::Direct {
        endpoint: endpoint.clone(),
        config: quic::data_client_config(&creds, &crate::transfer::DATA_TIMEOUTS)
            .map_err(transport)?,
        addr: reachable(local, options.advertise),
        relays: crate::transfer::Relays::default(),
    };
    let served = crate::transfer::Served {
        dirs: options.config.item_dirs(),
        relays: direct.relays.clone(),
        agent: None, // set once the agent runs (accept_children)
    };
    let (agent, agent_handle) = Actor::spawn(
        None,
        Agent,
        AgentArgs {
            config: options.config.clone(),
            parent: up.clone(),
            exit: Some(exit_tx),
            direct: Some(direct),
        },
    )
    .await
    .map_err(NodeError::Spawn)?;

    let router = Router::new();
    let up_end = up.clone();
    let children = tokio::spawn(accept_children(
        endpoint.clone(),
        router.clone(),
        up,
        agent.clone(),
        Link::Hello {
            position: position_code(Position::Agent(node)),
            session,
        },
        options.liveness,
        served,
    ));
    let parent = tokio::spawn(serve_parent(
        dialer,
        first,
        queue,
        agent.clone(),
        router.clone(),
        options.reattach_wait,
    ));

    let _ = agent_handle.await;
    let _ = std::fs::remove_file(&own_file);
    children.abort();
    // No exit reason: the actor panicked (its own failures come with a reason).
    let exit = exit_rx
        .await
        .unwrap_or(AgentExit::Failed(AgentFailure::NoExitReason));
    if matches!(exit, AgentExit::Shutdown) {
        // Children stop before their parent: their shutdown arrives through this
        // process, and their goodbyes leave through it. Without this wait a large
        // tree lost its lower levels' links at every shutdown.
        if tokio::time::timeout(options.liveness.timeout, router.wait_empty())
            .await
            .is_err()
        {
            tracing::debug!("children did not stop in time");
        }
    }
    // Ends the stream upward once everything before it is written.
    let _ = up_end.send(crate::liveness::end_of_stream());
    // The agent's last frames (its goodbye) are queued; let the link write them, and
    // wait for the parent to close the link once it has read them.
    let closed_by_parent = match tokio::time::timeout(Duration::from_secs(2), parent).await {
        Ok(Ok(closed)) => closed,
        _ => {
            tracing::debug!("parent link did not drain in time");
            false
        }
    };
    endpoint.close(0u32.into(), b"agent exiting");
    if !closed_by_parent {
        // Long enough for the driver to send the close. (Waiting for the endpoint to
        // go idle would wait out the draining period, 3 PTOs, ~90 ms on loopback.)
        tokio::time::timeout(Duration::from_millis(20), endpoint.wait_idle())
            .await
            .ok();
    }
    Ok(exit)
}

/// A link to a parent, handshake done.
struct ParentLink {
    connection: quinn::Connection,
    reader: FrameReader,
    writer: FrameWriter,
    position: Position,
    session: u64,
}

/// The link upward: writes the queue, reads frames for this node and its subtree, and
/// when the parent goes (closed, silent, invalid) tells the agent and reattaches to
/// the nearest live ancestor of the same root.
async fn serve_parent(
    dialer: Dialer,
    mut link: ParentLink,
    mut queue: UnboundedReceiver<FrameBuf>,
    agent: ActorRef<AgentMsg>,
    router: Arc<Router>,
    reattach_wait: Duration,
) -> bool {
    let interval = dialer.liveness.interval;
    let timeout = dialer.liveness.timeout;
    loop {
        tracing::debug!(parent = ?link.position, "linked to parent");
        let lost = tokio::select! {
            written = write_queue(&mut link.writer, &mut queue, interval) => match written {
                // Every sender is gone: the agent has stopped and its frames are
                // written. The parent closes the link once it has read them all.
                Ok(()) => {
                    return tokio::time::timeout(timeout, link.connection.closed())
                        .await
                        .is_ok();
                }
                Err(error) => ParentLinkError::Write(error),
            },
            lost = read_parent(&mut link.reader, dialer.node, &agent, &router, timeout) => lost,
            () = dialer.root_replaced(link.position, link.session) => ParentLinkError::RootReplaced,
        };
        let reason = crate::error_chain(&lost);
        link.connection.close(0u32.into(), reason.as_bytes());
        if let ParentLinkError::Superseded { node } = lost {
            // Looking for another parent would only supersede the newer agent in turn.
            tracing::error!(node, "another agent runs as this node; stopping");
            let _ = agent.send_message(AgentMsg::Superseded { node });
            return false;
        }
        // An agent told to stop has nothing to look for; a pilot that stops closes its
        // links: no cause for a warning either way.
        if agent.get_status() != ractor::ActorStatus::Running {
            tracing::info!(%reason, "the parent link closed as this agent stops");
            return false;
        }
        if reason.contains("pilot stopped") {
            tracing::info!(%reason, "the pilot stopped; looking for a live ancestor");
        } else {
            tracing::warn!(%reason, "lost the parent link; looking for a live ancestor");
        }
        if agent.send_message(AgentMsg::ParentLost).is_err() {
            return false;
        }
        // An elastic allocation's agents (a subtree of their own) outlive a root: a
        // resumed one, a new session of the same pilot (same certificates), adopts
        // them. Other agents stay within the tree they started in.
        let session = match (dialer.base, dialer.any_root) {
            (None, false) => Some(link.session),
            _ => None,
        };
        match dialer.attach_nearest(session, reattach_wait).await {
            Ok(new_link) => {
                link = new_link;
                tracing::info!(parent = ?link.position, "reattached");
                // The root has declared this whole subtree lost by now (or will):
                // every agent below registers again, as this one does.
                for child in router.links() {
                    let _ = child.send(link_frame(&Link::Rejoin));
                }
                if agent.send_message(AgentMsg::Reattached).is_err() {
                    return false;
                }
            }
            Err(search) => {
                let _ = agent.send_message(AgentMsg::ParentGone(ParentLost { lost, search }));
                return false;
            }
        }
    }
}

/// Frames from the parent: ours are decoded and handed to the agent, the rest are
/// forwarded raw to the child link that leads to their destination. Returns why the
/// link ended.
async fn read_parent(
    reader: &mut FrameReader,
    node: u32,
    agent: &ActorRef<AgentMsg>,
    router: &Router,
    timeout: Duration,
) -> ParentLinkError {
    loop {
        let frame = match next_incoming(reader, timeout).await {
            Ok(Some(Incoming::Frame(frame))) => frame,
            Ok(Some(Incoming::Link(Link::Rejoin))) => {
                for child in router.links() {
                    let _ = child.send(link_frame(&Link::Rejoin));
                }
                if agent.send_message(AgentMsg::Rejoin).is_err() {
                    return ParentLinkError::AgentStopped;
                }
                continue;
            }
            Ok(Some(Incoming::Link(Link::Superseded { node }))) => {
                return ParentLinkError::Superseded { node };
            }
            Ok(Some(Incoming::Link(other))) => {
                tracing::debug!(?other, "ignoring link message from parent");
                continue;
            }
            Ok(None) => return ParentLinkError::Closed,
            Err(error) => return ParentLinkError::Read(error),
        };
        if frame.route() == node || frame.route() == ROUTE_PEER {
            match saker_wire::frame::decode_to_agent(frame.payload()) {
                Ok(message) => {
                    let Some(message) = crate::actor_host::deliver(message) else {
                        continue;
                    };
                    if agent.send_message(AgentMsg::Down(message)).is_err() {
                        // Stopped, and waiting for its children: keep relaying to
                        // them until the process ends this link.
                        continue;
                    }
                }
                Err(error) => return ParentLinkError::InvalidFrame(error),
            }
            continue;
        }
        match router.route(frame.route()) {
            Some(child) => {
                let _ = child.send_raw(frame.raw());
            }
            None => tracing::debug!(route = frame.route(), "dropping frame for unknown node"),
        }
    }
}

/// Accepts child agents; their frames are forwarded upward unchanged.
async fn accept_children(
    endpoint: quinn::Endpoint,
    router: Arc<Router>,
    parent: LinkTx,
    agent: ActorRef<AgentMsg>,
    hello: Link,
    liveness: Liveness,
    served: crate::transfer::Served,
) {
    let served = crate::transfer::Served {
        agent: Some(agent.clone()),
        ..served
    };
    while let Some(incoming) = endpoint.accept().await {
        let router = router.clone();
        let parent = parent.clone();
        let agent = agent.clone();
        let hello = hello.clone();
        let served = served.clone();
        tokio::spawn(async move {
            let Ok(connection) = crate::link::accept_connection(incoming).await else {
                return;
            };
            // Another agent fetching this node's items, or a client putting and
            // getting objects: not a child.
            if saker_transport::quic::is_data_connection(&connection) {
                crate::transfer::serve(connection, served).await;
                return;
            }
            // The endpoint admits client certificates for data connections only.
            let presented = saker_transport::quic::peer_role(&connection);
            if presented != Some(saker_transport::Role::Agent) {
                let refused = saker_transport::roles::RoleRefused {
                    link: saker_transport::roles::LinkKind::Agent,
                    presented,
                };
                let remote = connection.remote_address();
                tracing::warn!(%remote, error = %refused, "refused a link");
                connection.close(LINK_REFUSED, refused.to_string().as_bytes());
                return;
            }
            let link = next_link_id();
            let reason =
                match serve_child(connection, link, &router, &parent, &hello, liveness).await {
                    Ok(()) => "child closed the link".to_string(),
                    Err(error) => crate::error_chain(&error),
                };
            let nodes = router.remove_link(link);
            if !nodes.is_empty() {
                let _ = agent.send_message(AgentMsg::ChildLost { nodes, reason });
            }
        });
    }
}

async fn serve_child(
    connection: quinn::Connection,
    link: LinkId,
    router: &Router,
    parent: &LinkTx,
    hello: &Link,
    liveness: Liveness,
) -> Result<(), LinkError> {
    serve_child_connection(
        connection,
        hello,
        liveness,
        |tx, node| {
            let superseded = router.add_link(link, tx, node);
            if !superseded.is_empty() {
                tracing::warn!(
                    ?node,
                    ?superseded,
                    "a newer agent linked as the same node; the older one is told to stop"
                );
            }
            Ok(())
        },
        |frame| {
            router.learn(frame.route(), link);
            std::future::ready(parent.send_raw(frame.raw()).map_err(|_| ReceiverStopped))
        },
    )
    .await
}

/// The protocol version this build speaks, for `saker --version` style reporting.
pub const fn protocol_version() -> u32 {
    PROTOCOL_VERSION
}

mod dialer;
#[cfg(test)]
mod tests;

use dialer::Dialer;
