//! The router's side of the agent tree: links up and down, agents' frames read in
//! place and handed to the owners they concern, nodes joining (hellos) and lost.

use std::collections::BTreeMap;

use saker_actors::link::{LinkId, LinkTx};
use saker_core::{AttemptId, NodeId, TaskId};
use saker_wire::messages::{
    ArchivedFromAgent, ArchivedOutcome, ArchivedReport, ArchivedResultBody, GangLaunch,
    GangLaunchEnded, Held, HeldActor, Hello, PmiFence, TaskResult, ToAgent, Welcome,
};

use super::adoption::{AdoptedGang, Early, Reconciled};
use super::gangs::Settled;
use super::nodes::Joining;
use super::outcomes::{attempt_note, core_outcome};
use super::results::Detail;
use super::state::{RootState, shutdown_message};
use crate::records::Record;

impl RootState {
    /// A child linked as `node`: an older link of the same node leads to a stale
    /// copy of it (an agent started twice), which is told to stop. Its work is
    /// replayed when the newer one says hello.
    pub(super) fn on_link_up(&mut self, link: LinkId, tx: LinkTx, node: Option<u32>) {
        self.nodes
            .link_up(&mut self.ctx, link, tx, node.map(NodeId));
    }

    pub(super) fn on_link_down(&mut self, link: LinkId, reason: &str) {
        for node in self.nodes.link_down(&mut self.ctx, link) {
            self.lose_node(node, reason);
        }
    }

    /// `node` is gone: its attempts are replayed (the core decides), its gangs, actors
    /// and data items with it; each attempt it ran is noted in its task's history.
    fn lose_node(&mut self, node: NodeId, reason: &str) {
        let Some(entry) = self.nodes.lose(node) else {
            return;
        };
        let host = entry.hostname();
        let releasing = self
            .upkeep
            .elastic
            .as_ref()
            .is_some_and(|elastic| elastic.releasing(node));
        if releasing {
            tracing::info!(%node, %reason, "agent left with its allocation");
        } else if !self.ctx.pilot.shutting_down {
            tracing::warn!(%node, %reason, "agent lost; its work is replayed");
        }
        let end_time = self.ctx.timestamp();
        if self.nodes.len() == 0 {
            self.facts.agentless_since = Some(end_time.unix_micros());
        }
        self.results.journal_later(Record::NodeLeft {
            node,
            reason: reason.to_owned(),
            unix_us: end_time.unix_micros(),
        });
        let now = self.ctx.now();
        let lost = self.ctx.core.node_attempts(node);
        match self.ctx.core.handle_node_lost(node, now) {
            Ok(loss) => tracing::info!(%node, ?loss, "node lost"),
            Err(error) => tracing::debug!(%node, %error, "node was not registered with the core"),
        }
        self.gangs.forget_dead_gangs(&self.ctx);
        self.actors
            .actors_lost_with(&mut self.ctx, &self.nodes, node, reason);
        self.items.items_lost_with(&mut self.ctx, &self.nodes, node);
        let why = format!("agent {node} on {host} lost: {reason}");
        self.results.lost_with_node(lost, host, &why, end_time);
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
            ArchivedFromAgent::StoreUsage(usage) => {
                match rkyv::deserialize::<saker_wire::StoreUsage, rkyv::rancor::Error>(usage) {
                    Ok(usage) if usage.node.0 == route => self.nodes.set_store(link, usage),
                    Ok(usage) => tracing::error!(route, node = %usage.node,
                        "store usage routed from another node"),
                    Err(error) => tracing::error!(%error, route, "unreadable store usage"),
                }
            }
            ArchivedFromAgent::Goodbye { node, reason } => {
                // A stale copy's goodbye must not end the node's live agent.
                if self.nodes.is_live(node.to_native(), link) {
                    self.lose_node(node.to_native(), reason.as_str())
                }
            }
            ArchivedFromAgent::GangLaunch(launch) => {
                match rkyv::deserialize::<GangLaunch, rkyv::rancor::Error>(launch) {
                    Ok(launch) if self.adoption.awaits_gang(launch.attempt) => {
                        let attempt = launch.attempt;
                        let early = Early::Launch(NodeId(route), launch);
                        self.adoption.keep_early(attempt, early);
                    }
                    Ok(launch) => {
                        self.gangs
                            .relay_launch(&mut self.ctx, &self.nodes, NodeId(route), launch)
                    }
                    Err(error) => tracing::error!(%error, route, "unreadable gang launch"),
                }
            }
            ArchivedFromAgent::GangLaunchEnded(ended) => {
                match rkyv::deserialize::<GangLaunchEnded, rkyv::rancor::Error>(ended) {
                    Ok(ended) if self.adoption.awaits_gang(ended.attempt) => {
                        self.adoption
                            .keep_early(ended.attempt, Early::LaunchEnded(ended));
                    }
                    Ok(ended) => self
                        .gangs
                        .relay_launch_end(&mut self.ctx, &self.nodes, ended),
                    Err(error) => tracing::error!(%error, route, "unreadable gang launch end"),
                }
            }
            ArchivedFromAgent::PmiFence(fence) => {
                match rkyv::deserialize::<PmiFence, rkyv::rancor::Error>(fence) {
                    Ok(fence) if self.adoption.awaits_gang(fence.attempt) => {
                        let attempt = fence.attempt;
                        let early = Early::Fence(NodeId(route), fence);
                        self.adoption.keep_early(attempt, early);
                    }
                    Ok(fence) => {
                        self.gangs
                            .on_pmi_fence(&mut self.ctx, &self.nodes, NodeId(route), fence)
                    }
                    Err(error) => tracing::error!(%error, route, "unreadable PMI fence"),
                }
            }
            ArchivedFromAgent::ActorReply(_)
            | ArchivedFromAgent::ActorCall(_)
            | ArchivedFromAgent::ActorEvent(_) => {
                // A stale copy of the node, or an old path of it, speaks for no actor.
                if self.nodes.is_live(NodeId(route), link) {
                    self.actors
                        .on_actor_frame(&mut self.ctx, &self.nodes, NodeId(route), message);
                }
            }
            ArchivedFromAgent::ItemsWritten(_)
            | ArchivedFromAgent::ItemRead(_)
            | ArchivedFromAgent::ItemData(_)
            | ArchivedFromAgent::ItemWhere(_)
            | ArchivedFromAgent::ItemCopied(_)
            | ArchivedFromAgent::DropCopy(_) => {
                self.items
                    .on_item_frame(&mut self.ctx, &self.nodes, link, route, message)
            }
            // Said on an agent's data connection, never on a link.
            ArchivedFromAgent::ObjectPut(_) => {
                tracing::warn!(route, "an object put came on a link: ignored");
            }
            ArchivedFromAgent::NodesLost { nodes, reason } => {
                for node in nodes.iter().map(|node| node.to_native()) {
                    // Registered again through another link since: that life stays.
                    if self.nodes.contains(node) && !self.nodes.is_live(node, link) {
                        continue;
                    }
                    self.lose_node(node, reason.as_str());
                    // If the node is in fact alive and already reattached (its
                    // hello overtook this report), it must register again; if it is
                    // gone, the frame dies at the first hop that has no route.
                    self.nodes
                        .answer(&mut self.ctx, link, node, &ToAgent::Rejoin);
                }
            }
        }
    }

    fn on_hello(&mut self, link: LinkId, hello: Hello) {
        if hello.pilot_id != self.ctx.pilot.id {
            let reason = format!(
                "agent belongs to pilot {}, not {}",
                hello.pilot_id, self.ctx.pilot.id
            );
            tracing::error!(node = %hello.node, %reason, "refusing agent");
            self.nodes.answer(
                &mut self.ctx,
                link,
                hello.node,
                &ToAgent::Refused { reason },
            );
            return;
        }
        // A hello from a node the root counts as live is a new life of it (the agent
        // restarted, or reattached after losing its parent before the loss was seen
        // here): the old life's work is replayed, its late results are duplicates.
        self.lose_node(hello.node, "the agent registered again");
        let now = self.ctx.now();
        let capacity = self.submissions.capacity_of(&hello);
        if let Err(error) = self.ctx.core.handle_node_joined(hello.node, capacity, now) {
            let refused = ToAgent::Refused {
                reason: error.to_string(),
            };
            self.nodes.answer(&mut self.ctx, link, hello.node, &refused);
            return;
        }
        tracing::info!(node = %hello.node, host = %hello.hostname, %capacity, "agent joined");
        self.results.journal_later(Record::NodeJoined {
            node: hello.node,
            host: hello.hostname.clone(),
            cores: capacity.core_count(),
            gpus: capacity.get(saker_core::ResourceKind::GPUS),
            unix_us: self.ctx.timestamp().unix_micros(),
        });
        let node = hello.node;
        let joining = Joining {
            link,
            hostname: hello.hostname.clone(),
            scratch: hello.scratch.clone(),
            data_addr: hello.data_addr.clone(),
            capacity,
            hosts_actors: hello.hosts_actors,
        };
        self.nodes.join(node, joining);
        self.facts.agentless_since = None;
        let welcome = ToAgent::Welcome(Welcome {
            node,
            pilot_id: self.ctx.pilot.id.clone(),
            capacity,
        });
        self.nodes.send(&mut self.ctx, node, &welcome);
        self.adopt(node, &hello.held);
        let stop = self.actors.adopt(&self.nodes, node, &hello.actors);
        for HeldActor { actor, life } in stop {
            let stop = ToAgent::ActorStop { actor, life };
            self.nodes.send(&mut self.ctx, node, &stop);
        }
        if self.ctx.pilot.shutting_down {
            self.nodes.send(&mut self.ctx, node, &shutdown_message());
        } else {
            self.actors.place_waiting(&mut self.ctx, &self.nodes);
        }
    }

    /// `node` holds attempts of an earlier root: those the core adopts run on as this
    /// root's (the results of those that ended follow the hello); the rest are stopped.
    /// A gang is adopted once its last member said hello.
    fn adopt(&mut self, node: NodeId, held: &[Held]) {
        let Reconciled {
            adopted,
            gangs,
            stop,
        } = self.adoption.adopt(&mut self.ctx, node, held);
        let at = self.ctx.timestamp().unix_micros();
        self.nodes.took_over(node, adopted.len() as u32);
        for adopted in &adopted {
            let started = adopted.started_unix_us;
            self.results
                .dispatched(adopted.task, if started == 0 { at } else { started });
            if started != 0 {
                self.results.started(adopted.task, adopted.attempt, started);
            }
        }
        for gang in gangs {
            self.adopt_gang(gang, at);
        }
        self.stop_held(stop);
    }

    /// Stops attempts of an earlier root on their nodes.
    pub(super) fn stop_held(&mut self, stop: Vec<(NodeId, AttemptId)>) {
        let mut by_node: BTreeMap<NodeId, Vec<AttemptId>> = BTreeMap::new();
        for (node, attempt) in stop {
            by_node.entry(node).or_default().push(attempt);
        }
        for (node, attempts) in by_node {
            self.nodes
                .send(&mut self.ctx, node, &ToAgent::Cancel { attempts });
        }
    }

    /// A gang of an earlier root runs on as this root's: what its members sent of it
    /// before is taken now, in the order it came.
    fn adopt_gang(&mut self, gang: AdoptedGang, at: u64) {
        let AdoptedGang {
            task,
            attempt,
            members,
            hosts,
            started_unix_us,
            early,
        } = gang;
        let hpc = self
            .ctx
            .core
            .live_task(task)
            .and_then(|(job, _)| self.submissions.definition(job))
            .and_then(|def| def.hpc);
        for &member in &members {
            self.nodes.took_over(member, 1);
        }
        let started = if started_unix_us == 0 {
            at
        } else {
            started_unix_us
        };
        self.results.dispatched(task, started);
        if started_unix_us != 0 {
            self.results.started(task, attempt, started_unix_us);
        }
        self.gangs.adopt(task, attempt, members, hosts, hpc);
        for early in early {
            match early {
                Early::Result(node, result) => {
                    let settled =
                        self.gangs
                            .on_part_result(&mut self.ctx, &self.nodes, node, *result);
                    if let Some(settled) = settled {
                        self.settle_gang(settled);
                    }
                }
                Early::Launch(from, launch) => {
                    self.gangs
                        .relay_launch(&mut self.ctx, &self.nodes, from, launch);
                }
                Early::LaunchEnded(ended) => {
                    self.gangs
                        .relay_launch_end(&mut self.ctx, &self.nodes, ended);
                }
                Early::Fence(from, fence) => {
                    self.gangs
                        .on_pmi_fence(&mut self.ctx, &self.nodes, from, fence);
                }
            }
        }
    }

    fn on_report(&mut self, link: LinkId, report: &ArchivedReport) {
        let now = self.ctx.now();
        let node = report.node.to_native();
        // A node declared lost may still report: its attempts were replayed, so its
        // results only count (and are counted) as duplicates; its starts and credit
        // belong to no live node. So do those of a node's stale copy, or of its old
        // path (a report sent before a reattached agent's hello).
        let live = self.nodes.is_live(node, link);
        if live {
            self.results.report_read(node, report.seq.to_native());
            for started in report.started.iter() {
                let attempt = started.attempt.to_native();
                let _ = self.ctx.core.handle_started(attempt, now);
                self.results.started(
                    started.task.to_native(),
                    attempt,
                    started.at_unix_us.to_native(),
                );
            }
        }
        for result in report.results.iter() {
            self.nodes.attempt_ended(node);
            let (task, attempt) = (result.task.to_native(), result.attempt.to_native());
            if self.adoption.was_delivered(attempt) {
                continue;
            }
            if matches!(result.body, ArchivedResultBody::Part { .. })
                && self.adoption.awaits_gang(attempt)
            {
                // A member's part of a gang not adopted yet: kept until it is.
                match rkyv::deserialize::<TaskResult, rkyv::rancor::Error>(result) {
                    Ok(result) => self
                        .adoption
                        .keep_early(attempt, Early::Result(node, Box::new(result))),
                    Err(error) => tracing::error!(%error, %node, "unreadable part result"),
                }
                continue;
            }
            if !self.made_here(task, attempt, node) {
                tracing::info!(%node, %task, %attempt,
                    "ignoring a result of an attempt of a previous root (its task was replayed)");
                continue;
            }
            if matches!(result.body, ArchivedResultBody::Part { .. })
                && self.gangs.contains(&attempt)
            {
                // Rare and small: copied out, as the gang's result waits for the rest.
                match rkyv::deserialize::<TaskResult, rkyv::rancor::Error>(result) {
                    Ok(result) => {
                        let settled =
                            self.gangs
                                .on_part_result(&mut self.ctx, &self.nodes, node, result);
                        if let Some(settled) = settled {
                            self.settle_gang(settled);
                        }
                    }
                    Err(error) => tracing::error!(%error, %node, "unreadable part result"),
                }
                continue;
            }
            let outcome = core_outcome(&result.outcome);
            if matches!(result.outcome, ArchivedOutcome::Lost { .. }) {
                // The agent may have lost a definition we counted as sent (it went
                // to another life of this node): send each again with its next task.
                self.nodes.resend_definitions(node);
            }
            let host = self.nodes.hostname(node);
            self.results.settle_with(
                &mut self.ctx,
                task,
                attempt,
                outcome,
                || Detail::read(node, host.clone(), result),
                |end| attempt_note(result, end, Some(host.clone())),
            );
        }
        let credit = report.credit.to_native();
        if live && !credit.is_zero() {
            let _ = self.ctx.core.handle_credit(node, credit, now);
        }
    }

    /// A gang attempt's every part is in: its one outcome goes to the core.
    fn settle_gang(&mut self, settled: Settled) {
        let Settled {
            task,
            attempt,
            outcome,
            detail,
            note,
        } = settled;
        self.results
            .settle(&mut self.ctx, task, attempt, outcome, detail, note);
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
}
