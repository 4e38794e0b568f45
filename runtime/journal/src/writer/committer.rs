//! The writer thread: group commit.
//!
//! The loop blocks for one append, then takes whatever else is already queued (up to
//! `max_group_bytes`), encodes it into one buffer, writes the buffer with one `write`,
//! makes it durable with one `fdatasync`, and only then runs the group's callbacks, in
//! the order the appends were queued.
//!
//! A write refused for want of space (ENOSPC, EDQUOT) does not fail the writer: the
//! group is held, the partial write cut off, and the same group written again at the
//! same offset every `space_retry` until it fits; appends queue behind it meanwhile
//! and [`Counters::waiting_for_space`] says so. Only `close` gives up on it.
//!
//! The committer sits behind a mutex so that a caller may also commit an append itself
//! ([`Shared::append_now`]) when nothing is queued and no sync is due: the append is
//! then written on the caller's thread, with no thread woken on either side.

use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The writer is closing: a group held for want of space is given up.
    closing: AtomicBool,
}

impl Shared {
    pub(crate) fn new(committer: Committer) -> Shared {
        Shared {
            committer: Mutex::new(committer),
            queued: AtomicU64::new(0),
            closing: AtomicBool::new(false),
        }
    }

    /// The writer is about to be closed (see [`Shared::wait_for_space`]).
    pub(crate) fn close_soon(&self) {
        self.closing.store(true, Ordering::SeqCst);
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
    /// an inline append only happens when every earlier one is written. Records that
    /// do not fit on the disk are given back too, to be queued and held.
    pub(crate) fn append_now<R: Serialize>(
        &self,
        records: Vec<R>,
    ) -> Result<Result<Vec<Position>, JournalError>, Vec<R>> {
        let mut committer = self.lock();
        if committer.options.sync != SyncMode::None
            || self.queued.load(Ordering::SeqCst) != 0
            || committer.space.is_some()
        {
            return Err(records);
        }
        let Some(written) = committer.append_now(&records) else {
            return Err(records);
        };
        Counters::add(&committer.counters.appends_submitted, 1);
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
            drop(committer);
            self.wait_for_space();
        }
        self.lock().finish()
    }

    /// While a group is held for want of space, writes it again every `space_retry`
    /// (nothing tells a process that space came back) until it fits, or the writer
    /// closes: then its appends are told the disk is full. Appends queue meanwhile.
    fn wait_for_space(&self) {
        loop {
            let mut committer = self.lock();
            if committer.space.is_none() || committer.group.is_empty() {
                return;
            }
            if self.closing.load(Ordering::SeqCst) {
                return committer.give_up_on_space();
            }
            let retry = committer.options.space_retry;
            drop(committer);
            std::thread::sleep(retry);
            self.lock().commit();
        }
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
    /// Why the group is held: its last write was refused for want of space.
    space: Option<JournalError>,
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
            space: None,
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
        if let Some(space) = &self.space {
            return Err(space.clone());
        }
        let placeholder = self.segment.number.next();
        let created = create_segment(
            &self.directory,
            placeholder,
            self.options.sync,
            &self.counters,
        )
        .and_then(|made| {
            match create_segment(
                &self.directory,
                placeholder.next(),
                self.options.sync,
                &self.counters,
            ) {
                Ok(segment) => self.segment = segment,
                Err(error) => {
                    // Not left behind the segment still being written.
                    let _ = std::fs::remove_file(&made.path);
                    return Err(error);
                }
            }
            Ok(placeholder)
        });
        match &created {
            // The seal fails; the writer goes on in its segment.
            Err(error) if error.is_disk_full() => {}
            Err(error) => self.fail(error.clone()),
            Ok(_) => {}
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
            // With the disk full, the segment's size limit (a soft one) gives way: the
            // records wait for space in the current segment.
            if self.space.is_none() {
                match self.rotate() {
                    Ok(()) => {}
                    Err(error) if error.is_disk_full() => {
                        tracing::warn!(%error, "no space for a new journal segment; going on in the current one");
                    }
                    Err(error) => {
                        self.fail(error.clone());
                        return Err(error);
                    }
                }
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

    /// Stages and writes `records` at once (see [`Shared::append_now`]); `None` if the
    /// disk has no room for them: they are unstaged, for the caller to queue.
    fn append_now<R: Serialize>(
        &mut self,
        records: &[R],
    ) -> Option<Result<Vec<Position>, JournalError>> {
        let positions = match self.stage(records) {
            Ok(positions) => positions,
            Err(error) => return Some(Err(error)),
        };
        self.commit();
        if self.space.is_some() {
            self.group.clear();
            self.group_records = 0;
            return None;
        }
        Some(match &self.failure {
            // The failure is this write's own: stage refuses once failed.
            Some(failure) => Err(JournalError::clone(failure)),
            None => Ok(positions),
        })
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
            // At the offset, not the file's cursor: a write the disk refused halfway is
            // written again over the same bytes.
            if let Err(source) = self.segment.file.write_all_at(&self.group, offset) {
                let error = JournalError::WriteSegment {
                    path: self.segment.path.clone(),
                    offset,
                    source: source.into(),
                };
                if error.is_disk_full() {
                    return self.hold_for_space(error);
                }
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
            if self.space.take().is_some() {
                self.counters
                    .waiting_for_space
                    .store(false, Ordering::Relaxed);
                tracing::info!(segment = %self.segment.path.display(), "the journal has space again; held records written");
            }
        }
        for (completion, result) in std::mem::take(&mut self.waiting) {
            self.complete(completion, result);
        }
    }

    /// Keeps the group and its callbacks to write again once there is space, and
    /// frees what a partial write took.
    fn hold_for_space(&mut self, error: JournalError) {
        let _ = self.segment.file.set_len(self.segment.length);
        Counters::add(&self.counters.space_refusals, 1);
        if self.space.is_none() {
            tracing::error!(error = %error, "journal: disk full; holding records until there is space");
            self.counters
                .waiting_for_space
                .store(true, Ordering::Relaxed);
        }
        self.space = Some(error);
    }

    /// The writer closes with a group held for want of space: its appends are told.
    fn give_up_on_space(&mut self) {
        if let Some(error) = self.space.take() {
            self.counters
                .waiting_for_space
                .store(false, Ordering::Relaxed);
            self.fail(error);
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
