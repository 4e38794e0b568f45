//! Root restarts: a pilot whose root is replaced a few times mid-run (a standby's
//! takeover, a resume). Each new root is a core of the next term, rebuilt from the
//! journal the earlier ones kept ([`Core::handle_restore_job`]); every live agent says
//! hello to it with the attempts it still holds (queued, running, or ended with the
//! result still on its way), and the root adopts each ([`Core::handle_adopt`]). Agents
//! run tasks in arrival order on their cores; results reach the root after a delay;
//! tasks fail now and then (retried after a backoff) and nodes crash (their work
//! replayed) and come back. Checked at every step:
//!
//! * every adoption succeeds, and no task is dispatched while an agent holds an
//!   attempt of it (it would run twice);
//! * every result is for a live attempt (none is a duplicate or unknown: everything
//!   held was adopted);
//! * every task ends exactly once over all the roots' lives, after as many attempts as
//!   the journal counts (earlier failures and replays, plus the last);
//!
//! and the core's own audit after every restart, every `audit_every` steps and at
//! the end.

use std::collections::{BTreeMap, HashMap, VecDeque};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use saker_core::{
    AttemptId, AttemptOutcome, Backoff, Core, CoreConfig, Disposition, EarlierAttempts, Event,
    JobId, JobSpec, NodeId, Resources, TaskId, TerminalState, Time,
};

/// The shape of one restart simulation.
#[derive(Debug, Clone, Copy)]
pub struct RestartWorld {
    pub seed: u64,
    pub nodes: u32,
    pub cores: u32,
    pub prefetch: u32,
    /// Tasks in all, in arrays of up to `max_array`.
    pub tasks: u32,
    pub max_array: u32,
    pub fail_percent: u32,
    /// Root restarts and node crashes, at random times while work runs.
    pub restarts: u32,
    pub crashes: u32,
    pub audit_every: u64,
}

/// What the world ends with.
#[derive(Debug, Default, Clone, Copy)]
pub struct RestartSummary {
    pub tasks: u64,
    pub succeeded: u64,
    pub restarts: u64,
    pub adopted: u64,
    pub steps: u64,
}

#[derive(Debug)]
enum Action {
    Submit(JobSpec),
    /// An attempt's process ends on its agent.
    Done {
        node: u32,
        life: u64,
        attempt: AttemptId,
    },
    /// The root receives an attempt's result, with the credit it frees.
    Report {
        node: u32,
        life: u64,
        attempt: AttemptId,
        outcome: AttemptOutcome,
    },
    Restart,
    Crash {
        node: u32,
    },
    Rejoin {
        node: u32,
    },
}

/// One attempt as its agent holds it.
#[derive(Debug, Clone, Copy)]
struct Held {
    task: TaskId,
    cores: u32,
    started: Option<Time>,
}

#[derive(Debug, Default)]
struct Agent {
    /// This life of the node (0: down).
    life: u64,
    queued: VecDeque<(AttemptId, Held)>,
    running: BTreeMap<AttemptId, Held>,
    /// Ended, its result on its way to the root.
    reported: BTreeMap<AttemptId, Held>,
    used: u32,
}

impl Agent {
    /// Every attempt it holds, in the order it lists them in its hello.
    fn held(&self) -> impl Iterator<Item = (AttemptId, Held)> + '_ {
        let queued = self.queued.iter().copied();
        let other = self.running.iter().chain(&self.reported);
        queued.chain(other.map(|(attempt, held)| (*attempt, *held)))
    }
}

/// What the journal keeps of one job.
#[derive(Debug)]
struct Journaled {
    spec: JobSpec,
    first_task: TaskId,
    finished: BTreeMap<u32, TerminalState>,
    earlier: BTreeMap<u32, EarlierAttempts>,
}

struct Sim {
    world: RestartWorld,
    rng: Xoshiro256PlusPlus,
    now: u64,
    agenda: BTreeMap<(u64, u64), Action>,
    sequence: u64,
    core: Core,
    term: u32,
    agents: Vec<Agent>,
    lives: u64,
    journal: Vec<Journaled>,
    /// Task -> the attempt an agent holds of it.
    holding: HashMap<TaskId, AttemptId>,
    ended: HashMap<TaskId, TerminalState>,
    summary: RestartSummary,
}

pub fn run(world: RestartWorld) -> RestartSummary {
    let mut sim = Sim {
        world,
        rng: Xoshiro256PlusPlus::seed_from_u64(world.seed),
        now: 0,
        agenda: BTreeMap::new(),
        sequence: 0,
        core: Core::new(config(1)),
        term: 1,
        agents: (0..world.nodes).map(|_| Agent::default()).collect(),
        lives: 0,
        journal: Vec::new(),
        holding: HashMap::new(),
        ended: HashMap::new(),
        summary: RestartSummary::default(),
    };
    sim.plan();
    loop {
        let action = sim.agenda.first_key_value().map(|(&(at, _), _)| at);
        let timer = sim.core.poll_timeout().map(Time::as_micros);
        match (action, timer) {
            (None, None) => break,
            (action, Some(timer)) if action.is_none_or(|action| timer < action) => {
                sim.now = sim.now.max(timer);
                sim.core.handle_timeout(Time(sim.now));
            }
            _ => {
                let ((at, _), action) = sim.agenda.pop_first().expect("an action is due");
                sim.now = sim.now.max(at);
                sim.apply(action);
            }
        }
        sim.drain();
        sim.summary.steps += 1;
        if sim.summary.steps.is_multiple_of(world.audit_every) {
            sim.audit();
        }
    }
    sim.audit();
    assert!(sim.core.is_quiescent(), "{:?}", sim.core.counts());
    assert!(sim.holding.is_empty(), "attempts left on agents");
    assert_eq!(
        sim.ended.len() as u64,
        sim.summary.tasks,
        "every task ended"
    );
    sim.summary.succeeded = sim
        .ended
        .values()
        .filter(|&&state| state == TerminalState::Succeeded)
        .count() as u64;
    sim.summary
}

fn config(term: u32) -> CoreConfig {
    CoreConfig {
        max_bundle: 16,
        retry_backoff: Backoff {
            base_micros: 200,
            factor: 2,
            max_micros: 2_000,
        },
        speculation: None,
        term,
        ..CoreConfig::default()
    }
}

impl Sim {
    fn schedule(&mut self, at: u64, action: Action) {
        self.sequence += 1;
        self.agenda.insert((at, self.sequence), action);
    }

    fn limit(&self) -> u32 {
        self.world.cores + self.world.prefetch
    }

    fn plan(&mut self) {
        let window = 20_000;
        let mut left = self.world.tasks;
        while left > 0 {
            let count = self.rng.random_range(1..=self.world.max_array).min(left);
            left -= count;
            let spec = JobSpec::array(count)
                .with_cores(self.rng.random_range(1..=2))
                .with_priority(self.rng.random_range(0..2))
                .with_max_retries(2);
            let at = self.rng.random_range(0..window);
            self.schedule(at, Action::Submit(spec));
        }
        for node in 0..self.world.nodes {
            self.schedule(0, Action::Rejoin { node });
        }
        for _ in 0..self.world.restarts {
            let at = self.rng.random_range(1..window * 2);
            self.schedule(at, Action::Restart);
        }
        for _ in 0..self.world.crashes {
            let (node, at) = (
                self.rng.random_range(0..self.world.nodes),
                self.rng.random_range(1..window * 2),
            );
            self.schedule(at, Action::Crash { node });
        }
    }

    fn apply(&mut self, action: Action) {
        let now = Time(self.now);
        match action {
            Action::Submit(spec) => {
                let job = self.core.handle_submit(spec, now).expect("valid spec");
                assert_eq!(job.job.0 as usize, self.journal.len() + 1);
                self.journal.push(Journaled {
                    spec,
                    first_task: job.first_task,
                    finished: BTreeMap::new(),
                    earlier: BTreeMap::new(),
                });
                self.summary.tasks += u64::from(spec.count);
            }
            Action::Done {
                node,
                life,
                attempt,
            } => {
                let agent = &mut self.agents[node as usize];
                if agent.life != life {
                    return;
                }
                let held = agent.running.remove(&attempt).expect("running");
                agent.used -= held.cores;
                agent.reported.insert(attempt, held);
                let outcome = if self.rng.random_range(0..100) < self.world.fail_percent {
                    AttemptOutcome::Failed
                } else {
                    AttemptOutcome::Succeeded
                };
                let at = self.now + self.rng.random_range(10..=300);
                self.schedule(
                    at,
                    Action::Report {
                        node,
                        life,
                        attempt,
                        outcome,
                    },
                );
                self.start_local(node);
            }
            Action::Report {
                node,
                life,
                attempt,
                outcome,
            } => {
                let agent = &mut self.agents[node as usize];
                if agent.life != life {
                    return; // the node crashed meanwhile: its work was replayed
                }
                let held = agent.reported.remove(&attempt).expect("reported");
                assert_eq!(self.holding.remove(&held.task), Some(attempt));
                match self.core.handle_result(attempt, outcome, now) {
                    Disposition::Accepted { .. } => {}
                    Disposition::WillRetry { task, .. } => self.earlier(task).failures += 1,
                    other => panic!("result of {attempt} (term {}): {other:?}", self.term),
                }
                let credit = Resources::cores(held.cores);
                self.core
                    .handle_credit(NodeId(node), credit, now)
                    .expect("live node");
            }
            Action::Restart => self.restart(),
            Action::Crash { node } => {
                let agent = &mut self.agents[node as usize];
                if agent.life == 0 {
                    return;
                }
                let held: Vec<(AttemptId, Held)> = agent.held().collect();
                *agent = Agent::default();
                for (attempt, held) in held {
                    assert_eq!(self.holding.remove(&held.task), Some(attempt));
                }
                let lost = self.core.node_attempts(NodeId(node));
                self.core
                    .handle_node_lost(NodeId(node), now)
                    .expect("live node");
                for (task, _) in lost {
                    if self.core.task_status(task) != Some(saker_core::TaskStatus::Finished) {
                        self.earlier(task).replays += 1;
                    }
                }
                self.schedule(self.now + 3_000, Action::Rejoin { node });
            }
            Action::Rejoin { node } => {
                self.lives += 1;
                self.agents[node as usize].life = self.lives;
                let capacity = Resources::cores(self.world.cores);
                self.core
                    .handle_node_joined(NodeId(node), capacity, now)
                    .expect("a new life");
                let credit = Resources::cores(self.limit());
                self.core
                    .handle_credit(NodeId(node), credit, now)
                    .expect("just joined");
            }
        }
    }

    /// The journal's count of what `task` used up before its current attempt.
    fn earlier(&mut self, task: TaskId) -> &mut EarlierAttempts {
        let at = self.journal.partition_point(|job| job.first_task <= task) - 1;
        let job = &mut self.journal[at];
        let index = (task.0 - job.first_task.0) as u32;
        job.earlier.entry(index).or_default()
    }

    /// A new root of the next term: the journal restored, every live agent joined
    /// again (its credit what it has free), and everything it holds adopted.
    fn restart(&mut self) {
        let now = Time(self.now);
        self.term += 1;
        self.summary.restarts += 1;
        let mut core = Core::new(config(self.term));
        for (position, job) in self.journal.iter().enumerate() {
            let finished: Vec<_> = job.finished.iter().map(|(&i, &s)| (i, s)).collect();
            let earlier: Vec<_> = job.earlier.iter().map(|(&i, &e)| (i, e)).collect();
            let restored = core
                .handle_restore_job(job.spec, &finished, &earlier, now)
                .expect("a journaled job");
            assert_eq!(
                (restored.job.0 as usize, restored.first_task),
                (position + 1, job.first_task)
            );
        }
        // Restored tasks are not reported again.
        while let Some(event) = core.poll_event() {
            assert!(matches!(event, Event::JobFinished { .. }), "{event:?}");
        }
        let mut adopted = 0;
        for (node, agent) in self.agents.iter().enumerate() {
            if agent.life == 0 {
                continue;
            }
            let id = NodeId(node as u32);
            core.handle_node_joined(id, Resources::cores(self.world.cores), now)
                .expect("joins");
            let mut busy = 0;
            for (attempt, held) in agent.held() {
                assert!(attempt.term() < self.term);
                core.handle_adopt(id, held.task, attempt, held.started, now)
                    .unwrap_or_else(|error| panic!("adopting {attempt}: {error}"));
                busy += held.cores;
                adopted += 1;
            }
            let credit = Resources::cores(self.limit() - busy);
            core.handle_credit(id, credit, now).expect("just joined");
        }
        assert_eq!(core.counts().adopted, adopted);
        self.summary.adopted += adopted;
        self.core = core;
        self.audit();
    }

    /// Applies the core's outputs: events (journaled), then dispatches.
    fn drain(&mut self) {
        while let Some(event) = self.core.poll_event() {
            self.event(event);
        }
        while let Some(dispatch) = self.core.poll_dispatch() {
            let node = dispatch.node.0;
            assert!(
                self.agents[node as usize].life != 0,
                "work for a node that is down"
            );
            for assignment in dispatch.assignments {
                let held = Held {
                    task: assignment.task,
                    cores: self.journal[assignment.job.0 as usize - 1]
                        .spec
                        .resources
                        .core_count(),
                    started: None,
                };
                let before = self.holding.insert(assignment.task, assignment.attempt);
                assert_eq!(
                    before, None,
                    "task {} dispatched while held",
                    assignment.task
                );
                self.agents[node as usize]
                    .queued
                    .push_back((assignment.attempt, held));
            }
            self.start_local(node);
        }
        while let Some(event) = self.core.poll_event() {
            self.event(event);
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::TaskFinished {
                task,
                job,
                index,
                state,
                attempts,
            } => {
                assert!(
                    self.ended.insert(task, state).is_none(),
                    "task {task} ended twice"
                );
                let journaled = &mut self.journal[slot(job)];
                let before = journaled.earlier.get(&index).copied().unwrap_or_default();
                assert_eq!(
                    attempts,
                    before.failures + before.replays + 1,
                    "task {task}"
                );
                journaled.finished.insert(index, state);
            }
            Event::JobFinished { .. } => {}
            other => panic!("unexpected event {other:?}"),
        }
    }

    /// Starts the agent's queued work, in order, while it fits its free cores.
    fn start_local(&mut self, node: u32) {
        loop {
            let agent = &mut self.agents[node as usize];
            let Some(&(attempt, held)) = agent.queued.front() else {
                return;
            };
            if agent.used + held.cores > self.world.cores {
                return;
            }
            agent.queued.pop_front();
            agent.used += held.cores;
            let now = Time(self.now);
            agent.running.insert(
                attempt,
                Held {
                    started: Some(now),
                    ..held
                },
            );
            let life = agent.life;
            self.core
                .handle_started(attempt, now)
                .expect("a live attempt");
            let at = self.now + self.rng.random_range(100..=2_000);
            self.schedule(
                at,
                Action::Done {
                    node,
                    life,
                    attempt,
                },
            );
        }
    }

    fn audit(&self) {
        if let Err(error) = self.core.check_consistency() {
            panic!("core of term {} inconsistent: {error}", self.term);
        }
    }
}

fn slot(job: JobId) -> usize {
    job.0 as usize - 1
}
