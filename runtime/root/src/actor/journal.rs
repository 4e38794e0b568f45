//! The root's journal, behind a trait so that the root's logic runs in unit tests
//! without a disk (`tests.rs` keeps records in memory): what a turn appends, what
//! waits for it to be durable, where results are read back from, and compaction.
//!
//! In a pilot, [`ActorJournal`] appends through the journal's writer (at once when
//! it need not sync, see [`JournalWriter::append_now`]) and compacts on threads of
//! its own.

use std::path::PathBuf;
use std::sync::Arc;

use ractor::ActorRef;
use saker_journal::{JournalError, JournalReader, JournalWriter, Position};

use super::message::RootMsg;
use crate::client::Reply;
use crate::compact::{CompactionError, KeepResults};
use crate::records::Record;
use saker_client::results::ResultRecord;
use saker_client::{
    ErrorKind, RequestError, SubmitReply, SubmittedJob, SubmittedLines, UpdateReport,
};

/// Where the root's records go and its results come back from.
pub trait Journal: std::fmt::Debug + Send + 'static {
    /// Appends `records`; once they are durable (or the journal
    /// failed), `after` is finished ([`AfterJournal::finish`]). When the journal wrote
    /// them at once (it does not sync, and nothing was queued ahead), `after` is
    /// finished before this returns and what the root must then handle is returned,
    /// to be handled in the same turn; otherwise it comes later as a message.
    fn append(&mut self, records: Vec<Record>, after: AfterJournal) -> Option<RootMsg>;
    /// Flushes and closes the journal (the root is stopping).
    fn close(&mut self);
    /// Whether the journal holds records its disk has no room for: appends wait for
    /// space ([`JournalWriter::is_waiting_for_space`]).
    fn waiting_for_space(&self) -> bool {
        false
    }
    /// Where durable results are read back from.
    fn results(&self) -> Arc<dyn ResultSource>;
    /// Segments the journal writer has started (compaction is due by this count).
    fn segments(&self) -> u64 {
        0
    }
    /// Compacts the journal under `keep` (`compaction.rs`); the outcome comes back as
    /// [`RootMsg::Compacted`].
    fn compact(&mut self, _keep: KeepResults, _now_unix_us: u64) {}
    /// Deletes the journal segments the last compaction superseded.
    fn retire_superseded(&mut self) {}
}

/// Why results could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the journal holds no result at {position}")]
    NotAResult { position: Position },
    #[error("reading the journal failed")]
    Journal(#[source] JournalError),
}

/// Where durable results are read back from.
pub trait ResultSource: std::fmt::Debug + Send + Sync + 'static {
    /// The result at `position`.
    fn read(&self, position: Position) -> Result<Arc<ResultRecord>, ReadError>;

    /// The results from `position` on, in journal order, each given to `visit` until
    /// it returns false.
    fn read_from(
        &self,
        position: Position,
        visit: &mut dyn FnMut(Arc<ResultRecord>) -> bool,
    ) -> Result<(), ReadError>;
}

/// A pilot's results: its journal.
#[derive(Debug)]
pub struct JournalResults {
    pub directory: PathBuf,
}

impl ResultSource for JournalResults {
    fn read(&self, position: Position) -> Result<Arc<ResultRecord>, ReadError> {
        match saker_journal::read_at::<Record>(&self.directory, position) {
            Ok(Record::Result(record)) => Ok(record),
            Ok(_) => Err(ReadError::NotAResult { position }),
            Err(error) => Err(ReadError::Journal(error)),
        }
    }

    fn read_from(
        &self,
        position: Position,
        visit: &mut dyn FnMut(Arc<ResultRecord>) -> bool,
    ) -> Result<(), ReadError> {
        let reader = JournalReader::<Record>::open_at(&self.directory, position)
            .map_err(ReadError::Journal)?;
        for record in reader {
            match record {
                Ok(Record::Result(result)) => {
                    if !visit(result) {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(error) => return Err(ReadError::Journal(error)),
            }
        }
        Ok(())
    }
}

/// What waits for records to become durable.
#[derive(Debug)]
pub enum AfterJournal {
    /// Nothing (cancellations): a failed append is reported by the next one.
    Nothing,
    /// Accepted results, shown to clients once durable; and the last report read of
    /// each node, whose agent is then told its results are durable.
    Results(Vec<Arc<ResultRecord>>, Vec<(saker_core::NodeId, u64)>),
    /// A submission, acknowledged once durable: an acknowledged job survives a crash.
    Acknowledge {
        reply: Reply<SubmitReply>,
        jobs: Vec<SubmittedJob>,
    },
    /// A `submit_lines`, acknowledged once durable.
    AcknowledgeLines {
        reply: Reply<SubmittedLines>,
        submitted: SubmittedLines,
    },
    /// An update, answered once durable: an answered update survives a crash.
    Updated {
        reply: Reply<UpdateReport>,
        report: UpdateReport,
    },
    /// An object a client put, answered once durable.
    Put { reply: Reply<()> },
}

impl AfterJournal {
    /// Finishes what waited, given the journal's outcome. Returns what the root must
    /// then handle. Runs on the journal's thread in a pilot, so an acknowledgement goes
    /// to its client without waiting for a turn of the root.
    /// `outcome` says where each of the append's records is.
    pub fn finish(self, outcome: Result<Vec<Position>, JournalError>) -> Option<RootMsg> {
        let outcome = match (self, outcome) {
            (AfterJournal::Results(results, reports), Ok(mut positions)) => {
                // The results are the append's last records.
                let first = positions.len().saturating_sub(results.len());
                let positions = positions.split_off(first);
                return Some(RootMsg::Durable {
                    results,
                    positions,
                    reports,
                });
            }
            (after, outcome) => (after, outcome.map(drop)),
        };
        match outcome {
            (AfterJournal::Nothing, _) => None,
            (AfterJournal::Results(..), Ok(())) => None,
            (AfterJournal::Results(..), Err(error)) => Some(RootMsg::JournalFailed { error }),
            (AfterJournal::Acknowledge { reply, jobs }, outcome) => {
                let answer = outcome
                    .map(|()| SubmitReply::acknowledged(jobs))
                    .map_err(|error| {
                        RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                    });
                let _ = reply.send(answer);
                None
            }
            (AfterJournal::AcknowledgeLines { reply, submitted }, outcome) => {
                let answer = outcome.map(|()| submitted).map_err(|error| {
                    RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                });
                let _ = reply.send(answer);
                None
            }
            (AfterJournal::Put { reply }, outcome) => {
                let answer = outcome.map_err(|error| {
                    RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                });
                let _ = reply.send(answer);
                None
            }
            (AfterJournal::Updated { reply, report }, outcome) => {
                let answer = outcome.map(|()| report).map_err(|error| {
                    RequestError::new(ErrorKind::Internal, format!("journal failed: {error}"))
                });
                let _ = reply.send(answer);
                None
            }
        }
    }
}

/// The pilot's journal: its writer, and the directory results are read back from.
#[derive(Debug)]
pub struct ActorJournal {
    myself: ActorRef<RootMsg>,
    journal: Option<JournalWriter<Record>>,
    results: Arc<JournalResults>,
}

impl ActorJournal {
    pub fn new(myself: ActorRef<RootMsg>, journal: JournalWriter<Record>) -> ActorJournal {
        ActorJournal {
            myself,
            results: Arc::new(JournalResults {
                directory: journal.directory().to_path_buf(),
            }),
            journal: Some(journal),
        }
    }
}

impl Journal for ActorJournal {
    fn append(&mut self, records: Vec<Record>, after: AfterJournal) -> Option<RootMsg> {
        let Some(journal) = &self.journal else {
            return after.finish(Err(JournalError::WriterStopped));
        };
        // Written here when the journal need not sync and waits for nothing: no thread
        // is woken, and the root sees its results durable in the same turn.
        let records = match journal.append_now(records) {
            Ok(outcome) => return after.finish(outcome),
            Err(records) => records,
        };
        let myself = self.myself.clone();
        journal.append_at(records, move |outcome| {
            if let Some(message) = after.finish(outcome) {
                let _ = myself.send_message(message);
            }
        });
        None
    }

    fn results(&self) -> Arc<dyn ResultSource> {
        self.results.clone()
    }

    fn waiting_for_space(&self) -> bool {
        self.journal
            .as_ref()
            .is_some_and(JournalWriter::is_waiting_for_space)
    }

    fn segments(&self) -> u64 {
        self.journal
            .as_ref()
            .map_or(0, |journal| journal.stats().segments_created)
    }

    fn compact(&mut self, keep: KeepResults, now_unix_us: u64) {
        let myself = self.myself.clone();
        let Some(journal) = &self.journal else {
            let _ = myself.send_message(RootMsg::Compacted(Err(CompactionError::Closed)));
            return;
        };
        let directory = journal.directory().to_path_buf();
        journal.seal(move |sealed| {
            let reply = myself.clone();
            // Off the writer thread: reading and rewriting the history takes a while.
            let spawned = std::thread::Builder::new()
                .name("saker-journal-compact".into())
                .spawn(move || {
                    let outcome = sealed.map_err(CompactionError::Seal).and_then(|base| {
                        crate::compact::run_compaction(&directory, base, keep, now_unix_us)
                    });
                    let _ = reply.send_message(RootMsg::Compacted(outcome));
                });
            if let Err(error) = spawned {
                let _ =
                    myself.send_message(RootMsg::Compacted(Err(CompactionError::Thread(error))));
            }
        });
    }

    fn retire_superseded(&mut self) {
        let directory = self.results.directory.clone();
        let spawned = std::thread::Builder::new()
            .name("saker-journal-retire".into())
            .spawn(move || {
                if let Err(error) = saker_journal::retire_superseded(&directory) {
                    tracing::error!(error = %saker_actors::error_chain(&error),
                        "deleting superseded journal segments failed");
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start a thread to delete superseded journal segments");
        }
    }

    fn close(&mut self) {
        if let Some(journal) = self.journal.take()
            && let Err(error) = journal.close()
        {
            tracing::error!(%error, "closing the journal failed");
        }
    }
}
