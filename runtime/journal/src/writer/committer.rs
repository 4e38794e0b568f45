//! The writer thread: group commit.
//!
//! The loop blocks for one append, then takes whatever else is already queued (up to
//! `max_group_bytes`), encodes it into one buffer, writes the buffer with one `write`,
//! makes it durable with one `fdatasync`, and only then runs the group's callbacks, in
//! the order the appends were queued.
//!
//! The committer sits behind a mutex so that a caller may also commit an append itself
//! ([`Shared::append_now`]) when nothing is queued and no sync is due: the append is
//! then written on the caller's thread, with no thread woken on either side.

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;

use super::files::{ActiveSegment, create_segment};
use crate::format::{FILE_HEADER_BYTES, Position, SegmentNumber, encode_record};
use crate::stats::{Counters, WriterStats};
use crate::{JournalError, SyncMode, WriterOptions};

/// What an append's caller is told once its records are durable (or cannot be): where
/// each record is.
pub(crate) type Callback = Box<dyn FnOnce(Result<Vec<Position>, JournalError>) + Send + 'static>;

/// Owns an append's callback and guarantees it runs exactly once: if the completion is
/// dropped unrun (the writer thread died, or the queue was dropped with it still inside),
/// the callback is told [`JournalError::WriterStopped`].
pub(crate) struct Completion {
    callback: Option<Callback>,
}

impl Completion {
    pub(crate) fn new(callback: Callback) -> Self {
        Self {
            callback: Some(callback),
        }
    }

    fn complete(mut self, result: Result<Vec<Position>, JournalError>) {
        if let Some(callback) = self.callback.take() {
            run_callback(callback, result);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(callback) = self.callback.take() {
            run_callback(callback, Err(JournalError::WriterStopped));
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Completion")
            .field("pending", &self.callback.is_some())
            .finish()
    }
}

/// A panicking callback must not take the writer thread (and every later callback) down.
fn run_callback(callback: Callback, result: Result<Vec<Position>, JournalError>) {
    if catch_unwind(AssertUnwindSafe(move || callback(result))).is_err() {
        tracing::error!("a journal durability callback panicked; the writer carries on");
    }
}

/// One queued append.
#[derive(Debug)]
pub(crate) struct Command<R> {
    pub(crate) records: Vec<R>,
    pub(crate) completion: Completion,
}

/// What the writer thread is asked to do, in queue order.
pub(crate) enum Queued<R> {
    Append(Command<R>),
    /// End the current segment, leave an empty placeholder segment after it for a
    /// compaction's base, and go on in a new one; the callback is told the placeholder.
    Seal(SealCompletion),
}

/// Told the placeholder segment a seal left (or why there is none).
pub(crate) type SealCallback =
    Box<dyn FnOnce(Result<SegmentNumber, JournalError>) + Send + 'static>;

/// A seal's callback, run exactly once: told [`JournalError::WriterStopped`] if it is
/// dropped unrun, like an append's [`Completion`].
pub(crate) struct SealCompletion(Option<SealCallback>);

impl SealCompletion {
    pub(crate) fn new(callback: SealCallback) -> Self {
        Self(Some(callback))
    }

    fn complete(mut self, result: Result<SegmentNumber, JournalError>) {
        if let Some(callback) = self.0.take() {
            run_seal_callback(callback, result);
        }
    }
}

impl Drop for SealCompletion {
    fn drop(&mut self) {
        if let Some(callback) = self.0.take() {
            run_seal_callback(callback, Err(JournalError::WriterStopped));
        }
    }
}

fn run_seal_callback(callback: SealCallback, result: Result<SegmentNumber, JournalError>) {
    if catch_unwind(AssertUnwindSafe(move || callback(result))).is_err() {
        tracing::error!("a journal seal callback panicked; the writer carries on");
    }
}

/// The committer and how many queued items the writer thread has not taken yet,
/// shared by the writer's handle and its thread.
#[derive(Debug)]
pub(crate) struct Shared {
    committer: Mutex<Committer>,
    /// Appends and seals sent to the thread and not yet handled by it. Raised before
    /// sending and lowered, under the committer's lock, once handled: while it is 0
    /// under the lock, nothing is queued that an inline append would overtake.
    queued: AtomicU64,
}

impl Shared {
    pub(crate) fn new(committer: Committer) -> Shared {
        Shared {
            committer: Mutex::new(committer),
            queued: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Committer> {
        // A panic inside the committer leaves its state as consistent as any failed
        // write does: the next write finds out.
        self.committer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// One more item is about to be sent to the thread.
    pub(crate) fn queue_one(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }

    /// A queued item was not sent after all.
    pub(crate) fn unqueue_one(&self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }

    /// Writes `records` now, on this thread, if the writer does not sync and nothing
    /// is queued for its thread; otherwise gives them back. Appends stay in order:
    /// an inline append only happens when every earlier one is written.
    pub(crate) fn append_now<R: Serialize>(
        &self,
        records: Vec<R>,
    ) -> Result<Result<Vec<Position>, JournalError>, Vec<R>> {
        let mut committer = self.lock();
        if committer.options.sync != SyncMode::None || self.queued.load(Ordering::SeqCst) != 0 {
            return Err(records);
        }
        Counters::add(&committer.counters.appends_submitted, 1);
        let written = committer.append_now(&records);
        Counters::add(&committer.counters.appends_completed, 1);
        Ok(written)
    }

    /// The writer thread: runs until every sender is gone and the queue is drained;
    /// returns the final stats, or the failure that stopped the writer.
    pub(crate) fn run<R: Serialize>(
        &self,
        queue: Receiver<Queued<R>>,
    ) -> Result<WriterStats, JournalError> {
        while let Ok(first) = queue.recv() {
            let mut committer = self.lock();
            committer.handle(first);
            let mut taken = 1;
            while committer.group.len() < committer.options.max_group_bytes {
                match queue.try_recv() {
                    Ok(queued) => {
                        committer.handle(queued);
                        taken += 1;
                    }
                    Err(_) => break,
                }
            }
            committer.commit();
            self.queued.fetch_sub(taken, Ordering::SeqCst);
        }
        self.lock().finish()
    }
}

/// State of the writer thread.
#[derive(Debug)]
pub(crate) struct Committer {
    directory: PathBuf,
    options: WriterOptions,
    segment: ActiveSegment,
    /// Encoded records of the group being built, not yet written.
    group: Vec<u8>,
    group_records: u64,
    /// One append's records, encoded before deciding whether they fit the segment.
    scratch: Vec<u8>,
    /// Where each of those records starts in `scratch`.
    starts: Vec<u64>,
    /// Callbacks of the group being built, in queue order, with what each will be told
    /// if the group commits: where its records are (an append that failed to encode
    /// keeps its own error).
    waiting: Vec<(Completion, Result<Vec<Position>, JournalError>)>,
    /// Set by the first write, sync or segment-creation failure; the writer accepts
    /// nothing afterwards.
    failure: Option<Arc<JournalError>>,
    counters: Arc<Counters>,
}

impl Committer {
    pub(crate) fn new(
        directory: PathBuf,
        options: WriterOptions,
        segment: ActiveSegment,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            directory,
            options,
            segment,
            group: Vec::new(),
            group_records: 0,
            scratch: Vec::new(),
            starts: Vec::new(),
            waiting: Vec::new(),
            failure: None,
            counters,
        }
    }

    fn handle<R: Serialize>(&mut self, queued: Queued<R>) {
        match queued {
            Queued::Append(command) => self.handle_append(command),
            Queued::Seal(completion) => {
                let sealed = self.seal();
                completion.complete(sealed);
            }
        }
    }

    /// Commits what is queued before the seal, creates the placeholder segment (empty,
    /// durable) and then the next active segment after it.
    fn seal(&mut self) -> Result<SegmentNumber, JournalError> {
        self.commit();
        if let Some(cause) = &self.failure {
            let cause = Arc::clone(cause);
            return Err(JournalError::WriterFailed { cause });
        }
        let placeholder = self.segment.number.next();
        let created = create_segment(
            &self.directory,
            placeholder,
            self.options.sync,
            &self.counters,
        )
        .and_then(|_| {
            self.segment = create_segment(
                &self.directory,
                placeholder.next(),
                self.options.sync,
                &self.counters,
            )?;
            Ok(placeholder)
        });
        if let Err(error) = &created {
            self.fail(error.clone());
        }
        created
    }

    fn handle_append<R: Serialize>(&mut self, command: Command<R>) {
        let Command {
            records,
            completion,
        } = command;
        match self.stage(&records) {
            Ok(positions) => self.waiting.push((completion, Ok(positions))),
            // Its callback still runs in queue order (an encoding error), or the
            // writer failed and every waiting callback was told already.
            Err(error) if self.failure.is_none() => self.waiting.push((completion, Err(error))),
            Err(error) => self.complete(completion, Err(error)),
        }
    }

    /// Encodes `records` into the group being built and says where each will be: the
    /// whole append or none of it (an encoding error). A segment that would overflow
    /// is committed and a new one started first.
    fn stage<R: Serialize>(&mut self, records: &[R]) -> Result<Vec<Position>, JournalError> {
        if let Some(cause) = &self.failure {
            let cause = Arc::clone(cause);
            return Err(JournalError::WriterFailed { cause });
        }
        self.scratch.clear();
        self.starts.clear();
        for record in records {
            self.starts.push(self.scratch.len() as u64);
            encode_record(&mut self.scratch, record)?;
        }
        let segment_used = self.segment.length + self.group.len() as u64;
        let overflows = segment_used + self.scratch.len() as u64 > self.options.max_segment_bytes;
        // A segment always takes at least one append, however large.
        if overflows && segment_used > FILE_HEADER_BYTES && !self.scratch.is_empty() {
            self.commit();
            if let Some(cause) = &self.failure {
                let cause = Arc::clone(cause);
                return Err(JournalError::WriterFailed { cause });
            }
            if let Err(error) = self.rotate() {
                self.fail(error.clone());
                return Err(error);
            }
        }
        let base = self.segment.length + self.group.len() as u64;
        let segment = self.segment.number;
        let positions = self
            .starts
            .iter()
            .map(|start| Position {
                segment,
                offset: base + start,
            })
            .collect();
        self.group.extend_from_slice(&self.scratch);
        self.group_records += records.len() as u64;
        Ok(positions)
    }

    /// Stages and writes `records` at once (see [`Shared::append_now`]).
    fn append_now<R: Serialize>(&mut self, records: &[R]) -> Result<Vec<Position>, JournalError> {
        let positions = self.stage(records)?;
        self.commit();
        match &self.failure {
            // The failure is this write's own: stage refuses once failed.
            Some(failure) => Err(JournalError::clone(failure)),
            None => Ok(positions),
        }
    }

    fn rotate(&mut self) -> Result<(), JournalError> {
        let number = self.segment.number.next();
        self.segment = create_segment(&self.directory, number, self.options.sync, &self.counters)?;
        Ok(())
    }

    /// Writes and syncs the group, then runs its callbacks in order.
    fn commit(&mut self) {
        if !self.group.is_empty() {
            let offset = self.segment.length;
            if let Err(source) = self.segment.file.write_all(&self.group) {
                let error = JournalError::WriteSegment {
                    path: self.segment.path.clone(),
                    offset,
                    source: source.into(),
                };
                return self.fail(error);
            }
            if self.options.sync == SyncMode::Fsync {
                if let Err(source) = self.segment.file.sync_data() {
                    let error = JournalError::SyncSegment {
                        path: self.segment.path.clone(),
                        source: source.into(),
                    };
                    return self.fail(error);
                }
                Counters::add(&self.counters.data_syncs, 1);
            }
            let bytes = self.group.len() as u64;
            self.segment.length += bytes;
            let counters = &self.counters;
            Counters::add(&counters.records_written, self.group_records);
            Counters::add(&counters.bytes_written, bytes);
            Counters::add(&counters.groups_committed, 1);
            Counters::raise(&counters.largest_group_records, self.group_records);
            Counters::raise(&counters.largest_group_bytes, bytes);
            self.group.clear();
            self.group_records = 0;
        }
        for (completion, result) in std::mem::take(&mut self.waiting) {
            self.complete(completion, result);
        }
    }

    /// Stops the writer: the group being built is dropped unwritten and every waiting
    /// callback is told why.
    fn fail(&mut self, error: JournalError) {
        tracing::error!(error = %error, cause = ?std::error::Error::source(&error), "journal writer failed");
        self.group.clear();
        self.group_records = 0;
        for (completion, result) in std::mem::take(&mut self.waiting) {
            // An append that could not even be encoded keeps its own, more precise error.
            let result = result.and(Err(error.clone()));
            self.complete(completion, result);
        }
        self.failure = Some(Arc::new(error));
    }

    fn complete(&self, completion: Completion, result: Result<Vec<Position>, JournalError>) {
        Counters::add(&self.counters.appends_completed, 1);
        completion.complete(result);
    }

    fn finish(&mut self) -> Result<WriterStats, JournalError> {
        if let Some(failure) = &self.failure {
            return Err(JournalError::clone(failure));
        }
        if self.options.sync == SyncMode::None {
            // Without per-group syncs, at least leave a closed journal durable.
            self.segment
                .file
                .sync_data()
                .map_err(|source| JournalError::SyncSegment {
                    path: self.segment.path.clone(),
                    source: source.into(),
                })?;
            Counters::add(&self.counters.data_syncs, 1);
        }
        Ok(self.counters.snapshot())
    }
}
