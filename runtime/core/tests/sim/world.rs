//! The simulated pilot: a root driving the core, agents running tasks, links with
//! latency, crashes, on a virtual clock.
//!
//! Events are ordered by (virtual time, sequence number), so equal times run in the
//! order they were scheduled and a seed fixes the whole run. Each link direction is
//! FIFO (a QUIC stream): a message never overtakes an earlier one on the same link.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use saker_core::{
    AttemptId, AttemptOutcome, Backoff, Core, CoreConfig, Dispatch, Disposition, JobId, JobSpec,
    NodeId, Placement, ResourceKind, Resources, Time,
};

use crate::config::{SimConfig, Summary};
use crate::ledger::Ledger;

mod updates;
use updates::Change;

#[derive(Debug)]
enum Action {
    Submit(JobSpec),
    /// Root receives an agent's hello: join + initial credit.
    Hello {
        node: NodeId,
        incarnation: u64,
    },
    /// Agent receives work.
    Work {
        node: NodeId,
        incarnation: u64,
        work: Vec<Work>,
    },
    /// Agent is told to stop an attempt.
    Stop {
        node: NodeId,
        incarnation: u64,
        attempt: AttemptId,
    },
    /// An attempt's process ends on the agent.
    Done {
        node: NodeId,
        incarnation: u64,
        attempt: AttemptId,
    },
    /// Root receives "started".
    Started {
        attempt: AttemptId,
    },
    /// Root receives a result with the credit it frees.
    Report {
        node: NodeId,
        incarnation: u64,
        attempt: AttemptId,
        outcome: AttemptOutcome,
        credit: Resources,
    },
    Crash {
        node: NodeId,
    },
    Partition {
        node: NodeId,
    },
    Detect {
        node: NodeId,
    },
    Rejoin {
        node: NodeId,
    },
    Cancel {
        job: JobId,
    },
    Deadline(Option<Time>),
    Drain,
    /// A client updates a job.
    Update {
        job: JobId,
        change: Change,
    },
    /// Agent is asked to give back an attempt it has not started.
    Return {
        node: NodeId,
        incarnation: u64,
        attempt: AttemptId,
    },
}

/// One attempt as an agent holds it.
#[derive(Clone, Copy, Debug)]
struct Work {
    attempt: AttemptId,
    need: Resources,
    /// Longest the attempt may run (its job's time limit, else unbounded).
    max_duration: u64,
    /// Its durations are this many times the configured range (its class's scale).
    scale: u64,
}

/// The virtual clock's agenda: actions grouped by due time, FIFO within a time (so
/// ties run in scheduling order). Popping the earliest time touches the B-tree's first
/// leaf only, which is cheaper than a binary heap of a million entries.
#[derive(Debug, Default)]
struct Agenda {
    due: BTreeMap<u64, VecDeque<Action>>,
}

impl Agenda {
    fn push(&mut self, time: u64, action: Action) {
        self.due.entry(time).or_default().push_back(action);
    }

    fn next_time(&self) -> Option<u64> {
        self.due.first_key_value().map(|(time, _)| *time)
    }

    fn pop(&mut self) -> Option<(u64, Action)> {
        let mut entry = self.due.first_entry()?;
        let time = *entry.key();
        let action = entry.get_mut().pop_front().expect("no empty time is kept");
        if entry.get().is_empty() {
            entry.remove();
        }
        Some((time, action))
    }
}

#[derive(Debug)]
struct Agent {
    /// What the node offers; the same for every incarnation.
    capacity: Resources,
    incarnation: u64,
    alive: bool,
    /// Received, not started.
    local: VecDeque<Work>,
    /// Started: attempt -> what it needs.
    running: BTreeMap<AttemptId, Resources>,
    /// What the started work needs.
    running_total: Resources,
    /// What the work held (local + running) needs: the core's credit discipline bounds
    /// it, in every kind, by its credit limit (capacity plus prefetch).
    held: Resources,
    /// Last delivery time on the agent -> root and root -> agent links.
    up_clock: u64,
    down_clock: u64,
}

pub struct World {
    config: SimConfig,
    rng: Xoshiro256PlusPlus,
    now: u64,
    agenda: Agenda,
    core: Core,
    ledger: Ledger,
    agents: Vec<Agent>,
    /// The incarnation the root (core) currently has joined for each node.
    root_view: Vec<Option<u64>>,
    next_incarnation: u64,
    summary: Summary,
}

impl World {
    pub fn new(config: SimConfig) -> World {
        let core = Core::new(CoreConfig {
            max_bundle: config.max_bundle,
            retry_backoff: Backoff {
                base_micros: 500,
                factor: 2,
                max_micros: 20_000,
            },
            default_max_replays: 8,
            speculation: config.speculation,
            locality_wait_micros: 2_000,
            term: 1,
        });
        let agents = (0..config.nodes)
            .map(|node| Agent {
                capacity: match &config.mix {
                    Some(mix) => mix.node_shapes[node as usize % mix.node_shapes.len()],
                    None => Resources::cores(config.cores_per_node),
                },
                incarnation: 0,
                alive: false,
                local: VecDeque::new(),
                running: BTreeMap::new(),
                held: Resources::ZERO,
                running_total: Resources::ZERO,
                up_clock: 0,
                down_clock: 0,
            })
            .collect();
        let mut world = World {
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            now: 0,
            agenda: Agenda::default(),
            core,
            ledger: Ledger::default(),
            agents,
            root_view: vec![None; config.nodes as usize],
            next_incarnation: 0,
            summary: Summary {
                dependent_jobs: 0,
                preferring_jobs: 0,
                updates: 0,
                asked_back: 0,
                steps: 0,
                makespan: Time::ZERO,
                tasks: 0,
                succeeded: 0,
                failed: 0,
                cancelled: 0,
                retries: 0,
                replays: 0,
                duplicates: 0,
                dispatches: 0,
                unstarted: 0,
                speculated: 0,
                copies_won: 0,
                continued: 0,
                non_core_attempts: 0,
                non_core_copies: 0,
                bound_by_other_kinds: 0,
                sweeps: 0,
                trace: 0xcbf2_9ce4_8422_2325,
            },
            config,
        };
        world.plan();
        world
    }

    fn schedule(&mut self, time: u64, action: Action) {
        self.agenda.push(time, action);
    }

    fn latency(&mut self) -> u64 {
        let (low, high) = self.config.latency_micros;
        self.rng.random_range(low..=high)
    }

    /// Delivery time of a message sent now on a FIFO link whose last delivery was `clock`.
    fn deliver_at(&mut self, clock: u64) -> u64 {
        (self.now + self.latency()).max(clock)
    }

    fn trace(&mut self, values: &[u64]) {
        for value in values {
            for byte in value.to_le_bytes() {
                self.summary.trace ^= u64::from(byte);
                self.summary.trace = self.summary.trace.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }

    fn trace_event(&mut self, event: saker_core::Event) {
        use saker_core::Event;
        match event {
            Event::TaskFinished {
                task,
                state,
                attempts,
                ..
            } => self.trace(&[2, task.0, state as u64, u64::from(attempts)]),
            Event::CancelAttempt { node, attempt } => {
                self.trace(&[8, u64::from(node.0), attempt.0]);
            }
            Event::JobFinished { job } => self.trace(&[9, u64::from(job.0)]),
            Event::DependencyFailed { job, dependency } => {
                self.trace(&[13, u64::from(job.0), u64::from(dependency.0)]);
            }
            // These worlds have no gangs: only updates ask for work back.
            Event::ReturnUnstarted { node, attempt } => {
                self.trace(&[19, u64::from(node.0), attempt.0]);
                self.summary.asked_back += 1;
                self.send_down(node, |incarnation| Action::Return {
                    node,
                    incarnation,
                    attempt,
                });
            }
        }
    }

    fn trace_disposition(&mut self, attempt: AttemptId, disposition: Disposition) {
        let values = match disposition {
            Disposition::Accepted { task, state, .. } => [10, task.0, state as u64],
            Disposition::WillRetry { task, not_before } => [11, task.0, not_before.0],
            Disposition::WillReplay { task } => [12, task.0, 0],
            Disposition::Continues { task } => [17, task.0, 0],
            Disposition::Duplicate => [13, 0, 0],
            Disposition::UnknownAttempt => [14, 0, 0],
            Disposition::Returned { task } => [18, task.0, 0],
        };
        self.trace(&[attempt.0]);
        self.trace(&values);
    }

    /// Schedules submissions, agent start-up, crashes and cancellations.
    fn plan(&mut self) {
        let mut remaining = self.config.tasks;
        let mut jobs = 0u32;
        while remaining > 0 {
            let single = self.rng.random_bool(self.config.single_fraction);
            let count = if single {
                1
            } else {
                self.rng.random_range(2..=self.config.max_array.max(2))
            };
            let count = count.min(u32::try_from(remaining).unwrap_or(u32::MAX));
            remaining -= u64::from(count);
            let choice = self.rng.random_range(0..self.config.core_choices.len());
            let mut resources = Resources::cores(self.config.core_choices[choice]);
            if let Some(mix) = &self.config.mix {
                let extra = mix.task_extras[self.rng.random_range(0..mix.task_extras.len())];
                resources = resources.saturating_add(extra);
                assert!(
                    resources.fits_in(&mix.node_shapes[0]),
                    "every task must fit node 0, or it could wait forever"
                );
            }
            let time_limit = if self.config.time_limits.is_empty() {
                None
            } else {
                let choice = self.rng.random_range(0..self.config.time_limits.len());
                self.config.time_limits[choice]
            };
            let (class, speculative) = if self.config.speculative_fraction > 0.0 {
                let speculative = self.rng.random_bool(self.config.speculative_fraction);
                (
                    self.rng.random_range(0..self.config.classes.max(1)),
                    speculative,
                )
            } else {
                (0, false)
            };
            let placement = if self.config.pinned_fraction > 0.0
                && self.config.mix.is_none()
                && self.rng.random_bool(self.config.pinned_fraction)
            {
                Placement::Node {
                    node: NodeId(self.rng.random_range(0..self.config.nodes)),
                }
            } else {
                Placement::Single
            };
            let spec = JobSpec {
                count,
                resources,
                placement,
                priority: self.rng.random_range(0..3),
                max_retries: self.config.max_retries,
                max_replays: None,
                time_limit,
                class,
                speculative,
            };
            let at = self.rng.random_range(0..=self.config.submit_window_micros);
            self.schedule(at, Action::Submit(spec));
            jobs += 1;
        }
        for node in 0..self.config.nodes {
            self.rejoin(NodeId(node));
        }
        let horizon = self.config.submit_window_micros * 2 + self.config.duration_micros.1;
        for _ in 0..self.config.crashes {
            let node = NodeId(self.rng.random_range(0..self.config.nodes));
            let at = self.rng.random_range(1..=horizon);
            self.schedule(at, Action::Crash { node });
        }
        for _ in 0..self.config.partitions {
            let node = NodeId(self.rng.random_range(0..self.config.nodes));
            let at = self.rng.random_range(1..=horizon);
            self.schedule(at, Action::Partition { node });
        }
        if let Some(plan) = self.config.deadline {
            let deadline = Some(Time(plan.deadline));
            if let Some(at) = plan.set_at {
                self.schedule(at, Action::Deadline(deadline));
            }
            if let Some(at) = plan.cleared_at {
                self.schedule(at, Action::Deadline(None));
            }
            if let Some(at) = plan.drain_at {
                self.schedule(at, Action::Drain);
            }
        }
        for _ in 0..self.config.cancels {
            let job = JobId(self.rng.random_range(1..=jobs));
            let at = self.rng.random_range(0..=horizon);
            self.schedule(at, Action::Cancel { job });
        }
        self.plan_updates(jobs, horizon);
    }

    /// A (new incarnation of a) node starts and says hello.
    fn rejoin(&mut self, node: NodeId) {
        self.next_incarnation += 1;
        let incarnation = self.next_incarnation;
        let agent = &mut self.agents[node.0 as usize];
        agent.incarnation = incarnation;
        agent.alive = true;
        agent.local.clear();
        agent.running.clear();
        agent.held = Resources::ZERO;
        agent.running_total = Resources::ZERO;
        let clock = agent.up_clock;
        let at = self.deliver_at(clock);
        self.agents[node.0 as usize].up_clock = at;
        self.schedule(at, Action::Hello { node, incarnation });
    }

    /// Runs to completion and returns the summary; panics on any violated invariant.
    pub fn run(mut self) -> Summary {
        let wall = Instant::now();
        loop {
            let next_action = self.agenda.next_time();
            let next_timer = self.core.poll_timeout().map(Time::as_micros);
            match (next_action, next_timer) {
                (None, None) => break,
                (Some(action), Some(timer)) if timer < action => self.fire_timer(timer),
                (None, Some(timer)) => self.fire_timer(timer),
                _ => {
                    // Invariant: the match above covers next_action == None.
                    let (time, action) = self.agenda.pop().expect("an action is due");
                    self.now = self.now.max(time);
                    self.apply(action);
                }
            }
            self.after_step();
        }
        self.ledger.check_final(&self.core);
        self.summary.sweeps += 1;
        let counts = self.core.counts();
        self.summary.makespan = Time(self.now);
        self.summary.tasks = self.ledger.total_tasks();
        self.summary.succeeded = counts.succeeded;
        self.summary.failed = counts.failed;
        self.summary.cancelled = counts.cancelled;
        self.summary.retries = counts.retries;
        self.summary.replays = counts.replays;
        self.summary.duplicates = counts.duplicates;
        self.summary.unstarted = self.core.unstarted().tasks;
        self.summary.speculated = counts.speculated;
        self.summary.copies_won = self.ledger.copies_won;
        self.summary.continued = self.ledger.continued;
        self.summary.non_core_attempts = self.ledger.non_core_attempts;
        self.summary.non_core_copies = self.ledger.non_core_copies;
        self.summary.bound_by_other_kinds = self.ledger.bound_by_other_kinds;
        for agent in &self.agents {
            assert!(
                agent.running.is_empty() && agent.local.is_empty(),
                "agent left with work"
            );
        }
        println!(
            "sim seed={} nodes={}x{} tasks={} steps={} dispatches={} makespan={:.3}s wall={:.2?} \
             succeeded={} failed={} cancelled={} unstarted={} retries={} replays={} duplicates={} \
             speculated={} copies_won={} continued={} sweeps={}",
            self.config.seed,
            self.config.nodes,
            self.config.cores_per_node,
            self.summary.tasks,
            self.summary.steps,
            self.summary.dispatches,
            self.now as f64 / 1e6,
            wall.elapsed(),
            self.summary.succeeded,
            self.summary.failed,
            self.summary.cancelled,
            self.summary.unstarted,
            self.summary.retries,
            self.summary.replays,
            self.summary.duplicates,
            self.summary.speculated,
            self.summary.copies_won,
            self.summary.continued,
            self.summary.sweeps,
        );
        self.summary
    }

    fn fire_timer(&mut self, timer: u64) {
        self.now = self.now.max(timer);
        self.core.handle_timeout(Time(self.now));
        self.trace(&[1, self.now]);
    }

    fn after_step(&mut self) {
        self.drain();
        self.summary.steps += 1;
        self.ledger.check_counts(&self.core.counts());
        if self.summary.steps.is_multiple_of(self.config.sweep_every) {
            self.ledger.sweep(&self.core);
            self.summary.sweeps += 1;
        }
    }

    /// Drains events, then dispatches, as the root actor does after every input.
    fn drain(&mut self) {
        while let Some(event) = self.core.poll_event() {
            self.trace_event(event);
            self.ledger.event(event);
            if let saker_core::Event::CancelAttempt { node, attempt } = event {
                self.send_down(node, |incarnation| Action::Stop {
                    node,
                    incarnation,
                    attempt,
                });
            }
        }
        while let Some(dispatch) = self.core.poll_dispatch() {
            self.summary.dispatches += 1;
            self.on_dispatch(dispatch);
        }
    }

    fn on_dispatch(&mut self, dispatch: Dispatch) {
        let node = dispatch.node;
        self.ledger.dispatched(&dispatch, Time(self.now));
        self.ledger.check_credit(&self.core, node);
        let work: Vec<Work> = dispatch
            .assignments
            .iter()
            .map(|assignment| Work {
                attempt: assignment.attempt,
                need: self.ledger.job_need(assignment.job),
                max_duration: self
                    .ledger
                    .job_time_limit(assignment.job)
                    .unwrap_or(u64::MAX),
                scale: u64::from(self.ledger.job_class(assignment.job)) + 1,
            })
            .collect();
        let first = dispatch.assignments[0];
        self.trace(&[
            3,
            u64::from(node.0),
            first.attempt.0,
            first.task.0,
            work.len() as u64,
        ]);
        self.send_down(node, |incarnation| Action::Work {
            node,
            incarnation,
            work,
        });
    }

    /// Sends a root -> agent message to the incarnation the root knows.
    fn send_down(&mut self, node: NodeId, action: impl FnOnce(u64) -> Action) {
        // Invariant: the core only names nodes the root has joined.
        let incarnation = self.root_view[node.0 as usize].expect("root knows the node");
        let clock = self.agents[node.0 as usize].down_clock;
        let at = self.deliver_at(clock);
        self.agents[node.0 as usize].down_clock = at;
        self.schedule(at, action(incarnation));
    }

    /// Sends an agent -> root message.
    fn send_up(&mut self, node: NodeId, action: Action) {
        let clock = self.agents[node.0 as usize].up_clock;
        let at = self.deliver_at(clock);
        self.agents[node.0 as usize].up_clock = at;
        self.schedule(at, action);
    }

    /// The jobs a new job waits for (see `SimConfig::dependency_fraction`).
    fn draw_dependencies(&mut self) -> Vec<saker_core::Dependency> {
        let submitted = self.ledger.jobs() as u32;
        if self.config.dependency_fraction <= 0.0
            || submitted == 0
            || !self.rng.random_bool(self.config.dependency_fraction)
        {
            return Vec::new();
        }
        let mut after = Vec::new();
        for _ in 0..self.rng.random_range(1..=3) {
            // The latest job half the time (chains), else any earlier one.
            let job = if self.rng.random_bool(0.5) {
                submitted
            } else {
                self.rng.random_range(1..=submitted)
            };
            let kind = if self.rng.random_bool(0.7) {
                saker_core::DependencyKind::Success
            } else {
                saker_core::DependencyKind::Any
            };
            after.push(saker_core::Dependency {
                job: JobId(job),
                kind,
            });
        }
        after
    }

    fn agent_current(&self, node: NodeId, incarnation: u64) -> bool {
        let agent = &self.agents[node.0 as usize];
        agent.alive && agent.incarnation == incarnation
    }

    fn apply(&mut self, action: Action) {
        let now = Time(self.now);
        match action {
            Action::Submit(spec) => {
                let after = self.draw_dependencies();
                let job = self
                    .core
                    .handle_submit_after(spec, &after, now)
                    .expect("valid spec");
                if !after.is_empty() {
                    self.summary.dependent_jobs += 1;
                }
                if self.config.preferring_fraction > 0.0
                    && spec.placement == Placement::Single
                    && self.rng.random_bool(self.config.preferring_fraction)
                {
                    let nodes: Vec<NodeId> = (0..self.rng.random_range(1..=2))
                        .map(|_| NodeId(self.rng.random_range(0..self.config.nodes)))
                        .collect();
                    self.core
                        .handle_prefer(job.job, &nodes, now)
                        .expect("a job just submitted");
                    self.summary.preferring_jobs += 1;
                }
                self.ledger.submitted_after(job, &spec, after);
                self.trace(&[4, u64::from(job.job.0), job.first_task.0]);
            }
            Action::Hello { node, incarnation } => {
                if !self.agent_current(node, incarnation) {
                    return;
                }
                if self.root_view[node.0 as usize].take().is_some() {
                    // A reconnect supersedes the old connection: its node is lost.
                    let loss = self.core.handle_node_lost(node, now).expect("live node");
                    self.ledger.node_lost(node, loss);
                }
                let capacity = self.agents[node.0 as usize].capacity;
                self.core
                    .handle_node_joined(node, capacity, now)
                    .expect("node joins once per life");
                self.ledger.joined(node, capacity);
                self.root_view[node.0 as usize] = Some(incarnation);
                let credit = self.credit_limit(node);
                self.core
                    .handle_credit(node, credit, now)
                    .expect("just joined");
                self.ledger.credited(node, credit);
            }
            Action::Work {
                node,
                incarnation,
                work,
            } => {
                if !self.agent_current(node, incarnation) {
                    return;
                }
                let limit = self.credit_limit(node);
                let agent = &mut self.agents[node.0 as usize];
                for work in &work {
                    agent.held = agent.held.saturating_add(work.need);
                }
                assert!(
                    agent.held.fits_in(&limit),
                    "node {node} holds more work than it asked for: {} of {limit}",
                    agent.held
                );
                agent.local.extend(work);
                self.start_local(node);
            }
            Action::Stop {
                node,
                incarnation,
                attempt,
            } => {
                if !self.agent_current(node, incarnation) {
                    return;
                }
                let agent = &mut self.agents[node.0 as usize];
                let need = if let Some(position) =
                    agent.local.iter().position(|work| work.attempt == attempt)
                {
                    agent.local.remove(position).map(|work| work.need)
                } else if let Some(need) = agent.running.remove(&attempt) {
                    agent.running_total = release(agent.running_total, need);
                    Some(need)
                } else {
                    None
                };
                if let Some(need) = need {
                    let agent = &mut self.agents[node.0 as usize];
                    agent.held = release(agent.held, need);
                    self.report(node, incarnation, attempt, AttemptOutcome::Cancelled, need);
                    self.start_local(node);
                }
            }
            Action::Done {
                node,
                incarnation,
                attempt,
            } => {
                if !self.agent_current(node, incarnation) {
                    return;
                }
                let agent = &mut self.agents[node.0 as usize];
                let Some(need) = agent.running.remove(&attempt) else {
                    return; // stopped earlier
                };
                agent.held = release(agent.held, need);
                agent.running_total = release(agent.running_total, need);
                let roll: f64 = self.rng.random();
                let outcome = if roll < self.config.fail_probability {
                    AttemptOutcome::Failed
                } else if roll < self.config.fail_probability + self.config.lost_probability {
                    AttemptOutcome::Lost
                } else {
                    AttemptOutcome::Succeeded
                };
                self.report(node, incarnation, attempt, outcome, need);
                self.start_local(node);
            }
            Action::Started { attempt } => {
                let result = self.core.handle_started(attempt, now);
                self.ledger.started(attempt, result);
            }
            Action::Report {
                node,
                incarnation,
                attempt,
                outcome,
                credit,
            } => {
                let disposition = self.core.handle_result(attempt, outcome, now);
                self.ledger.result(attempt, disposition);
                self.trace_disposition(attempt, disposition);
                // Credit belongs to the connection: a lost incarnation's is dropped.
                if self.root_view[node.0 as usize] == Some(incarnation) {
                    self.core
                        .handle_credit(node, credit, now)
                        .expect("live node");
                    self.ledger.credited(node, credit);
                }
            }
            Action::Crash { node } => {
                let agent = &mut self.agents[node.0 as usize];
                if !agent.alive {
                    return;
                }
                agent.alive = false;
                agent.local.clear();
                agent.running.clear();
                agent.held = Resources::ZERO;
                agent.running_total = Resources::ZERO;
                let at = self.now + self.config.detect_delay_micros;
                self.schedule(at, Action::Detect { node });
            }
            Action::Partition { node } => {
                let at = self.now + self.config.detect_delay_micros;
                self.schedule(at, Action::Detect { node });
            }
            Action::Detect { node } => {
                if self.root_view[node.0 as usize].take().is_some() {
                    let loss = self.core.handle_node_lost(node, now).expect("live node");
                    self.ledger.node_lost(node, loss);
                    self.trace(&[6, u64::from(node.0), u64::from(loss.replayed)]);
                }
                let at = self.now + self.config.rejoin_delay_micros;
                self.schedule(at, Action::Rejoin { node });
            }
            Action::Rejoin { node } => self.rejoin(node),
            Action::Cancel { job } => {
                if self.core.job_counts(job).is_none() {
                    return; // not submitted yet
                }
                self.ledger.cancel_requested(job);
                self.core.handle_cancel_job(job, now).expect("known job");
                self.trace(&[7, u64::from(job.0)]);
            }
            Action::Deadline(deadline) => {
                self.core.handle_deadline(deadline, now);
                self.ledger.deadline(deadline);
                self.trace(&[15, deadline.map_or(0, Time::as_micros)]);
            }
            Action::Drain => {
                self.core.handle_drain(now);
                self.ledger.drain();
                self.trace(&[16]);
            }
            Action::Update { job, change } => self.update(job, change),
            Action::Return {
                node,
                incarnation,
                attempt,
            } => self.give_back(node, incarnation, attempt),
        }
    }

    fn report(
        &mut self,
        node: NodeId,
        incarnation: u64,
        attempt: AttemptId,
        outcome: AttemptOutcome,
        credit: Resources,
    ) {
        self.send_up(
            node,
            Action::Report {
                node,
                incarnation,
                attempt,
                outcome,
                credit,
            },
        );
    }

    /// What a node asks for when it joins, and keeps asked for: its capacity plus
    /// `prefetch` cores, and as many GPUs if it has any (so that its GPU credit can
    /// exceed its capacity, and a task needing more GPUs than the node has must still
    /// not be sent there).
    fn credit_limit(&self, node: NodeId) -> Resources {
        let capacity = self.agents[node.0 as usize].capacity;
        let prefetch = self.config.prefetch;
        let limit = capacity.saturating_add(Resources::cores(prefetch));
        match capacity.gpu_count() {
            0 => limit,
            gpus => limit.with(ResourceKind::GPUS, gpus + prefetch),
        }
    }

    /// Starts locally queued work in FIFO order while it fits what is idle.
    fn start_local(&mut self, node: NodeId) {
        loop {
            let agent = &mut self.agents[node.0 as usize];
            let Some(&Work {
                attempt,
                need,
                max_duration,
                scale,
            }) = agent.local.front()
            else {
                return;
            };
            let running = agent.running_total.saturating_add(need);
            if !running.fits_in(&agent.capacity) {
                return;
            }
            agent.local.pop_front();
            agent.running.insert(attempt, need);
            let incarnation = agent.incarnation;
            agent.running_total = running;
            let (low, high) = self.config.duration_micros;
            let (low, high) = (low * scale, high * scale);
            let mut duration = self
                .rng
                .random_range(low.min(max_duration)..=high.min(max_duration));
            if self.config.slow_fraction > 0.0 && self.rng.random_bool(self.config.slow_fraction) {
                duration = (duration * self.config.slow_factor).min(max_duration);
            }
            self.schedule(
                self.now + duration,
                Action::Done {
                    node,
                    incarnation,
                    attempt,
                },
            );
            self.send_up(node, Action::Started { attempt });
        }
    }
}

/// `total` without `need`, which it holds (an agent only releases what it took).
fn release(total: Resources, need: Resources) -> Resources {
    total
        .checked_sub(need)
        .expect("an agent releases only what it holds")
}
