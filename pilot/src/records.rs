//! What the root writes to its journal. The format of the journal file itself is
//! `saker-journal`'s (docs/journal.md); these are the JSON documents inside it.
//!
//! Designed for resume: a `Submit` holds the whole request and the task ids it was
//! given, so replaying `Submit`s rebuilds the queue exactly; `Result`s say which tasks
//! are already terminal and must not run again.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::attempts::AttemptNote;
use crate::results::ResultRecord;
use crate::spec::JobRequest;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// First record of every pilot start.
    PilotStarted {
        pilot_id: String,
        saker_version: String,
        started_unix_us: u64,
    },
    /// A job accepted from a client: acknowledged to the client only once durable.
    Submit {
        job: u32,
        first_task: u64,
        count: u32,
        submitted_unix_us: u64,
        request: JobRequest,
    },
    /// A task reached its terminal state (exactly once per task). Shared with the
    /// clients' view of the same result, so journaling it copies nothing.
    Result(Arc<ResultRecord>),
    /// A client cancelled a job.
    Cancel { job: u32, unix_us: u64 },
    /// An attempt of a task ended without counting (retried or replayed). Only such
    /// attempts are journaled one by one; the accepted one is in the task's `Result`,
    /// which carries these again as its history.
    Attempt { task: u64, note: AttemptNote },
}
