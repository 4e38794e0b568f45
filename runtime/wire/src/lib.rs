//! The wire format of the agent tree: message schema, stream preamble, framing, and
//! checked (validated) access to received payloads.
//!
//! **Owns:** the rkyv schema ([`messages`]), the protocol version, the 8-byte stream
//! preamble, the frame layout (length + route header, 8-aligned payloads), encoding of
//! single and bundled frames, and the incremental [`FrameDecoder`].
//!
//! **Must never:** do I/O, depend on an async runtime or a clock, or hand out a view of
//! peer bytes that has not passed rkyv's validator. It never panics on peer input: every
//! malformed byte sequence is a [`WireError`] (fuzzed by `fuzz/` target `frame_decoder`).
//! The transport crate owns the sockets and wraps these functions around QUIC streams.
//!
//! **Start reading** at [`frame`] (the stream layout), then [`messages`] (what flows in
//! each direction), then [`FrameDecoder`].
//!
//! **Key decision: rkyv archives accessed in place, not a serde format.** The root sends
//! one frame carrying hundreds of tasks, and interior agents relay most frames without
//! looking inside. With rkyv a receiver validates a payload once (a linear bytecheck
//! pass, no allocation per task or per string) and then reads fields straight from the
//! receive buffer; a relay only reads the 8-byte header. A serde format would allocate
//! and copy every string of every task on every hop. The price is an alignment contract
//! (payloads on 8-byte boundaries, kept by padding and by decoding into `AlignedVec`) and
//! a schema that must be versioned by hand ([`PROTOCOL_VERSION`]), which the preamble
//! checks before any payload is read. Validation is not optional: peers are untrusted,
//! and there is deliberately no unchecked access in this API.
//!
//! Typical use:
//!
//! ```
//! use saker_wire::{AttemptId, FrameDecoder, ROUTE_PEER, ToAgent, encode};
//!
//! let bytes = encode(ROUTE_PEER, &ToAgent::Cancel { attempts: vec![AttemptId(7)] })?;
//! let mut decoder = FrameDecoder::new();
//! decoder.push(&bytes);
//! let frame = decoder.next_frame()?.expect("one whole frame was pushed");
//! let message = frame.access_to_agent()?; // validated, zero-copy
//! assert!(matches!(message, saker_wire::ArchivedToAgent::Cancel { attempts } if attempts[0] == AttemptId(7)));
//! # Ok::<(), saker_wire::WireError>(())
//! ```

mod align;
pub mod error;
pub mod frame;
pub mod items;
pub mod messages;

pub use error::WireError;
pub use frame::{
    DEFAULT_MAX_PAYLOAD_LEN, FRAME_ALIGNMENT, FRAME_HEADER_LEN, Frame, FrameDecoder, FrameHeader,
    MAGIC, MAX_PAYLOAD_LEN_CEILING, Message, PREAMBLE_LEN, access, access_from_agent,
    access_to_agent, check_preamble, decode, decode_from_agent, decode_to_agent, deserialize,
    encode, encode_into, encode_preamble, encode_raw_into,
};
pub use items::*;
pub use messages::*;
/// Re-exported so users can name `AlignedVec` without depending on rkyv directly.
pub use rkyv::util::AlignedVec;
