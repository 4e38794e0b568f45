//! Frame I/O over byte streams: QUIC streams, or TLS-over-TCP halves.
//!
//! [`FrameWriter`] writes bytes that saker-wire has already framed (header +
//! padded payload, possibly many frames per call). [`FrameReader`] reads big
//! chunks into an aligned buffer and hands out one [`Frame`] at a time, so a
//! burst of small frames costs a handful of reads, not one per frame.
//!
//! Both are generic over tokio's `AsyncRead`/`AsyncWrite`; the defaults are
//! quinn's stream types. Start reading at [`FrameReader::read_frame`].

mod reader;
mod writer;

use std::fmt;
use std::io;
use std::sync::Arc;

use rkyv::util::AlignedVec;

use saker_wire::{ArchivedFromAgent, ArchivedToAgent, FRAME_HEADER_LEN, Message, WireError};

pub use reader::FrameReader;
pub use writer::FrameWriter;

/// Errors reading or writing frames.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The underlying stream failed (for quinn, the cause is a `quinn::ReadError`).
    #[error("cannot read from the stream")]
    Read(#[source] io::Error),
    /// The underlying stream failed (for quinn, the cause is a `quinn::WriteError`).
    #[error("cannot write to the stream")]
    Write(#[source] io::Error),
    /// The stream ended before a whole preamble arrived.
    #[error("stream ended after {received} bytes, before the 8-byte preamble")]
    MissingPreamble {
        /// Bytes received before the end.
        received: usize,
    },
    /// The peer's preamble is not Saker's, or has another protocol version.
    #[error("the peer sent an invalid preamble")]
    Preamble(#[source] WireError),
    /// A frame header was rejected (for example, longer than the maximum);
    /// nothing was allocated for it.
    #[error("the peer sent an invalid frame header")]
    Header(#[source] WireError),
    /// The stream ended in the middle of a frame.
    #[error("stream ended in the middle of a frame ({received} of {expected} bytes)")]
    Truncated {
        /// Bytes of the frame received.
        received: usize,
        /// Bytes needed: the header, or header plus padded payload.
        expected: usize,
    },
}

/// One received frame.
///
/// Frames share the reader's receive buffer (an `rkyv` [`AlignedVec`]) instead
/// of being copied out: cloning a frame is cheap, and holding one keeps its
/// receive chunk (64 KiB, or the frame's size if larger) alive. The payload is
/// 8-aligned, ready for saker-wire's checked access ([`Frame::access`]).
///
/// Unlike `saker_wire::Frame` (which owns a copy of its payload) this keeps the
/// header bytes next to the payload, so [`Frame::raw`] forwards a frame with
/// no decoding, re-encoding or per-frame allocation.
#[derive(Clone)]
pub struct Frame {
    buffer: Arc<AlignedVec>,
    start: usize,
    payload_len: usize,
    total_len: usize,
    route: u32,
}

impl Frame {
    /// The route from the frame header.
    pub fn route(&self) -> u32 {
        self.route
    }

    /// The payload, without padding; its first byte is 8-aligned.
    pub fn payload(&self) -> &[u8] {
        let payload_start = self.start + FRAME_HEADER_LEN;
        &self.buffer[payload_start..payload_start + self.payload_len]
    }

    /// The frame exactly as received: header, payload and padding. An
    /// interior agent forwards this to its parent or child without re-encoding
    /// (pass it to [`FrameWriter::write_frames`]).
    pub fn raw(&self) -> &[u8] {
        &self.buffer[self.start..self.start + self.total_len]
    }

    /// Validates the payload as `M` and borrows the archive (zero-copy).
    pub fn access<M: Message>(&self) -> Result<&M::Archived, WireError> {
        saker_wire::access::<M>(self.payload())
    }

    /// Validates the payload as a [`ToAgent`](saker_wire::ToAgent) and borrows the archive.
    pub fn access_to_agent(&self) -> Result<&ArchivedToAgent, WireError> {
        saker_wire::access_to_agent(self.payload())
    }

    /// Validates the payload as a [`FromAgent`](saker_wire::FromAgent) and borrows the archive.
    pub fn access_from_agent(&self) -> Result<&ArchivedFromAgent, WireError> {
        saker_wire::access_from_agent(self.payload())
    }

    /// Validates and deserializes the payload into an owned `M`.
    pub fn decode<M: Message>(&self) -> Result<M, WireError> {
        saker_wire::decode::<M>(self.payload())
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Frame")
            .field("route", &self.route)
            .field("payload_len", &self.payload_len)
            .finish()
    }
}
