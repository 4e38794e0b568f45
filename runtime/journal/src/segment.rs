//! Segment files: listing them in order, and scanning one record by record.
//!
//! The scanner checks framing and checksums but not JSON, so the writer can use it to find
//! (and cut off) a torn tail without knowing the record type.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::JournalError;
use crate::format::{
    BASE_SEGMENT_FLAG, FILE_HEADER_BYTES, FORMAT_VERSION, MAGIC, MAX_RECORD_BYTES,
    RECORD_HEADER_BYTES, RecordDefect, SegmentNumber, file_header,
};

/// The end of the last segment did not hold a complete record: the writer crashed (or is
/// still writing) there. The bytes from `offset` on were never acknowledged as durable and
/// are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file (always the last one).
    pub segment: PathBuf,
    /// Byte offset in that file where the incomplete record starts; every byte before it
    /// belongs to complete, valid records.
    pub offset: u64,
    /// What was incomplete.
    pub reason: RecordDefect,
}

/// One segment file of a journal directory.
#[derive(Debug, Clone)]
pub(crate) struct SegmentEntry {
    pub(crate) number: SegmentNumber,
    pub(crate) path: PathBuf,
}

/// The segments of the journal in `directory`, in increasing order, from the last base
/// segment on (a compaction's base holds all that is still needed from the segments
/// before it, so they are not part of the journal any more); an error if the numbers
/// from there have a gap.
pub(crate) fn list_segments(directory: &Path) -> Result<Vec<SegmentEntry>, JournalError> {
    let mut segments = list_segment_files(directory)?;
    let base = last_base(&segments)?;
    let segments = segments.split_off(base);
    for pair in segments.windows(2) {
        if pair[1].number != pair[0].number.next() {
            return Err(JournalError::MissingSegment {
                directory: directory.to_path_buf(),
                missing: pair[0].number.next(),
            });
        }
    }
    Ok(segments)
}

/// Every segment file in `directory`, superseded ones included, in increasing order.
pub(crate) fn list_segment_files(directory: &Path) -> Result<Vec<SegmentEntry>, JournalError> {
    let list_error = |source: io::Error| JournalError::ListDirectory {
        path: directory.to_path_buf(),
        source: source.into(),
    };
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(directory).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        let Some(number) = entry
            .file_name()
            .to_str()
            .and_then(SegmentNumber::parse_file_name)
        else {
            continue;
        };
        segments.push(SegmentEntry {
            number,
            path: entry.path(),
        });
    }
    segments.sort_by_key(|segment| segment.number);
    Ok(segments)
}

/// Index in `segments` of the last base segment (0 if there is none). Reads headers
/// from the end, so only the segments since the last compaction are opened.
pub(crate) fn last_base(segments: &[SegmentEntry]) -> Result<usize, JournalError> {
    for (index, segment) in segments.iter().enumerate().rev() {
        if segment_flags(&segment.path)? & BASE_SEGMENT_FLAG != 0 {
            return Ok(index);
        }
    }
    Ok(0)
}

/// The flags of a segment's header; 0 for a file too short to have them (a segment
/// torn while being created is never a base: a base is complete before it is named).
fn segment_flags(path: &Path) -> Result<u32, JournalError> {
    let mut file = File::open(path).map_err(|source| JournalError::OpenSegment {
        path: path.to_path_buf(),
        source: source.into(),
    })?;
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    let mut read = 0;
    while read < header.len() {
        match file.read(&mut header[read..]) {
            Ok(0) => return Ok(0),
            Ok(count) => read += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(JournalError::ReadSegment {
                    path: path.to_path_buf(),
                    offset: 0,
                    source: source.into(),
                });
            }
        }
    }
    if header[..8] != MAGIC {
        return Ok(0);
    }
    Ok(u32::from_le_bytes([
        header[12], header[13], header[14], header[15],
    ]))
}

/// What the scanner found next.
#[derive(Debug)]
pub(crate) enum ScanStep<'scanner> {
    /// A complete record with a valid checksum, starting at `offset`.
    Record {
        offset: u64,
        payload: &'scanner [u8],
    },
    /// The segment ended exactly after a complete record (or its header).
    End,
    /// The last segment ends with an incomplete record.
    Torn(TornTail),
}

/// Reads one segment record by record.
#[derive(Debug)]
pub(crate) struct SegmentScanner {
    path: PathBuf,
    reader: BufReader<File>,
    /// Offset of the next record header.
    offset: u64,
    /// File length when the scanner opened it; a writer appending concurrently is not seen.
    length: u64,
    /// Whether a defect at the end is a torn tail (last segment) or corruption.
    is_last: bool,
    /// Set when the file is shorter than its header (only possible if `is_last`).
    short_file_header: Option<u64>,
    finished: bool,
    payload: Vec<u8>,
}

impl SegmentScanner {
    /// Opens a segment and checks its file header.
    pub(crate) fn open(path: &Path, is_last: bool) -> Result<Self, JournalError> {
        let file = File::open(path).map_err(|source| JournalError::OpenSegment {
            path: path.to_path_buf(),
            source: source.into(),
        })?;
        let read_error = |source: io::Error| JournalError::ReadSegment {
            path: path.to_path_buf(),
            offset: 0,
            source: source.into(),
        };
        let length = file.metadata().map_err(read_error)?.len();
        let mut reader = BufReader::with_capacity(256 * 1024, file);
        let available = length.min(FILE_HEADER_BYTES) as usize;
        let mut header = [0u8; FILE_HEADER_BYTES as usize];
        reader
            .read_exact(&mut header[..available])
            .map_err(read_error)?;
        let header = &header[..available];

        let magic_bytes = available.min(MAGIC.len());
        if header[..magic_bytes] != MAGIC[..magic_bytes] {
            return Err(JournalError::BadMagic {
                path: path.to_path_buf(),
                found: header[..magic_bytes].to_vec(),
            });
        }
        if available >= 12 {
            let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
            if version != FORMAT_VERSION {
                return Err(JournalError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    version,
                    supported: FORMAT_VERSION,
                });
            }
        }
        let short_file_header = if length < FILE_HEADER_BYTES {
            // A crash while creating the segment leaves a prefix of the header; anything
            // else this short is damage.
            if !is_last || header != &file_header()[..available] {
                return Err(JournalError::TruncatedFileHeader {
                    path: path.to_path_buf(),
                    length,
                });
            }
            Some(length)
        } else {
            None
        };
        Ok(Self {
            path: path.to_path_buf(),
            reader,
            offset: FILE_HEADER_BYTES,
            length,
            is_last,
            short_file_header,
            finished: false,
            payload: Vec::new(),
        })
    }

    /// Opens a segment to read from `offset` on (where a record starts).
    pub(crate) fn open_at(path: &Path, is_last: bool, offset: u64) -> Result<Self, JournalError> {
        let mut scanner = Self::open(path, is_last)?;
        if offset > scanner.offset {
            use std::io::Seek;
            let seek = scanner
                .reader
                .seek(io::SeekFrom::Start(offset))
                .map_err(|source| JournalError::ReadSegment {
                    path: path.to_path_buf(),
                    offset,
                    source: source.into(),
                });
            seek?;
            scanner.offset = offset.min(scanner.length);
        }
        Ok(scanner)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The next record, the end of the segment, or its torn tail. After an error, a torn
    /// tail or the end, every further call returns `End`.
    pub(crate) fn next_step(&mut self) -> Result<ScanStep<'_>, JournalError> {
        if self.finished {
            return Ok(ScanStep::End);
        }
        if let Some(length) = self.short_file_header {
            self.finished = true;
            return Ok(ScanStep::Torn(TornTail {
                segment: self.path.clone(),
                offset: 0,
                reason: RecordDefect::ShortFileHeader { length },
            }));
        }
        let offset = self.offset;
        let remaining = self.length - offset;
        if remaining == 0 {
            self.finished = true;
            return Ok(ScanStep::End);
        }
        if remaining < RECORD_HEADER_BYTES {
            return self.defect(RecordDefect::ShortHeader {
                available: remaining,
            });
        }
        let mut header = [0u8; RECORD_HEADER_BYTES as usize];
        self.read_exact_at_offset(offset, &mut header)?;
        let declared = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let available = remaining - RECORD_HEADER_BYTES;

        if declared == 0 {
            if self.is_last && stored == 0 && self.rest_is_zero(offset, available)? {
                return self.defect(RecordDefect::ZeroFilled { length: remaining });
            }
            return self.corrupt(RecordDefect::ZeroLength);
        }
        if declared > MAX_RECORD_BYTES {
            return self.corrupt(RecordDefect::TooLong { declared });
        }
        if u64::from(declared) > available {
            return self.defect(RecordDefect::ShortPayload {
                declared,
                available,
            });
        }

        let mut payload = std::mem::take(&mut self.payload);
        payload.resize(declared as usize, 0);
        let read = self.read_exact_at_offset(offset + RECORD_HEADER_BYTES, &mut payload);
        self.payload = payload;
        read?;
        let computed = crc32fast::hash(&self.payload);
        if computed != stored {
            let defect = RecordDefect::ChecksumMismatch { stored, computed };
            // Only a record reaching exactly to the end of the last segment can be torn;
            // with anything after it, it is damage in the middle of the journal.
            return if u64::from(declared) == available {
                self.defect(defect)
            } else {
                self.corrupt(defect)
            };
        }
        self.offset = offset + RECORD_HEADER_BYTES + u64::from(declared);
        Ok(ScanStep::Record {
            offset,
            payload: &self.payload,
        })
    }

    /// A defect that reaches the end of the segment: torn if this is the last segment.
    fn defect(&mut self, defect: RecordDefect) -> Result<ScanStep<'_>, JournalError> {
        if !self.is_last {
            return self.corrupt(defect);
        }
        self.finished = true;
        Ok(ScanStep::Torn(TornTail {
            segment: self.path.clone(),
            offset: self.offset,
            reason: defect,
        }))
    }

    fn corrupt(&mut self, defect: RecordDefect) -> Result<ScanStep<'_>, JournalError> {
        self.finished = true;
        Err(JournalError::CorruptRecord {
            path: self.path.clone(),
            offset: self.offset,
            defect,
        })
    }

    fn read_exact_at_offset(&mut self, offset: u64, buffer: &mut [u8]) -> Result<(), JournalError> {
        self.reader.read_exact(buffer).map_err(|source| {
            self.finished = true;
            JournalError::ReadSegment {
                path: self.path.clone(),
                offset,
                source: source.into(),
            }
        })
    }

    /// Whether the next `count` bytes are all zero (consumes them).
    fn rest_is_zero(&mut self, offset: u64, mut count: u64) -> Result<bool, JournalError> {
        let mut chunk = vec![0u8; 64 * 1024];
        while count > 0 {
            let take = count.min(chunk.len() as u64) as usize;
            self.read_exact_at_offset(offset, &mut chunk[..take])?;
            if chunk[..take].iter().any(|byte| *byte != 0) {
                return Ok(false);
            }
            count -= take as u64;
        }
        Ok(true)
    }
}
