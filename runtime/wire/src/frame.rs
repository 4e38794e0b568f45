//! Stream preamble, frame layout, encoding and checked access.
//!
//! # Layout of a stream
//!
//! ```text
//! preamble   "SAKR" | PROTOCOL_VERSION u32 LE                     8 bytes, once
//! frame      len u32 LE | route u32 LE                            8-byte header
//!            rkyv payload (len bytes) | zero padding to 8        repeated
//! ```
//!
//! Every header, and so every payload, starts at a multiple of 8 from the start of the
//! stream, and the archived schema needs at most 8-byte alignment (asserted at compile
//! time in [`crate::messages`]). A receiver that copies each payload into an
//! [`AlignedVec`] (as [`FrameDecoder`] does) can therefore access it in place; a sender
//! can append any number of frames to one buffer ([`encode_into`]) and write them with
//! one system call.
//!
//! # Relaying
//!
//! The `route` field lets an interior agent forward a frame for its subtree without
//! decoding the payload: read the header, look the route up, re-emit the payload with
//! [`encode_raw_into`] (or [`Frame::encode_into`]). [`ROUTE_PEER`](crate::ROUTE_PEER)
//! addresses the link peer itself.

mod decoder;

pub use decoder::{Frame, FrameDecoder};

use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor::Error as RkyvError;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};

use crate::error::WireError;
use crate::messages::{
    ArchivedFromAgent, ArchivedToAgent, FromAgent, Link, PROTOCOL_VERSION, ToAgent,
};

/// First four bytes of every Saker stream.
pub const MAGIC: [u8; 4] = *b"SAKR";

/// Length of the stream preamble: [`MAGIC`] and the protocol version.
pub const PREAMBLE_LEN: usize = 8;

/// Length of a frame header: payload length and route, both `u32` little-endian.
pub const FRAME_HEADER_LEN: usize = 8;

pub use crate::align::FRAME_ALIGNMENT;

/// Default limit on one frame's payload: large enough for a dispatch of about two
/// million assignments, small enough that a hostile header cannot make us reserve
/// gigabytes.
pub const DEFAULT_MAX_PAYLOAD_LEN: u32 = 64 << 20;

/// Hard ceiling for any configured limit: the largest length whose padded size still
/// fits in a `u32` (and so in `usize` on every supported target).
pub const MAX_PAYLOAD_LEN_CEILING: u32 = u32::MAX - (FRAME_ALIGNMENT as u32 - 1);

/// The 8 bytes each side writes first on every stream it opens.
pub fn encode_preamble() -> [u8; PREAMBLE_LEN] {
    let mut bytes = [0; PREAMBLE_LEN];
    bytes[..4].copy_from_slice(&MAGIC);
    bytes[4..].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    bytes
}

/// Checks a peer's preamble: magic first, then the version.
pub fn check_preamble(bytes: &[u8; PREAMBLE_LEN]) -> Result<(), WireError> {
    let [m0, m1, m2, m3, v0, v1, v2, v3] = *bytes;
    let found = [m0, m1, m2, m3];
    if found != MAGIC {
        return Err(WireError::BadMagic { found });
    }
    let peer = u32::from_le_bytes([v0, v1, v2, v3]);
    if peer != PROTOCOL_VERSION {
        return Err(WireError::VersionMismatch {
            local: PROTOCOL_VERSION,
            peer,
        });
    }
    Ok(())
}

/// The 8-byte header in front of every payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in bytes, without the padding.
    pub len: u32,
    /// Destination in the agent tree, read by relays without touching the payload;
    /// [`ROUTE_PEER`](crate::ROUTE_PEER) for the link peer.
    pub route: u32,
}

impl FrameHeader {
    /// Parses a header, rejecting a payload length above `max_payload_len` (clamped to
    /// [`MAX_PAYLOAD_LEN_CEILING`]) before anything is allocated for it.
    pub fn parse(bytes: &[u8; FRAME_HEADER_LEN], max_payload_len: u32) -> Result<Self, WireError> {
        let [l0, l1, l2, l3, r0, r1, r2, r3] = *bytes;
        let header = Self {
            len: u32::from_le_bytes([l0, l1, l2, l3]),
            route: u32::from_le_bytes([r0, r1, r2, r3]),
        };
        let max = max_payload_len.min(MAX_PAYLOAD_LEN_CEILING);
        if header.len > max {
            return Err(WireError::PayloadTooLarge {
                len: u64::from(header.len),
                max,
            });
        }
        Ok(header)
    }

    /// The header as it goes on the wire.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut bytes = [0; FRAME_HEADER_LEN];
        bytes[..4].copy_from_slice(&self.len.to_le_bytes());
        bytes[4..].copy_from_slice(&self.route.to_le_bytes());
        bytes
    }

    /// Payload length rounded up to [`FRAME_ALIGNMENT`]: the bytes that follow the
    /// header on the wire. Saturates for lengths above [`MAX_PAYLOAD_LEN_CEILING`],
    /// which [`FrameHeader::parse`] never returns.
    pub fn padded_len(&self) -> usize {
        padded(self.len as usize)
    }
}

fn padded(len: usize) -> usize {
    len.saturating_add(FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::messages::ToAgent {}
    impl Sealed for crate::messages::FromAgent {}
    impl Sealed for crate::messages::Link {}
}

/// A top-level wire message: [`ToAgent`], [`FromAgent`] or [`Link`] (sealed).
///
/// The supertraits spell out what rkyv needs to serialize into an [`AlignedVec`], to
/// validate the archive, and to deserialize it; user code only names `M: Message`.
pub trait Message:
    sealed::Sealed
    + Sized
    + Archive<
        Archived: for<'a> CheckBytes<HighValidator<'a, RkyvError>>
                      + Deserialize<Self, HighDeserializer<RkyvError>>,
    > + for<'a, 'b> Serialize<HighSerializer<&'b mut AlignedVec, ArenaHandle<'a>, RkyvError>>
{
    /// Name used in error messages.
    const NAME: &'static str;
}

impl Message for ToAgent {
    const NAME: &'static str = "ToAgent";
}

impl Message for FromAgent {
    const NAME: &'static str = "FromAgent";
}

impl Message for Link {
    const NAME: &'static str = "Link";
}

/// Encodes one message as a complete frame (header, payload, padding) in a new buffer.
pub fn encode<M: Message>(route: u32, message: &M) -> Result<AlignedVec, WireError> {
    let mut buffer = AlignedVec::new();
    encode_into(&mut buffer, route, message)?;
    Ok(buffer)
}

/// Appends one frame to `buffer`, which must hold whole frames (or a preamble) only.
///
/// The message is serialized once, directly behind an 8-byte placeholder that is then
/// overwritten with the header: no intermediate buffer, no copy of the payload. On error
/// `buffer` is left as it was.
///
/// Fails with [`WireError::PayloadTooLarge`] above [`DEFAULT_MAX_PAYLOAD_LEN`], the limit
/// receivers enforce by default: split the batch instead.
pub fn encode_into<M: Message>(
    buffer: &mut AlignedVec,
    route: u32,
    message: &M,
) -> Result<(), WireError> {
    let start = begin_frame(buffer)?;
    if let Err(source) = rkyv::api::high::to_bytes_in::<_, RkyvError>(message, &mut *buffer) {
        buffer.resize(start, 0);
        return Err(WireError::Serialize {
            message: M::NAME,
            source,
        });
    }
    finish_frame(buffer, start, route)
}

/// Appends a frame carrying an already-encoded payload, e.g. one received in a
/// [`Frame`] and relayed to a child under a new route. The payload is copied once.
pub fn encode_raw_into(
    buffer: &mut AlignedVec,
    route: u32,
    payload: &[u8],
) -> Result<(), WireError> {
    let start = begin_frame(buffer)?;
    buffer.extend_from_slice(payload);
    finish_frame(buffer, start, route)
}

/// Checks that `buffer` ends on a frame boundary and reserves the header placeholder.
/// Returns where the frame starts.
fn begin_frame(buffer: &mut AlignedVec) -> Result<usize, WireError> {
    let start = buffer.len();
    if start & (FRAME_ALIGNMENT - 1) != 0 {
        return Err(WireError::UnalignedBuffer {
            len: start,
            required: FRAME_ALIGNMENT,
        });
    }
    buffer.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    Ok(start)
}

/// Writes the header over the placeholder at `start` and pads the payload behind it,
/// or rolls `buffer` back to `start` if the payload is too large.
fn finish_frame(buffer: &mut AlignedVec, start: usize, route: u32) -> Result<(), WireError> {
    let payload_len = buffer.len() - start - FRAME_HEADER_LEN;
    let len = match u32::try_from(payload_len) {
        Ok(len) if len <= DEFAULT_MAX_PAYLOAD_LEN => len,
        _ => {
            buffer.resize(start, 0);
            return Err(WireError::PayloadTooLarge {
                len: payload_len as u64,
                max: DEFAULT_MAX_PAYLOAD_LEN,
            });
        }
    };
    let header = FrameHeader { len, route };
    buffer[start..start + FRAME_HEADER_LEN].copy_from_slice(&header.encode());
    buffer.resize(start + FRAME_HEADER_LEN + header.padded_len(), 0);
    Ok(())
}

/// Validates `payload` as an archived `M` and returns a reference into it (zero-copy:
/// nothing is allocated per task or per string).
///
/// `payload` must be exactly the frame's payload (without padding: the archive's root
/// sits at its end) and start on an 8-byte boundary; a misaligned slice is an error,
/// not a panic.
pub fn access<M: Message>(payload: &[u8]) -> Result<&M::Archived, WireError> {
    let address = payload.as_ptr().addr();
    // An empty slice may carry a dangling address; it fails validation below anyway.
    if address & (FRAME_ALIGNMENT - 1) != 0 && !payload.is_empty() {
        return Err(WireError::UnalignedPayload {
            address,
            required: FRAME_ALIGNMENT,
        });
    }
    rkyv::access::<M::Archived, RkyvError>(payload).map_err(|source| WireError::InvalidPayload {
        message: M::NAME,
        len: payload.len(),
        source,
    })
}

/// [`access`] for a frame travelling down the tree.
pub fn access_to_agent(payload: &[u8]) -> Result<&ArchivedToAgent, WireError> {
    access::<ToAgent>(payload)
}

/// [`access`] for a frame travelling up the tree.
pub fn access_from_agent(payload: &[u8]) -> Result<&ArchivedFromAgent, WireError> {
    access::<FromAgent>(payload)
}

/// Turns an already validated archive into the owned message.
pub fn deserialize<M: Message>(archived: &M::Archived) -> Result<M, WireError> {
    rkyv::deserialize::<M, RkyvError>(archived).map_err(|source| WireError::Deserialize {
        message: M::NAME,
        source,
    })
}

/// [`access`] then [`deserialize`]: validates and copies the payload into owned values.
pub fn decode<M: Message>(payload: &[u8]) -> Result<M, WireError> {
    deserialize::<M>(access::<M>(payload)?)
}

/// [`decode`] for a frame travelling down the tree.
pub fn decode_to_agent(payload: &[u8]) -> Result<ToAgent, WireError> {
    decode::<ToAgent>(payload)
}

/// [`decode`] for a frame travelling up the tree.
pub fn decode_from_agent(payload: &[u8]) -> Result<FromAgent, WireError> {
    decode::<FromAgent>(payload)
}

#[cfg(test)]
mod tests;
