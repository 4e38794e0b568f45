//! The alignment frames keep: below the frames and the messages, which both check
//! against it.

/// Alignment of every header and payload on the wire, and the padding unit.
pub const FRAME_ALIGNMENT: usize = 8;
