//! A driver for tests: applies inputs, drains outputs after each, and checks the core's
//! consistency every time.

use saker_core::{
    AdoptError, AttemptId, AttemptOutcome, Backoff, Core, CoreConfig, Dispatch, Disposition, Event,
    JobSpec, NodeId, NodeLoss, Resources, Speculation, SubmittedJob, TaskId, Time,
};

/// Config with a small, visible backoff (100 us, doubling, at most 1 ms).
pub fn test_config() -> CoreConfig {
    CoreConfig {
        max_bundle: 1024,
        retry_backoff: Backoff {
            base_micros: 100,
            factor: 2,
            max_micros: 1_000,
        },
        default_max_replays: 3,
        speculation: Some(Speculation::default()),
        locality_wait_micros: 1_000,
        term: 1,
    }
}

#[derive(Debug)]
pub struct Harness {
    pub core: Core,
    pub now: Time,
    events: Vec<Event>,
    dispatches: Vec<Dispatch>,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(test_config())
    }

    pub fn with_config(config: CoreConfig) -> Harness {
        Harness {
            core: Core::new(config),
            now: Time::ZERO,
            events: Vec::new(),
            dispatches: Vec::new(),
        }
    }

    /// Drains both outputs into the harness buffers and checks consistency.
    pub fn drain(&mut self) {
        while let Some(event) = self.core.poll_event() {
            self.events.push(event);
        }
        while let Some(dispatch) = self.core.poll_dispatch() {
            assert!(!dispatch.assignments.is_empty(), "empty dispatch");
            self.dispatches.push(dispatch);
        }
        // Dispatching can ask for events too (a gang's reservation).
        while let Some(event) = self.core.poll_event() {
            self.events.push(event);
        }
        if let Err(error) = self.core.check_consistency() {
            panic!("core inconsistent: {error}");
        }
    }

    pub fn advance_to(&mut self, now: Time) {
        self.now = now;
    }

    pub fn submit(&mut self, spec: JobSpec) -> SubmittedJob {
        let job = self.core.handle_submit(spec, self.now).expect("valid spec");
        self.drain();
        job
    }

    pub fn submit_after(
        &mut self,
        spec: JobSpec,
        after: &[saker_core::Dependency],
    ) -> SubmittedJob {
        let job = self
            .core
            .handle_submit_after(spec, after, self.now)
            .expect("valid spec");
        self.drain();
        job
    }

    /// Joins a node of `cores` cores and nothing else.
    pub fn join(&mut self, node: u32, cores: u32) {
        self.join_resources(node, Resources::cores(cores));
    }

    pub fn join_resources(&mut self, node: u32, capacity: Resources) {
        self.core
            .handle_node_joined(NodeId(node), capacity, self.now)
            .expect("fresh node");
        self.drain();
    }

    /// Grants `cores` cores of credit and nothing else.
    pub fn credit(&mut self, node: u32, cores: u32) {
        self.credit_resources(node, Resources::cores(cores));
    }

    pub fn credit_resources(&mut self, node: u32, credit: Resources) {
        self.core
            .handle_credit(NodeId(node), credit, self.now)
            .expect("live node");
        self.drain();
    }

    /// Joins a node and grants credit equal to its capacity.
    pub fn join_with_credit(&mut self, node: u32, cores: u32) {
        self.join_resources_with_credit(node, Resources::cores(cores));
    }

    pub fn join_resources_with_credit(&mut self, node: u32, capacity: Resources) {
        self.join_resources(node, capacity);
        self.credit_resources(node, capacity);
    }

    /// A node's capacity and credit in cores, for nodes that deal only in cores
    /// (panics if either holds another kind).
    pub fn cores_credit(&self, node: u32) -> Option<(u32, u32)> {
        let (capacity, credit) = self.core.node_credit(NodeId(node))?;
        let cores = (capacity.core_count(), credit.core_count());
        assert_eq!(
            (capacity, credit),
            (Resources::cores(cores.0), Resources::cores(cores.1)),
            "node {node} deals in more than cores"
        );
        Some(cores)
    }

    pub fn started(&mut self, attempt: AttemptId) {
        self.core
            .handle_started(attempt, self.now)
            .expect("live attempt");
        self.drain();
    }

    pub fn result(&mut self, attempt: AttemptId, outcome: AttemptOutcome) -> Disposition {
        let disposition = self.core.handle_result(attempt, outcome, self.now);
        self.drain();
        disposition
    }

    /// Node `node` holds `attempt` of `task`, from an earlier root (`handle_adopt`).
    pub fn adopt(
        &mut self,
        node: u32,
        task: TaskId,
        attempt: AttemptId,
        started: Option<Time>,
    ) -> Result<(), AdoptError> {
        let adopted = self
            .core
            .handle_adopt(NodeId(node), task, attempt, started, self.now);
        self.drain();
        adopted
    }

    /// Nodes `members` hold gang `attempt` of `task`, from an earlier root.
    pub fn adopt_gang(
        &mut self,
        members: &[u32],
        task: TaskId,
        attempt: AttemptId,
        started: Option<Time>,
    ) -> Result<(), AdoptError> {
        let members: Vec<NodeId> = members.iter().map(|&node| NodeId(node)).collect();
        let adopted = self
            .core
            .handle_adopt_gang(&members, task, attempt, started, self.now);
        self.drain();
        adopted
    }

    pub fn lose(&mut self, node: u32) -> NodeLoss {
        let loss = self
            .core
            .handle_node_lost(NodeId(node), self.now)
            .expect("live node");
        self.drain();
        loss
    }

    pub fn cancel(&mut self, job: saker_core::JobId) -> saker_core::CancelSummary {
        let summary = self
            .core
            .handle_cancel_job(job, self.now)
            .expect("known job");
        self.drain();
        summary
    }

    /// `job` prefers `nodes` (where its data is).
    pub fn prefer(&mut self, job: saker_core::JobId, nodes: &[u32]) {
        let nodes: Vec<NodeId> = nodes.iter().map(|&node| NodeId(node)).collect();
        self.core
            .handle_prefer(job, &nodes, self.now)
            .expect("a live job");
        self.drain();
    }

    pub fn timeout(&mut self) {
        self.core.handle_timeout(self.now);
        self.drain();
    }

    pub fn set_deadline(&mut self, deadline: Option<Time>) {
        self.core.handle_deadline(deadline, self.now);
        self.drain();
    }

    /// Tells the core to stop dispatching (`handle_drain`).
    pub fn stop_dispatch(&mut self) {
        self.core.handle_drain(self.now);
        self.drain();
    }

    pub fn take_dispatches(&mut self) -> Vec<Dispatch> {
        std::mem::take(&mut self.dispatches)
    }

    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// All dispatched assignments since the last take, as (node, task index, job) in order.
    pub fn take_assigned(&mut self) -> Vec<(u32, u32, u32)> {
        self.take_dispatches()
            .into_iter()
            .flat_map(|dispatch| {
                dispatch
                    .assignments
                    .into_iter()
                    .map(move |assignment| (dispatch.node.0, assignment.index, assignment.job.0))
            })
            .collect()
    }

    /// The single assignment dispatched since the last take.
    pub fn take_one(&mut self) -> saker_core::Assignment {
        let dispatches = self.take_dispatches();
        assert_eq!(dispatches.len(), 1, "expected one dispatch: {dispatches:?}");
        assert_eq!(
            dispatches[0].assignments.len(),
            1,
            "expected one assignment"
        );
        dispatches[0].assignments[0]
    }
}
