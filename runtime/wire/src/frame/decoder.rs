//! Incremental frame decoder: bytes in, aligned frames out.

use std::collections::VecDeque;

use rkyv::util::AlignedVec;

use super::{
    DEFAULT_MAX_PAYLOAD_LEN, FRAME_HEADER_LEN, FrameHeader, MAX_PAYLOAD_LEN_CEILING, Message,
    PREAMBLE_LEN, access, check_preamble, decode, encode_raw_into,
};
use crate::error::WireError;
use crate::messages::{ArchivedFromAgent, ArchivedToAgent, FromAgent, ToAgent};

/// Payload capacity reserved when a header arrives. Larger payloads grow as their bytes
/// arrive, so a header alone cannot make us allocate up to the limit.
const INITIAL_PAYLOAD_CAPACITY: usize = 64 << 10;

/// One received frame: its route and its payload, alone in an 8-aligned buffer.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Route from the header (see [`FrameHeader::route`]).
    pub route: u32,
    /// The payload without padding, in its own aligned buffer. Not yet validated:
    /// use [`Frame::access`] (or the directional variants) before reading it.
    pub payload: AlignedVec,
}

impl Frame {
    /// Validates the payload as `M` and borrows the archive (zero-copy).
    pub fn access<M: Message>(&self) -> Result<&M::Archived, WireError> {
        access::<M>(&self.payload)
    }

    /// Validates the payload as a [`ToAgent`] and borrows the archive.
    pub fn access_to_agent(&self) -> Result<&ArchivedToAgent, WireError> {
        self.access::<ToAgent>()
    }

    /// Validates the payload as a [`FromAgent`] and borrows the archive.
    pub fn access_from_agent(&self) -> Result<&ArchivedFromAgent, WireError> {
        self.access::<FromAgent>()
    }

    /// Validates and deserializes the payload into an owned `M`.
    pub fn decode<M: Message>(&self) -> Result<M, WireError> {
        decode::<M>(&self.payload)
    }

    /// Appends this frame, unchanged and still undecoded, to an outgoing buffer (relay).
    /// Set [`Frame::route`] first to re-address it.
    pub fn encode_into(&self, buffer: &mut AlignedVec) -> Result<(), WireError> {
        encode_raw_into(buffer, self.route, &self.payload)
    }
}

/// Turns a byte stream, delivered in chunks of any size, into [`Frame`]s.
///
/// # Driving it
///
/// Call [`push`](Self::push) with each chunk read from the stream, then call
/// [`next_frame`](Self::next_frame) until it returns `Ok(None)`. Frames come out in
/// stream order. When the stream ends, call [`finish`](Self::finish) to learn whether it
/// stopped cleanly on a frame boundary.
///
/// A header whose length exceeds the limit (default [`DEFAULT_MAX_PAYLOAD_LEN`]) is
/// rejected as soon as its 8 bytes are in, before anything is allocated for it. Frames
/// completed before the bad header are still returned; after them `next_frame` returns
/// the error, every time: the stream has no resynchronisation point and must be closed.
/// Bytes pushed after a failure are dropped.
///
/// Each payload byte is copied once, from the pushed chunk into the frame's own aligned
/// buffer. Padding is skipped, not checked.
#[derive(Debug)]
pub struct FrameDecoder {
    max_payload_len: u32,
    state: State,
    ready: VecDeque<Frame>,
    failure: Option<Failure>,
}

#[derive(Debug)]
enum State {
    Preamble {
        bytes: [u8; PREAMBLE_LEN],
        filled: usize,
    },
    Header {
        bytes: [u8; FRAME_HEADER_LEN],
        filled: usize,
    },
    Payload {
        header: FrameHeader,
        /// Bytes of payload and padding consumed so far.
        received: usize,
        payload: AlignedVec,
    },
}

impl State {
    fn header() -> Self {
        Self::Header {
            bytes: [0; FRAME_HEADER_LEN],
            filled: 0,
        }
    }
}

/// Why the decoder stopped: the bytes that failed their check, kept so that every
/// later [`FrameDecoder::next_frame`] can report the same error again (`WireError` holds
/// rkyv errors and is not `Clone`).
#[derive(Debug, Clone, Copy)]
enum Failure {
    Preamble([u8; PREAMBLE_LEN]),
    Header {
        bytes: [u8; FRAME_HEADER_LEN],
        max_payload_len: u32,
    },
}

impl Failure {
    fn to_error(self) -> WireError {
        let result = match self {
            Self::Preamble(bytes) => check_preamble(&bytes),
            Self::Header {
                bytes,
                max_payload_len,
            } => FrameHeader::parse(&bytes, max_payload_len).map(drop),
        };
        // Invariant: both checks are pure functions of the stored bytes, and these bytes
        // failed them when the failure was recorded.
        result.expect_err("stored bytes failed this check when recorded")
    }
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder for a stream whose preamble the caller has already checked, with the
    /// default payload limit.
    pub fn new() -> Self {
        Self::with_max_payload_len(DEFAULT_MAX_PAYLOAD_LEN)
    }

    /// A decoder with another payload limit (clamped to [`MAX_PAYLOAD_LEN_CEILING`]).
    pub fn with_max_payload_len(max_payload_len: u32) -> Self {
        Self {
            max_payload_len: max_payload_len.min(MAX_PAYLOAD_LEN_CEILING),
            state: State::header(),
            ready: VecDeque::new(),
            failure: None,
        }
    }

    /// Makes the decoder read and check the 8-byte stream preamble (see
    /// [`check_preamble`]) before the first frame. Call before the first push.
    pub fn expect_preamble(mut self) -> Self {
        self.state = State::Preamble {
            bytes: [0; PREAMBLE_LEN],
            filled: 0,
        };
        self
    }

    /// The payload limit in force.
    pub fn max_payload_len(&self) -> u32 {
        self.max_payload_len
    }

    /// Feeds the next chunk of the stream. Never fails by itself: errors surface through
    /// [`next_frame`](Self::next_frame), after the frames that preceded them.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while self.failure.is_none() {
            if let Err(failure) = self.advance(&mut bytes) {
                self.failure = Some(failure);
                // Drop any partial frame: nothing after a failure is ever returned.
                self.state = State::header();
                return;
            }
            if bytes.is_empty() && !self.frame_is_complete() {
                return;
            }
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or the error that
    /// stopped the stream (after all frames completed before it).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        if let Some(frame) = self.ready.pop_front() {
            return Ok(Some(frame));
        }
        match self.failure {
            Some(failure) => Err(failure.to_error()),
            None => Ok(None),
        }
    }

    /// Call when the stream has ended: `Ok(())` if it ended on a frame boundary,
    /// [`WireError::TruncatedFrame`] if it stopped inside the preamble, a header or a
    /// payload, or the error that stopped the decoder earlier. Frames still queued are
    /// not affected and can be taken with `next_frame`.
    pub fn finish(&self) -> Result<(), WireError> {
        if let Some(failure) = self.failure {
            return Err(failure.to_error());
        }
        let (received, expected) = match &self.state {
            State::Preamble { filled, .. } => (*filled, PREAMBLE_LEN),
            State::Header { filled: 0, .. } => return Ok(()),
            State::Header { filled, .. } => (*filled, FRAME_HEADER_LEN),
            State::Payload {
                header, received, ..
            } => (*received, header.padded_len()),
        };
        Err(WireError::TruncatedFrame { received, expected })
    }

    /// Whether the current payload has all its bytes (true at once for an empty one).
    fn frame_is_complete(&self) -> bool {
        matches!(&self.state, State::Payload { header, received, .. } if *received == header.padded_len())
    }

    /// Consumes bytes from the front of `bytes` for the current state and moves to the
    /// next state when the current unit is complete.
    fn advance(&mut self, bytes: &mut &[u8]) -> Result<(), Failure> {
        match &mut self.state {
            State::Preamble {
                bytes: buffer,
                filled,
            } => {
                if fill(buffer, filled, bytes) {
                    if check_preamble(buffer).is_err() {
                        return Err(Failure::Preamble(*buffer));
                    }
                    self.state = State::header();
                }
            }
            State::Header {
                bytes: buffer,
                filled,
            } => {
                if fill(buffer, filled, bytes) {
                    let max_payload_len = self.max_payload_len;
                    let header = FrameHeader::parse(buffer, max_payload_len).map_err(|_| {
                        Failure::Header {
                            bytes: *buffer,
                            max_payload_len,
                        }
                    })?;
                    let capacity = (header.len as usize).min(INITIAL_PAYLOAD_CAPACITY);
                    self.state = State::Payload {
                        header,
                        received: 0,
                        payload: AlignedVec::with_capacity(capacity),
                    };
                }
            }
            State::Payload {
                header,
                received,
                payload,
            } => {
                let take = (header.padded_len() - *received).min(bytes.len());
                let (chunk, rest) = bytes.split_at(take);
                // Payload bytes still missing; the remainder of `chunk` is padding.
                let payload_missing = (header.len as usize).saturating_sub(*received);
                payload.extend_from_slice(&chunk[..payload_missing.min(take)]);
                *received += take;
                *bytes = rest;
                if *received < header.padded_len() {
                    return Ok(());
                }
                let route = header.route;
                let payload = std::mem::take(payload);
                self.state = State::header();
                self.ready.push_back(Frame { route, payload });
            }
        }
        Ok(())
    }
}

/// Copies bytes from the front of `input` into `buffer[*filled..]`; true once full.
fn fill<const N: usize>(buffer: &mut [u8; N], filled: &mut usize, input: &mut &[u8]) -> bool {
    let take = (N - *filled).min(input.len());
    let (chunk, rest) = input.split_at(take);
    buffer[*filled..*filled + take].copy_from_slice(chunk);
    *filled += take;
    *input = rest;
    *filled == N
}
