//! Compaction: replacing the segments before a point with one *base* segment that holds
//! only what is still needed, then deleting them.
//!
//! The journal does not know which records are still needed (that is the pilot's
//! business); it provides the three crash-safe steps. [`crate::JournalWriter::seal`]
//! ends the current segment and leaves an empty placeholder segment after it, so that
//! everything appended before the seal is in segments below the placeholder and
//! everything after it above. [`write_base_segment`] writes the records to keep into a
//! temporary file, syncs it, and renames it over the placeholder (with the base flag in
//! its header): readers then skip every segment before it. [`retire_superseded`]
//! deletes those. A crash before the rename leaves an empty segment (harmless); after it,
//! superseded segments that are simply ignored and deleted by the next writer to open.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::JournalError;
use crate::format::{
    BASE_SEGMENT_FLAG, FILE_HEADER_BYTES, Position, SegmentNumber, encode_record, file_header_with,
};
use crate::segment::{last_base, list_segment_files};
use crate::writer::files::sync_directory;

/// Suffix of the temporary file a base segment is written to before it is renamed
/// into place (never a segment name, so readers ignore it).
const BASE_TEMPORARY_SUFFIX: &str = ".base";

/// Writes `records` as base segment `number` of the journal in `directory`, replacing
/// the empty placeholder that [`crate::JournalWriter::seal`] left there, and returns
/// where each record is. Durable on return (file and directory synced, whatever the
/// writer's sync mode). From then on readers start at this segment.
pub fn write_base_segment<R: Serialize>(
    directory: &Path,
    number: SegmentNumber,
    records: &[R],
) -> Result<Vec<Position>, JournalError> {
    let path = directory.join(number.file_name());
    let length = std::fs::metadata(&path).map_or(0, |metadata| metadata.len());
    if length != FILE_HEADER_BYTES {
        return Err(JournalError::NotAPlaceholder { path, length });
    }
    let mut buffer = file_header_with(BASE_SEGMENT_FLAG).to_vec();
    let mut positions = Vec::with_capacity(records.len());
    for record in records {
        positions.push(Position {
            segment: number,
            offset: buffer.len() as u64,
        });
        encode_record(&mut buffer, record)?;
    }
    let temporary = temporary_path(&path);
    let write_error = |source: io::Error| JournalError::WriteBase {
        path: temporary.clone(),
        source: source.into(),
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)
        .map_err(write_error)?;
    file.write_all(&buffer).map_err(write_error)?;
    file.sync_all().map_err(write_error)?;
    drop(file);
    std::fs::rename(&temporary, &path).map_err(|source| JournalError::WriteBase {
        path: path.clone(),
        source: source.into(),
    })?;
    sync_directory(directory)?;
    Ok(positions)
}

/// What [`retire_superseded`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retired {
    /// Segment files deleted.
    pub segments: u64,
    /// Their total size.
    pub bytes: u64,
}

/// Deletes the segments that the last base segment supersedes, and temporary files of
/// base segments that were never renamed into place (a compaction that crashed).
/// Lowest first, so a crash part-way leaves a contiguous run before the base.
pub fn retire_superseded(directory: &Path) -> Result<Retired, JournalError> {
    let mut retired = Retired::default();
    remove_temporaries(directory)?;
    let segments = list_segment_files(directory)?;
    let base = last_base(&segments)?;
    for segment in &segments[..base] {
        let bytes = std::fs::metadata(&segment.path).map_or(0, |metadata| metadata.len());
        std::fs::remove_file(&segment.path).map_err(|source| JournalError::RemoveSegment {
            path: segment.path.clone(),
            source: source.into(),
        })?;
        retired.segments += 1;
        retired.bytes += bytes;
    }
    if retired.segments > 0 {
        sync_directory(directory)?;
        tracing::debug!(directory = %directory.display(), ?retired, "retired superseded journal segments");
    }
    Ok(retired)
}

fn remove_temporaries(directory: &Path) -> Result<(), JournalError> {
    let list_error = |source: io::Error| JournalError::ListDirectory {
        path: directory.to_path_buf(),
        source: source.into(),
    };
    for entry in std::fs::read_dir(directory).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        let name = entry.file_name();
        let is_temporary = name.to_str().is_some_and(|name| {
            name.strip_suffix(BASE_TEMPORARY_SUFFIX)
                .and_then(SegmentNumber::parse_file_name)
                .is_some()
        });
        if is_temporary {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| JournalError::RemoveSegment {
                path,
                source: source.into(),
            })?;
        }
    }
    Ok(())
}

fn temporary_path(segment: &Path) -> PathBuf {
    let mut name = segment.as_os_str().to_owned();
    name.push(BASE_TEMPORARY_SUFFIX);
    PathBuf::from(name)
}

/// Total size of the segment files in `directory` (superseded ones included), for
/// reports and tests.
pub fn journal_bytes(directory: &Path) -> Result<u64, JournalError> {
    let segments = list_segment_files(directory)?;
    Ok(segments
        .iter()
        .filter_map(|segment| File::open(&segment.path).ok()?.metadata().ok())
        .map(|metadata| metadata.len())
        .sum())
}
