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

use crate::liveness::{Incoming, Liveness, ReadError, link_frame, next_incoming, write_queue};

/// One encoded frame (header + 8-aligned payload), ready to write.
pub type FrameBuf = rkyv::util::AlignedVec;

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
/// refuses. `on_up` gets the link's sending half once it is ready. The connection is
/// closed with the reason, so the child learns at once and can look for another way in.
/// `Ok` when the child closed the link.
pub async fn serve_child_link<F>(
    incoming: quinn::Incoming,
    hello: &Link,
    liveness: Liveness,
    on_up: impl FnOnce(LinkTx) -> Result<(), ReceiverStopped>,
    mut on_frame: impl FnMut(Frame) -> F,
) -> Result<(), LinkError>
where
    F: Future<Output = Result<(), ReceiverStopped>>,
{
    let connection = incoming.await.map_err(LinkError::Handshake)?;
    let (send, recv) = connection.accept_bi().await.map_err(LinkError::NoStream)?;
    let mut reader = FrameReader::new(recv);
    reader.read_preamble().await.map_err(LinkError::Preamble)?;
    let mut writer = FrameWriter::new(send);
    writer.write_preamble().await.map_err(LinkError::Preamble)?;
    let (tx, _writer_task) = spawn_writer(writer, liveness.interval);
    tx.send(link_frame(hello))
        .map_err(LinkError::WriterStopped)?;
    on_up(tx)?;
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
#[derive(Debug, Default)]
pub struct Router {
    inner: Mutex<RouterInner>,
}

#[derive(Debug, Default)]
struct RouterInner {
    via: HashMap<u32, LinkId>,
    links: HashMap<LinkId, LinkTx>,
}

impl Router {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    pub fn add_link(&self, link: LinkId, tx: LinkTx) {
        self.lock().links.insert(link, tx);
    }

    /// Records that `node` is reached through `link`.
    pub fn learn(&self, node: u32, link: LinkId) {
        let mut inner = self.lock();
        if inner.via.get(&node) != Some(&link) {
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
            .cloned()
    }

    /// Every child link, e.g. to tell the whole subtree something.
    pub fn links(&self) -> Vec<LinkTx> {
        self.lock().links.values().cloned().collect()
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
        lost.sort_unstable();
        lost
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
        router.add_link(LinkId(1), a);
        router.add_link(LinkId(2), b);
        router.learn(5, LinkId(1));
        router.learn(9, LinkId(1));
        router.learn(7, LinkId(2));
        assert!(router.route(5).is_some());
        assert!(router.route(8).is_none());
        assert_eq!(router.remove_link(LinkId(1)), vec![5, 9]);
        assert!(router.route(5).is_none());
        assert!(router.route(7).is_some());
    }
}
