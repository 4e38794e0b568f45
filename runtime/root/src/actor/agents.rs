//! The root's side of the agent tree: registration, reports, losses.

use std::collections::HashSet;

use saker_actors::link::{LinkId, LinkTx};
use saker_core::{AttemptId, AttemptOutcome, NodeId, Resources, TaskId};
use saker_wire::messages::{
    ArchivedFromAgent, ArchivedOutcome, ArchivedOutput, ArchivedReport, ArchivedResultBody,
    ArchivedTaskResult, GangLaunch, GangLaunchEnded, Hello, TaskResult, ToAgent, Welcome,
};

use super::results::Detail;
use super::state::{NodeEntry, RootState};
use crate::attempts::{AttemptEnd, AttemptNote};
use crate::records::Record;
use crate::results::{Failure, Timestamp, lossy_text};

impl RootState {
    /// A child linked as `node`: an older link of the same node leads to a stale
    /// copy of it (an agent started twice), which is told to stop. Its work is
    /// replayed when the newer one says hello.
    pub(super) fn on_link_up(&mut self, link: LinkId, tx: LinkTx, node: Option<u32>) {
        self.ctx.port.link_up(link, tx);
        let Some(node) = node.map(NodeId) else {
            return;
        };
        let stale: Vec<LinkId> = self
            .ctx
            .links
            .iter()
            .filter(|(_, n)| **n == node)
            .map(|(l, _)| *l)
            .collect();
        for old in stale {
            tracing::warn!(%node, ?old, "a newer agent linked as this node; the older one is told to stop");
            self.ctx.port.supersede(old, node);
            self.ctx.links.remove(&old);
        }
        self.ctx.links.insert(link, node);
    }

    pub(super) fn on_link_down(&mut self, link: LinkId, reason: &str) {
        self.ctx.port.link_down(link);
        self.ctx.links.remove(&link);
        let lost: Vec<NodeId> = {
            let mut lost: Vec<NodeId> = self
                .ctx
                .nodes
                .iter()
                .filter(|(_, n)| n.link == link)
                .map(|(id, _)| *id)
                .collect();
            lost.sort_unstable();
            lost
        };
        for node in lost {
            self.lose_node(node, reason);
        }
    }

    fn lose_node(&mut self, node: NodeId, reason: &str) {
        let Some(entry) = self.ctx.nodes.remove(&node) else {
            return;
        };
        let host = entry.hostname;
        if self.releasing(node) {
            tracing::info!(%node, %reason, "agent left with its allocation");
        } else if !self.ctx.pilot.shutting_down {
            tracing::warn!(%node, %reason, "agent lost; its work is replayed");
        }
        self.results.unjournaled.records.push(Record::NodeLeft {
            node,
            reason: reason.to_owned(),
            unix_us: self.ctx.timestamp().unix_micros(),
        });
        let now = self.ctx.now();
        let lost = self.ctx.core.node_attempts(node);
        match self.ctx.core.handle_node_lost(node, now) {
            Ok(loss) => tracing::info!(%node, ?loss, "node lost"),
            Err(error) => tracing::debug!(%node, %error, "node was not registered with the core"),
        }
        self.gangs.forget_dead_gangs(&self.ctx);
        self.actors.actors_lost_with(&mut self.ctx, node, reason);
        self.items.items_lost_with(&mut self.ctx, node);
        let end_time = self.ctx.timestamp();
        for (task, attempt) in lost {
            // An attempt its agent said started: it ran until the node was lost.
            let start_time = self
                .results
                .attempts
                .dispatched
                .get(&task)
                .and_then(|dispatched| dispatched.started)
                .filter(|(started, _)| *started == attempt.0)
                .map(|(_, at)| Timestamp::from_unix_micros(at));
            self.results.note_attempt(
                task,
                AttemptNote {
                    attempt: attempt.0,
                    end: AttemptEnd::Lost,
                    reason: format!("agent {node} on {host} lost: {reason}"),
                    exit_code: None,
                    signal: None,
                    node: Some(host.clone()),
                    start_time,
                    end_time,
                },
            );
        }
    }

    /// Reads an agent's frame in place: the payload is validated once and its fields
    /// are read straight from the receive buffer. Only a hello (rare) and the parts of
    /// an accepted result that its record keeps are copied out.
    pub(super) fn on_agent_frame(&mut self, link: LinkId, route: u32, payload: &[u8]) {
        let message = match saker_wire::frame::access_from_agent(payload) {
            Ok(message) => message,
            Err(error) => {
                // A peer that sends garbage loses its link; everything behind it is
                // replayed. Nothing else is affected.
                tracing::error!(%error, route, "invalid frame from an agent; closing its link");
                self.on_link_down(link, "invalid frame");
                return;
            }
        };
        match message {
            ArchivedFromAgent::Hello(hello) => {
                match rkyv::deserialize::<Hello, rkyv::rancor::Error>(hello) {
                    Ok(hello) => self.on_hello(link, hello),
                    Err(error) => {
                        tracing::error!(%error, route, "unreadable hello; closing its link");
                        self.on_link_down(link, "invalid frame");
                    }
                }
            }
            ArchivedFromAgent::Report(report) => {
                let node = report.node.to_native();
                if node.0 != route {
                    tracing::error!(route, %node, "report routed from another node");
                    return;
                }
                self.on_report(link, report)
            }
            ArchivedFromAgent::Goodbye { node, reason } => {
                // A stale copy's goodbye must not end the node's live agent.
                if self.ctx.registered_via(node.to_native(), link) {
                    self.lose_node(node.to_native(), reason.as_str())
                }
            }
            ArchivedFromAgent::GangLaunch(launch) => {
                match rkyv::deserialize::<GangLaunch, rkyv::rancor::Error>(launch) {
                    Ok(launch) => self
                        .gangs
                        .relay_launch(&mut self.ctx, NodeId(route), launch),
                    Err(error) => tracing::error!(%error, route, "unreadable gang launch"),
                }
            }
            ArchivedFromAgent::GangLaunchEnded(ended) => {
                match rkyv::deserialize::<GangLaunchEnded, rkyv::rancor::Error>(ended) {
                    Ok(ended) => self.gangs.relay_launch_end(&mut self.ctx, ended),
                    Err(error) => tracing::error!(%error, route, "unreadable gang launch end"),
                }
            }
            ArchivedFromAgent::ActorReply(_)
            | ArchivedFromAgent::ActorCall(_)
            | ArchivedFromAgent::ActorEvent(_) => {
                // A stale copy of the node, or an old path of it, speaks for no actor.
                if self.ctx.registered_via(NodeId(route), link) {
                    self.actors
                        .on_actor_frame(&mut self.ctx, NodeId(route), message);
                }
            }
            ArchivedFromAgent::ItemsWritten(_)
            | ArchivedFromAgent::ItemRead(_)
            | ArchivedFromAgent::ItemData(_) => {
                self.items
                    .on_item_frame(&mut self.ctx, link, route, message)
            }
            ArchivedFromAgent::NodesLost { nodes, reason } => {
                for node in nodes.iter().map(|node| node.to_native()) {
                    // Registered again through another link since: that life stays.
                    if self.ctx.nodes.contains_key(&node) && !self.ctx.registered_via(node, link) {
                        continue;
                    }
                    self.lose_node(node, reason.as_str());
                    // If the node is in fact alive and already reattached (its
                    // hello overtook this report), it must register again; if it is
                    // gone, the frame dies at the first hop that has no route.
                    self.ctx.send_to(link, node, &ToAgent::Rejoin);
                }
            }
        }
    }

    fn on_hello(&mut self, link: LinkId, hello: Hello) {
        let refuse = if hello.pilot_id != self.ctx.pilot.id {
            Some(format!(
                "agent belongs to pilot {}, not {}",
                hello.pilot_id, self.ctx.pilot.id
            ))
        } else {
            None
        };
        if let Some(reason) = refuse {
            tracing::error!(node = %hello.node, %reason, "refusing agent");
            self.ctx
                .send_to(link, hello.node, &ToAgent::Refused { reason });
            return;
        }
        // A hello from a node the root counts as live is a new life of it (the agent
        // restarted, or reattached after losing its parent before the loss was seen
        // here): the old life's work is replayed, its late results are duplicates.
        self.lose_node(hello.node, "the agent registered again");
        let now = self.ctx.now();
        let capacity = self.capacity_of(&hello);
        if let Err(error) = self.ctx.core.handle_node_joined(hello.node, capacity, now) {
            self.ctx.send_to(
                link,
                hello.node,
                &ToAgent::Refused {
                    reason: error.to_string(),
                },
            );
            return;
        }
        tracing::info!(node = %hello.node, host = %hello.hostname, %capacity, "agent joined");
        self.results.unjournaled.records.push(Record::NodeJoined {
            node: hello.node,
            host: hello.hostname.clone(),
            cores: capacity.core_count(),
            gpus: capacity.get(saker_core::ResourceKind::GPUS),
            unix_us: self.ctx.timestamp().unix_micros(),
        });
        self.ctx.nodes.insert(
            hello.node,
            NodeEntry {
                link,
                hostname: hello.hostname,
                cores: capacity.core_count(),
                capacity,
                known_jobs: HashSet::new(),
                forget: Vec::new(),
                running: 0,
                hosts_actors: hello.hosts_actors,
            },
        );
        let welcome = ToAgent::Welcome(Welcome {
            node: hello.node,
            pilot_id: self.ctx.pilot.id.clone(),
            capacity,
        });
        self.ctx.send_to(link, hello.node, &welcome);
        if self.ctx.pilot.shutting_down {
            self.ctx.send_to(link, hello.node, &shutdown_message());
        } else {
            self.actors.place_waiting(&mut self.ctx);
        }
    }

    /// What a node offers in the root's kinds: its cores, GPUs and memory, and its
    /// named resources numbered as the pilot numbers them. A name with no kind left
    /// (more names than a pilot can number) is left out, logged.
    fn capacity_of(&mut self, hello: &Hello) -> Resources {
        use saker_core::ResourceKind;
        let offered = hello.capacity;
        let mut capacity = Resources::cores(offered.core_count())
            .with(ResourceKind::GPUS, offered.gpu_count())
            .with(ResourceKind::MEMORY_MIB, offered.memory_mib());
        for named in &hello.custom {
            if !crate::spec::valid_resource_name(&named.name) {
                tracing::warn!(node = %hello.node, name = ?named.name, "ignoring a resource with an invalid name");
                continue;
            }
            match self.submissions.resource_names.kind(&named.name) {
                Some(kind) => capacity = capacity.with(kind, named.amount),
                None => tracing::warn!(
                    node = %hello.node,
                    name = %named.name,
                    "ignoring a resource: the pilot numbers no more kinds"
                ),
            }
        }
        capacity
    }

    fn on_report(&mut self, link: LinkId, report: &ArchivedReport) {
        let now = self.ctx.now();
        let node = report.node.to_native();
        // A node declared lost may still report: its attempts were replayed, so its
        // results only count (and are counted) as duplicates; its starts and credit
        // belong to no live node. So do those of a node's stale copy, or of its old
        // path (a report sent before a reattached agent's hello).
        let live = self.ctx.registered_via(node, link);
        if live {
            for started in report.started.iter() {
                let attempt = started.attempt.to_native();
                let _ = self.ctx.core.handle_started(attempt, now);
                // Noted in place: no map grows per task for it.
                if let Some(dispatched) = self
                    .results
                    .attempts
                    .dispatched
                    .get_mut(&started.task.to_native())
                {
                    dispatched.started = Some((attempt.0, started.at_unix_us.to_native()));
                }
            }
        }
        for result in report.results.iter() {
            if let Some(entry) = self.ctx.nodes.get_mut(&node) {
                entry.running = entry.running.saturating_sub(1);
            }
            let (task, attempt) = (result.task.to_native(), result.attempt.to_native());
            if !self.made_here(task, attempt, node) {
                tracing::info!(%node, %task, %attempt,
                    "ignoring a result of an attempt of a previous root (its task was replayed)");
                continue;
            }
            if matches!(result.body, ArchivedResultBody::Part { .. })
                && self.gangs.contains(&result.attempt.to_native())
            {
                // Rare and small: copied out, as the gang's result waits for the rest.
                match rkyv::deserialize::<TaskResult, rkyv::rancor::Error>(result) {
                    Ok(result) => {
                        self.gangs
                            .on_part_result(&mut self.ctx, &mut self.results, node, result);
                    }
                    Err(error) => tracing::error!(%error, %node, "unreadable part result"),
                }
                continue;
            }
            let outcome = match &result.outcome {
                ArchivedOutcome::Exited { code } if code.to_native() == 0 => {
                    AttemptOutcome::Succeeded
                }
                // A stop signal no agent sends: stopped from outside, so lost.
                ArchivedOutcome::Signaled { signal }
                    if stopped_from_outside(signal.to_native()) =>
                {
                    AttemptOutcome::Lost
                }
                ArchivedOutcome::Exited { .. }
                | ArchivedOutcome::Signaled { .. }
                | ArchivedOutcome::TimedOut
                | ArchivedOutcome::OutOfMemory { .. }
                | ArchivedOutcome::SpawnFailed { .. }
                | ArchivedOutcome::WorkerFailed { .. }
                | ArchivedOutcome::Raised { .. } => AttemptOutcome::Failed,
                ArchivedOutcome::Lost { .. } => AttemptOutcome::Lost,
                ArchivedOutcome::Cancelled => AttemptOutcome::Cancelled,
            };
            if matches!(result.outcome, ArchivedOutcome::Lost { .. })
                && let Some(entry) = self.ctx.nodes.get_mut(&node)
            {
                // The agent may have lost a definition we counted as sent (it went
                // to another life of this node): send each again with its next task.
                entry.known_jobs.clear();
            }
            let host = Some(self.ctx.hostname_of(node));
            self.results.settle_with(
                &mut self.ctx,
                task,
                attempt,
                outcome,
                || Detail::read(node, result),
                |end| attempt_note(result, end, host),
            );
        }
        let credit = report.credit.to_native();
        if live && !credit.is_zero() {
            let _ = self.ctx.core.handle_credit(node, credit, now);
        }
    }

    /// Whether a result of `attempt` for `task` from `node` can be this root's: an
    /// attempt not live is (the core counts it stale or unknown); a live one only for
    /// its own task, from its node or a member of its HPC job. A root that took over
    /// numbers its attempts from 1 again, and an adopted agent may still hold a result
    /// of the previous root's attempt of the same number: counted, it would end
    /// another task with this one's output.
    fn made_here(&self, task: TaskId, attempt: AttemptId, node: NodeId) -> bool {
        match self.ctx.core.live_attempt(attempt) {
            None => true,
            Some((live_task, live_node)) => {
                live_task == task
                    && (live_node == node
                        || self
                            .ctx
                            .core
                            .gang_members(attempt)
                            .is_some_and(|members| members.contains(&node)))
            }
        }
    }

    pub(super) fn broadcast_shutdown(&mut self) {
        let targets: Vec<(LinkId, NodeId)> =
            self.ctx.nodes.iter().map(|(id, n)| (n.link, *id)).collect();
        for (link, node) in targets {
            self.ctx.send_to(link, node, &shutdown_message());
        }
    }
}

/// Whether a task killed by `signal` was stopped from outside rather than failed:
/// SIGHUP, SIGINT and SIGTERM are how a batch system ends an allocation (Slurm's
/// `scancel`, time limit and preemption, PBS's `qdel`: SIGTERM; LSF's `bkill`:
/// SIGINT first) and how an operator stops a session. An agent never sends them (its
/// own stops kill with SIGKILL and report the attempt cancelled or timed out), and a
/// batch system signals the tasks of a step before their agent: one that dies first
/// has its end reported by an agent about to die too. Counted as the task's failure,
/// such an end failed tasks of every allocation cancelled under them; as a loss it is
/// replayed, within the task's `max_replays`. (SIGKILL stays the task's own: it is
/// also the kernel's out-of-memory kill.)
pub(super) fn stopped_from_outside(signal: i32) -> bool {
    const SIGHUP: i32 = 1;
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    matches!(signal, SIGHUP | SIGINT | SIGTERM)
}

/// Exit code, signal and reason of an outcome, as a result record shows them.
fn describe(outcome: &ArchivedOutcome) -> (Option<i32>, Option<i32>, Option<String>) {
    match outcome {
        ArchivedOutcome::Exited { code } => (Some(code.to_native()), None, None),
        ArchivedOutcome::Signaled { signal } if stopped_from_outside(signal.to_native()) => {
            let signal = signal.to_native();
            let reason = format!(
                "killed by signal {signal} ({}) from outside Saker (its allocation \
                 ending, or an operator)",
                crate::results::signal_name(signal)
            );
            (None, Some(signal), Some(reason))
        }
        ArchivedOutcome::Signaled { signal } => {
            let signal = signal.to_native();
            (
                None,
                Some(signal),
                Some(format!("killed by signal {signal}")),
            )
        }
        ArchivedOutcome::TimedOut => (None, None, Some("time limit exceeded".into())),
        ArchivedOutcome::OutOfMemory { limit_mib } => {
            (None, Some(9), Some(out_of_memory(limit_mib.to_native())))
        }
        ArchivedOutcome::SpawnFailed { reason } | ArchivedOutcome::WorkerFailed { reason } => {
            (None, None, Some(reason.as_str().to_owned()))
        }
        ArchivedOutcome::Lost { reason } => (None, None, Some(format!("lost: {reason}"))),
        ArchivedOutcome::Cancelled => (None, None, Some("stopped by its agent".into())),
        ArchivedOutcome::Raised { message } => (None, None, Some(format!("raised: {message}"))),
    }
}

/// How an attempt that ended so failed, for the result's `failure` (`None`: it did not).
fn failure_of(outcome: &ArchivedOutcome) -> Option<Failure> {
    Some(match outcome {
        ArchivedOutcome::Exited { code } if code.to_native() == 0 => return None,
        ArchivedOutcome::Exited { .. } => Failure::Exit,
        ArchivedOutcome::Signaled { signal } if stopped_from_outside(signal.to_native()) => {
            Failure::Lost
        }
        ArchivedOutcome::Signaled { .. } => Failure::Signal,
        ArchivedOutcome::TimedOut => Failure::TimeLimit,
        ArchivedOutcome::OutOfMemory { .. } => Failure::OutOfMemory,
        ArchivedOutcome::SpawnFailed { .. } => Failure::Spawn,
        ArchivedOutcome::WorkerFailed { .. } => Failure::WorkerStart,
        ArchivedOutcome::Raised { .. } => Failure::Raised,
        ArchivedOutcome::Lost { .. } => Failure::Lost,
        ArchivedOutcome::Cancelled => return None,
    })
}

/// The reason of an attempt killed at its memory limit.
pub(super) fn out_of_memory(limit_mib: u32) -> String {
    format!("out of memory: killed at its limit of {limit_mib} MiB")
}

impl Detail {
    /// What the result record will keep of an accepted attempt: the one copy out of
    /// the agent's frame.
    fn read(node: NodeId, result: &ArchivedTaskResult) -> Detail {
        let (exit_code, signal, mut reason) = describe(&result.outcome);
        if matches!(result.outcome, ArchivedOutcome::Cancelled) {
            reason = Some("cancelled".into());
        }
        let executor = result.executor.to_native();
        let spill = |output: &ArchivedOutput| output.spill_path.as_ref().map(|p| p.to_string());
        let (stdout, stderr, stdout_path, stderr_path, output) = match &result.body {
            ArchivedResultBody::Command { stdout, stderr } => (
                lossy_text(&stdout.inline),
                lossy_text(&stderr.inline),
                spill(stdout),
                spill(stderr),
                None,
            ),
            ArchivedResultBody::Function { output } => (
                String::new(),
                String::new(),
                None,
                None,
                output.as_ref().map(|bytes| bytes.as_slice().to_vec()),
            ),
            // A part of a gang that is no longer in flight: only ever a duplicate.
            ArchivedResultBody::Part { stdout, stderr, .. } => (
                lossy_text(&stdout.inline),
                lossy_text(&stderr.inline),
                spill(stdout),
                spill(stderr),
                None,
            ),
        };
        Detail {
            node,
            executor: (executor != u32::MAX).then_some(executor),
            received_unix_us: result.received_unix_us.to_native(),
            start_unix_us: result.start_unix_us.to_native(),
            end_unix_us: result.end_unix_us.to_native(),
            exit_code,
            signal,
            reason,
            failure: failure_of(&result.outcome),
            stdout,
            stderr,
            stdout_path,
            stderr_path,
            output,
            gang: None,
        }
    }
}

fn attempt_note(result: &ArchivedTaskResult, end: AttemptEnd, node: Option<String>) -> AttemptNote {
    let (exit_code, signal, reason) = describe(&result.outcome);
    AttemptNote {
        attempt: result.attempt.to_native().0,
        end,
        reason: reason.unwrap_or_else(|| format!("exit {}", exit_code.unwrap_or_default())),
        exit_code,
        signal,
        node,
        start_time: Some(Timestamp::from_unix_micros(
            result.start_unix_us.to_native(),
        )),
        end_time: Timestamp::from_unix_micros(result.end_unix_us.to_native()),
    }
}

fn shutdown_message() -> ToAgent {
    ToAgent::Shutdown {
        reason: "pilot shutting down".into(),
        kill_running: true,
    }
}
