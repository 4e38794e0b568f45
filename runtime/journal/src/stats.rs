//! Counters the writer keeps for performance reports (group sizes, sync counts).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A snapshot of what a [`JournalWriter`](crate::JournalWriter) has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Calls to `append` (and `append_blocking`).
    pub appends_submitted: u64,
    /// Appends whose callback has been called (it is counted just before it runs),
    /// successfully or not.
    pub appends_completed: u64,
    /// Records written to segment files (acknowledged or about to be).
    pub records_written: u64,
    /// Bytes written to segment files, file headers included.
    pub bytes_written: u64,
    /// Groups committed: one buffered write followed by one `fdatasync` (in
    /// [`SyncMode::Fsync`](crate::SyncMode::Fsync)). A segment rotation in the middle of a
    /// group commits it in two parts, counted twice.
    pub groups_committed: u64,
    /// `fdatasync` calls on segment files (group commits, new segment headers, the final
    /// sync at close in [`SyncMode::None`](crate::SyncMode::None)).
    pub data_syncs: u64,
    /// `fsync` calls on the journal directory (one per created segment, to make its
    /// directory entry durable).
    pub directory_syncs: u64,
    /// Segment files this writer created.
    pub segments_created: u64,
    /// Most records committed by one group.
    pub largest_group_records: u64,
    /// Most bytes committed by one group.
    pub largest_group_bytes: u64,
    /// Writes refused for want of space (ENOSPC, EDQUOT), each retried later.
    pub space_refusals: u64,
    /// The writer is holding records because the disk is full (see
    /// [`JournalWriter::is_waiting_for_space`](crate::JournalWriter::is_waiting_for_space)).
    pub waiting_for_space: bool,
}

impl WriterStats {
    /// Appends submitted whose callback has not run yet: what a caller bounds to get
    /// backpressure (the queue to the writer thread is unbounded).
    pub fn appends_in_flight(&self) -> u64 {
        self.appends_submitted
            .saturating_sub(self.appends_completed)
    }

    /// Mean records per committed group (0 before the first commit).
    pub fn mean_group_records(&self) -> f64 {
        if self.groups_committed == 0 {
            0.0
        } else {
            self.records_written as f64 / self.groups_committed as f64
        }
    }
}

/// The live counters behind [`WriterStats`], shared by the handle and the writer thread.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) appends_submitted: AtomicU64,
    pub(crate) appends_completed: AtomicU64,
    pub(crate) records_written: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) groups_committed: AtomicU64,
    pub(crate) data_syncs: AtomicU64,
    pub(crate) directory_syncs: AtomicU64,
    pub(crate) segments_created: AtomicU64,
    pub(crate) largest_group_records: AtomicU64,
    pub(crate) largest_group_bytes: AtomicU64,
    pub(crate) space_refusals: AtomicU64,
    pub(crate) waiting_for_space: AtomicBool,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, amount: u64) {
        counter.fetch_add(amount, Ordering::Relaxed);
    }

    pub(crate) fn raise(counter: &AtomicU64, value: u64) {
        counter.fetch_max(value, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WriterStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WriterStats {
            appends_submitted: load(&self.appends_submitted),
            appends_completed: load(&self.appends_completed),
            records_written: load(&self.records_written),
            bytes_written: load(&self.bytes_written),
            groups_committed: load(&self.groups_committed),
            data_syncs: load(&self.data_syncs),
            directory_syncs: load(&self.directory_syncs),
            segments_created: load(&self.segments_created),
            largest_group_records: load(&self.largest_group_records),
            largest_group_bytes: load(&self.largest_group_bytes),
            space_refusals: load(&self.space_refusals),
            waiting_for_space: self.waiting_for_space.load(Ordering::Relaxed),
        }
    }
}
