//! The one error type of the wire crate.
//!
//! Every variant is something a peer (or a bug on our side) can cause; none of them is
//! reported by a panic. After any error from a [`crate::FrameDecoder`] or from
//! [`crate::check_preamble`] the stream is unusable and should be closed: framing has no
//! resynchronisation point.

/// Errors of the stream preamble, of framing, and of checked access to payloads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The first four bytes of the stream are not `SAKR`: the peer is not a Saker
    /// process (or the stream is misaligned).
    #[error("stream preamble starts with {found:?}, expected the magic b\"SAKR\"")]
    BadMagic {
        /// The four bytes received where the magic was expected.
        found: [u8; 4],
    },

    /// The peer speaks another protocol version. Checked before any payload is read,
    /// so the two sides can name the mismatch instead of failing validation later.
    #[error("peer speaks protocol version {peer}, this build speaks version {local}")]
    VersionMismatch {
        /// [`crate::PROTOCOL_VERSION`] of this build.
        local: u32,
        /// The version announced in the peer's preamble.
        peer: u32,
    },

    /// A frame header announces (or an encoder produced) a payload above the limit.
    /// Raised from the header alone, before any buffer for the payload is allocated.
    #[error("frame payload of {len} bytes exceeds the limit of {max} bytes")]
    PayloadTooLarge {
        /// Payload length announced or produced.
        len: u64,
        /// The limit in force.
        max: u32,
    },

    /// A payload handed to checked access does not start on an 8-byte boundary. Frames
    /// from [`crate::FrameDecoder`] always are; this means the caller sliced a buffer.
    #[error("frame payload at address {address:#x} is not aligned to {required} bytes")]
    UnalignedPayload {
        /// Address of the first payload byte.
        address: usize,
        /// The alignment required ([`crate::FRAME_ALIGNMENT`]).
        required: usize,
    },

    /// A buffer passed to an `encode_into` function does not end on a frame boundary
    /// (its length is not a multiple of [`crate::FRAME_ALIGNMENT`]), so a frame appended
    /// to it would be misaligned on the wire.
    #[error("encode buffer length {len} is not a multiple of {required}")]
    UnalignedBuffer {
        /// Length of the buffer handed in.
        len: usize,
        /// The alignment required ([`crate::FRAME_ALIGNMENT`]).
        required: usize,
    },

    /// The stream ended in the middle of the preamble, a frame header or a payload.
    #[error("stream ended inside a frame: {received} of {expected} bytes received")]
    TruncatedFrame {
        /// Bytes of the unfinished unit (preamble, header, or padded payload) received.
        received: usize,
        /// Bytes that unit needs.
        expected: usize,
    },

    /// Checked access rejected a payload: wrong discriminant, invalid UTF-8, a relative
    /// pointer out of bounds, a truncated buffer, and so on.
    #[error("invalid {message} payload of {len} bytes")]
    InvalidPayload {
        /// Which message enum the payload was checked as (`"ToAgent"`, `"FromAgent"`).
        message: &'static str,
        /// Payload length in bytes.
        len: usize,
        /// What rkyv's validator found.
        #[source]
        source: rkyv::rancor::Error,
    },

    /// Serialising a message failed (in practice: a message too large for rkyv's
    /// 32-bit relative pointers).
    #[error("failed to serialize a {message} message")]
    Serialize {
        /// Which message enum was being encoded.
        message: &'static str,
        /// The serializer's error.
        #[source]
        source: rkyv::rancor::Error,
    },

    /// Turning a validated archive into owned values failed.
    #[error("failed to deserialize a {message} message")]
    Deserialize {
        /// Which message enum was being decoded.
        message: &'static str,
        /// The deserializer's error.
        #[source]
        source: rkyv::rancor::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::WireError;

    /// Transport code moves errors across tasks and boxes them as `dyn Error`.
    #[test]
    fn wire_error_is_send_sync_static() {
        fn assert_bounds<T: std::error::Error + Send + Sync + 'static>() {}
        assert_bounds::<WireError>();
        assert_bounds::<rkyv::rancor::Error>();
    }

    #[test]
    fn version_error_names_both_versions() {
        let error = WireError::VersionMismatch { local: 1, peer: 7 };
        assert_eq!(
            error.to_string(),
            "peer speaks protocol version 7, this build speaks version 1"
        );
    }
}
