//! The on-disk format, version 1 (specified in `docs/journal.md`; keep the two in step).
//!
//! ```text
//! segment  = file-header record*
//! file-header = "SAKERJ01" version:u32le reserved:u32le          (16 bytes)
//! record   = length:u32le crc32:u32le payload[length]            (8 + length bytes)
//! payload  = one JSON document, UTF-8; 1 <= length <= MAX_RECORD_BYTES
//! crc32    = CRC-32/IEEE (crc32fast) of payload
//! ```

use std::fmt;

use serde::Serialize;

use crate::JournalError;

/// First eight bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"SAKERJ01";

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Bytes of the file header: magic, version, reserved.
pub const FILE_HEADER_BYTES: u64 = 16;

/// Bytes of a record header: payload length and payload CRC.
pub const RECORD_HEADER_BYTES: u64 = 8;

/// Longest payload a record may have. A header declaring more is corruption, never a torn
/// write, so a flipped bit in a length field cannot make a reader allocate gigabytes.
/// Sized for the largest record the pilot writes: a result with 16 MiB of inline
/// stdout and of stderr, each up to 6 times longer as escaped JSON, and a 16 MiB
/// function output in base64 (a third longer), about 213 MiB.
pub const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;

/// Default size after which the writer starts a new segment.
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;

/// Flag bit of a file header's last four bytes: this segment is a *base* written by a
/// compaction, holding everything still needed from the segments before it, which
/// readers therefore skip (docs/journal.md, "Compaction").
pub const BASE_SEGMENT_FLAG: u32 = 1;

/// The complete file header of a version-1 segment.
pub(crate) fn file_header() -> [u8; FILE_HEADER_BYTES as usize] {
    file_header_with(0)
}

/// A file header with `flags` in its last four bytes (0 for a segment the writer starts).
pub(crate) fn file_header_with(flags: u32) -> [u8; FILE_HEADER_BYTES as usize] {
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&flags.to_le_bytes());
    header
}

/// Number of a segment file: `journal-000001.log` is segment 1. Segments of one journal are
/// numbered contiguously; readers read them in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentNumber(pub u64);

impl SegmentNumber {
    /// The file name of this segment inside the journal directory.
    pub fn file_name(self) -> String {
        format!("journal-{:06}.log", self.0)
    }

    /// Parses `journal-<digits>.log`; anything else is not a segment (and is ignored, so a
    /// pilot may keep other files, e.g. a lock file, next to the segments).
    pub fn parse_file_name(name: &str) -> Option<Self> {
        let digits = name.strip_prefix("journal-")?.strip_suffix(".log")?;
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(Self)
    }

    /// The segment after this one.
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for SegmentNumber {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.file_name())
    }
}

/// Where a record starts: its segment and the byte offset of its header there. Stable
/// for as long as the segment exists, so a reader can go straight to the record
/// ([`crate::read_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub segment: SegmentNumber,
    pub offset: u64,
}

impl Position {
    /// Bits of the offset in [`Position::pack`]: segments up to 1 TiB.
    const OFFSET_BITS: u32 = 40;

    /// The position in one `u64` (24 bits of segment number, 40 of offset), for
    /// compact indexes; `None` past 16,777,215 segments or a 1 TiB offset. Never 0.
    pub fn pack(self) -> Option<u64> {
        let segment = self.segment.0;
        (segment < 1 << (64 - Self::OFFSET_BITS) && self.offset < 1 << Self::OFFSET_BITS)
            .then_some((segment << Self::OFFSET_BITS) | self.offset)
            .filter(|packed| *packed != 0)
    }

    /// The position [`Position::pack`] made.
    pub fn unpack(packed: u64) -> Position {
        Position {
            segment: SegmentNumber(packed >> Self::OFFSET_BITS),
            offset: packed & ((1 << Self::OFFSET_BITS) - 1),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}@{}", self.segment, self.offset)
    }
}

/// What is wrong with the bytes at some offset of a segment. The same defect is a harmless
/// torn tail at the very end of the last segment and corruption anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordDefect {
    /// Fewer than 8 bytes remain where a record header should start.
    ShortHeader { available: u64 },
    /// The header declares more payload than remains in the segment.
    ShortPayload { declared: u32, available: u64 },
    /// The payload's CRC-32 differs from the stored one.
    ChecksumMismatch { stored: u32, computed: u32 },
    /// The header declares an empty payload; a JSON document is never empty.
    ZeroLength,
    /// The header declares a payload longer than [`MAX_RECORD_BYTES`]. Always corruption.
    TooLong { declared: u32 },
    /// Every remaining byte is zero: the file was extended but the data never written
    /// (a crash on file systems that allocate before writing). Only ever a torn tail.
    ZeroFilled { length: u64 },
    /// The last segment is shorter than its file header, and what is there is a prefix of
    /// a valid header: the writer crashed while creating it. Only ever a torn tail.
    ShortFileHeader { length: u64 },
}

impl fmt::Display for RecordDefect {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ShortHeader { available } => {
                write!(formatter, "short record header ({available} of 8 bytes)")
            }
            Self::ShortPayload {
                declared,
                available,
            } => write!(
                formatter,
                "short payload ({declared} bytes declared, {available} present)"
            ),
            Self::ChecksumMismatch { stored, computed } => write!(
                formatter,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            Self::ZeroLength => formatter.write_str("zero payload length"),
            Self::TooLong { declared } => write!(
                formatter,
                "payload length {declared} exceeds the limit of {MAX_RECORD_BYTES} bytes"
            ),
            Self::ZeroFilled { length } => {
                write!(
                    formatter,
                    "{length} zero bytes up to the end of the segment"
                )
            }
            Self::ShortFileHeader { length } => {
                write!(formatter, "file header cut short at {length} of 16 bytes")
            }
        }
    }
}

/// Appends `record` to `buffer` as one framed record (header + JSON). On error `buffer` is
/// left as it was.
pub(crate) fn encode_record<R: Serialize>(
    buffer: &mut Vec<u8>,
    record: &R,
) -> Result<(), JournalError> {
    let start = buffer.len();
    let payload_start = start + RECORD_HEADER_BYTES as usize;
    buffer.resize(payload_start, 0);
    if let Err(error) = serde_json::to_writer(&mut *buffer, record) {
        buffer.truncate(start);
        return Err(JournalError::EncodeRecord {
            source: error.into(),
        });
    }
    let length = buffer.len() - payload_start;
    let Some(length) = u32::try_from(length)
        .ok()
        .filter(|length| *length <= MAX_RECORD_BYTES)
    else {
        buffer.truncate(start);
        return Err(JournalError::RecordTooLarge {
            length: length as u64,
            limit: MAX_RECORD_BYTES,
        });
    };
    let checksum = crc32fast::hash(&buffer[payload_start..]);
    buffer[start..start + 4].copy_from_slice(&length.to_le_bytes());
    buffer[start + 4..payload_start].copy_from_slice(&checksum.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_file_names_round_trip_and_reject_strangers() {
        assert_eq!(SegmentNumber(1).file_name(), "journal-000001.log");
        assert_eq!(SegmentNumber(1234567).file_name(), "journal-1234567.log");
        for number in [1, 42, 999_999, 1_000_000] {
            let name = SegmentNumber(number).file_name();
            assert_eq!(
                SegmentNumber::parse_file_name(&name),
                Some(SegmentNumber(number))
            );
        }
        for stranger in [
            "journal-.log",
            "journal-12a.log",
            "journal-000001.log.tmp",
            "lock",
            "journal-+1.log",
        ] {
            assert_eq!(SegmentNumber::parse_file_name(stranger), None, "{stranger}");
        }
    }

    #[test]
    fn encoded_record_has_length_crc_and_json() {
        let mut buffer = vec![0xAA];
        encode_record(&mut buffer, &vec![1u32, 2]).expect("a vec of integers always encodes");
        assert_eq!(buffer[0], 0xAA);
        let payload = b"[1,2]";
        assert_eq!(&buffer[1..5], &(payload.len() as u32).to_le_bytes());
        assert_eq!(&buffer[5..9], &crc32fast::hash(payload).to_le_bytes());
        assert_eq!(&buffer[9..], payload);
    }

    #[test]
    fn unencodable_record_leaves_buffer_untouched() {
        // JSON object keys must be strings; a map keyed by a tuple cannot be encoded.
        let record: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let mut buffer = b"keep".to_vec();
        let error = encode_record(&mut buffer, &record).expect_err("tuple keys do not encode");
        assert!(matches!(error, JournalError::EncodeRecord { .. }));
        assert_eq!(buffer, b"keep");
    }

    #[test]
    fn oversized_record_is_refused() {
        let record = "x".repeat(MAX_RECORD_BYTES as usize);
        let mut buffer = Vec::new();
        let error = encode_record(&mut buffer, &record).expect_err("quotes push it over");
        assert!(matches!(
            error,
            JournalError::RecordTooLarge { length, .. } if length == MAX_RECORD_BYTES as u64 + 2
        ));
        assert!(buffer.is_empty());
    }
}
