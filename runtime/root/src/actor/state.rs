//! The root's state and the translation of core outputs into actions.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use saker_actors::link::LinkId;
use saker_core::{Core, Event, JobId, NodeId, TaskId, Time};
use saker_wire::messages::{Assignment, Dispatch, FRAME_DATA_BUDGET, ToAgent};
use tokio::sync::mpsc;

use super::clients::Waiter;
pub(super) use super::jobs::{JobEntry, JobTable, LineBatch};
use super::port::{AfterJournal, Clock, Port, Wake};
use super::rates::{MinuteRate, RateWindow};
use super::resources::ResourceNames;
use crate::attempts::AttemptNote;
use crate::records::Record;
use crate::results::{ResultRecord, Timestamp};
use saker_actors::resources::NodeResources;

/// Results that must have ended since the last time before a pilot that has gone idle
/// gives its freed memory back: enough that a burst's queue was worth returning, few
/// enough that a pilot fed one task at a time never pays for it.
const RELEASE_AFTER_RESULTS: u64 = 10_000;

/// Finished jobs a node is told to forget in one message when no dispatch takes them.
const FORGET_BATCH: usize = 1024;

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
    /// When the agent received the dispatch (0: not known).
    pub received_unix_us: u64,
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
    /// When each task in motion was last dispatched (unix µs): its result's
    /// `dispatch_time`. Removed when the task finishes, so it holds what is in flight.
    pub dispatched: HashMap<TaskId, u64>,
}

/// What this turn produced for the journal; journaled together at the end of it.
#[derive(Debug, Default)]
pub(super) struct Unjournaled {
    pub results: Vec<Arc<ResultRecord>>,
    /// Records no one waits on: attempts that ended without counting, nodes that
    /// joined or left.
    pub records: Vec<Record>,
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
    pub minute: MinuteRate,
    pub stages: super::stages::Stages,
    pub waiters: Vec<Waiter>,
    /// Submissions answered once their own tasks have ended.
    pub submit_waiters: super::waiters::SubmitWaiters,
    /// `totals.durable` when the root last gave freed memory back, and how many more
    /// results must end in an idle pilot before it does so again (see
    /// [`Port::release_memory`]).
    pub released_at: u64,
    pub release_after: u64,
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
            minute: MinuteRate::default(),
            stages: Default::default(),
            waiters: Vec::new(),
            submit_waiters: Default::default(),
            released_at: 0,
            release_after: RELEASE_AFTER_RESULTS,
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
    /// An elastic pilot's batch allocations (`elastic.rs`).
    pub(super) elastic: Option<super::elastic::Elastic>,
    /// What the journal finished at once during this turn, handled before it ends.
    pub(super) written_now: Option<super::RootMsg>,
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
            elastic: None,
            written_now: None,
        }
    }

    /// Makes this an elastic pilot: before [`RootState::restore`], which adopts the
    /// allocations its journal names; the first round comes one round after start.
    pub fn set_elastic(&mut self, config: super::elastic::ElasticConfig) {
        let round = config.round;
        self.elastic = Some(super::elastic::Elastic::new(config));
        self.port.wake_after(round, Wake::Provision);
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
        let at = self.timestamp().unix_micros();
        for assignment in &dispatch.assignments {
            self.attempts.dispatched.insert(assignment.task, at);
        }
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
            // A batch's job gets its own definition (and entry) the first time.
            let def = if node.known_jobs.contains(&job_id) {
                None
            } else {
                self.jobs.def(job_id)
            };
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            if let Some(def) = def {
                node.known_jobs.insert(job_id);
                let len = def.payload.data_len();
                if data > 0 && data + len > FRAME_DATA_BUDGET {
                    frames.push((std::mem::take(&mut jobs), std::mem::take(&mut tasks)));
                    data = 0;
                }
                data += len;
                jobs.push(def);
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
        if self.unjournaled.results.is_empty() && self.unjournaled.records.is_empty() {
            return;
        }
        let results = std::mem::take(&mut self.unjournaled.results);
        let mut records = std::mem::take(&mut self.unjournaled.records);
        records.extend(results.iter().map(|r| Record::Result(Arc::clone(r))));
        self.append(records, AfterJournal::Results(results));
    }

    /// Appends `records` to the journal (see [`Port::append`]); what it finished at
    /// once is handled before this turn ends.
    pub(super) fn append(&mut self, records: Vec<Record>, after: AfterJournal) {
        if let Some(message) = self.port.append(records, after) {
            debug_assert!(self.written_now.is_none(), "one inline append a turn");
            self.written_now = Some(message);
        }
    }

    pub(super) fn close_journal(&mut self) {
        self.port.close_journal();
    }
}
