//! Links: one long-lived QUIC bi-directional stream per parent–child pair.
//!
//! Outgoing frames go through a [`LinkTx`] (an unbounded channel) to a writer task
//! that drains everything queued and writes it with one call, so a burst of frames
//! becomes one QUIC write. Incoming frames are read by a reader task owned by the role
//! (agent or root) because what to do with a frame — decode it, or forward its raw
//! bytes — depends on the role.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use saker_transport::stream::{FrameWriter, StreamError};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use saker_transport::stream::{Frame, FrameReader};
use saker_wire::messages::Link;

pub use crate::liveness::FrameBuf;
use crate::liveness::{Incoming, Liveness, ReadError, link_frame, next_incoming, write_queue};

/// Identifies a link within one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

/// The sending half of a link. Cheap to clone.
#[derive(Debug, Clone)]
pub struct LinkTx {
    sender: mpsc::UnboundedSender<FrameBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("link closed")]
pub struct LinkClosed;

impl LinkTx {
    pub fn send(&self, frame: FrameBuf) -> Result<(), LinkClosed> {
        self.sender.send(frame).map_err(|_| LinkClosed)
    }

    /// Copies an already-framed byte run (e.g. a relayed frame) onto the link.
    pub fn send_raw(&self, raw: &[u8]) -> Result<(), LinkClosed> {
        let mut frame = FrameBuf::with_capacity(raw.len());
        frame.extend_from_slice(raw);
        self.send(frame)
    }

    /// A sender that does not keep the link's queue open: for holders that live
    /// longer than the agent (process-wide statics).
    pub fn downgrade(&self) -> WeakLinkTx {
        WeakLinkTx {
            sender: self.sender.downgrade(),
        }
    }
}

/// A [`LinkTx`] that does not keep the queue open; sends fail once every
/// [`LinkTx`] is gone.
#[derive(Debug, Clone)]
pub struct WeakLinkTx {
    sender: mpsc::WeakUnboundedSender<FrameBuf>,
}

impl WeakLinkTx {
    pub fn send(&self, frame: FrameBuf) -> Result<(), LinkClosed> {
        let sender = self.sender.upgrade().ok_or(LinkClosed)?;
        sender.send(frame).map_err(|_| LinkClosed)
    }
}

/// Why a link served by [`serve_child_link`] ended, other than by the child closing it.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the link's handshake failed")]
    Handshake(#[source] quinn::ConnectionError),
    #[error("the child opened no stream")]
    NoStream(#[source] quinn::ConnectionError),
    #[error("the link's preamble failed")]
    Preamble(#[source] StreamError),
    #[error("the link's writer has stopped")]
    WriterStopped(#[source] LinkClosed),
    #[error("the link failed")]
    Read(#[source] ReadError),
    #[error(transparent)]
    ReceiverStopped(#[from] ReceiverStopped),
}

/// Returned by the receiver of a link's frames once it takes no more: the link ends.
#[derive(Debug, thiserror::Error)]
#[error("the receiver of the link's frames has stopped")]
pub struct ReceiverStopped;

/// A link whose frames land in a channel; used by tests and in-process wiring.
pub fn channel() -> (LinkTx, mpsc::UnboundedReceiver<FrameBuf>) {
    let (sender, receiver) = mpsc::unbounded_channel();
    (LinkTx { sender }, receiver)
}

/// Starts the writer task of a link and returns its sending half. The writer sends a
/// heartbeat whenever it had nothing to write for `heartbeat` (see [`crate::liveness`]).
pub fn spawn_writer(
    mut writer: FrameWriter,
    heartbeat: Duration,
) -> (LinkTx, JoinHandle<Result<(), StreamError>>) {
    let (tx, mut rx) = channel();
    let task = tokio::spawn(async move { write_queue(&mut writer, &mut rx, heartbeat).await });
    (tx, task)
}

/// Serves one link a child opened to us (an agent's child, or an agent at the root):
/// the handshake, our [`Link::Hello`] as the first frame, then every frame the child
/// sends goes to `on_frame` until the link ends, fails, goes silent or `on_frame`
/// refuses. `on_up` gets the link's sending half once it is ready, and the node the
/// child said it is. The connection is
/// closed with the reason, so the child learns at once and can look for another way in.
/// `Ok` when the child closed the link.
pub async fn serve_child_link<F>(
    incoming: quinn::Incoming,
    hello: &Link,
    liveness: Liveness,
    on_up: impl FnOnce(LinkTx, Option<u32>) -> Result<(), ReceiverStopped>,
    on_frame: impl FnMut(Frame) -> F,
) -> Result<(), LinkError>
where
    F: Future<Output = Result<(), ReceiverStopped>>,
{
    let connection = accept_connection(incoming).await?;
    serve_child_connection(connection, hello, liveness, on_up, on_frame).await
}

/// Completes the handshake of a connection a peer opened to us. A failure is logged
/// with the address it came from: most often a certificate refused (not of this
/// pilot, or not an agent's), which the operator should see.
pub async fn accept_connection(incoming: quinn::Incoming) -> Result<quinn::Connection, LinkError> {
    let remote = incoming.remote_address();
    match incoming.await {
        Ok(connection) => Ok(connection),
        Err(error) => {
            if let quinn::ConnectionError::TransportError(refusal) = &error {
                tracing::warn!(%remote, reason = %refusal, "refused a link");
            } else {
                tracing::debug!(%remote, %error, "a link ended during its handshake");
            }
            Err(LinkError::Handshake(error))
        }
    }
}

/// [`serve_child_link`] on a connection whose handshake is done.
pub async fn serve_child_connection<F>(
    connection: quinn::Connection,
    hello: &Link,
    liveness: Liveness,
    on_up: impl FnOnce(LinkTx, Option<u32>) -> Result<(), ReceiverStopped>,
    mut on_frame: impl FnMut(Frame) -> F,
) -> Result<(), LinkError>
where
    F: Future<Output = Result<(), ReceiverStopped>>,
{
    let (send, recv) = connection.accept_bi().await.map_err(LinkError::NoStream)?;
    let mut reader = FrameReader::new(recv);
    reader.read_preamble().await.map_err(LinkError::Preamble)?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await.map_err(LinkError::Preamble)?;
    let (tx, _writer_task) = spawn_writer(writer, liveness.interval);
    tx.send(link_frame(hello))
        .map_err(LinkError::WriterStopped)?;
    // The child's first frame names the node it is (`Link::Child`).
    let (node, early) = match next_incoming(&mut reader, liveness.timeout).await {
        Ok(Some(Incoming::Link(Link::Child { node }))) => (Some(node), None),
        Ok(Some(Incoming::Link(_))) => (None, None),
        Ok(Some(Incoming::Frame(frame))) => (None, Some(frame)),
        Ok(None) => return Ok(()),
        Err(error) => return Err(LinkError::Read(error)),
    };
    on_up(tx, node)?;
    if let Some(frame) = early {
        on_frame(frame).await?;
    }
    let result = loop {
        match next_incoming(&mut reader, liveness.timeout).await {
            Ok(Some(Incoming::Frame(frame))) => {
                // Awaited before the next read: a receiver that is behind holds this
                // link's reads back, and QUIC's flow control then the sender.
                if let Err(stopped) = on_frame(frame).await {
                    break Err(stopped.into());
                }
            }
            Ok(Some(Incoming::Link(_))) => {}
            Ok(None) => break Ok(()),
            Err(error) => break Err(LinkError::Read(error)),
        }
    };
    let reason = match &result {
        Ok(()) => "closed".to_string(),
        Err(error) => crate::error_chain(error),
    };
    connection.close(0u32.into(), reason.as_bytes());
    result
}

/// Which child link leads to which node, learned from the route field (origin node) of
/// upward frames, so no payload needs decoding to build it.
///
/// One node has one live agent: when a child links as a node another child link
/// already is, the older link is told [`Link::Superseded`] (its agent stops) and
/// frames for the node go to the newer one. A node reached through two links (an
/// agent that reattached elsewhere in this subtree before its old path failed) is
/// routed through the newer link.
#[derive(Debug, Default)]
pub struct Router {
    inner: Mutex<RouterInner>,
    /// Woken whenever a link is removed, for [`Router::wait_empty`].
    removed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct RouterInner {
    via: HashMap<u32, LinkId>,
    links: HashMap<LinkId, ChildLink>,
}

#[derive(Debug)]
struct ChildLink {
    tx: LinkTx,
    /// The node at the other end of the link (the one that dialed), when it said.
    node: Option<u32>,
}

impl Router {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A child link came up; `node` is the node that dialed it. Returns the older
    /// links told they are superseded.
    pub fn add_link(&self, link: LinkId, tx: LinkTx, node: Option<u32>) -> Vec<LinkId> {
        let mut inner = self.lock();
        let mut superseded = Vec::new();
        if let Some(node) = node {
            for (old, child) in &inner.links {
                if child.node == Some(node) {
                    let _ = child.tx.send(link_frame(&Link::Superseded { node }));
                    superseded.push(*old);
                }
            }
            inner.via.insert(node, link);
        }
        inner.links.insert(link, ChildLink { tx, node });
        superseded.sort_unstable();
        superseded
    }

    /// Records that `node` is reached through `link`, unless a newer live link
    /// already leads there.
    pub fn learn(&self, node: u32, link: LinkId) {
        let mut inner = self.lock();
        let keep = match inner.via.get(&node) {
            Some(current) if *current == link => true,
            Some(current) => *current > link && inner.links.contains_key(current),
            None => false,
        };
        if !keep {
            inner.via.insert(node, link);
        }
    }

    /// The link towards `node`, if known.
    pub fn route(&self, node: u32) -> Option<LinkTx> {
        let inner = self.lock();
        inner
            .via
            .get(&node)
            .and_then(|l| inner.links.get(l))
            .map(|child| child.tx.clone())
    }

    /// Every child link, e.g. to tell the whole subtree something.
    pub fn links(&self) -> Vec<LinkTx> {
        self.lock()
            .links
            .values()
            .map(|child| child.tx.clone())
            .collect()
    }

    /// Forgets a closed link; returns the nodes that were reached through it, sorted.
    pub fn remove_link(&self, link: LinkId) -> Vec<u32> {
        let mut inner = self.lock();
        inner.links.remove(&link);
        let mut lost: Vec<u32> = inner
            .via
            .iter()
            .filter(|(_, l)| **l == link)
            .map(|(n, _)| *n)
            .collect();
        for node in &lost {
            inner.via.remove(node);
        }
        drop(inner);
        self.removed.notify_waiters();
        lost.sort_unstable();
        lost
    }

    /// Returns once no child link is left.
    pub async fn wait_empty(&self) {
        loop {
            let removed = self.removed.notified();
            tokio::pin!(removed);
            // Registered before the check, so a removal in between is not missed.
            removed.as_mut().enable();
            if self.lock().links.is_empty() {
                return;
            }
            removed.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RouterInner> {
        // A panic while holding this lock cannot leave the maps half-updated in a way
        // that matters (each operation is a single insert/remove), so recover the guard.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_learns_routes_and_reports_lost_subtrees() {
        let router = Router::new();
        let (a, _ra) = channel();
        let (b, _rb) = channel();
        router.add_link(LinkId(1), a, Some(5));
        router.add_link(LinkId(2), b, Some(7));
        router.learn(5, LinkId(1));
        router.learn(9, LinkId(1));
        router.learn(7, LinkId(2));
        assert!(router.route(5).is_some());
        assert!(router.route(8).is_none());
        assert_eq!(router.remove_link(LinkId(1)), vec![5, 9]);
        assert!(router.route(5).is_none());
        assert!(router.route(7).is_some());
    }

    fn next_link_message(receiver: &mut mpsc::UnboundedReceiver<FrameBuf>) -> Option<Link> {
        let frame = receiver.try_recv().ok()?;
        let len = u32::from_le_bytes(frame[0..4].try_into().ok()?) as usize;
        saker_wire::frame::decode::<Link>(&frame[8..8 + len]).ok()
    }

    /// Two live agents as one node (one started twice by hand): the older is told it
    /// is superseded, and frames for the node reach the newer only, even while the
    /// older still sends (a route that flipped to it would strand work there).
    #[test]
    fn a_second_agent_as_the_same_node_supersedes_the_first() {
        let router = Router::new();
        let (old, mut old_rx) = channel();
        let (new, mut new_rx) = channel();
        assert!(router.add_link(LinkId(1), old, Some(5)).is_empty());
        router.learn(5, LinkId(1));
        assert_eq!(router.add_link(LinkId(2), new, Some(5)), vec![LinkId(1)]);
        assert_eq!(
            next_link_message(&mut old_rx),
            Some(Link::Superseded { node: 5 })
        );
        router.learn(5, LinkId(1));
        router.route(5).unwrap().send_raw(b"x").unwrap();
        assert!(
            old_rx.try_recv().is_err(),
            "nothing more for the stale agent"
        );
        assert!(new_rx.try_recv().is_ok());
        // The stale link closing loses nothing: the node lives behind the newer one.
        assert!(router.remove_link(LinkId(1)).is_empty());
        assert!(router.route(5).is_some());
    }

    /// A node that reattached deeper in this subtree is routed through the newer
    /// link, and the older link's frames do not take the route back.
    #[test]
    fn a_node_behind_two_links_is_routed_through_the_newer() {
        let router = Router::new();
        let (a, _ra) = channel();
        let (b, mut rb) = channel();
        router.add_link(LinkId(3), a, Some(1));
        router.add_link(LinkId(4), b, Some(2));
        router.learn(9, LinkId(3));
        router.learn(9, LinkId(4));
        router.learn(9, LinkId(3));
        router.route(9).unwrap().send_raw(b"x").unwrap();
        assert!(rb.try_recv().is_ok());
        // Once the newer link is gone, the older one may carry the route again.
        assert_eq!(router.remove_link(LinkId(4)), vec![2, 9]);
        router.learn(9, LinkId(3));
        assert!(router.route(9).is_some());
    }
}
