//! Liveness of a link: heartbeats, silence timeouts, and the hop-local handshake.
//!
//! QUIC keep-alives prove that the peer's *kernel and QUIC stack* answer; the
//! heartbeats here are written by the link's own writer task, so they prove that the
//! peer process still runs its event loop, and they work the same over any stream.
//! Each end sends [`Link::Heartbeat`] when it has written nothing for
//! [`Liveness::interval`]; a reader that hears nothing at all for
//! [`Liveness::timeout`] declares the link dead and closes it, and its owner treats
//! the subtree behind it as lost.

use std::time::Duration;

use saker_transport::quic::LinkTimeouts;
use saker_transport::stream::{Frame, FrameReader, FrameWriter, StreamError};
use saker_wire::messages::{Link, ROUTE_LINK};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::link::FrameBuf;

/// Heartbeat settings of every link in one pilot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// A link with nothing to send sends a heartbeat this often (default 1 s).
    pub interval: Duration,
    /// A link that hears nothing for this long is dead (default 5 s). This bounds how
    /// long a dead or hung agent holds its work before it is replayed elsewhere.
    pub timeout: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LivenessError {
    #[error("the heartbeat interval must be above zero")]
    ZeroInterval,
    #[error(
        "the heartbeat timeout ({timeout:?}) must be at least twice the interval ({interval:?}), or one late heartbeat kills a healthy link"
    )]
    TimeoutTooShort {
        interval: Duration,
        timeout: Duration,
    },
}

impl Liveness {
    pub fn new(interval: Duration, timeout: Duration) -> Result<Self, LivenessError> {
        if interval.is_zero() {
            return Err(LivenessError::ZeroInterval);
        }
        if timeout < interval * 2 {
            return Err(LivenessError::TimeoutTooShort { interval, timeout });
        }
        Ok(Liveness { interval, timeout })
    }

    /// QUIC settings under these heartbeats: keep-alives at the same interval, and an
    /// idle timeout well behind the heartbeat timeout, as a backstop only.
    pub fn quic_timeouts(&self) -> LinkTimeouts {
        LinkTimeouts {
            keep_alive_interval: self.interval,
            max_idle_timeout: self.timeout * 2,
        }
    }
}

/// Encodes a hop-local message as a frame.
pub fn link_frame(message: &Link) -> FrameBuf {
    // Invariant: these messages are a few bytes, far below any frame limit.
    saker_wire::frame::encode(ROUTE_LINK, message).expect("link messages always encode")
}

/// What a link reader gets besides heartbeats.
#[derive(Debug)]
pub enum Incoming {
    /// A frame to decode or relay.
    Frame(Frame),
    /// A hop-local message other than a heartbeat.
    Link(Link),
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("heard nothing for {0:?} (no heartbeat)")]
    Silent(Duration),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error("invalid link message: {0}")]
    BadLink(#[source] saker_wire::WireError),
}

/// The next frame that is not a heartbeat; `Ok(None)` when the peer closed the stream.
pub async fn next_incoming(
    reader: &mut FrameReader,
    timeout: Duration,
) -> Result<Option<Incoming>, ReadError> {
    loop {
        let frame = match tokio::time::timeout(timeout, reader.read_frame()).await {
            Err(_) => return Err(ReadError::Silent(timeout)),
            Ok(frame) => frame?,
        };
        let Some(frame) = frame else {
            return Ok(None);
        };
        if frame.route() != ROUTE_LINK {
            return Ok(Some(Incoming::Frame(frame)));
        }
        match frame.decode::<Link>().map_err(ReadError::BadLink)? {
            Link::Heartbeat => continue,
            other => return Ok(Some(Incoming::Link(other))),
        }
    }
}

/// Queued on a link to say "write what is queued before this, then finish the
/// stream": how an exiting agent makes sure its goodbye leaves.
pub fn end_of_stream() -> FrameBuf {
    FrameBuf::new()
}

/// Writes everything queued on `queue`, coalescing bursts into one write, and a
/// heartbeat whenever nothing was written for `interval`. Returns after finishing the
/// stream when the queue's senders are all gone or [`end_of_stream`] is dequeued, or
/// on a write error.
pub async fn write_queue(
    writer: &mut FrameWriter,
    queue: &mut UnboundedReceiver<FrameBuf>,
    interval: Duration,
) -> Result<(), StreamError> {
    let heartbeat = link_frame(&Link::Heartbeat);
    let mut batch: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        batch.clear();
        let mut end = false;
        match tokio::time::timeout(interval, queue.recv()).await {
            Ok(Some(first)) => {
                end = first.is_empty();
                batch.extend_from_slice(&first);
            }
            Ok(None) => end = true,
            Err(_) => batch.extend_from_slice(&heartbeat),
        }
        // Coalesce whatever else is already queued, up to a sane write size.
        while !end && batch.len() < 1 << 20 {
            match queue.try_recv() {
                Ok(next) if next.is_empty() => end = true,
                Ok(next) => batch.extend_from_slice(&next),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            writer.write_frames(&batch).await?;
        }
        if end {
            return writer.finish().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_must_leave_room_for_a_late_heartbeat() {
        let second = Duration::from_secs(1);
        assert_eq!(
            Liveness::new(Duration::ZERO, second),
            Err(LivenessError::ZeroInterval)
        );
        assert!(matches!(
            Liveness::new(second, second),
            Err(LivenessError::TimeoutTooShort { .. })
        ));
        let ok = Liveness::new(second, second * 3).unwrap();
        assert_eq!(ok.quic_timeouts().max_idle_timeout, second * 6);
        assert!(Liveness::default().timeout >= Liveness::default().interval * 2);
    }
}
