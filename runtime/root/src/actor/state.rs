//! The root's state: a shared [`Ctx`], the node registry and the owners of the rest,
//! and the translation of the core's outputs into actions. Its side effects go
//! through [`Port`] and [`Journal`]; its only clock is [`Clock`].
//!
//! `RootState` only routes: each message is handed to the owners it concerns (`mod.rs`
//! for the loop, `agents.rs` and `clients.rs` for the two kinds of peers), and what
//! one owner's work means to another (a durable result to its job's counts, a
//! finished job to the nodes holding its definition) passes through here as values,
//! never as one owner reaching into another.

use std::time::Duration;

use saker_core::{Core, Event, Time};
use saker_wire::messages::{Assignment, ToAgent};

use super::adoption::Adoption;
use super::ctx::{Ctx, PilotFacts};
use super::gangs::GangRuns;
use super::items::ItemTable;
use super::journal::Journal;
use super::nodes::Nodes;
use super::placed::PlacedActors;
use super::port::{Clock, Port, Wake};
use super::results::{FinishedTask, Results};
use super::schedules::Schedules;
use super::submissions::Submissions;
use super::upkeep::Upkeep;
use super::upkeep::compaction::CompactionPolicy;
use super::upkeep::elastic::{Elastic, ElasticConfig};
use crate::records::Record;
use saker_actors::resources::NodeResources;
use saker_client::{AllocationStatus, RootStatus};

/// How soon a root whose journal waits for space looks again (dispatch waits for it).
const SPACE_CHECK: Duration = Duration::from_millis(500);

/// The root's state (see the module doc). The actor ([`super::Root`]) is one driver;
/// the unit tests in `tests.rs` are another.
#[derive(Debug)]
pub struct RootState {
    /// The core, the port, the journal, the clock, the pilot's facts.
    pub(super) ctx: Ctx,
    /// The live nodes, their links and the job definitions each holds.
    pub(super) nodes: Nodes,
    /// Jobs as submitted and how far each has come.
    pub(super) submissions: Submissions,
    /// Attempts in flight and results: settled, journaled, durable, followed.
    pub(super) results: Results,
    /// Placed actors and the calls in flight to them.
    pub(super) actors: PlacedActors,
    /// Data items: where they are, who reads them, what was moved.
    pub(super) items: ItemTable,
    /// Gang attempts in flight (HPC jobs), waiting for their members' parts.
    pub(super) gangs: GangRuns,
    /// Periodic jobs going on.
    pub(super) schedules: Schedules,
    /// What keeps the pilot itself going: compaction, elastic allocations, walltime.
    pub(super) upkeep: Upkeep,
    /// Attempts a previous root left running, taken over from their nodes.
    pub(super) adoption: Adoption,
    /// What `status` says of the pilot's allocation and process.
    pub(super) facts: StatusFacts,
    /// The wakes the router has asked for.
    wakes: Wakes,
}

/// What `status` says of the pilot beside its work.
#[derive(Debug)]
pub(super) struct StatusFacts {
    /// The batch allocation the pilot runs in, if any.
    pub allocation: Option<AllocationStatus>,
    /// This root's process; `None` in unit tests.
    pub process: Option<RootStatus>,
    /// Since when no agent is connected (unix µs): the root's start, or when the
    /// last one left. `None` while one is.
    pub agentless_since: Option<u64>,
}

/// The wakes a turn arms (see [`RootState::drain`]).
#[derive(Debug, Default)]
struct Wakes {
    /// When the core's next timeout is armed for, if it is.
    timer_at: Option<Time>,
    /// A [`Wake::Space`] is on its way.
    space_check: bool,
}

/// What a root starts from, besides its port and clock.
#[derive(Debug)]
pub struct StateArgs {
    pub pilot_id: String,
    pub core: saker_core::CoreConfig,
    /// The batch allocation the pilot runs in, if any (for `status`).
    pub allocation: Option<AllocationStatus>,
    /// The most nodes the pilot can have, when known: work asking for more is refused.
    pub max_nodes: Option<u32>,
    /// The widest node the pilot will have, when known.
    pub expected_node: Option<NodeResources>,
    /// This root's process, for `status`.
    pub process: Option<RootStatus>,
}

impl RootState {
    pub fn new(
        args: StateArgs,
        port: Box<dyn Port>,
        journal: Box<dyn Journal>,
        clock: Box<dyn Clock>,
    ) -> Self {
        let pilot = PilotFacts {
            id: args.pilot_id,
            max_nodes: args.max_nodes,
            shutting_down: false,
        };
        let in_allocation = args.allocation.is_some();
        let started = clock.unix_micros();
        RootState {
            ctx: Ctx::new(Core::new(args.core), port, journal, clock, pilot),
            nodes: Nodes::default(),
            submissions: Submissions::new(args.expected_node, in_allocation),
            results: Results::default(),
            actors: Default::default(),
            items: Default::default(),
            gangs: GangRuns::default(),
            schedules: Default::default(),
            upkeep: Upkeep::default(),
            adoption: Adoption::default(),
            facts: StatusFacts {
                allocation: args.allocation,
                process: args.process,
                agentless_since: Some(started),
            },
            wakes: Wakes::default(),
        }
    }

    /// Makes this an elastic pilot: before `RootState::restore`, which adopts the
    /// allocations its journal names; the first round comes one round after start.
    pub fn set_elastic(&mut self, config: ElasticConfig) {
        let round = config.round;
        self.upkeep.elastic = Some(Elastic::new(config));
        self.ctx.port.wake_after(round, Wake::Provision);
    }

    /// Sets when the root compacts its journal (none by default).
    pub fn set_compaction(&mut self, policy: CompactionPolicy) {
        self.upkeep.compaction.set(&self.ctx, policy);
    }

    /// Sets the walltime deadline (unix µs) and arms the timer that enforces it.
    pub(super) fn set_deadline(&mut self, deadline_unix_us: u64) {
        self.upkeep.walltime.set(&mut self.ctx, deadline_unix_us);
    }

    pub(super) fn on_timer(&mut self) {
        self.wakes.timer_at = None;
        let now = self.ctx.now();
        self.ctx.core.handle_timeout(now);
    }

    /// The journal's space is to be looked at again (in this turn's drain).
    pub(super) fn on_space_check(&mut self) {
        self.wakes.space_check = false;
    }

    /// Turns everything the core wants done into actions. Called after every message.
    pub(super) fn drain(&mut self) {
        // What this turn started or ended may bring a periodic job's next occurrence,
        // or lose a data item that is to be made again.
        self.poll_schedules();
        if self.items.wants_recomputes() {
            self.recompute_wanted();
        }
        // Events first (the core's documented order): cancels go out before new work.
        while let Some(event) = self.ctx.core.poll_event() {
            self.on_core_event(event);
        }
        // With the journal's disk full, no attempt starts: the results held in memory
        // are bounded by what runs already.
        if self.ctx.journal.waiting_for_space() {
            self.check_space_soon();
        } else if !self.adoption.holds_dispatch(&mut self.ctx) {
            // Gangs whose members did not all come back are stopped before their
            // jobs are placed again.
            let stops = self.adoption.take_stops();
            if !stops.is_empty() {
                self.stop_held(stops);
            }
            while let Some(dispatch) = self.ctx.core.poll_dispatch() {
                self.send_dispatch(dispatch);
            }
        }
        if !self.adoption.waits() {
            self.actors.release_restored(&mut self.ctx, &self.nodes);
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
        if !self.wakes.space_check {
            self.wakes.space_check = true;
            self.ctx.port.wake_after(SPACE_CHECK, Wake::Space);
        }
    }

    fn arm_timer(&mut self) {
        let Some(at) = self.ctx.core.poll_timeout() else {
            return;
        };
        if self.wakes.timer_at.is_some_and(|armed| armed <= at) {
            return;
        }
        self.wakes.timer_at = Some(at);
        let delay =
            Duration::from_micros(at.as_micros().saturating_sub(self.ctx.now().as_micros()));
        self.ctx.port.wake_after(delay, Wake::Timer);
    }

    /// Submits the next occurrence of every schedule whose pending one has started or
    /// ended, through the submissions like any job; its reads are noted.
    pub(super) fn poll_schedules(&mut self) {
        let due = self.schedules.poll(&self.ctx);
        for occurrence in due {
            let offered = self.nodes.offered();
            let request = &occurrence.request;
            let spec = match self.submissions.core_spec(&self.ctx, offered, request) {
                Ok(spec) => spec,
                Err(problem) => {
                    self.schedules.end(occurrence.schedule, &problem);
                    continue;
                }
            };
            let submitted_us = self.ctx.timestamp().unix_micros();
            let registered =
                self.submissions
                    .register(&mut self.ctx, request, spec, &[], submitted_us, None);
            let job = match registered {
                Ok(job) => job,
                Err(problem) => {
                    self.schedules.end(occurrence.schedule, &problem);
                    continue;
                }
            };
            self.items
                .note_reads(&mut self.ctx, job.job, &request.spec.reads);
            self.items.note_request_writes(job.job, request);
            let records = self.schedules.occurred(occurrence, job, submitted_us);
            self.ctx
                .append(records, super::journal::AfterJournal::Nothing);
        }
    }

    fn send_dispatch(&mut self, dispatch: saker_core::Dispatch) {
        let at = self.ctx.timestamp().unix_micros();
        for assignment in &dispatch.assignments {
            self.results.dispatched(assignment.task, at);
        }
        if !dispatch.members.is_empty() {
            return self.send_gang(dispatch);
        }
        let submissions = &self.submissions;
        let tasks: Vec<Assignment> = dispatch
            .assignments
            .iter()
            .filter_map(|assignment| {
                let index = submissions.array_index(assignment.job, assignment.index)?;
                Some(Assignment {
                    task: assignment.task,
                    attempt: assignment.attempt,
                    job: assignment.job,
                    index,
                })
            })
            .collect();
        self.nodes
            .dispatch(&mut self.ctx, dispatch.node, tasks, None, |job| {
                submissions.definition(job)
            });
    }

    /// Sends each member of a gang dispatch its part.
    fn send_gang(&mut self, dispatch: saker_core::Dispatch) {
        let Some(&assignment) = dispatch.assignments.first() else {
            return;
        };
        let job = assignment.job;
        let (Some(index), Some(def)) = (
            self.submissions.array_index(job, assignment.index),
            self.submissions.definition(job),
        ) else {
            return;
        };
        let hosts = dispatch
            .members
            .iter()
            .map(|node| self.nodes.hostname(*node))
            .collect();
        let members = dispatch.members;
        let hub = members
            .first()
            .and_then(|leader| self.nodes.get(*leader))
            .map(|leader| leader.data_addr().to_owned())
            .unwrap_or_default();
        let parts = self.gangs.start(
            assignment.task,
            assignment.attempt,
            members.clone(),
            hosts,
            def.hpc,
            &hub,
        );
        let task = Assignment {
            task: assignment.task,
            attempt: assignment.attempt,
            job,
            index,
        };
        for (node, part) in members.into_iter().zip(parts) {
            self.nodes
                .dispatch(&mut self.ctx, node, vec![task], Some(part), |_| {
                    Some(std::sync::Arc::clone(&def))
                });
        }
    }

    fn on_core_event(&mut self, event: Event) {
        match event {
            event @ Event::TaskFinished { .. } => {
                if let Ok(finished) = FinishedTask::from_event(event)
                    && let Some(job) = self.submissions.facts(finished.job, finished.offset)
                {
                    self.results.finish_task(&mut self.ctx, finished, job);
                }
            }
            Event::CancelAttempt { node, attempt } => {
                let message = ToAgent::Cancel {
                    attempts: vec![attempt],
                };
                self.nodes.send(&mut self.ctx, node, &message);
            }
            Event::ReturnUnstarted { node, attempt } => {
                let message = ToAgent::Return {
                    attempts: vec![attempt],
                };
                self.nodes.send(&mut self.ctx, node, &message);
            }
            Event::JobFinished { job } => {
                self.nodes.forget(&mut self.ctx, job);
                self.items.forget_reads(&mut self.ctx, &self.nodes, job);
                self.items.recompute_ended(&mut self.ctx, &self.nodes, job);
                self.submissions.job_finished(job);
            }
            Event::DependencyFailed { job, dependency } => {
                tracing::info!(%job, %dependency, "a job's dependency failed; it is cancelled");
                self.submissions.dependency_failed(job, dependency);
            }
        }
    }

    /// A new submission's record: what it means beside its job, the data items it
    /// reads and a schedule it starts.
    pub(super) fn note_submitted(&mut self, record: &Record) {
        if let Record::Submit {
            job,
            request,
            submitted_unix_us,
            ..
        } = record
        {
            self.items
                .note_reads(&mut self.ctx, *job, &request.spec.reads);
            self.items.note_request_writes(*job, request);
            self.schedules
                .start_schedule(*job, request, *submitted_unix_us);
        }
    }

    /// Submits the jobs that make lost data items again (`items/recompute.rs`): each
    /// writer's request as it was, without its dependencies, time or node, journaled
    /// as a submission with a `recompute` record. One the pilot cannot take fails the
    /// items' readers with the reason.
    fn recompute_wanted(&mut self) {
        for want in self.items.take_wanted() {
            let mut request = (*want.request).clone();
            let spec = &mut request.spec;
            spec.after.clear();
            spec.after_any.clear();
            spec.not_before = None;
            spec.node = None;
            let offered = self.nodes.offered();
            let registered = self
                .submissions
                .core_spec(&self.ctx, offered, &request)
                .map_err(|problem| problem.to_string())
                .and_then(|spec| {
                    let submitted_us = self.ctx.timestamp().unix_micros();
                    self.submissions
                        .register(&mut self.ctx, &request, spec, &[], submitted_us, None)
                        .map(|job| (job, submitted_us))
                        .map_err(|problem| problem.to_string())
                });
            let (job, submitted_us) = match registered {
                Ok(registered) => registered,
                Err(problem) => {
                    let reason = format!(
                        "no live node holds it, and job {} that wrote it cannot run again: {problem}",
                        want.of
                    );
                    self.items
                        .recompute_failed(&mut self.ctx, &self.nodes, &want, &reason);
                    continue;
                }
            };
            tracing::warn!(job = %job.job, of = %want.of, items = ?want.items, "making lost data items again");
            let submit = Record::Submit {
                job: job.job,
                first_task: job.first_task,
                count: job.count,
                submitted_unix_us: submitted_us,
                request: Box::new(request),
            };
            self.note_submitted(&submit);
            self.items.recomputing(&want, job.job);
            let mark = Record::Recompute {
                job: job.job,
                of: want.of,
                items: want.items,
                unix_us: submitted_us,
            };
            self.ctx
                .append(vec![submit, mark], super::journal::AfterJournal::Nothing);
        }
    }

    /// The pilot stops: nothing new starts, pending allocations are cancelled, every
    /// agent is told, and streams that follow results end.
    pub(super) fn on_shutdown(&mut self) {
        self.ctx.pilot.shutting_down = true;
        if let Some(elastic) = self.upkeep.elastic.as_mut() {
            elastic.cancel_pending(&mut self.ctx);
        }
        self.ctx.port.shutdown_requested();
        self.nodes.broadcast(&mut self.ctx, &shutdown_message());
        // Dropping the live senders ends follow streams with `end`.
        self.results.end_streams();
    }

    /// The walltime deadline has come: stop starting, kill what runs, stop the pilot.
    pub(super) fn on_walltime(&mut self) {
        if self.upkeep.walltime.reach(&mut self.ctx) {
            self.stop_for_walltime();
        }
    }

    /// Called after every turn: with a deadline, stops the pilot once waiting longer
    /// achieves nothing.
    pub(super) fn check_exhausted(&mut self) {
        if self.upkeep.walltime.exhausted(&self.ctx) {
            self.stop_for_walltime();
        }
    }

    fn stop_for_walltime(&mut self) {
        self.upkeep.walltime.stop();
        let status = self.status();
        self.upkeep.walltime.keep_status(status);
        self.on_shutdown();
    }

    /// One provisioning round of an elastic pilot.
    pub(super) fn on_provision(&mut self) {
        let longest = self.results.longest_run_micros().unwrap_or(0);
        if let Some(elastic) = self.upkeep.elastic.as_mut() {
            elastic.on_provision(&mut self.ctx, &self.nodes, longest);
        }
    }

    pub(super) fn on_batch(&mut self, outcome: super::port::BatchOutcome) {
        if let Some(elastic) = self.upkeep.elastic.as_mut() {
            elastic.on_batch(&mut self.ctx, outcome);
        }
    }

    pub(super) fn close_journal(&mut self) {
        self.ctx.journal.close();
    }
}

/// What every agent is told when the pilot stops.
pub(super) fn shutdown_message() -> ToAgent {
    ToAgent::Shutdown {
        reason: "pilot shutting down".into(),
        kill_running: true,
    }
}
