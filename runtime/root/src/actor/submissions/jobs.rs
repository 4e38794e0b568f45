//! The root's table of jobs: what agents need to run each job until it is done, then
//! its final counts only.

use std::collections::HashMap;
use std::sync::Arc;

use saker_core::JobId;
use saker_wire::messages::JobDef;

use saker_client::spec::ArraySpec;

/// A submitted job as the root keeps it.
#[derive(Debug, Clone)]
pub(super) struct JobEntry {
    /// Its definition; for a job of a `submit_lines` batch, the batch's shared one
    /// (job 0, no command) until [`JobTable::def`] builds its own.
    pub def: Arc<JobDef>,
    /// Boxed: most jobs are single tasks (a task file is a job per line), and an
    /// unboxed spec would cost each of them 56 bytes for nothing.
    pub array: Option<Box<ArraySpec>>,
    pub submitted_us: u64,
    pub count: u32,
    /// Terminal results made durable so far.
    pub durable: u32,
    pub failed: u32,
    pub cancelled: u32,
}

/// Jobs by id. The core numbers jobs 1, 2, 3… in submission order, so a vector
/// indexed by id replaces a hash map (whose inserts were an eighth of the resume
/// of a million single jobs).
///
/// A job whose every result is durable is *done*: its entry (definition, array,
/// bookkeeping: hundreds of bytes) is dropped and only its final counts are kept, in
/// one byte for a single task (most jobs of a task file) or a map entry for an array.
/// So the root's memory follows the jobs in flight, not the pilot's history.
#[derive(Debug, Default)]
pub(super) struct JobTable {
    /// Slot `id - 1`; `None` for a done job, or an id the core skipped.
    entries: Slots,
    /// Slot `id - 1`: how a done single-task job ended (see [`Done`]); 0 otherwise.
    done_singles: Vec<u8>,
    /// Done jobs of several tasks: (count, failed, cancelled).
    done_arrays: HashMap<JobId, (u32, u32, u32)>,
    len: usize,
    /// `submit_lines` batches by first job, in id order, while any of their jobs is
    /// not done: their commands, from which a job's definition is built.
    lines: Vec<LineSlot>,
}

/// The jobs of one `submit_lines` batch.
#[derive(Debug)]
pub(super) struct LineBatch {
    pub lines: Arc<saker_client::spec::JobLines>,
    /// Every job's definition but its id and command.
    pub proto: Arc<JobDef>,
    pub submitted_us: u64,
}

/// A batch's jobs have no entry of their own until one is changed (dispatched,
/// finished, updated): until then each is the batch's `blank` entry, so a queued
/// line costs its command's bytes, not an entry.
#[derive(Debug)]
struct LineSlot {
    first: JobId,
    count: u32,
    /// `None` once every job of the batch is done.
    batch: Option<Arc<LineBatch>>,
    blank: Option<Box<JobEntry>>,
    /// Jobs of the batch not done yet.
    left: u32,
}

/// Entries by slot in pages of [`PAGE`], a page freed once every job in it is done:
/// finished history costs no pointer per job.
#[derive(Debug, Default)]
struct Slots {
    /// `None` for a page not written yet, or freed.
    pages: Vec<Option<Page>>,
    /// Per page: its jobs that are done.
    done: Vec<u16>,
    len: usize,
}

/// Slots per page.
const PAGE: usize = 1024;

/// [`PAGE`] slots: each a job's entry, or `None` for a job without one.
type Page = Box<[Option<Box<JobEntry>>]>;

impl Slots {
    fn len(&self) -> usize {
        self.len
    }

    fn resize(&mut self, len: usize) {
        if len > self.len {
            self.len = len;
            let pages = len.div_ceil(PAGE);
            self.pages.resize_with(pages, || None);
            self.done.resize(pages, 0);
        }
    }

    fn get(&self, slot: usize) -> Option<&JobEntry> {
        self.pages.get(slot / PAGE)?.as_ref()?[slot % PAGE].as_deref()
    }

    fn get_mut(&mut self, slot: usize) -> Option<&mut JobEntry> {
        self.pages.get_mut(slot / PAGE)?.as_mut()?[slot % PAGE].as_deref_mut()
    }

    /// Keeps `entry` at `slot` (within `len`); whether the slot was empty.
    fn put(&mut self, slot: usize, entry: Box<JobEntry>) -> bool {
        let Some(page) = self.pages.get_mut(slot / PAGE) else {
            return false;
        };
        let page = page.get_or_insert_with(|| (0..PAGE).map(|_| None).collect());
        page[slot % PAGE].replace(entry).is_none()
    }

    fn take(&mut self, slot: usize) -> Option<Box<JobEntry>> {
        self.pages.get_mut(slot / PAGE)?.as_mut()?[slot % PAGE].take()
    }

    /// The job at `slot` is done (called once per job): a full page of done jobs goes.
    fn done(&mut self, slot: usize) {
        let page = slot / PAGE;
        let Some(done) = self.done.get_mut(page) else {
            return;
        };
        *done += 1;
        if usize::from(*done) == PAGE {
            self.pages[page] = None;
        }
    }
}

/// How a done single-task job ended, in [`JobTable::done_singles`].
struct Done;

impl Done {
    const SUCCEEDED: u8 = 1;
    const FAILED: u8 = 2;
    const CANCELLED: u8 = 3;
}

impl JobTable {
    fn slot(job: JobId) -> Option<usize> {
        (job.0 as usize).checked_sub(1)
    }

    pub fn get(&self, job: &JobId) -> Option<&JobEntry> {
        let slot = Self::slot(*job)?;
        match self.entries.get(slot) {
            Some(entry) => Some(entry),
            None if slot < self.entries.len() && self.done_singles[slot] == 0 => {
                self.lines[self.line_slot(*job)?].blank.as_deref()
            }
            None => None,
        }
    }

    pub fn get_mut(&mut self, job: &JobId) -> Option<&mut JobEntry> {
        let slot = Self::slot(*job)?;
        if self.entries.get(slot).is_none()
            && slot < self.entries.len()
            && self.done_singles[slot] == 0
            && let Some(at) = self.line_slot(*job)
            && let Some(blank) = self.lines[at].blank.as_deref()
        {
            // A batch's job about to change gets an entry of its own.
            let entry = Box::new(blank.clone());
            self.entries.put(slot, entry);
        }
        self.entries.get_mut(slot)
    }

    /// Whether `job` was submitted (it may be done).
    pub fn contains_key(&self, job: &JobId) -> bool {
        self.get(job).is_some() || self.final_counts(job).is_some()
    }

    /// Keeps the batch whose jobs are `first ..`, one task each (the core's ids).
    pub fn add_lines(&mut self, first: JobId, batch: Arc<LineBatch>) {
        let count = batch.lines.len() as u32;
        let blank = JobEntry {
            def: Arc::clone(&batch.proto),
            array: None,
            submitted_us: batch.submitted_us,
            count: 1,
            durable: 0,
            failed: 0,
            cancelled: 0,
        };
        let Some(start) = Self::slot(first) else {
            return;
        };
        let end = start + count as usize;
        if end > self.entries.len() {
            self.entries.resize(end);
            self.done_singles.resize(end, 0);
        }
        self.len += count as usize;
        self.lines.push(LineSlot {
            first,
            count,
            batch: Some(batch),
            blank: Some(Box::new(blank)),
            left: count,
        });
    }

    fn line_slot(&self, job: JobId) -> Option<usize> {
        let after = self.lines.partition_point(|slot| slot.first <= job);
        let at = after.checked_sub(1)?;
        let slot = &self.lines[at];
        (job.0 - slot.first.0 < slot.count && slot.batch.is_some()).then_some(at)
    }

    /// The definition of `job` to send to a node.
    pub fn def(&self, job: JobId) -> Option<Arc<JobDef>> {
        let entry = self.get(&job)?;
        if entry.def.job == job {
            return Some(Arc::clone(&entry.def));
        }
        let slot = &self.lines[self.line_slot(job)?];
        let batch = slot.batch.as_ref()?;
        let index = (job.0 - slot.first.0) as usize;
        Some(Arc::new(line_def(batch, job, index)))
    }

    /// A job's every result is durable: its entry goes, its final counts stay.
    pub fn finish(&mut self, job: JobId) {
        let Some(slot) = Self::slot(job) else {
            return;
        };
        let Some(entry) = self.entries.take(slot) else {
            return;
        };
        self.entries.done(slot);
        if let Some(at) = self.line_slot(job) {
            let line = &mut self.lines[at];
            line.left -= 1;
            if line.left == 0 {
                line.batch = None;
                line.blank = None;
            }
        }
        if entry.count == 1 {
            self.done_singles[slot] = match (entry.failed, entry.cancelled) {
                (0, 0) => Done::SUCCEEDED,
                (_, 0) => Done::FAILED,
                _ => Done::CANCELLED,
            };
        } else {
            self.done_arrays
                .insert(job, (entry.count, entry.failed, entry.cancelled));
        }
    }

    /// (count, failed, cancelled) of a done job.
    pub fn final_counts(&self, job: &JobId) -> Option<(u32, u32, u32)> {
        let slot = Self::slot(*job)?;
        match *self.done_singles.get(slot)? {
            Done::SUCCEEDED => Some((1, 0, 0)),
            Done::FAILED => Some((1, 1, 0)),
            Done::CANCELLED => Some((1, 0, 1)),
            _ => self.done_arrays.get(job).copied(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn reserve(&mut self, additional: usize) {
        self.done_singles.reserve(additional);
    }

    /// Keeps `entry` as job `job` (id 0 is never a job and is ignored).
    pub fn insert(&mut self, job: JobId, entry: JobEntry) {
        let Some(slot) = Self::slot(job) else {
            return;
        };
        if slot >= self.entries.len() {
            self.entries.resize(slot + 1);
            self.done_singles.resize(slot + 1, 0);
        }
        // A batch's job was counted with its batch.
        if self.entries.put(slot, Box::new(entry)) && self.line_slot(job).is_none() {
            self.len += 1;
        }
    }
}

/// Job `job`, command `index` of `batch`: the batch's definition with that command.
fn line_def(batch: &LineBatch, job: JobId, index: usize) -> JobDef {
    use saker_wire::messages::{Command, EnvVar, Payload};
    let commands = &batch.lines.commands;
    // A batch's template has no function (`JobLines::validate`).
    let Payload::Command(Command { env, cwd, .. }) = &batch.proto.payload else {
        return JobDef {
            job,
            ..JobDef::clone(&batch.proto)
        };
    };
    let env = match commands.env(index) {
        None => env.clone(),
        Some(added) => {
            let mut merged: std::collections::BTreeMap<&str, &str> =
                env.iter().map(|var| (&*var.key, &*var.value)).collect();
            merged.extend(added.iter().map(|(k, v)| (&**k, &**v)));
            merged
                .into_iter()
                .map(|(key, value)| EnvVar {
                    key: key.to_owned(),
                    value: value.to_owned(),
                })
                .collect()
        }
    };
    JobDef {
        job,
        payload: Payload::Command(Command {
            argv: commands.argv(index).map(str::to_owned).collect(),
            env,
            cwd: cwd.clone(),
        }),
        ..JobDef::clone(&batch.proto)
    }
}

impl JobEntry {
    pub fn is_done(&self) -> bool {
        self.durable >= self.count
    }

    /// The user-visible array index of task offset `offset`.
    pub fn array_index(&self, offset: u32) -> Option<u32> {
        self.array
            .as_ref()
            .and_then(|a| a.index_at(u64::from(offset)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_core::{Placement, Resources};
    use saker_wire::messages::{Command, Payload};

    fn entry(job: u32) -> JobEntry {
        JobEntry {
            def: Arc::new(JobDef {
                job: JobId(job),
                payload: Payload::Command(Command {
                    argv: vec!["/bin/true".to_owned()],
                    env: Vec::new(),
                    cwd: None,
                }),
                resources: Resources::cores(1),
                placement: Placement::Single,
                hpc: None,
                time_limit_ms: 0,
                inline_output_bytes: 0,
                is_array: false,
                reads: Vec::new(),
                writes: Vec::new(),
            }),
            array: None,
            submitted_us: 0,
            count: 1,
            durable: 0,
            failed: 0,
            cancelled: 0,
        }
    }

    /// A done job's entry goes; it is still known, with its final counts.
    #[test]
    fn a_done_job_keeps_only_its_final_counts() {
        let mut jobs = JobTable::default();
        jobs.insert(JobId(1), entry(1));
        let mut array = entry(2);
        array.count = 3;
        jobs.insert(JobId(2), array);
        jobs.get_mut(&JobId(1)).unwrap().failed = 1;
        jobs.finish(JobId(1));
        let entry = jobs.get_mut(&JobId(2)).unwrap();
        entry.cancelled = 2;
        jobs.finish(JobId(2));
        assert!(jobs.get(&JobId(1)).is_none() && jobs.get(&JobId(2)).is_none());
        assert!(jobs.contains_key(&JobId(1)) && jobs.contains_key(&JobId(2)));
        assert!(!jobs.contains_key(&JobId(3)));
        assert_eq!(jobs.final_counts(&JobId(1)), Some((1, 1, 0)));
        assert_eq!(jobs.final_counts(&JobId(2)), Some((3, 0, 2)));
        assert_eq!(jobs.len(), 2);
    }

    #[test]
    fn job_table_finds_jobs_by_id_and_tolerates_gaps() {
        let mut jobs = JobTable::default();
        for id in [1, 2, 5, 0] {
            jobs.insert(JobId(id), entry(id));
        }
        assert_eq!(jobs.len(), 3);
        for id in [1, 2, 5].map(JobId) {
            assert_eq!(jobs.get(&id).map(|j| j.def.job), Some(id));
        }
        for id in [0, 3, 4, 6, u32::MAX].map(JobId) {
            assert!(!jobs.contains_key(&id), "{id}");
        }
        jobs.get_mut(&JobId(2)).unwrap().durable = 1;
        assert_eq!(jobs.get(&JobId(2)).unwrap().durable, 1);
        jobs.insert(JobId(2), entry(2));
        assert_eq!((jobs.len(), jobs.get(&JobId(2)).unwrap().durable), (3, 0));
    }

    /// A page of done jobs is freed whole: what is left of them is a byte each.
    #[test]
    fn pages_of_done_jobs_are_freed() {
        let mut jobs = JobTable::default();
        let count = 2 * PAGE as u32 + 5;
        for id in 1..=count {
            jobs.insert(JobId(id), entry(id));
        }
        for id in 1..=PAGE as u32 + 3 {
            jobs.get_mut(&JobId(id)).unwrap().failed = u32::from(id % 3 == 0);
            jobs.finish(JobId(id));
        }
        assert!(jobs.entries.pages[0].is_none(), "the first page is freed");
        assert!(
            jobs.entries.pages[1].is_some(),
            "the second is not all done"
        );
        assert_eq!(jobs.final_counts(&JobId(3)), Some((1, 1, 0)));
        assert_eq!(jobs.final_counts(&JobId(4)), Some((1, 0, 0)));
        assert!(jobs.get(&JobId(4)).is_none() && jobs.get_mut(&JobId(4)).is_none());
        assert_eq!(
            jobs.get(&JobId(PAGE as u32 + 4)).map(|j| j.def.job),
            Some(JobId(PAGE as u32 + 4))
        );
        assert_eq!(jobs.len(), count as usize);
        // No write lands in a freed page.
        jobs.finish(JobId(4));
        assert!(jobs.entries.pages[0].is_none());
    }
}
