//! The errors the root answers requests with, in words every owner shares.

use saker_client::{ErrorKind, RequestError};

pub(super) fn error(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError::new(kind, message)
}

pub(super) fn shutting_down() -> RequestError {
    error(ErrorKind::Unavailable, "the pilot is shutting down")
}

/// What a request the journal must record first is told while it cannot.
pub(super) fn disk_full() -> RequestError {
    error(
        ErrorKind::DiskFull,
        "disk full: the pilot's journal cannot be written, so nothing was submitted or changed; \
         running tasks go on and their results are kept until there is space; try again then",
    )
}
