//! Reading a journal directory back: every record of every segment, in order.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::JournalError;
use crate::segment::{ScanStep, SegmentEntry, SegmentScanner, TornTail, list_segments};

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
            records: PhantomData,
        })
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
            match scanner.next_step() {
                Ok(ScanStep::Record { offset, payload }) => {
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
    /// The incomplete record the last segment ended with, if any (ignored: a record is
    /// only acknowledged after it is completely on disk, so a torn one never was).
    pub torn_tail: Option<TornTail>,
    /// Number of segment files read.
    pub segments: usize,
}

/// Reads every record of the journal in `directory`. Fails on the first defect that is not
/// a torn tail, naming the segment and byte offset.
pub fn read_all<R: DeserializeOwned>(directory: &Path) -> Result<ReadOutcome<R>, JournalError> {
    let mut reader = JournalReader::open(directory)?;
    let records = reader.by_ref().collect::<Result<Vec<R>, _>>()?;
    Ok(ReadOutcome {
        records,
        torn_tail: reader.torn_tail,
        segments: reader.segments.len(),
    })
}
