//! The root's durable record of submissions and accepted results.
//!
//! **Owns:** the journal directory inside the pilot directory — its file format (segment
//! files of length-prefixed, CRC-checked JSON records, specified in `docs/journal.md`), the
//! group-commit writer thread, and the reader that turns the files back into records.
//! It is generic over the record type `R`; the pilot crate defines the records.
//!
//! **Must never:** depend on tokio or any async runtime (callers complete their own
//! oneshots inside the durability callback); acknowledge a record before it is durable;
//! drop a callback without running it; panic on a damaged file (every defect is a
//! [`JournalError`] naming the segment and byte offset); append to a file a crashed writer
//! left behind.
//!
//! **Start reading** at [`JournalWriter`] (`writer.rs`), then the group-commit loop in
//! `writer/committer.rs`; for reading, [`read_all`] and the per-segment scanner in
//! `segment.rs`, which holds the torn-tail rules; `format.rs` is the byte layout;
//! `compact.rs` the crash-safe steps of a compaction (what to keep is the pilot's).
//!
//! **Design decision: one writer thread, group commit, callback acknowledgement.**
//! An `fdatasync` costs from tens of microseconds (NVMe) to milliseconds (network file
//! systems, where pilot directories usually live), while encoding a record costs well
//! under one. Syncing per record would cap the root at a few thousand submissions per
//! second; a single thread that takes everything queued, writes it with one `write` and
//! syncs it with one `fdatasync` makes the number of syncs follow the disk, not the load:
//! the slower the sync, the more records the next group carries. The thread is plain std
//! (a channel in, callbacks out) rather than a tokio task so that the blocking sync never
//! occupies an async worker and the crate stays usable from synchronous tools; callers in
//! async code complete a `tokio::sync::oneshot` inside the callback, which costs nothing
//! extra. Records are encoded on the writer thread, keeping the root's actor loop free of
//! JSON work. Records are JSON, not rkyv, because the journal is read rarely (on resume),
//! must stay readable across versions of the record types, and should be inspectable by
//! other tools; the writer is limited by the sync, not by encoding.

mod compact;
mod error;
mod format;
mod reader;
mod segment;
mod stats;
mod writer;

pub use compact::{Retired, journal_bytes, retire_superseded, write_base_segment};
pub use error::JournalError;
pub use format::{
    BASE_SEGMENT_FLAG, DEFAULT_MAX_SEGMENT_BYTES, FILE_HEADER_BYTES, FORMAT_VERSION, MAGIC,
    MAX_RECORD_BYTES, Position, RECORD_HEADER_BYTES, RecordDefect, SegmentNumber,
};
pub use reader::{JournalReader, ReadOutcome, read_all, read_at};
pub use segment::TornTail;
pub use stats::WriterStats;
pub use writer::{JournalWriter, SyncMode, WriterOptions};
