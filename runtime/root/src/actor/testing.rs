//! What the root's unit tests drive it with, in the style of HyperQueue's `TestComm`:
//! a recording port that is the journal too, a journal in memory, a manual clock, an
//! [`Owned`] context for testing each owner on its own, and builders of requests and
//! results. Every message the root sends is round-tripped through the wire format and
//! every record through the journal's JSON before a test sees it, so each test also
//! checks the encodings.

pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::Duration;

pub(crate) use saker_actors::link::{LinkId, LinkTx};
pub(crate) use saker_core::{
    AttemptId, Core, CoreConfig, Event, JobId, NodeId, Resources, TaskId, Time,
};
pub(crate) use saker_wire::messages::{Outcome, Output, ResultBody, TaskResult, ToAgent};
pub(crate) use tokio::sync::oneshot;

pub(crate) use super::ctx::{Ctx, PilotFacts};
pub(crate) use super::journal::{AfterJournal, Journal};
pub(crate) use super::journal::{ReadError, ResultSource};
pub(crate) use super::message::RootMsg;
pub(super) use super::nodes::{Joining, Nodes};
pub(crate) use super::port::{Clock, Port, Wake};
use super::results::{FinishedTask, JobFacts, Results};
pub(crate) use crate::records::Record;
pub(crate) use saker_client::spec::{ArraySpec, JobRequest, TaskSpec};

pub(crate) const PILOT: &str = "pilot-under-test";

/// What the root did, as the recording port saw it.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// (route, message), decoded from the frames the root encoded.
    pub sent: Vec<(u32, ToAgent)>,
    pub superseded: Vec<(LinkId, NodeId)>,
    /// Appends not yet made durable, records decoded from their journal form.
    pub appends: Vec<(Vec<Record>, AfterJournal)>,
    pub wakes: Vec<(Duration, Wake)>,
    pub shutdown_requested: bool,
    pub journal_closed: bool,
    /// Times the root gave freed memory back.
    pub memory_releases: u32,
    /// Batch-system work the root handed over (elastic pilots).
    pub batches: Vec<super::port::BatchWork>,
    /// Every record made durable, by its (made-up) position: what the journal holds.
    pub durable: Arc<MemoryJournal>,
    /// Appends are durable at once, as a journal that does not sync and waits for
    /// nothing makes them ([`Journal::append`]'s inline case).
    pub inline_journal: bool,
    /// The journal waits for space ([`Journal::waiting_for_space`]).
    pub disk_full: bool,
}

/// A journal in memory, for reading results back as the pilot reads its journal.
#[derive(Debug, Default)]
pub(crate) struct MemoryJournal(
    pub Mutex<std::collections::BTreeMap<saker_journal::Position, Record>>,
);

impl MemoryJournal {
    /// Keeps `records` after those held; says where each is.
    pub(crate) fn hold(&self, records: Vec<Record>) -> Vec<saker_journal::Position> {
        let mut held = self.0.lock().unwrap();
        records
            .into_iter()
            .map(|record| {
                let position = saker_journal::Position {
                    segment: saker_journal::SegmentNumber(1),
                    offset: 16 + held.len() as u64,
                };
                held.insert(position, record);
                position
            })
            .collect()
    }
}

impl ResultSource for MemoryJournal {
    fn read(
        &self,
        position: saker_journal::Position,
    ) -> Result<Arc<saker_client::results::ResultRecord>, ReadError> {
        match self.0.lock().unwrap().get(&position) {
            Some(Record::Result(record)) => Ok(record.clone()),
            _ => Err(ReadError::NotAResult { position }),
        }
    }

    fn read_from(
        &self,
        position: saker_journal::Position,
        visit: &mut dyn FnMut(Arc<saker_client::results::ResultRecord>) -> bool,
    ) -> Result<(), ReadError> {
        let results: Vec<_> = self
            .0
            .lock()
            .unwrap()
            .range(position..)
            .filter_map(|(_, record)| match record {
                Record::Result(result) => Some(result.clone()),
                _ => None,
            })
            .collect();
        for result in results {
            if !visit(result) {
                break;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TestPort(pub Arc<Mutex<Recorded>>);

impl TestPort {
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Recorded) -> T) -> T {
        f(&mut self.0.lock().expect("a test thread panicked"))
    }
}

impl Port for TestPort {
    fn link_up(&mut self, _link: LinkId, _tx: LinkTx) {}

    fn link_down(&mut self, _link: LinkId) {}

    fn supersede(&mut self, link: LinkId, node: NodeId) {
        self.with(|r| r.superseded.push((link, node)));
    }

    fn send(&mut self, _link: LinkId, node: NodeId, message: &ToAgent) {
        let bytes = saker_wire::encode(node.0, message).expect("the root's messages encode");
        let mut decoder = saker_wire::FrameDecoder::new();
        decoder.push(&bytes);
        let frame = decoder
            .next_frame()
            .expect("a frame the root encoded decodes")
            .expect("one whole frame");
        let decoded = frame.decode::<ToAgent>().expect("and validates");
        assert_eq!(&decoded, message, "the wire round trip changed a message");
        self.with(|r| r.sent.push((frame.route, decoded)));
    }

    fn wake_after(&mut self, delay: Duration, wake: Wake) {
        self.with(|r| r.wakes.push((delay, wake)));
    }

    fn shutdown_requested(&mut self) {
        self.with(|r| r.shutdown_requested = true);
    }

    fn release_memory(&mut self) {
        self.with(|r| r.memory_releases += 1);
    }

    fn batch(&mut self, work: super::port::BatchWork) {
        self.with(|r| r.batches.push(work));
    }
}

/// The test port is the journal too: what it appends is recorded beside the frames.
impl Journal for TestPort {
    fn append(&mut self, records: Vec<Record>, after: AfterJournal) -> Option<RootMsg> {
        let decoded: Vec<Record> = records
            .iter()
            .map(|record| {
                let json = serde_json::to_vec(record).expect("records serialize");
                serde_json::from_slice::<Record>(&json).expect("and parse back")
            })
            .collect();
        if self.with(|r| r.inline_journal) {
            let journal = self.with(|r| r.durable.clone());
            let positions = journal.hold(decoded);
            return after.finish(Ok(positions));
        }
        self.with(|r| r.appends.push((decoded, after)));
        None
    }

    fn close(&mut self) {
        self.with(|r| r.journal_closed = true);
    }

    fn waiting_for_space(&self) -> bool {
        self.with(|r| r.disk_full)
    }

    fn results(&self) -> Arc<dyn ResultSource> {
        self.with(|r| r.durable.clone())
    }
}

/// Monotonic and wall-clock time that move only when a test says so.
#[derive(Debug, Clone)]
pub(crate) struct ManualClock(pub Arc<Mutex<u64>>);

/// The wall clock reads this plus the monotonic clock.
pub(crate) const UNIX_ORIGIN_US: u64 = 1_700_000_000_000_000;

impl ManualClock {
    pub(crate) fn advance(&self, by: Duration) {
        *self.0.lock().expect("a test thread panicked") += by.as_micros() as u64;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        Time::from_micros(*self.0.lock().expect("a test thread panicked"))
    }

    fn unix_micros(&self) -> u64 {
        UNIX_ORIGIN_US + self.now().as_micros()
    }
}

/// A shared context and what watches it.
pub(crate) struct Owned {
    pub ctx: Ctx,
    /// The live nodes, for owners that send to them.
    pub nodes: Nodes,
    pub port: TestPort,
    pub clock: ManualClock,
}

impl Owned {
    /// A pilot of at most two nodes, none registered yet, journaling to the port.
    pub(crate) fn new() -> Owned {
        let port = TestPort::default();
        Owned::with_journal(port.clone(), Box::new(port))
    }

    /// The same with `journal` as the journal.
    pub(crate) fn with_journal(port: TestPort, journal: Box<dyn Journal>) -> Owned {
        let clock = ManualClock(Arc::new(Mutex::new(0)));
        let pilot = PilotFacts {
            id: PILOT.to_owned(),
            max_nodes: Some(2),
            shutting_down: false,
        };
        let ctx = Ctx::new(
            Core::new(CoreConfig::default()),
            Box::new(port.clone()),
            journal,
            Box::new(clock.clone()),
            pilot,
        );
        Owned {
            ctx,
            nodes: Nodes::default(),
            port,
            clock,
        }
    }

    /// Node `node` offers `cores` more cores, as its agent does when a slot frees.
    pub(crate) fn credit(&mut self, node: u32, cores: u32) {
        let now = self.ctx.now();
        self.ctx
            .core
            .handle_credit(NodeId(node), Resources::cores(cores), now)
            .expect("a joined node grants credit");
    }

    /// Registers node `node` (host `host{node}`, over link `node`) with `cores` cores,
    /// in the core and the registry, its cores all offered as credit.
    pub(crate) fn add_node(&mut self, node: u32, cores: u32) {
        let now = self.ctx.now();
        let capacity = Resources::cores(cores);
        let id = NodeId(node);
        self.ctx
            .core
            .handle_node_joined(id, capacity, now)
            .expect("a new node joins");
        self.ctx
            .core
            .handle_credit(id, capacity, now)
            .expect("a joined node grants credit");
        let joining = Joining {
            link: LinkId(u64::from(node)),
            hostname: format!("host{node}"),
            scratch: String::new(),
            data_addr: String::new(),
            capacity,
            hosts_actors: false,
        };
        self.nodes.join(id, joining);
    }

    /// What the core dispatches now.
    pub(crate) fn dispatches(&mut self) -> Vec<saker_core::Dispatch> {
        std::iter::from_fn(|| self.ctx.core.poll_dispatch()).collect()
    }

    /// The (task, attempt) of every assignment the core dispatches now.
    pub(crate) fn dispatched(&mut self) -> Vec<(TaskId, AttemptId)> {
        self.dispatches()
            .iter()
            .flat_map(|dispatch| &dispatch.assignments)
            .map(|assignment| (assignment.task, assignment.attempt))
            .collect()
    }

    /// Frames sent since the last look, as (route, message).
    pub(crate) fn sent(&self) -> Vec<(u32, ToAgent)> {
        self.port.with(|r| std::mem::take(&mut r.sent))
    }

    /// Appends not yet durable, taken: what waits on each stays with it.
    pub(crate) fn appends(&self) -> Vec<(Vec<Record>, AfterJournal)> {
        self.port.with(|r| std::mem::take(&mut r.appends))
    }

    /// The records of the appends not yet durable (what waited on them is dropped).
    pub(crate) fn appended(&self) -> Vec<Record> {
        self.appends()
            .into_iter()
            .flat_map(|(records, _)| records)
            .collect()
    }

    pub(crate) fn wakes(&self) -> Vec<(Duration, Wake)> {
        self.port.with(|r| std::mem::take(&mut r.wakes))
    }

    /// The core's events now, `TaskFinished` ones handed to `results` with what
    /// `facts` says of their job (as the router does); the others returned.
    pub(crate) fn finish_tasks(
        &mut self,
        results: &mut Results,
        facts: impl Fn(saker_core::JobId, u32) -> Option<JobFacts>,
    ) -> Vec<Event> {
        let mut others = Vec::new();
        while let Some(event) = self.ctx.core.poll_event() {
            match FinishedTask::from_event(event) {
                Ok(finished) => match facts(finished.job, finished.offset) {
                    Some(job) => results.finish_task(&mut self.ctx, finished, job),
                    None => others.push(Event::TaskFinished {
                        task: finished.task,
                        job: finished.job,
                        index: finished.offset,
                        state: finished.state,
                        attempts: finished.attempts,
                    }),
                },
                Err(other) => others.push(other),
            }
        }
        others
    }
}

/// Submits `requests` through `submissions`, which must accept them; their jobs.
pub(crate) fn accept(
    owned: &mut Owned,
    submissions: &mut super::submissions::Submissions,
    requests: Vec<JobRequest>,
) -> Vec<saker_core::JobId> {
    let offered = owned.nodes.offered();
    let accepted = submissions
        .submit(&mut owned.ctx, offered, requests, None)
        .expect("accepted");
    accepted.jobs.iter().map(|job| job.job).collect()
}

/// The result records among `records`.
pub(crate) fn results_of(records: &[Record]) -> Vec<Arc<saker_client::results::ResultRecord>> {
    records
        .iter()
        .filter_map(|record| match record {
            Record::Result(result) => Some(result.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn array(argv: &[&str], indices: &str) -> JobRequest {
    JobRequest {
        spec: TaskSpec::new(argv.iter().map(|a| (*a).to_owned()).collect()),
        array: Some(indices.parse::<ArraySpec>().expect("a valid array")),
        inline_output: None,
    }
}

pub(crate) fn single(argv: &[&str]) -> JobRequest {
    JobRequest {
        spec: TaskSpec::new(argv.iter().map(|a| (*a).to_owned()).collect()),
        array: None,
        inline_output: None,
    }
}

pub(crate) fn exited(task: u64, attempt: u64, code: i32) -> TaskResult {
    TaskResult {
        task: TaskId(task),
        attempt: AttemptId(attempt),
        executor: 0,
        outcome: Outcome::Exited { code },
        received_unix_us: UNIX_ORIGIN_US,
        start_unix_us: UNIX_ORIGIN_US,
        end_unix_us: UNIX_ORIGIN_US + 1_000,
        fetch_us: 0,
        body: ResultBody::Command {
            stdout: Output::default(),
            stderr: Output::default(),
        },
    }
}

/// The (task, attempt) pairs of the dispatches in `sent` for `node`.
pub(crate) fn assignments(sent: &[(u32, ToAgent)], node: u32) -> Vec<(u64, u64)> {
    sent.iter()
        .filter(|(route, _)| *route == node)
        .filter_map(|(_, message)| match message {
            ToAgent::Dispatch(dispatch) => {
                Some(dispatch.tasks.iter().map(|a| (a.task.0, a.attempt.0)))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// An elastic pilot's configuration: one-node allocations of two cores, two at most.
pub(crate) fn elastic_config() -> super::ElasticConfig {
    use saker_core::provision::{Policy, ProvisionConfig};
    const SECOND: u64 = 1_000_000;
    super::ElasticConfig {
        provision: ProvisionConfig {
            policy: Policy::All,
            nodes_per_allocation: 1,
            cores_per_node: 2,
            max_nodes: 2,
            max_pending: 2,
            grow_after_us: 10 * SECOND,
            idle_release_us: 30 * SECOND,
            replace_ahead_us: 60 * SECOND,
        },
        round: Duration::from_secs(1),
        script: "#!/bin/bash\nexec saker agent --subtree-base {first_node}\n".into(),
        job_name: "saker-test".into(),
        partition: Some("debug".into()),
        account: None,
        time_limit_minutes: Some(60),
        working_directory: None,
        output: None,
    }
}
