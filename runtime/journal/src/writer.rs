//! The public writer handle: opening a journal, appending, closing.

mod committer;
pub(crate) mod files;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, SendError, Sender};
use std::thread::JoinHandle;

use serde::Serialize;

use self::committer::{Command, Committer, Completion, Queued, SealCompletion, Shared};
use self::files::{ActiveSegment, create_segment, repair_last_segment, sync_directory};
use crate::JournalError;
use crate::format::{DEFAULT_MAX_SEGMENT_BYTES, Position, SegmentNumber};
use crate::segment::list_segments;
use crate::stats::{Counters, WriterStats};

/// When a group counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fdatasync` after every group write, and `fsync` of the directory after every new
    /// segment. A callback reporting success means the records survive a power loss.
    #[default]
    Fsync,
    /// No syncs until `close`: a callback only means the bytes reached the page cache
    /// (they survive a crash of the process, not of the machine). For measuring what the
    /// syncs cost; never for a real pilot.
    None,
}

/// How a [`JournalWriter`] writes.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// When a group counts as durable; see [`SyncMode`].
    pub sync: SyncMode,
    /// A new segment is started before an append that would take the current one past
    /// this size. A segment always holds at least one append, so one larger append makes
    /// one larger segment.
    pub max_segment_bytes: u64,
    /// The writer stops taking queued appends into a group once its encoded size reaches
    /// this, bounding the buffer and the latency of the first callback in a group.
    pub max_group_bytes: usize,
    /// How often a group the disk had no room for is written again.
    pub space_retry: std::time::Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            sync: SyncMode::Fsync,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_group_bytes: 8 * 1024 * 1024,
            space_retry: std::time::Duration::from_millis(250),
        }
    }
}

/// Appends records of type `R` to a journal directory with group commit.
///
/// Each [`append`](Self::append) is queued to one writer thread and its callback runs on
/// that thread once the records are durable (see [`SyncMode`]) or can no longer be
/// written. Callbacks run in the order the appends were queued; a callback must be quick
/// (complete a oneshot, send on a channel) because the next group waits for it. It must
/// not call [`append_blocking`](Self::append_blocking), which would wait for itself.
///
/// A write the disk has no room for (ENOSPC, EDQUOT) is held and written again until it
/// fits ([`is_waiting_for_space`](Self::is_waiting_for_space)); its callbacks and every
/// later one wait. After any other write, sync or segment-creation failure the writer is
/// failed for good: the appends of the failing group get that error, every later one
/// [`JournalError::WriterFailed`] with it as the cause.
pub struct JournalWriter<R> {
    directory: PathBuf,
    first_segment: SegmentNumber,
    queue: Option<Sender<Queued<R>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Result<WriterStats, JournalError>>>,
    counters: Arc<Counters>,
}

impl<R> std::fmt::Debug for JournalWriter<R> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("JournalWriter")
            .field("directory", &self.directory)
            .field("first_segment", &self.first_segment)
            .field("stats", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl<R: Serialize + Send + 'static> JournalWriter<R> {
    /// Opens the journal in `directory` for appending, creating the directory if needed.
    ///
    /// Existing segments are kept; if the last one ends in a torn tail, the tail is cut off
    /// (it was never acknowledged), and corruption anywhere in the last segment is an error.
    /// The writer then starts a new segment numbered after the last one, so it never
    /// appends to a file a crashed writer left behind.
    ///
    /// Only one writer may have a directory open at a time; the pilot directory's owner
    /// (the root) is responsible for that.
    pub fn open(directory: &Path, options: WriterOptions) -> Result<Self, JournalError> {
        let counters = Arc::new(Counters::default());
        if !directory.is_dir() {
            std::fs::create_dir_all(directory).map_err(|source| JournalError::CreateDirectory {
                path: directory.to_path_buf(),
                source: source.into(),
            })?;
            // Make the new directory's own entry durable too (its parent is usually the
            // pilot directory, which the pilot created and synced).
            let parent = directory
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty());
            if let (SyncMode::Fsync, Some(parent)) = (options.sync, parent) {
                sync_directory(parent)?;
                Counters::add(&counters.directory_syncs, 1);
            }
        }
        // What a compaction that crashed left: superseded segments, a base never renamed.
        crate::compact::retire_superseded(directory)?;
        let segments = list_segments(directory)?;
        let number = match segments.last() {
            Some(last) => {
                repair_last_segment(last)?;
                last.number.next()
            }
            None => SegmentNumber(1),
        };
        let segment = create_segment(directory, number, options.sync, &counters)?;
        Self::start(directory, segment, options, counters)
    }

    fn start(
        directory: &Path,
        segment: ActiveSegment,
        options: WriterOptions,
        counters: Arc<Counters>,
    ) -> Result<Self, JournalError> {
        let (queue, receiver) = mpsc::channel();
        let first_segment = segment.number;
        let committer = Committer::new(directory.to_path_buf(), options, segment, counters.clone());
        let shared = Arc::new(Shared::new(committer));
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("saker-journal-writer".into())
            .spawn(move || theirs.run(receiver))
            .map_err(|source| JournalError::SpawnWriter {
                source: source.into(),
            })?;
        Ok(Self {
            directory: directory.to_path_buf(),
            first_segment,
            queue: Some(queue),
            shared,
            thread: Some(thread),
            counters,
        })
    }

    /// Queues `records` for the next group and returns at once. `on_durable` runs on the
    /// writer thread exactly once: with `Ok(())` after the group holding these records was
    /// written and synced, or with the error that prevented it. The records of one append
    /// are encoded (to JSON, on the writer thread) all or nothing: if one fails to encode,
    /// none is written and the callback gets [`JournalError::EncodeRecord`].
    ///
    /// The queue is unbounded; bound your appends in flight (see
    /// [`WriterStats::appends_in_flight`]) if the producer can outrun the disk.
    pub fn append(
        &self,
        records: Vec<R>,
        on_durable: impl FnOnce(Result<(), JournalError>) + Send + 'static,
    ) {
        self.append_at(records, move |result| on_durable(result.map(drop)));
    }

    /// As [`append`](Self::append), and `on_durable` is told where each record is, in
    /// the order given (for reading one back later with [`crate::read_at`]).
    pub fn append_at(
        &self,
        records: Vec<R>,
        on_durable: impl FnOnce(Result<Vec<Position>, JournalError>) + Send + 'static,
    ) {
        Counters::add(&self.counters.appends_submitted, 1);
        let command = Queued::Append(Command {
            records,
            completion: Completion::new(Box::new(on_durable)),
        });
        // The writer thread is gone: dropping the completion runs the callback with
        // `WriterStopped`, here on the caller's thread.
        drop(self.send(command));
    }

    /// Writes `records` now, on this thread, and says where each is, when that needs
    /// no sync and waits for nothing: the writer was opened with [`SyncMode::None`]
    /// and every earlier append is written. Otherwise the records are given back, to
    /// be queued with [`append_at`](Self::append_at). It saves waking the writer
    /// thread and being called back from it (what a lone result waits for).
    /// Never call it from inside an append callback: they run under the lock it takes.
    pub fn append_now(
        &self,
        records: Vec<R>,
    ) -> Result<Result<Vec<Position>, JournalError>, Vec<R>> {
        if self.queue.is_none() {
            return Err(records);
        }
        self.shared.append_now(records)
    }

    /// Queues `queued` for the writer thread; gives it back if the thread is gone.
    fn send(&self, queued: Queued<R>) -> Option<Queued<R>> {
        let Some(queue) = &self.queue else {
            return Some(queued);
        };
        self.shared.queue_one();
        let unsent = queue.send(queued).err().map(|SendError(queued)| queued);
        if unsent.is_some() {
            self.shared.unqueue_one();
        }
        unsent
    }

    /// Ends the current segment once everything appended before is durable, leaves an
    /// empty *placeholder* segment after it and goes on appending in the segment after
    /// that. `on_sealed` (run on the writer thread) is told the placeholder's number:
    /// every record appended before the seal is in a segment below it, every record
    /// after in one above, so a compaction can read the sealed segments at leisure and
    /// write its base over the placeholder ([`crate::write_base_segment`]).
    pub fn seal(
        &self,
        on_sealed: impl FnOnce(Result<SegmentNumber, JournalError>) + Send + 'static,
    ) {
        let completion = SealCompletion::new(Box::new(on_sealed));
        // Unsent, the completion is dropped and runs the callback with
        // `WriterStopped`, as it does when the queue is gone.
        drop(self.send(Queued::Seal(completion)));
    }

    /// Appends `records` and waits until they are durable. Never call it from inside an
    /// append callback (it would wait for the thread it runs on).
    pub fn append_blocking(&self, records: Vec<R>) -> Result<(), JournalError> {
        let (sender, receiver) = mpsc::sync_channel(1);
        self.append(records, move |result| {
            // The receiver lives until this callback has sent; a failed send cannot happen.
            let _ = sender.send(result);
        });
        receiver.recv().unwrap_or(Err(JournalError::WriterStopped))
    }
}

impl<R> JournalWriter<R> {
    /// The journal directory.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// The segment this writer started with (the one it created at open).
    pub fn first_segment(&self) -> SegmentNumber {
        self.first_segment
    }

    /// Whether the writer holds records the disk has no room for (ENOSPC, EDQUOT),
    /// writing them again until there is: their callbacks, and every later append's,
    /// wait meanwhile.
    pub fn is_waiting_for_space(&self) -> bool {
        self.counters
            .waiting_for_space
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the writer has done so far.
    pub fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }

    /// Commits everything queued, syncs, stops the writer thread and waits for it.
    /// Returns the final stats, or the failure that stopped the writer earlier.
    pub fn close(mut self) -> Result<WriterStats, JournalError> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<WriterStats, JournalError> {
        self.shared.close_soon();
        // Closing the queue ends the writer's loop once it has committed what is queued.
        drop(self.queue.take());
        let Some(thread) = self.thread.take() else {
            return Ok(self.counters.snapshot());
        };
        if thread.thread().id() == std::thread::current().id() {
            // Dropped from inside a callback: the thread cannot wait for itself. It still
            // commits everything queued and then exits on its own.
            tracing::warn!("journal writer closed from its own callback; not waiting for it");
            return Ok(self.counters.snapshot());
        }
        thread.join().unwrap_or(Err(JournalError::WriterStopped))
    }
}

impl<R> Drop for JournalWriter<R> {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        if let Err(error) = self.shut_down() {
            tracing::error!(error = %error, "journal writer stopped with an error while being dropped");
        }
    }
}

#[cfg(test)]
impl<R: Serialize + Send + 'static> JournalWriter<R> {
    /// A writer whose active segment is `file` (already past its header), e.g. `/dev/full`
    /// to simulate a full disk.
    pub(crate) fn with_segment_file(
        directory: &Path,
        path: &Path,
        file: std::fs::File,
        options: WriterOptions,
    ) -> Result<Self, JournalError> {
        let segment = ActiveSegment {
            number: SegmentNumber(1),
            path: path.to_path_buf(),
            file,
            length: crate::format::FILE_HEADER_BYTES,
        };
        Self::start(directory, segment, options, Arc::new(Counters::default()))
    }
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::path::Path;
    use std::sync::mpsc;

    use super::*;

    fn dev_full() -> (tempfile::TempDir, &'static Path, std::fs::File) {
        let directory = tempfile::tempdir().expect("temporary directory");
        let full = Path::new("/dev/full");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(full)
            .expect("/dev/full exists on Linux");
        (directory, full, file)
    }

    fn quick_retry(sync: SyncMode) -> WriterOptions {
        WriterOptions {
            sync,
            space_retry: std::time::Duration::from_millis(5),
            ..WriterOptions::default()
        }
    }

    #[test]
    fn a_full_disk_holds_appends_and_a_close_tells_each_one() {
        let (directory, full, file) = dev_full();
        let writer = JournalWriter::with_segment_file(
            directory.path(),
            full,
            file,
            quick_retry(SyncMode::Fsync),
        )
        .expect("writer starts");
        let (sender, results) = mpsc::channel();
        for record in 0..3u32 {
            let sender = sender.clone();
            writer.append(vec![record], move |result| {
                sender.send(result).expect("test is listening")
            });
        }
        drop(sender);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while writer.stats().space_refusals < 3 {
            assert!(std::time::Instant::now() < deadline, "the writer retries");
            std::thread::yield_now();
        }
        assert!(writer.is_waiting_for_space());
        assert!(writer.stats().waiting_for_space);
        // Held, not failed: no callback has run.
        assert!(results.try_recv().is_err());
        assert_eq!(writer.stats().appends_in_flight(), 3);

        let closed = writer.close().unwrap_err();
        assert!(closed.is_disk_full(), "{closed:?}");
        assert!(closed.to_string().contains("/dev/full"), "{closed}");
        let told: Vec<_> = results.iter().collect();
        assert_eq!(told.len(), 3);
        for result in told {
            let error = result.unwrap_err();
            assert!(error.is_disk_full(), "{error:?}");
            assert_eq!(
                error.io_error().map(|io| io.kind()),
                Some(ErrorKind::StorageFull)
            );
        }
    }

    fn no_sync() -> WriterOptions {
        WriterOptions {
            sync: SyncMode::None,
            ..WriterOptions::default()
        }
    }

    #[test]
    fn an_idle_writer_without_syncs_appends_on_the_callers_thread() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let writer = JournalWriter::<String>::open(directory.path(), no_sync()).unwrap();
        let positions = writer
            .append_now(vec!["one".to_owned(), "two".to_owned()])
            .expect("nothing is queued")
            .expect("written");
        let read: Vec<String> = positions
            .iter()
            .map(|&position| crate::read_at(directory.path(), position).unwrap())
            .collect();
        assert_eq!(read, ["one", "two"]);
        // Queued appends and inline ones interleave in the order they were made.
        writer.append_blocking(vec!["three".to_owned()]).unwrap();
        let four = writer.append_now(vec!["four".to_owned()]).unwrap().unwrap();
        assert!(four[0] > positions[1]);
        let stats = writer.close().unwrap();
        assert_eq!(stats.appends_submitted, 3);
        assert_eq!(stats.appends_in_flight(), 0);
        let all = crate::read_all::<String>(directory.path()).unwrap();
        assert_eq!(all.records, ["one", "two", "three", "four"]);
    }

    #[test]
    fn a_syncing_writer_gives_inline_appends_back() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let writer =
            JournalWriter::<u32>::open(directory.path(), WriterOptions::default()).unwrap();
        assert_eq!(writer.append_now(vec![7]).unwrap_err(), vec![7]);
        assert_eq!(writer.close().unwrap().appends_submitted, 0);
    }

    #[test]
    fn an_inline_append_on_a_full_disk_is_given_back_to_be_held() {
        let (directory, full, file) = dev_full();
        let writer = JournalWriter::with_segment_file(
            directory.path(),
            full,
            file,
            quick_retry(SyncMode::None),
        )
        .unwrap();
        assert_eq!(writer.append_now(vec![1u32]).unwrap_err(), vec![1]);
        assert!(writer.is_waiting_for_space());
        // Later inline appends are given back without trying: they would overtake.
        assert_eq!(writer.append_now(vec![2u32]).unwrap_err(), vec![2]);
        assert_eq!(writer.stats().appends_submitted, 0);
        let (sender, result) = mpsc::channel();
        writer.append(vec![1], move |outcome| sender.send(outcome).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while writer.stats().space_refusals < 3 {
            assert!(std::time::Instant::now() < deadline, "the writer retries");
            std::thread::yield_now();
        }
        assert!(result.try_recv().is_err(), "held");
        assert!(writer.close().unwrap_err().is_disk_full());
        assert!(result.recv().unwrap().unwrap_err().is_disk_full());
    }

    #[test]
    fn an_io_error_other_than_space_fails_the_writer_for_good() {
        // A file opened read-only: writing it fails with EBADF, not for want of space.
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("read-only");
        std::fs::write(&path, crate::format::file_header()).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let writer = JournalWriter::with_segment_file(
            directory.path(),
            &path,
            file,
            WriterOptions::default(),
        )
        .unwrap();
        let error = writer.append_blocking(vec![1u32]).unwrap_err();
        assert!(
            matches!(error, JournalError::WriteSegment { offset: 16, .. }),
            "{error:?}"
        );
        assert!(!error.is_disk_full());
        let later = writer.append_blocking(vec![2u32]).unwrap_err();
        assert!(
            matches!(later, JournalError::WriterFailed { .. }),
            "{later:?}"
        );
        assert!(!writer.is_waiting_for_space());
        assert!(writer.close().is_err());
    }

    #[test]
    fn a_dropped_completion_reports_writer_stopped() {
        let (sender, result) = mpsc::channel();
        let completion = Completion::new(Box::new(move |outcome| {
            sender.send(outcome).expect("test is listening");
        }));
        drop(completion);
        let outcome = result.recv().expect("the callback ran on drop");
        assert!(matches!(outcome, Err(JournalError::WriterStopped)));
    }
}
