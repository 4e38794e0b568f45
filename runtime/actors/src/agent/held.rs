//! Results held while no root hears this node, on its disk past the memory bound
//! ([`crate::board::AWAY_MEMORY_BYTES`]): appended to one file in the node's scratch
//! directory as length-prefixed rkyv archives, read back (and checked) at the next
//! life, then removed. The board decides when; this only writes and reads.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use saker_wire::messages::TaskResult;

/// The file under the node's scratch directory.
pub(crate) fn path(scratch: &Path) -> PathBuf {
    scratch.join("held-results.bin")
}

/// Why held results could not be written or read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeldError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the file ends inside a result", path.display())]
    Truncated { path: PathBuf },
    #[error("{}: a result does not read back", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: rkyv::rancor::Error,
    },
}

/// Appends `results` to the file at `path`, synced.
pub(crate) fn write(path: &Path, results: &[TaskResult]) -> Result<(), HeldError> {
    let io = |source| HeldError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut buffer = Vec::new();
    for result in results {
        let bytes =
            rkyv::to_bytes::<rkyv::rancor::Error>(result).map_err(|source| HeldError::Corrupt {
                path: path.to_owned(),
                source,
            })?;
        buffer.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        buffer.extend_from_slice(&bytes);
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    file.write_all(&buffer).map_err(io)?;
    file.sync_data().map_err(io)
}

/// Every result in the file at `path`, in the order written; the file is removed.
pub(crate) fn read(path: &Path) -> Result<Vec<TaskResult>, HeldError> {
    let io = |source| HeldError::Io {
        path: path.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(io)?;
    let mut results = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        let corrupt = |source| HeldError::Corrupt {
            path: path.to_owned(),
            source,
        };
        let truncated = || HeldError::Truncated {
            path: path.to_owned(),
        };
        let Some((length, after)) = rest.split_first_chunk::<8>() else {
            return Err(truncated());
        };
        let length = usize::try_from(u64::from_le_bytes(*length)).unwrap_or(usize::MAX);
        if after.len() < length {
            return Err(truncated());
        }
        // Copied into an aligned buffer: the file's bytes sit at any offset.
        let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(length);
        aligned.extend_from_slice(&after[..length]);
        results
            .push(rkyv::from_bytes::<TaskResult, rkyv::rancor::Error>(&aligned).map_err(corrupt)?);
        rest = &after[length..];
    }
    std::fs::remove_file(path).map_err(io)?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_wire::messages::{AttemptId, Outcome, Output, ResultBody, TaskId};

    fn result(task: u64, stdout: &[u8]) -> TaskResult {
        let output = |bytes: &[u8]| Output {
            inline: bytes.to_vec(),
            total_bytes: bytes.len() as u64,
            spill_path: None,
        };
        TaskResult {
            task: TaskId(task),
            attempt: AttemptId(task + 100),
            executor: 1,
            outcome: Outcome::Exited { code: 0 },
            received_unix_us: 1,
            start_unix_us: 2,
            end_unix_us: 3,
            fetch_us: 0,
            body: ResultBody::Command {
                stdout: output(stdout),
                stderr: output(b""),
            },
        }
    }

    #[test]
    fn results_written_in_two_rounds_read_back_in_order_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(&dir.path().join("node-0"));
        write(&file, &[result(1, b"one"), result(2, b"")]).unwrap();
        write(&file, &[result(3, &[7; 1000])]).unwrap();
        let read = read(&file).unwrap();
        assert_eq!(
            read,
            vec![result(1, b"one"), result(2, b""), result(3, &[7; 1000])]
        );
        assert!(!file.exists());
    }

    #[test]
    fn a_cut_or_garbled_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        write(&file, &[result(1, b"one")]).unwrap();
        let whole = std::fs::read(&file).unwrap();
        std::fs::write(&file, &whole[..whole.len() - 3]).unwrap();
        assert!(matches!(read(&file), Err(HeldError::Truncated { .. })));
        let mut garbled = whole.clone();
        let last = garbled.len() - 1;
        garbled[8..last].fill(0xff);
        std::fs::write(&file, &garbled).unwrap();
        assert!(matches!(read(&file), Err(HeldError::Corrupt { .. })));
        std::fs::write(&file, [1, 2, 3]).unwrap();
        assert!(matches!(read(&file), Err(HeldError::Truncated { .. })));
        assert!(matches!(
            read(&dir.path().join("none")),
            Err(HeldError::Io { .. })
        ));
    }
}
