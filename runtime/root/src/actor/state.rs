//! The root's state and the translation of core outputs into actions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use saker_actors::link::LinkId;
use saker_core::{Core, Event, JobId, NodeId, TaskId, Time};
use saker_wire::messages::{Assignment, Dispatch, FRAME_DATA_BUDGET, JobDef, ToAgent};
use tokio::sync::mpsc;

use super::clients::{RateWindow, Waiter};
use super::port::{AfterJournal, Clock, Port, Wake};
use super::resources::ResourceNames;
use crate::attempts::AttemptNote;
use crate::records::Record;
use crate::results::{ResultRecord, Timestamp};
use crate::spec::ArraySpec;
use saker_actors::resources::NodeResources;

/// A submitted job as the root keeps it.
#[derive(Debug)]
pub(super) struct JobEntry {
    pub def: Arc<JobDef>,
    /// Boxed: most jobs are single tasks (a task file is a job per line), and an
    /// unboxed spec would cost each of them 56 bytes for nothing.
    pub array: Option<Box<ArraySpec>>,
    pub submitted_us: u64,
    pub count: u32,
    /// Nodes this job's definition was sent to (a node may appear twice across lives),
    /// told to forget it once the job is finished.
    pub known_by: Vec<NodeId>,
    /// Terminal results made durable so far.
    pub durable: u32,
    pub failed: u32,
    pub cancelled: u32,
}

/// Finished jobs a node is told to forget in one message when no dispatch takes them.
const FORGET_BATCH: usize = 1024;

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
    entries: Vec<Option<Box<JobEntry>>>,
    /// Slot `id - 1`: how a done single-task job ended (see [`Done`]); 0 otherwise.
    done_singles: Vec<u8>,
    /// Done jobs of several tasks: (count, failed, cancelled).
    done_arrays: HashMap<JobId, (u32, u32, u32)>,
    len: usize,
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
        self.entries.get(Self::slot(*job)?)?.as_deref()
    }

    pub fn get_mut(&mut self, job: &JobId) -> Option<&mut JobEntry> {
        self.entries.get_mut(Self::slot(*job)?)?.as_deref_mut()
    }

    /// Whether `job` was submitted (it may be done).
    pub fn contains_key(&self, job: &JobId) -> bool {
        self.get(job).is_some() || self.final_counts(job).is_some()
    }

    /// A job's every result is durable: its entry goes, its final counts stay.
    pub fn finish(&mut self, job: JobId) {
        let Some(slot) = Self::slot(job) else {
            return;
        };
        let Some(entry) = self.entries.get_mut(slot).and_then(Option::take) else {
            return;
        };
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
        self.entries.reserve(additional);
        self.done_singles.reserve(additional);
    }

    /// Keeps `entry` as job `job` (id 0 is never a job and is ignored).
    pub fn insert(&mut self, job: JobId, entry: JobEntry) {
        let Some(slot) = Self::slot(job) else {
            return;
        };
        if slot >= self.entries.len() {
            self.entries.resize_with(slot + 1, || None);
            self.done_singles.resize(slot + 1, 0);
        }
        if self.entries[slot].replace(Box::new(entry)).is_none() {
            self.len += 1;
        }
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

#[derive(Debug)]
pub(super) struct NodeEntry {
    pub link: LinkId,
    pub hostname: String,
    pub cores: u32,
    /// What it offers, in the root's kinds.
    pub capacity: saker_core::Resources,
    /// Jobs whose definition this node already has.
    pub known_jobs: HashSet<JobId>,
    /// Finished jobs this node may drop, sent with the next dispatch.
    pub forget: Vec<JobId>,
    pub running: u32,
    /// Its agent is the application's binary and runs actors.
    pub hosts_actors: bool,
}

/// Pilot-wide counts of durable results, kept as results arrive so that waits and
/// status cost nothing per job.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub tasks: u64,
    pub durable: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// What a result record keeps of an accepted attempt, read out of the agent's report
/// once and kept until the core reports the task finished.
#[derive(Debug)]
pub(super) struct Detail {
    pub node: NodeId,
    pub executor: Option<u32>,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_path: Option<String>,
    pub stderr_path: Option<String>,
    pub output: Option<Vec<u8>>,
    /// For an HPC job: its nodes and how each of its processes ended.
    pub gang: Option<crate::results::GangRecord>,
}

/// What attempts left behind that a task's result record will need.
#[derive(Debug, Default)]
pub(super) struct AttemptTable {
    /// The accepted attempt of each task the core has not finished yet.
    pub details: HashMap<TaskId, Detail>,
    /// Earlier attempts of tasks not yet finished.
    pub history: HashMap<TaskId, Vec<AttemptNote>>,
}

/// What this turn produced for the journal; journaled together at the end of it.
#[derive(Debug, Default)]
pub(super) struct Unjournaled {
    pub results: Vec<Arc<ResultRecord>>,
    /// Attempts that ended without counting.
    pub attempts: Vec<Record>,
}

/// Durable results and everything that waits on them.
#[derive(Debug)]
pub(super) struct ResultLog {
    pub next_seq: u64,
    /// Where each durable result is in the journal (the results themselves are not
    /// kept: see `history.rs`).
    pub index: super::history::ResultIndex,
    /// Results dropped by compactions under the retention, and the highest `seq`
    /// among them (a stream from at or below it is told how many).
    pub compacted: u64,
    pub compacted_through: u64,
    /// Held by every read of results under way: segments a compaction superseded are
    /// deleted only once no read that may hold a position in them is left.
    pub readers: Arc<()>,
    pub totals: Totals,
    pub followers: Vec<mpsc::UnboundedSender<Arc<ResultRecord>>>,
    pub rate: RateWindow,
    pub waiters: Vec<Waiter>,
}

impl Default for ResultLog {
    fn default() -> Self {
        ResultLog {
            next_seq: 1,
            index: Default::default(),
            compacted: 0,
            compacted_through: 0,
            readers: Arc::new(()),
            totals: Totals::default(),
            followers: Vec::new(),
            rate: RateWindow::default(),
            waiters: Vec::new(),
        }
    }
}

/// The walltime deadline and what reaching it left.
#[derive(Debug, Default)]
pub(super) struct Walltime {
    /// The deadline on the core's clock, if any.
    pub deadline: Option<Time>,
    pub reached: bool,
    /// `status` as the deadline left the pilot, reported from then on.
    pub status: Option<crate::client::StatusReport>,
}

/// The root's state: the core and the tables around it. Its side effects go through
/// [`Port`]; its only clock is [`Clock`]. The actor ([`super::Root`]) is one driver;
/// the unit tests in `tests.rs` are another.
#[derive(Debug)]
pub struct RootState {
    pub(super) pilot_id: String,
    pub(super) core: Core,
    pub(super) port: Box<dyn Port>,
    pub(super) clock: Box<dyn Clock>,
    pub(super) jobs: JobTable,
    pub(super) nodes: HashMap<NodeId, NodeEntry>,
    /// The node that dialed each agent link (its direct child), as it said.
    pub(super) link_nodes: HashMap<LinkId, NodeId>,
    pub(super) attempts: AttemptTable,
    pub(super) unjournaled: Unjournaled,
    /// Runtime estimate class of each set of tags (sorted), numbered from 1.
    pub(super) classes: HashMap<Vec<String>, u32>,
    /// The custom resource kinds this pilot has numbered.
    pub(super) resource_names: ResourceNames,
    pub(super) log: ResultLog,
    pub(super) shutting_down: bool,
    pub(super) allocation: Option<crate::client::AllocationStatus>,
    pub(super) walltime: Walltime,
    timer_at: Option<Time>,
    /// Gang attempts in flight (HPC jobs), waiting for their members' parts.
    pub(super) gangs: super::gangs::GangRuns,
    /// The most nodes this pilot can have (its allocation's, or its local agents'),
    /// when known: an HPC job asking for more is refused at submission.
    pub(super) max_nodes: Option<u32>,
    /// The widest node the pilot will have (its local agents', or what the batch host
    /// finds), when known before nodes join.
    pub(super) expected_node: Option<NodeResources>,
    /// Placed actors and the calls in flight to them.
    pub(super) actors: super::placed::PlacedActors,
    /// Jobs cancelled because a job they needed to succeed did not, with that job
    /// (their results say so), until they finish.
    pub(super) dependency_failed: HashMap<JobId, JobId>,
    /// Periodic jobs going on.
    pub(super) schedules: super::schedules::Schedules,
    /// Data items: where they are, who reads them, what was moved.
    pub(super) items: super::items::ItemTable,
    pub(super) compaction: super::compaction::Compaction,
}

/// What a root starts from, besides its port and clock.
#[derive(Debug)]
pub struct StateArgs {
    pub pilot_id: String,
    pub core: saker_core::CoreConfig,
    /// The batch allocation the pilot runs in, if any (for `status`).
    pub allocation: Option<crate::client::AllocationStatus>,
    /// The most nodes the pilot can have, when known (see `RootState::max_nodes`).
    pub max_nodes: Option<u32>,
    /// The widest node the pilot will have, when known.
    pub expected_node: Option<NodeResources>,
}

impl RootState {
    pub fn new(args: StateArgs, port: Box<dyn Port>, clock: Box<dyn Clock>) -> Self {
        // The names the pilot's nodes offer take the first custom kinds, in the order
        // given: the same numbers every time the pilot starts or resumes.
        let mut resource_names = ResourceNames::default();
        for (name, _) in args.expected_node.iter().flat_map(|node| &node.custom) {
            resource_names.kind(name);
        }
        RootState {
            pilot_id: args.pilot_id,
            core: Core::new(args.core),
            port,
            clock,
            jobs: JobTable::default(),
            nodes: HashMap::new(),
            link_nodes: HashMap::new(),
            attempts: AttemptTable::default(),
            unjournaled: Unjournaled::default(),
            classes: HashMap::new(),
            resource_names,
            log: ResultLog::default(),
            shutting_down: false,
            allocation: args.allocation,
            walltime: Walltime::default(),
            timer_at: None,
            gangs: super::gangs::GangRuns::default(),
            max_nodes: args.max_nodes,
            expected_node: args.expected_node,
            actors: Default::default(),
            dependency_failed: HashMap::new(),
            schedules: Default::default(),
            items: Default::default(),
            compaction: Default::default(),
        }
    }

    pub(super) fn now(&self) -> Time {
        self.clock.now()
    }

    /// Wall-clock time for records people read.
    pub(super) fn timestamp(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.clock.unix_micros())
    }

    pub(super) fn on_timer(&mut self) {
        self.timer_at = None;
        let now = self.now();
        self.core.handle_timeout(now);
    }

    /// Turns everything the core wants done into actions. Called after every message.
    pub(super) fn drain(&mut self) {
        // What this turn started or ended may bring a periodic job's next occurrence.
        self.poll_schedules();
        // Events first (the core's documented order): cancels go out before new work.
        while let Some(event) = self.core.poll_event() {
            self.on_core_event(event);
        }
        while let Some(dispatch) = self.core.poll_dispatch() {
            self.send_dispatch(dispatch);
        }
        // Dispatching can ask for events too (a gang's reservation asks its nodes for
        // their queued work back): they go out after the work already on its way.
        while let Some(event) = self.core.poll_event() {
            self.on_core_event(event);
        }
        self.journal_accepted();
        self.arm_timer();
    }

    fn arm_timer(&mut self) {
        let Some(at) = self.core.poll_timeout() else {
            return;
        };
        if self.timer_at.is_some_and(|armed| armed <= at) {
            return;
        }
        self.timer_at = Some(at);
        let delay = Duration::from_micros(at.as_micros().saturating_sub(self.now().as_micros()));
        self.port.wake_after(delay, Wake::Timer);
    }

    fn send_dispatch(&mut self, dispatch: saker_core::Dispatch) {
        if !dispatch.members.is_empty() {
            return self.send_gang(dispatch);
        }
        let node_id = dispatch.node;
        let Some(node) = self.nodes.get_mut(&node_id) else {
            return;
        };
        let mut jobs = Vec::new();
        let mut tasks = Vec::with_capacity(dispatch.assignments.len());
        // Function payloads travel in the definitions: past the budget, the frame so
        // far goes out and the rest follows in another (one big payload goes alone).
        let mut data = 0;
        let mut frames = Vec::new();
        let mut count = 0;
        for assignment in &dispatch.assignments {
            let job_id = assignment.job;
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            if node.known_jobs.insert(job_id) {
                let len = job.def.payload.data_len();
                if data > 0 && data + len > FRAME_DATA_BUDGET {
                    frames.push((std::mem::take(&mut jobs), std::mem::take(&mut tasks)));
                    data = 0;
                }
                data += len;
                jobs.push(Arc::clone(&job.def));
                job.known_by.push(node_id);
            }
            count += 1;
            tasks.push(Assignment {
                task: assignment.task,
                attempt: assignment.attempt,
                job: job_id,
                index: job.array_index(assignment.index).unwrap_or(0),
            });
        }
        node.running += count;
        frames.push((jobs, tasks));
        let mut forget = Some(std::mem::take(&mut node.forget));
        let link = node.link;
        let last = frames.len() - 1;
        for (i, (jobs, tasks)) in frames.into_iter().enumerate() {
            let message = ToAgent::Dispatch(Dispatch {
                jobs,
                tasks,
                forget: if i == last {
                    forget.take().unwrap_or_default()
                } else {
                    Vec::new()
                },
                gang: None,
            });
            self.send_to(link, node_id, &message);
        }
    }

    /// A finished job's definition is no longer needed by the nodes that have it: they
    /// are told with their next dispatch, or at once when many have piled up (a node
    /// that gets no more work still frees its memory).
    fn forget_job(&mut self, job: JobId) {
        let Some(entry) = self.jobs.get_mut(&job) else {
            return;
        };
        for node_id in std::mem::take(&mut entry.known_by) {
            let Some(node) = self.nodes.get_mut(&node_id) else {
                continue;
            };
            if !node.known_jobs.remove(&job) {
                continue;
            }
            node.forget.push(job);
            if node.forget.len() >= FORGET_BATCH {
                let message = ToAgent::Dispatch(Dispatch {
                    jobs: Vec::new(),
                    tasks: Vec::new(),
                    forget: std::mem::take(&mut node.forget),
                    gang: None,
                });
                let link = node.link;
                self.send_to(link, node_id, &message);
            }
        }
    }

    /// Sends a message to `node` over `link` (see [`Port::send`]).
    pub(super) fn send_to(&mut self, link: LinkId, node: NodeId, message: &ToAgent) {
        self.port.send(link, node, message);
    }

    fn on_core_event(&mut self, event: Event) {
        match event {
            Event::TaskFinished {
                task,
                job,
                index,
                state,
                attempts,
            } => {
                let detail = self.attempts.details.remove(&task);
                self.finish_task(task, job, index, state, attempts, detail);
            }
            Event::CancelAttempt { node, attempt } => {
                if let Some(entry) = self.nodes.get(&node) {
                    let message = ToAgent::Cancel {
                        attempts: vec![attempt],
                    };
                    self.send_to(entry.link, node, &message);
                }
            }
            Event::ReturnUnstarted { node, attempt } => {
                if let Some(entry) = self.nodes.get(&node) {
                    let message = ToAgent::Return {
                        attempts: vec![attempt],
                    };
                    self.send_to(entry.link, node, &message);
                }
            }
            Event::JobFinished { job } => {
                self.forget_job(job);
                self.forget_reads(job);
                self.dependency_failed.remove(&job);
            }
            Event::DependencyFailed { job, dependency } => {
                tracing::info!(%job, %dependency, "a job's dependency failed; it is cancelled");
                self.dependency_failed.insert(job, dependency);
            }
        }
    }

    /// Journals this turn's accepted results as one group; they reach clients when the
    /// journal calls back.
    fn journal_accepted(&mut self) {
        if self.unjournaled.results.is_empty() && self.unjournaled.attempts.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.unjournaled.results);
        let mut records = std::mem::take(&mut self.unjournaled.attempts);
        records.extend(results.iter().map(|r| Record::Result(Arc::clone(r))));
        self.port.append(records, AfterJournal::Results(results));
    }

    pub(super) fn close_journal(&mut self) {
        self.port.close_journal();
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
            known_by: Vec::new(),
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
}
