//! Reading a journal directory back: every record of every segment, in order.

use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::JournalError;
use crate::format::{MAX_RECORD_BYTES, Position, RECORD_HEADER_BYTES, RecordDefect};
use crate::segment::{
    ScanStep, SegmentEntry, SegmentScanner, TornTail, list_segment_files, list_segments,
};

/// Iterates over the records of a journal directory, segment by segment, in the order they
/// were appended.
///
/// Yields `Ok(record)` for each valid record. A torn tail at the end of the last segment
/// ends the iteration quietly (see [`JournalReader::torn_tail`]); any other defect yields
/// one `Err` naming the segment and byte offset, after which the iterator is exhausted.
/// The set of segments and the length of each are taken when they are opened, so reading
/// a journal that a writer is still appending to sees a consistent prefix (possibly with
/// a torn tail where a group is half written).
#[derive(Debug)]
pub struct JournalReader<R> {
    directory: PathBuf,
    segments: Vec<SegmentEntry>,
    next_segment: usize,
    scanner: Option<SegmentScanner>,
    torn_tail: Option<TornTail>,
    finished: bool,
    /// Where the record last returned starts.
    last_position: Option<Position>,
    records: PhantomData<fn() -> R>,
}

impl<R: DeserializeOwned> JournalReader<R> {
    /// Lists the segments of `directory`. Fails if the directory cannot be listed or a
    /// segment number is missing; file contents are checked while iterating.
    pub fn open(directory: &Path) -> Result<Self, JournalError> {
        let segments = list_segments(directory)?;
        Ok(Self {
            directory: directory.to_path_buf(),
            segments,
            next_segment: 0,
            scanner: None,
            torn_tail: None,
            finished: false,
            last_position: None,
            records: PhantomData,
        })
    }

    /// Reads from `from` on: the records of its segment from that offset (which must
    /// be where a record starts, as [`crate::JournalWriter::append_at`] said), then
    /// every later segment. Fails if `from`'s segment is not in the journal. A segment
    /// a compaction superseded but did not delete yet is read too, then every later
    /// file, base included: records the base kept come again.
    pub fn open_at(directory: &Path, from: Position) -> Result<Self, JournalError> {
        let mut reader = Self::open(directory)?;
        if !reader
            .segments
            .iter()
            .any(|segment| segment.number == from.segment)
        {
            // A position a compaction has superseded, its segment not yet deleted: read
            // on from there through every later file (the base repeats what was kept).
            let all = list_segment_files(directory)?;
            let later: Vec<SegmentEntry> = all
                .into_iter()
                .filter(|segment| segment.number >= from.segment)
                .collect();
            let contiguous = later
                .iter()
                .zip(later.iter().skip(1))
                .all(|(a, b)| b.number == a.number.next());
            if later.first().map(|segment| segment.number) == Some(from.segment) && contiguous {
                reader.segments = later;
            }
        }
        let Some(index) = reader
            .segments
            .iter()
            .position(|segment| segment.number == from.segment)
        else {
            return Err(JournalError::MissingSegment {
                directory: directory.to_path_buf(),
                missing: from.segment,
            });
        };
        let is_last = index + 1 == reader.segments.len();
        let scanner = SegmentScanner::open_at(&reader.segments[index].path, is_last, from.offset)?;
        reader.scanner = Some(scanner);
        reader.next_segment = index + 1;
        Ok(reader)
    }

    /// Where the record the iterator returned last starts.
    pub fn last_position(&self) -> Option<Position> {
        self.last_position
    }

    /// The journal directory being read.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// Number of segment files found when the reader was opened.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The torn tail found at the end of the last segment, once iteration reached it.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn_tail.as_ref()
    }

    fn fail(&mut self, error: JournalError) -> Option<Result<R, JournalError>> {
        self.finished = true;
        self.scanner = None;
        Some(Err(error))
    }
}

impl<R: DeserializeOwned> Iterator for JournalReader<R> {
    type Item = Result<R, JournalError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.finished {
                return None;
            }
            let scanner = match &mut self.scanner {
                Some(scanner) => scanner,
                None => {
                    let Some(segment) = self.segments.get(self.next_segment) else {
                        self.finished = true;
                        return None;
                    };
                    let is_last = self.next_segment + 1 == self.segments.len();
                    self.next_segment += 1;
                    match SegmentScanner::open(&segment.path, is_last) {
                        Ok(scanner) => self.scanner.insert(scanner),
                        Err(error) => return self.fail(error),
                    }
                }
            };
            let segment = self.segments[self.next_segment - 1].number;
            match scanner.next_step() {
                Ok(ScanStep::Record { offset, payload }) => {
                    self.last_position = Some(Position { segment, offset });
                    return match serde_json::from_slice(payload) {
                        Ok(record) => Some(Ok(record)),
                        Err(source) => {
                            let error = JournalError::DecodeRecord {
                                path: scanner.path().to_path_buf(),
                                offset,
                                source: source.into(),
                            };
                            self.fail(error)
                        }
                    };
                }
                Ok(ScanStep::End) => self.scanner = None,
                Ok(ScanStep::Torn(torn_tail)) => {
                    self.torn_tail = Some(torn_tail);
                    self.finished = true;
                    self.scanner = None;
                    return None;
                }
                Err(error) => return self.fail(error),
            }
        }
    }
}

impl<R: DeserializeOwned> std::iter::FusedIterator for JournalReader<R> {}

/// Everything a journal holds, as read by [`read_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome<R> {
    /// Every complete record, in append order.
    pub records: Vec<R>,
    /// Where each of `records` is.
    pub positions: Vec<Position>,
    /// The incomplete record the last segment ended with, if any (ignored: a record is
    /// only acknowledged after it is completely on disk, so a torn one never was).
    pub torn_tail: Option<TornTail>,
    /// Number of segment files read.
    pub segments: usize,
}

/// Reads the one record at `position` of the journal in `directory` (a position the
/// writer gave, [`crate::JournalWriter::append_at`]): framing and checksum are checked,
/// so a wrong or stale position is an error, never a wrong record.
pub fn read_at<R: DeserializeOwned>(
    directory: &Path,
    position: Position,
) -> Result<R, JournalError> {
    let path = directory.join(position.segment.file_name());
    let file = File::open(&path).map_err(|source| JournalError::OpenSegment {
        path: path.clone(),
        source: source.into(),
    })?;
    let read_error = |offset: u64| {
        let path = path.clone();
        move |source: std::io::Error| JournalError::ReadSegment {
            path,
            offset,
            source: source.into(),
        }
    };
    let mut header = [0u8; RECORD_HEADER_BYTES as usize];
    file.read_exact_at(&mut header, position.offset)
        .map_err(read_error(position.offset))?;
    let declared = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let corrupt = |defect| JournalError::CorruptRecord {
        path: path.clone(),
        offset: position.offset,
        defect,
    };
    if declared == 0 {
        return Err(corrupt(RecordDefect::ZeroLength));
    }
    if declared > MAX_RECORD_BYTES {
        return Err(corrupt(RecordDefect::TooLong { declared }));
    }
    let mut payload = vec![0u8; declared as usize];
    let start = position.offset + RECORD_HEADER_BYTES;
    file.read_exact_at(&mut payload, start)
        .map_err(read_error(start))?;
    let computed = crc32fast::hash(&payload);
    if computed != stored {
        return Err(corrupt(RecordDefect::ChecksumMismatch { stored, computed }));
    }
    serde_json::from_slice(&payload).map_err(|source| JournalError::DecodeRecord {
        path,
        offset: position.offset,
        source: source.into(),
    })
}

/// Reads every record of the journal in `directory`. Fails on the first defect that is not
/// a torn tail, naming the segment and byte offset.
pub fn read_all<R: DeserializeOwned>(directory: &Path) -> Result<ReadOutcome<R>, JournalError> {
    let mut reader = JournalReader::open(directory)?;
    let (mut records, mut positions) = (Vec::new(), Vec::new());
    while let Some(record) = reader.next() {
        records.push(record?);
        // Invariant: a record was just returned, so its position is known.
        positions.extend(reader.last_position());
    }
    Ok(ReadOutcome {
        records,
        positions,
        torn_tail: reader.torn_tail,
        segments: reader.segments.len(),
    })
}
