//! The one error type of the crate.
//!
//! `JournalError` is `Clone` because a single writer failure is delivered to every pending
//! and later durability callback; I/O and JSON causes are therefore held in `Arc`s.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::format::{RecordDefect, SegmentNumber};

/// Everything that can go wrong while writing or reading a journal.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The journal directory could not be created.
    #[error("cannot create journal directory {path}")]
    CreateDirectory {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// The journal directory could not be listed.
    #[error("cannot list journal directory {path}")]
    ListDirectory {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// A directory could not be fsynced after a segment was created in it.
    #[error("cannot sync directory {path}")]
    SyncDirectory {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// A new segment file could not be created (or its header not written).
    #[error("cannot create journal segment {path}")]
    CreateSegment {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// An existing segment file could not be opened.
    #[error("cannot open journal segment {path}")]
    OpenSegment {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// Reading a segment failed at the operating-system level.
    #[error("cannot read journal segment {path} at byte offset {offset}")]
    ReadSegment {
        path: PathBuf,
        offset: u64,
        #[source]
        source: Arc<io::Error>,
    },

    /// Writing a group of records failed (disk full, EIO, ...).
    #[error("cannot write journal segment {path} at byte offset {offset}")]
    WriteSegment {
        path: PathBuf,
        offset: u64,
        #[source]
        source: Arc<io::Error>,
    },

    /// `fdatasync` of a segment failed; the group it covered is not durable.
    #[error("cannot sync journal segment {path}")]
    SyncSegment {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// Cutting a torn tail off the last segment (when a writer reopens a journal) failed.
    #[error("cannot truncate the torn tail of journal segment {path} at byte offset {offset}")]
    TruncateSegment {
        path: PathBuf,
        offset: u64,
        #[source]
        source: Arc<io::Error>,
    },

    /// The file does not start with `SAKERJ01`: it is not a journal segment.
    #[error(
        "journal segment {path} does not start with the magic bytes SAKERJ01 (found {found:02x?})"
    )]
    BadMagic { path: PathBuf, found: Vec<u8> },

    /// The segment was written in a format version this build cannot read.
    #[error(
        "journal segment {path} has format version {version}; this build reads version {supported}"
    )]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        supported: u32,
    },

    /// A segment that is not the last one is shorter than the 16-byte file header.
    #[error("journal segment {path} is {length} bytes, shorter than the 16-byte file header")]
    TruncatedFileHeader { path: PathBuf, length: u64 },

    /// A record is damaged somewhere a crash cannot explain (not the torn tail of the
    /// last segment): the journal is corrupt and reading stops here.
    #[error("corrupt journal record in {path} at byte offset {offset}: {defect}")]
    CorruptRecord {
        path: PathBuf,
        offset: u64,
        defect: RecordDefect,
    },

    /// A record is intact (length and checksum match) but its JSON is not a valid `R`.
    #[error(
        "journal record in {path} at byte offset {offset} does not decode as the expected type"
    )]
    DecodeRecord {
        path: PathBuf,
        offset: u64,
        #[source]
        source: Arc<serde_json::Error>,
    },

    /// A record could not be serialized to JSON; nothing of its append was written.
    #[error("cannot encode a journal record as json")]
    EncodeRecord {
        #[source]
        source: Arc<serde_json::Error>,
    },

    /// A record's JSON is longer than the format allows; nothing of its append was written.
    #[error("journal record of {length} bytes exceeds the limit of {limit} bytes")]
    RecordTooLarge { length: u64, limit: u32 },

    /// Segment numbers are not contiguous: a segment file has been lost.
    #[error("journal directory {directory} has no segment {missing} (segments must be contiguous)")]
    MissingSegment {
        directory: PathBuf,
        missing: SegmentNumber,
    },

    /// The writer thread could not be started.
    /// A compaction's base segment could not be written or put in place.
    #[error("cannot write journal base segment {path}")]
    WriteBase {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    /// A compaction may only replace the empty placeholder segment the writer sealed
    /// for it ([`crate::JournalWriter::seal`]); this one holds records, or is missing.
    #[error("journal segment {path} is not an empty placeholder ({length} bytes)")]
    NotAPlaceholder { path: PathBuf, length: u64 },

    /// A segment superseded by a base segment could not be deleted.
    #[error("cannot remove superseded journal segment {path}")]
    RemoveSegment {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },

    #[error("cannot start the journal writer thread")]
    SpawnWriter {
        #[source]
        source: Arc<io::Error>,
    },

    /// The writer thread is gone (it panicked, or the writer is being dropped) before this
    /// append was committed. Nothing is known about whether the records reached the disk.
    #[error("the journal writer thread stopped before the records were committed")]
    WriterStopped,

    /// An earlier write or sync failed; the writer accepts nothing after a failure, because
    /// after a failed fsync the state of the file is unknown.
    #[error("the journal writer failed earlier and accepts no more records")]
    WriterFailed {
        #[source]
        cause: Arc<JournalError>,
    },
}

impl JournalError {
    /// Whether this failed for want of space (ENOSPC, or a quota: EDQUOT): what the
    /// writer waits out instead of failing for good.
    pub fn is_disk_full(&self) -> bool {
        self.io_error().is_some_and(|error| {
            matches!(
                error.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            )
        })
    }

    /// The I/O error at the bottom of this error, if any (looking through `WriterFailed`).
    /// Lets callers tell "disk full" from "I/O error" without matching every variant.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Self::CreateDirectory { source, .. }
            | Self::ListDirectory { source, .. }
            | Self::SyncDirectory { source, .. }
            | Self::CreateSegment { source, .. }
            | Self::OpenSegment { source, .. }
            | Self::ReadSegment { source, .. }
            | Self::WriteSegment { source, .. }
            | Self::SyncSegment { source, .. }
            | Self::TruncateSegment { source, .. }
            | Self::WriteBase { source, .. }
            | Self::RemoveSegment { source, .. }
            | Self::SpawnWriter { source } => Some(source),
            Self::WriterFailed { cause } => cause.io_error(),
            Self::BadMagic { .. }
            | Self::UnsupportedVersion { .. }
            | Self::TruncatedFileHeader { .. }
            | Self::CorruptRecord { .. }
            | Self::DecodeRecord { .. }
            | Self::EncodeRecord { .. }
            | Self::RecordTooLarge { .. }
            | Self::MissingSegment { .. }
            | Self::NotAPlaceholder { .. }
            | Self::WriterStopped => None,
        }
    }
}
