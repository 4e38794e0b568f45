//! The agent tree as the root knows it: every live node, the direct-child link each
//! came through, and what each holds of the jobs' definitions.
//!
//! A node *joins* when its agent's hello is accepted and is *lost* when its link goes
//! down, it says goodbye, a relay reports it gone, or a new life of it says hello. A
//! frame reaches a node through the link it registered over; what arrives over any
//! other link for it comes from a stale copy or an old path and [`Nodes::is_live`]
//! says so.
//!
//! A job's definition (its command or function payload, resources, limits) goes to a
//! node once, with the first of its tasks that the node runs ([`Nodes::dispatch`]);
//! the node keeps it until the job finishes and the root tells it to *forget* it, with
//! its next dispatch or in a batch of its own ([`Nodes::forget`]). The reverse index
//! (job → nodes holding its definition) is what a finished job and a changed
//! definition ([`Nodes::redefine`]) are sent through; it holds only jobs not finished.
//!
//! **Owns:** the registry, the links, every node's definition cache. **Never:** decides
//! where work goes (the core does) or reads a definition's contents (its caller hands
//! them in).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use saker_actors::link::{LinkId, LinkTx};
use std::time::Duration;

use saker_core::{JobId, NodeId, Resources, Time};
use saker_wire::messages::{Assignment, Dispatch, FRAME_DATA_BUDGET, GangPart, JobDef, ToAgent};

use super::ctx::Ctx;

/// Finished jobs a node is told to forget in one message when no dispatch takes them.
const FORGET_BATCH: usize = 1024;

/// The least time between two frames of their own telling a node its results are
/// durable; in between it is told with its next dispatch. A tuning constant: an agent
/// keeps what it was not told yet, and hands it to a next root (a duplicate there).
pub(super) const DURABLE_GAP: Duration = Duration::from_secs(1);

/// The live nodes (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Nodes {
    live: HashMap<NodeId, Node>,
    /// The node that dialed each agent link (its direct child), as it said.
    links: HashMap<LinkId, NodeId>,
    /// The live nodes holding each unfinished job's definition.
    holders: HashMap<JobId, Vec<NodeId>>,
}

/// A live node.
#[derive(Debug)]
pub(super) struct Node {
    link: LinkId,
    hostname: String,
    /// Its scratch directory, where its items and objects are files.
    scratch: String,
    /// Where other agents fetch its items directly (empty: nowhere).
    data_addr: String,
    /// What it offers, in the root's kinds.
    capacity: Resources,
    /// Jobs whose definition it has.
    known: HashSet<JobId>,
    /// Finished jobs it may drop, sent with its next dispatch.
    forget: Vec<JobId>,
    /// Attempts dispatched to it whose results have not come back.
    running: u32,
    /// Its agent is the application's binary and hosts placed actors.
    hosts_actors: bool,
    /// Its reports up to this one are durable, not yet said (0: nothing to say).
    durable: u64,
    /// When that was last said in a frame of its own.
    durable_said: Option<Time>,
    /// What its object memory holds, as it last said.
    store: saker_wire::StoreUsage,
}

/// What a joining node says of itself.
#[derive(Debug)]
pub(super) struct Joining {
    pub link: LinkId,
    pub hostname: String,
    pub scratch: String,
    pub data_addr: String,
    pub capacity: Resources,
    pub hosts_actors: bool,
}

/// The most any one live node offers of each kind, and how many have joined: what a
/// submission is checked against once nodes are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Offered {
    pub joined: u32,
    /// Kind by kind, the most one node offers (cores: the widest node's).
    pub most: Resources,
}

impl Node {
    /// The direct-child link it registered through.
    pub(super) fn link(&self) -> LinkId {
        self.link
    }

    pub(super) fn hostname(&self) -> &str {
        &self.hostname
    }

    pub(super) fn scratch(&self) -> &str {
        &self.scratch
    }

    pub(super) fn data_addr(&self) -> &str {
        &self.data_addr
    }

    /// What its object memory holds, as it last said.
    pub(super) fn store(&self) -> &saker_wire::StoreUsage {
        &self.store
    }

    pub(super) fn capacity(&self) -> Resources {
        self.capacity
    }

    pub(super) fn cores(&self) -> u32 {
        self.capacity.core_count()
    }

    /// Its slots running an attempt (at most its cores).
    pub(super) fn busy(&self) -> u32 {
        self.running.min(self.cores())
    }

    pub(super) fn is_running(&self) -> bool {
        self.running > 0
    }

    pub(super) fn hosts_actors(&self) -> bool {
        self.hosts_actors
    }
}

impl Nodes {
    /// A child linked as `node`: an older link of the same node leads to a stale copy
    /// of it (an agent started twice), which is told to stop.
    pub(super) fn link_up(
        &mut self,
        ctx: &mut Ctx,
        link: LinkId,
        tx: LinkTx,
        node: Option<NodeId>,
    ) {
        ctx.port.link_up(link, tx);
        let Some(node) = node else {
            return;
        };
        let stale: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, n)| **n == node)
            .map(|(l, _)| *l)
            .collect();
        for old in stale {
            tracing::warn!(%node, ?old, "a newer agent linked as this node; the older one is told to stop");
            ctx.port.supersede(old, node);
            self.links.remove(&old);
        }
        self.links.insert(link, node);
    }

    /// A link went down: the live nodes registered through it, in id order, which the
    /// caller then loses.
    pub(super) fn link_down(&mut self, ctx: &mut Ctx, link: LinkId) -> Vec<NodeId> {
        ctx.port.link_down(link);
        self.links.remove(&link);
        let mut behind: Vec<NodeId> = self
            .live
            .iter()
            .filter(|(_, n)| n.link == link)
            .map(|(id, _)| *id)
            .collect();
        behind.sort_unstable();
        behind
    }

    /// `node` joined over `link`. A node that was live is replaced (its caller loses
    /// the old life first).
    pub(super) fn join(&mut self, node: NodeId, joining: Joining) {
        self.lose(node);
        self.live.insert(
            node,
            Node {
                link: joining.link,
                hostname: joining.hostname,
                scratch: joining.scratch,
                data_addr: joining.data_addr,
                capacity: joining.capacity,
                known: HashSet::new(),
                forget: Vec::new(),
                running: 0,
                hosts_actors: joining.hosts_actors,
                durable: 0,
                durable_said: None,
                store: saker_wire::StoreUsage::default(),
            },
        );
    }

    /// `node` is gone: it holds nothing any more. Its entry, if it was live.
    pub(super) fn lose(&mut self, node: NodeId) -> Option<Node> {
        let entry = self.live.remove(&node)?;
        self.drop_holder(node, &entry.known);
        Some(entry)
    }

    /// Whether `node` is live and registered through `link`: what a link carries for a
    /// node registered elsewhere comes from a stale copy or an old path of it.
    pub(super) fn is_live(&self, node: NodeId, link: LinkId) -> bool {
        self.live.get(&node).is_some_and(|entry| entry.link == link)
    }

    pub(super) fn contains(&self, node: NodeId) -> bool {
        self.live.contains_key(&node)
    }

    /// `node`, live over `link`, says what its object memory holds.
    pub(super) fn set_store(&mut self, link: LinkId, usage: saker_wire::StoreUsage) {
        if let Some(entry) = self.live.get_mut(&usage.node)
            && entry.link == link
        {
            entry.store = usage;
        }
    }

    /// What the live nodes' object memories hold, added up.
    pub(super) fn store_total(&self) -> saker_wire::StoreUsage {
        let mut total = saker_wire::StoreUsage::default();
        for node in self.live.values() {
            let usage = &node.store;
            total.objects += usage.objects;
            total.memory_bytes += usage.memory_bytes;
            total.memory_bound += usage.memory_bound;
            total.disk_bytes += usage.disk_bytes;
            total.spills += usage.spills;
            total.spilled_bytes += usage.spilled_bytes;
            total.spill_failures += usage.spill_failures;
            total.drops += usage.drops;
            total.dropped_bytes += usage.dropped_bytes;
        }
        total
    }

    pub(super) fn get(&self, node: NodeId) -> Option<&Node> {
        self.live.get(&node)
    }

    /// Every live node, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.live.iter().map(|(id, node)| (*id, node))
    }

    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// `node`'s host name, or a stand-in for a node no longer live.
    pub(super) fn hostname(&self, node: NodeId) -> String {
        self.live
            .get(&node)
            .map_or_else(|| format!("node-{node}"), |n| n.hostname.clone())
    }

    /// Sends `message` to `node` if it is live; whether it was.
    pub(super) fn send(&self, ctx: &mut Ctx, node: NodeId, message: &ToAgent) -> bool {
        match self.live.get(&node) {
            Some(entry) => {
                ctx.send_to(entry.link, node, message);
                true
            }
            None => false,
        }
    }

    /// Sends `message` over `link` to `node`, live or not: an answer to whoever sent a
    /// frame over that link (a refusal, a rejoin).
    pub(super) fn answer(&self, ctx: &mut Ctx, link: LinkId, node: NodeId, message: &ToAgent) {
        ctx.send_to(link, node, message);
    }

    /// Sends `message` to every live node.
    pub(super) fn broadcast(&self, ctx: &mut Ctx, message: &ToAgent) {
        for (node, entry) in &self.live {
            ctx.send_to(entry.link, *node, message);
        }
    }

    /// The most any live node offers, kind by kind.
    pub(super) fn offered(&self) -> Offered {
        let mut most = Resources::default();
        for node in self.live.values() {
            for kind in saker_core::ResourceKind::all() {
                let amount = node.capacity.get(kind);
                if amount > most.get(kind) {
                    most = most.with(kind, amount);
                }
            }
        }
        Offered {
            joined: self.live.len() as u32,
            most,
        }
    }

    /// Sends `node` its `tasks`, each job's definition (from `definition`) with the
    /// first of its tasks the node runs, and the jobs it may forget. Function payloads
    /// travel in the definitions: past [`FRAME_DATA_BUDGET`] the frame so far goes out
    /// and the rest follows in another (one big payload goes alone). A gang member's
    /// one task comes with its `gang` part. False if `node` is not live.
    pub(super) fn dispatch(
        &mut self,
        ctx: &mut Ctx,
        node: NodeId,
        tasks: Vec<Assignment>,
        gang: Option<GangPart>,
        mut definition: impl FnMut(JobId) -> Option<Arc<JobDef>>,
    ) -> bool {
        let Some(entry) = self.live.get_mut(&node) else {
            return false;
        };
        let mut frames = Vec::new();
        let mut jobs = Vec::new();
        let mut batch = Vec::with_capacity(tasks.len());
        let mut data = 0;
        entry.running += tasks.len() as u32;
        for task in tasks {
            if !entry.known.contains(&task.job)
                && let Some(def) = definition(task.job)
            {
                entry.known.insert(task.job);
                self.holders.entry(task.job).or_default().push(node);
                let len = def.payload.data_len();
                if data > 0 && data + len > FRAME_DATA_BUDGET {
                    frames.push((std::mem::take(&mut jobs), std::mem::take(&mut batch)));
                    data = 0;
                }
                data += len;
                jobs.push(def);
            }
            batch.push(task);
        }
        frames.push((jobs, batch));
        let mut forget = Some(std::mem::take(&mut entry.forget));
        let durable = std::mem::take(&mut entry.durable);
        let mut gang = gang;
        let link = entry.link;
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
                gang: if i == last { gang.take() } else { None },
                durable: if i == last { durable } else { 0 },
            });
            ctx.send_to(link, node, &message);
        }
        true
    }

    /// `node` runs `attempts` more that this root adopted (sent by an earlier one).
    pub(super) fn took_over(&mut self, node: NodeId, attempts: u32) {
        if let Some(entry) = self.live.get_mut(&node) {
            entry.running += attempts;
        }
    }

    /// The results of `node`'s reports up to `through` are in the journal: said with
    /// its next dispatch, or in a frame of its own if none was said for
    /// [`DURABLE_GAP`] (an idle node's agent still frees what it keeps).
    pub(super) fn durable(&mut self, ctx: &mut Ctx, node: NodeId, through: u64) {
        let Some(entry) = self.live.get_mut(&node) else {
            return;
        };
        entry.durable = entry.durable.max(through);
        let now = ctx.now();
        if entry
            .durable_said
            .is_some_and(|said| now < said.saturating_add(DURABLE_GAP))
        {
            return;
        }
        entry.durable_said = Some(now);
        let through = std::mem::take(&mut entry.durable);
        ctx.send_to(entry.link, node, &ToAgent::Durable { through });
    }

    /// An attempt on `node` ended (its result came back).
    pub(super) fn attempt_ended(&mut self, node: NodeId) {
        if let Some(entry) = self.live.get_mut(&node) {
            entry.running = entry.running.saturating_sub(1);
        }
    }

    /// `node` may have lost definitions it was sent (they went to another life of it):
    /// each goes again with its job's next task there.
    pub(super) fn resend_definitions(&mut self, node: NodeId) {
        let Some(entry) = self.live.get_mut(&node) else {
            return;
        };
        let known = std::mem::take(&mut entry.known);
        self.drop_holder(node, &known);
    }

    /// A finished job's definition is no longer needed by the nodes that have it: they
    /// are told with their next dispatch, or at once when many have piled up (a node
    /// that gets no more work still frees its memory).
    pub(super) fn forget(&mut self, ctx: &mut Ctx, job: JobId) {
        for node in self.holders.remove(&job).unwrap_or_default() {
            let Some(entry) = self.live.get_mut(&node) else {
                continue;
            };
            if !entry.known.remove(&job) {
                continue;
            }
            entry.forget.push(job);
            if entry.forget.len() >= FORGET_BATCH {
                let message = ToAgent::Dispatch(Dispatch {
                    jobs: Vec::new(),
                    tasks: Vec::new(),
                    forget: std::mem::take(&mut entry.forget),
                    gang: None,
                    durable: 0,
                });
                ctx.send_to(entry.link, node, &message);
            }
        }
    }

    /// Job `def.job` has a new definition: every node holding the old one gets it at
    /// once, where it replaces it before any queued attempt of the job starts.
    pub(super) fn redefine(&mut self, ctx: &mut Ctx, def: &Arc<JobDef>) {
        let holders = self.holders.get(&def.job).cloned().unwrap_or_default();
        for node in holders {
            let Some(entry) = self.live.get_mut(&node) else {
                continue;
            };
            let message = ToAgent::Dispatch(Dispatch {
                jobs: vec![Arc::clone(def)],
                tasks: Vec::new(),
                forget: std::mem::take(&mut entry.forget),
                gang: None,
                durable: 0,
            });
            ctx.send_to(entry.link, node, &message);
        }
    }

    /// The nodes holding `job`'s definition, in the order they got it.
    #[cfg(test)]
    pub(super) fn holders(&self, job: JobId) -> &[NodeId] {
        self.holders.get(&job).map_or(&[], Vec::as_slice)
    }

    /// Whether `node` holds `job`'s definition.
    #[cfg(test)]
    pub(super) fn knows(&self, node: NodeId, job: JobId) -> bool {
        self.live
            .get(&node)
            .is_some_and(|entry| entry.known.contains(&job))
    }

    /// Takes `node` out of the holders of `jobs`.
    fn drop_holder(&mut self, node: NodeId, jobs: &HashSet<JobId>) {
        for job in jobs {
            if let Some(holders) = self.holders.get_mut(job) {
                holders.retain(|holder| *holder != node);
                if holders.is_empty() {
                    self.holders.remove(job);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
