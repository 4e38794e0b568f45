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
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc::UnboundedReceiver;

/// One encoded frame (header + 8-aligned payload), ready to write.
pub type FrameBuf = rkyv::util::AlignedVec;

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
pub async fn next_incoming<R: AsyncRead + Unpin>(
    reader: &mut FrameReader<R>,
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
pub async fn write_queue<W: AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
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
    use tokio::io::DuplexStream;
    use tokio::time::Instant;

    /// The two ends of a link's stream, in memory.
    fn stream() -> (FrameWriter<DuplexStream>, FrameReader<DuplexStream>) {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        (FrameWriter::new(ours), FrameReader::new(theirs))
    }

    async fn link_message(reader: &mut FrameReader<DuplexStream>) -> Link {
        let frame = reader.read_frame().await.unwrap().expect("a frame");
        assert_eq!(frame.route(), ROUTE_LINK);
        frame.decode::<Link>().unwrap()
    }

    /// A link with nothing to send writes a heartbeat once per interval, counted from
    /// whatever it wrote last; its end finishes the stream.
    #[tokio::test(start_paused = true)]
    async fn a_quiet_link_writes_a_heartbeat_an_interval_after_its_last_write() {
        let interval = Duration::from_secs(1);
        let (mut writer, mut reader) = stream();
        let (tx, mut queue) = crate::link::channel();
        let writing =
            tokio::spawn(async move { write_queue(&mut writer, &mut queue, interval).await });
        let t0 = Instant::now();
        assert!(matches!(link_message(&mut reader).await, Link::Heartbeat));
        assert_eq!(t0.elapsed(), interval);
        // A frame half an interval later goes at once and puts the next heartbeat off.
        tokio::time::advance(interval / 2).await;
        tx.send(link_frame(&Link::Rejoin)).unwrap();
        assert!(matches!(link_message(&mut reader).await, Link::Rejoin));
        assert_eq!(t0.elapsed(), interval * 3 / 2);
        assert!(matches!(link_message(&mut reader).await, Link::Heartbeat));
        assert_eq!(t0.elapsed(), interval * 5 / 2);
        drop(tx);
        assert!(reader.read_frame().await.unwrap().is_none(), "finished");
        writing.await.unwrap().unwrap();
    }

    /// Heartbeats keep a link that carries nothing else alive for as long as they come;
    /// once they stop (the peer hangs, its stream still open), the reader declares the
    /// link silent one timeout after the last.
    #[tokio::test(start_paused = true)]
    async fn heartbeats_keep_a_link_alive_and_silence_ends_it_after_the_timeout() {
        let liveness = Liveness::new(Duration::from_secs(1), Duration::from_secs(3)).unwrap();
        let (mut writer, mut reader) = stream();
        let (_tx, mut queue) = crate::link::channel();
        let (hang, hung) = tokio::sync::oneshot::channel::<()>();
        let writing = tokio::spawn(async move {
            tokio::select! {
                _ = write_queue(&mut writer, &mut queue, liveness.interval) => {}
                _ = hung => {}
            }
            writer // kept open, and silent
        });
        let t0 = Instant::now();
        let reading = tokio::spawn(async move {
            let incoming = next_incoming(&mut reader, liveness.timeout).await;
            (incoming, Instant::now())
        });
        // Ten timeouts' worth of heartbeats, one a second; the hang comes half a
        // second after the last.
        tokio::time::sleep(Duration::from_millis(30_500)).await;
        assert!(
            !reading.is_finished(),
            "declared silent while heartbeats came"
        );
        hang.send(()).unwrap();
        let _writer = writing.await.unwrap();
        let (incoming, at) = reading.await.unwrap();
        assert!(
            matches!(incoming, Err(ReadError::Silent(waited)) if waited == liveness.timeout),
            "{incoming:?}"
        );
        assert_eq!(at - t0, Duration::from_secs(30) + liveness.timeout);
    }

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
