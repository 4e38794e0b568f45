//! Each owner of the root's state on its own: a [`Ctx`] built here (the recording
//! [`TestPort`] as port and journal, a [`ManualClock`], a few registered nodes), the
//! owner's methods called directly, and its state, the port's record and the core
//! looked at afterwards. What the router ([`RootState`]) adds is tested in `tests.rs`.

use std::collections::HashMap;

use saker_core::{Core, Event, JobId};

use super::*;
use crate::actor::ctx::{Ctx, NodeEntry, PilotFacts};
use crate::actor::jobs::JobTable;
use crate::actor::resources::ResourceNames;
use crate::actor::results::{FinishedTask, Results};
use crate::actor::submissions::Submissions;

mod gangs;
mod results;
mod schedules;
mod submissions;
mod upkeep;

/// A shared context and what watches it.
struct Owned {
    ctx: Ctx,
    port: TestPort,
    clock: ManualClock,
}

impl Owned {
    /// A pilot of at most two nodes, none registered yet, journaling to the port.
    fn new() -> Owned {
        let port = TestPort::default();
        Owned::with_journal(port.clone(), Box::new(port))
    }

    /// The same with `journal` as the journal.
    fn with_journal(port: TestPort, journal: Box<dyn Journal>) -> Owned {
        let clock = ManualClock(Arc::new(Mutex::new(0)));
        let ctx = Ctx {
            core: Core::new(CoreConfig::default()),
            port: Box::new(port.clone()),
            journal,
            clock: Box::new(clock.clone()),
            nodes: HashMap::new(),
            links: HashMap::new(),
            pilot: PilotFacts {
                id: PILOT.to_owned(),
                allocation: None,
                max_nodes: Some(2),
                expected_node: None,
                shutting_down: false,
                process: None,
            },
            timer_at: None,
            written_now: None,
            space_check_armed: false,
        };
        Owned { ctx, port, clock }
    }

    /// Node `node` offers `cores` more cores, as its agent does when a slot frees.
    fn credit(&mut self, node: u32, cores: u32) {
        let now = self.ctx.now();
        self.ctx
            .core
            .handle_credit(NodeId(node), Resources::cores(cores), now)
            .expect("a joined node grants credit");
    }

    /// Registers node `node` (host `host{node}`, over link `node`) with `cores` cores,
    /// in the core and the registry, its cores all offered as credit.
    fn add_node(&mut self, node: u32, cores: u32) {
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
        self.ctx.nodes.insert(
            id,
            NodeEntry {
                link: LinkId(u64::from(node)),
                hostname: format!("host{node}"),
                cores,
                capacity,
                known_jobs: Default::default(),
                forget: Vec::new(),
                running: 0,
                hosts_actors: false,
            },
        );
    }

    /// What the core dispatches now.
    fn dispatches(&mut self) -> Vec<saker_core::Dispatch> {
        std::iter::from_fn(|| self.ctx.core.poll_dispatch()).collect()
    }

    /// The (task, attempt) of every assignment the core dispatches now.
    fn dispatched(&mut self) -> Vec<(TaskId, AttemptId)> {
        self.dispatches()
            .iter()
            .flat_map(|dispatch| &dispatch.assignments)
            .map(|assignment| (assignment.task, assignment.attempt))
            .collect()
    }

    /// Frames sent since the last look, as (route, message).
    fn sent(&self) -> Vec<(u32, ToAgent)> {
        self.port.with(|r| std::mem::take(&mut r.sent))
    }

    /// Appends not yet durable, taken: what waits on each stays with it.
    fn appends(&self) -> Vec<(Vec<Record>, AfterJournal)> {
        self.port.with(|r| std::mem::take(&mut r.appends))
    }

    /// The records of the appends not yet durable (what waited on them is dropped).
    fn appended(&self) -> Vec<Record> {
        self.appends()
            .into_iter()
            .flat_map(|(records, _)| records)
            .collect()
    }

    fn wakes(&self) -> Vec<(Duration, Wake)> {
        self.port.with(|r| std::mem::take(&mut r.wakes))
    }

    /// The core's events now, `TaskFinished` ones handed to `results` (as the router
    /// does); the others returned.
    fn finish_tasks(&mut self, results: &mut Results, submissions: &Submissions) -> Vec<Event> {
        let mut others = Vec::new();
        while let Some(event) = self.ctx.core.poll_event() {
            match FinishedTask::from_event(event) {
                Ok(finished) => results.finish_task(&mut self.ctx, submissions, finished),
                Err(other) => others.push(other),
            }
        }
        others
    }
}

/// Submissions as a new pilot's root starts with them.
fn new_submissions() -> Submissions {
    Submissions {
        jobs: JobTable::default(),
        classes: HashMap::new(),
        resource_names: ResourceNames::default(),
        dependency_failed: HashMap::new(),
        tasks: 0,
    }
}

/// Submits `requests` through `submissions`, which must accept them; their jobs.
fn accept(
    owned: &mut Owned,
    submissions: &mut Submissions,
    requests: Vec<JobRequest>,
) -> Vec<JobId> {
    let accepted = submissions
        .submit(&mut owned.ctx, requests, None)
        .expect("accepted");
    accepted.jobs.iter().map(|job| job.job).collect()
}
