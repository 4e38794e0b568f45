//! Creating segment files durably, and cutting the torn tail off the last one on reopen.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::{FILE_HEADER_BYTES, SegmentNumber, file_header};
use crate::segment::{ScanStep, SegmentEntry, SegmentScanner};
use crate::stats::Counters;
use crate::{JournalError, SyncMode};

/// The segment the writer is appending to.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub(crate) number: SegmentNumber,
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    /// Bytes in the file (header included): the offset of the next write.
    pub(crate) length: u64,
}

/// Creates segment `number` in `directory` and writes its file header. With
/// [`SyncMode::Fsync`] the header and the directory entry are durable on return, so a crash
/// can never leave a gap in the segment numbers.
pub(crate) fn create_segment(
    directory: &Path,
    number: SegmentNumber,
    sync: SyncMode,
    counters: &Arc<Counters>,
) -> Result<ActiveSegment, JournalError> {
    let path = directory.join(number.file_name());
    let create_error = |source: io::Error| JournalError::CreateSegment {
        path: path.clone(),
        source: source.into(),
    };
    // `create_new`: never reuse (and so never append after the torn tail of) an old file.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(create_error)?;
    let written = file.write_all(&file_header()).and_then(|()| match sync {
        SyncMode::Fsync => file.sync_data(),
        SyncMode::None => Ok(()),
    });
    if let Err(source) = written {
        // A half-made segment (the disk filled under its header) must not stay: the
        // writer goes on in the segment before it, which would then not be the last.
        let _ = std::fs::remove_file(&path);
        return Err(create_error(source));
    }
    Counters::add(&counters.bytes_written, FILE_HEADER_BYTES);
    if sync == SyncMode::Fsync {
        Counters::add(&counters.data_syncs, 1);
        sync_directory(directory)?;
        Counters::add(&counters.directory_syncs, 1);
    }
    Counters::add(&counters.segments_created, 1);
    tracing::debug!(segment = %path.display(), "created journal segment");
    Ok(ActiveSegment {
        number,
        path,
        file,
        length: FILE_HEADER_BYTES,
    })
}

/// `fsync` on a directory, making the entries created in it durable.
pub(crate) fn sync_directory(directory: &Path) -> Result<(), JournalError> {
    File::open(directory)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| JournalError::SyncDirectory {
            path: directory.to_path_buf(),
            source: source.into(),
        })
}

/// Makes the last segment of a journal end on a record boundary before a new segment is
/// started after it, so that every segment but the last is whole (readers treat a defect
/// in a non-final segment as corruption).
///
/// A torn tail is cut off (those bytes were never acknowledged: a group is acknowledged
/// only after its `fdatasync` returned, and durable bytes cannot tear). A segment shorter
/// than its header gets a complete header. Corruption before the end is returned as an
/// error: the writer refuses to add to a journal that cannot be read back.
pub(crate) fn repair_last_segment(segment: &SegmentEntry) -> Result<(), JournalError> {
    let mut scanner = SegmentScanner::open(&segment.path, true)?;
    let torn_tail = loop {
        match scanner.next_step()? {
            ScanStep::Record { .. } => {}
            ScanStep::End => return Ok(()),
            ScanStep::Torn(torn_tail) => break torn_tail,
        }
    };
    drop(scanner);
    tracing::warn!(
        segment = %segment.path.display(),
        offset = torn_tail.offset,
        reason = %torn_tail.reason,
        "cutting the torn tail off the last journal segment"
    );
    let truncate_error = |source: io::Error| JournalError::TruncateSegment {
        path: segment.path.clone(),
        offset: torn_tail.offset,
        source: source.into(),
    };
    let mut file = OpenOptions::new()
        .write(true)
        .open(&segment.path)
        .map_err(truncate_error)?;
    if torn_tail.offset == 0 {
        // Torn inside the file header: write the whole header again.
        file.set_len(0).map_err(truncate_error)?;
        file.write_all(&file_header()).map_err(truncate_error)?;
    } else {
        file.set_len(torn_tail.offset).map_err(truncate_error)?;
    }
    // Always synced, whatever the sync mode: the next segment must not become durable
    // while this one still ends in garbage.
    file.sync_all().map_err(truncate_error)?;
    Ok(())
}
