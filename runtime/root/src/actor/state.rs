//! The root's state and the translation of core outputs into actions.

use std::collections::HashMap;
use std::time::Duration;

use saker_core::{Core, Event, JobId};
use saker_wire::messages::{Assignment, Dispatch, FRAME_DATA_BUDGET, ToAgent};

use super::jobs::JobTable;
use super::journal::Journal;
use super::port::{Clock, Port, Wake};
use super::resources::ResourceNames;
use saker_actors::resources::NodeResources;

/// Finished jobs a node is told to forget in one message when no dispatch takes them.
const FORGET_BATCH: usize = 1024;
/// How soon a root whose journal waits for space looks again (dispatch waits for it).
const SPACE_CHECK: Duration = Duration::from_millis(500);

pub(super) use super::ctx::NodeEntry;

/// The root's state: the core and the tables around it. Its side effects go through
/// [`Port`]; its only clock is [`Clock`]. The actor ([`super::Root`]) is one driver;
/// the unit tests in `tests.rs` are another.
#[derive(Debug)]
pub struct RootState {
    /// The core, the port, the clock, the node registry, the pilot's facts.
    pub(super) ctx: super::ctx::Ctx,
    /// Jobs as submitted, and what submissions are checked against.
    pub(super) submissions: super::submissions::Submissions,
    /// Attempts in flight and results: settled, journaled, durable, waited for.
    pub(super) results: super::results::Results,
    /// Placed actors and the calls in flight to them.
    pub(super) actors: super::placed::PlacedActors,
    /// Data items: where they are, who reads them, what was moved.
    pub(super) items: super::items::ItemTable,
    /// Gang attempts in flight (HPC jobs), waiting for their members' parts.
    pub(super) gangs: super::gangs::GangRuns,
    /// Periodic jobs going on.
    pub(super) schedules: super::schedules::Schedules,
    /// What keeps the pilot itself going: compaction, elastic allocations, walltime.
    pub(super) upkeep: super::upkeep::Upkeep,
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
    /// This root's process, for `status`.
    pub process: Option<crate::client::RootStatus>,
}

impl RootState {
    pub fn new(
        args: StateArgs,
        port: Box<dyn Port>,
        journal: Box<dyn Journal>,
        clock: Box<dyn Clock>,
    ) -> Self {
        // The names the pilot's nodes offer take the first custom kinds, in the order
        // given: the same numbers every time the pilot starts or resumes.
        let mut resource_names = ResourceNames::default();
        for (name, _) in args.expected_node.iter().flat_map(|node| &node.custom) {
            resource_names.kind(name);
        }
        RootState {
            ctx: super::ctx::Ctx {
                core: Core::new(args.core),
                port,
                journal,
                clock,
                nodes: HashMap::new(),
                links: HashMap::new(),
                pilot: super::ctx::PilotFacts {
                    id: args.pilot_id,
                    allocation: args.allocation,
                    max_nodes: args.max_nodes,
                    expected_node: args.expected_node,
                    shutting_down: false,
                    process: args.process,
                },
                timer_at: None,
                written_now: None,
                space_check_armed: false,
            },
            submissions: super::submissions::Submissions {
                jobs: JobTable::default(),
                classes: HashMap::new(),
                resource_names,
                dependency_failed: HashMap::new(),
                tasks: 0,
            },
            results: super::results::Results::default(),
            actors: Default::default(),
            items: Default::default(),
            gangs: super::gangs::GangRuns::default(),
            schedules: Default::default(),
            upkeep: super::upkeep::Upkeep::default(),
        }
    }

    /// Makes this an elastic pilot: before [`RootState::restore`], which adopts the
    /// allocations its journal names; the first round comes one round after start.
    pub fn set_elastic(&mut self, config: super::elastic::ElasticConfig) {
        let round = config.round;
        self.upkeep.elastic = Some(super::elastic::Elastic::new(config));
        self.ctx.port.wake_after(round, Wake::Provision);
    }

    pub(super) fn on_timer(&mut self) {
        self.ctx.timer_at = None;
        let now = self.ctx.now();
        self.ctx.core.handle_timeout(now);
    }

    /// Turns everything the core wants done into actions. Called after every message.
    pub(super) fn drain(&mut self) {
        // What this turn started or ended may bring a periodic job's next occurrence.
        self.schedules
            .poll_schedules(&mut self.ctx, &mut self.submissions, &mut self.items);
        // Events first (the core's documented order): cancels go out before new work.
        while let Some(event) = self.ctx.core.poll_event() {
            self.on_core_event(event);
        }
        // With the journal's disk full, no attempt starts: the results held in memory
        // are bounded by what runs already.
        if self.ctx.journal.waiting_for_space() {
            self.check_space_soon();
        } else {
            while let Some(dispatch) = self.ctx.core.poll_dispatch() {
                self.send_dispatch(dispatch);
            }
        }
        // Dispatching can ask for events too (a gang's reservation asks its nodes for
        // their queued work back): they go out after the work already on its way.
        while let Some(event) = self.ctx.core.poll_event() {
            self.on_core_event(event);
        }
        self.results.journal(&mut self.ctx);
        self.arm_timer();
    }

    /// Nothing says when space returns: look again shortly.
    fn check_space_soon(&mut self) {
        if !self.ctx.space_check_armed {
            self.ctx.space_check_armed = true;
            self.ctx.port.wake_after(SPACE_CHECK, Wake::Space);
        }
    }

    fn arm_timer(&mut self) {
        let Some(at) = self.ctx.core.poll_timeout() else {
            return;
        };
        if self.ctx.timer_at.is_some_and(|armed| armed <= at) {
            return;
        }
        self.ctx.timer_at = Some(at);
        let delay =
            Duration::from_micros(at.as_micros().saturating_sub(self.ctx.now().as_micros()));
        self.ctx.port.wake_after(delay, Wake::Timer);
    }

    fn send_dispatch(&mut self, dispatch: saker_core::Dispatch) {
        let at = self.ctx.timestamp().unix_micros();
        for assignment in &dispatch.assignments {
            let dispatched = super::results::Dispatched {
                at_us: at,
                started: None,
            };
            self.results
                .attempts
                .dispatched
                .insert(assignment.task, dispatched);
        }
        if !dispatch.members.is_empty() {
            return self
                .gangs
                .send_gang(&mut self.ctx, &mut self.submissions.jobs, dispatch);
        }
        let node_id = dispatch.node;
        let Some(node) = self.ctx.nodes.get_mut(&node_id) else {
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
                self.submissions.jobs.def(job_id)
            };
            let Some(job) = self.submissions.jobs.get_mut(&job_id) else {
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
            self.ctx.send_to(link, node_id, &message);
        }
    }

    /// A finished job's definition is no longer needed by the nodes that have it: they
    /// are told with their next dispatch, or at once when many have piled up (a node
    /// that gets no more work still frees its memory).
    fn forget_job(&mut self, job: JobId) {
        let Some(entry) = self.submissions.jobs.get_mut(&job) else {
            return;
        };
        for node_id in std::mem::take(&mut entry.known_by) {
            let Some(node) = self.ctx.nodes.get_mut(&node_id) else {
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
                self.ctx.send_to(link, node_id, &message);
            }
        }
    }

    fn on_core_event(&mut self, event: Event) {
        match event {
            event @ Event::TaskFinished { .. } => {
                if let Ok(finished) = super::results::FinishedTask::from_event(event) {
                    self.results
                        .finish_task(&mut self.ctx, &self.submissions, finished);
                }
            }
            Event::CancelAttempt { node, attempt } => {
                if let Some(entry) = self.ctx.nodes.get(&node) {
                    let message = ToAgent::Cancel {
                        attempts: vec![attempt],
                    };
                    self.ctx.send_to(entry.link, node, &message);
                }
            }
            Event::ReturnUnstarted { node, attempt } => {
                if let Some(entry) = self.ctx.nodes.get(&node) {
                    let message = ToAgent::Return {
                        attempts: vec![attempt],
                    };
                    self.ctx.send_to(entry.link, node, &message);
                }
            }
            Event::JobFinished { job } => {
                self.forget_job(job);
                self.items.forget_reads(job);
                self.submissions.dependency_failed.remove(&job);
            }
            Event::DependencyFailed { job, dependency } => {
                tracing::info!(%job, %dependency, "a job's dependency failed; it is cancelled");
                self.submissions.dependency_failed.insert(job, dependency);
            }
        }
    }

    pub(super) fn close_journal(&mut self) {
        self.ctx.journal.close();
    }
}
