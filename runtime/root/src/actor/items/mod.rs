//! Data items (`reads`/`writes` of a spec): which nodes hold each, the preferences of
//! the jobs that read them, and the chunks of a transfer passed from a holder to a
//! reader.
//!
//! An item is a file a task wrote in its node's scratch directory. When its attempt
//! ended the agent said so (`ItemsWritten`, before the result); the root journals the
//! holder (`Record::Item`) and tells the core that every unfinished job reading the
//! item prefers the nodes holding the most bytes of what it reads
//! ([`saker_core::Core::handle_prefer`]): a reader waits a bounded time for such a node
//! and runs elsewhere after it. A reader that runs where an item is not pulls it from a
//! holder: first it asks where the item is ([`saker_wire::ItemWhere`]), and fetches
//! from the holders named ([`saker_wire::ItemHolders`]) directly, node to node; what
//! it cannot have that way comes through the root
//! ([`saker_wire::ItemRead`]/[`saker_wire::ItemData`]). A reader that has the whole
//! item holds a copy ([`saker_wire::ItemCopied`], journaled as its writer's is). Bytes
//! moved are counted (`status`: `data_moved_bytes`, `data_root_bytes` of them passed on
//! by the root). A node that is lost
//! holds nothing any more; a holder that cannot give an item is dropped and the next
//! one asked; with none left the item is made again by its writer when it may run
//! twice (`recompute.rs`), else the reader is told, and its attempt fails with the
//! reason.

use std::collections::HashMap;
use std::sync::Arc;

use saker_actors::link::LinkId;
use saker_core::{JobId, MAX_PREFERRED_NODES, NodeId};
use saker_wire::messages::{ArchivedFromAgent, ToAgent};
use saker_wire::{
    ItemCopied, ItemData, ItemHolder, ItemHolders, ItemRead, ItemWhere, ItemsWritten,
};

use super::ctx::Ctx;
use super::nodes::Nodes;
use crate::records::Record;
use recompute::{Parked, Recomputes};
use saker_client::spec::JobRequest;

mod free;
mod recompute;
mod relay;

/// What the journal holds of the data items: what each job reads, and where each
/// item was written, in journal order.
#[derive(Debug, Default)]
pub(super) struct Journaled {
    reads: Vec<(JobId, Vec<String>)>,
    holders: Vec<(String, NodeId, u64)>,
    /// Jobs that write items: the items, and the request when it may run again.
    writes: Vec<(JobId, Vec<String>, Option<Arc<JobRequest>>)>,
    /// Jobs submitted to make items again: (job, items).
    recomputes: Vec<(JobId, Vec<String>)>,
    /// Items freed by their owner.
    freed: Vec<String>,
}

impl Journaled {
    /// A submission: what its job reads.
    pub(super) fn look(&mut self, record: &Record) {
        if let Record::Submit { job, request, .. } = record {
            if !request.spec.reads.is_empty() {
                self.reads.push((*job, request.spec.reads.clone()));
            }
            if !request.spec.writes.is_empty() {
                let recipe = recompute::recipe_of(request);
                self.writes
                    .push((*job, request.spec.writes.clone(), recipe));
            }
        }
    }

    /// Keeps where an item was written, and which jobs make items again.
    pub(super) fn gather(&mut self, record: Record) {
        match record {
            Record::Item { item, node, bytes } => self.holders.push((item, node, bytes)),
            Record::Recompute { job, items, .. } => self.recomputes.push((job, items)),
            Record::ItemsFreed { items, .. } => self.freed.extend(items),
            _ => {}
        }
    }
}

/// What the root knows of the pilot's data items.
#[derive(Debug, Default)]
pub(super) struct ItemTable {
    items: HashMap<String, Item>,
    /// The unfinished jobs reading each item.
    readers: HashMap<String, Vec<JobId>>,
    /// What each unfinished reading job reads.
    reads: HashMap<JobId, Vec<String>>,
    /// Requests passed to a holder and not answered yet: (reader, request) → holder,
    /// and the request (asked again elsewhere if the holder is lost).
    pending: HashMap<(NodeId, u64), (NodeId, ItemRead)>,
    /// Bytes passed from holders to readers through the root.
    root_bytes: u64,
    /// Bytes readers fetched from holders directly, node to node.
    direct_bytes: u64,
    /// Of those, from nodes that were fetching the item too (`relay.rs`).
    relayed_bytes: u64,
    /// Bytes of whole items each live node fetched (its copies).
    fetched: HashMap<NodeId, u64>,
    /// Items lost and made again, and the readers waiting for them.
    recomputes: Recomputes,
    /// Freed items that jobs still read (`free.rs`).
    freeing: std::collections::HashSet<String>,
    /// Copies the root let their nodes drop (`DropCopy`): one said again (read there
    /// meanwhile, so kept) is a holder again, not a new fetch.
    dropped: std::collections::HashSet<(String, NodeId)>,
    /// Which nodes are fetching each item, relaying it to the next (`relay.rs`).
    fetching: relay::Fetching,
    /// Clients' asks for an object's holders so far (each starts at another one).
    client_reads: usize,
}

#[derive(Debug, Default)]
struct Item {
    holders: Vec<NodeId>,
    bytes: u64,
}

impl ItemTable {
    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes moved from holders to readers so far, node to node or through the root.
    pub(super) fn moved_bytes(&self) -> u64 {
        self.root_bytes + self.direct_bytes
    }

    /// Bytes of whole items `node` fetched since it joined.
    pub(super) fn fetched_by(&self, node: NodeId) -> u64 {
        self.fetched.get(&node).copied().unwrap_or(0)
    }

    /// Bytes of the items `node` holds.
    pub(super) fn held_by(&self, node: NodeId) -> u64 {
        self.items
            .values()
            .filter(|item| item.holders.contains(&node))
            .map(|item| item.bytes)
            .sum()
    }

    /// Bytes of the items every node holds, each copy counted (lost nodes hold none).
    pub(super) fn held_bytes(&self) -> u64 {
        self.items
            .values()
            .map(|item| item.bytes * item.holders.len() as u64)
            .sum()
    }

    /// Jobs submitted so far to make lost items again.
    pub(super) fn recomputes(&self) -> u64 {
        self.recomputes.submitted
    }

    /// Of [`Self::moved_bytes`], those relayed by nodes fetching the item too.
    pub(super) fn relayed_bytes(&self) -> u64 {
        self.relayed_bytes
    }

    /// Of [`Self::moved_bytes`], those the root passed on.
    pub(super) fn root_bytes(&self) -> u64 {
        self.root_bytes
    }

    /// `node` holds `item` of `bytes` bytes. Returns whether that is news.
    fn add_holder(&mut self, item: &str, node: NodeId, bytes: u64) -> bool {
        let entry = self.items.entry(item.to_owned()).or_default();
        entry.bytes = bytes;
        if entry.holders.contains(&node) {
            return false;
        }
        entry.holders.push(node);
        true
    }

    /// The nodes `job` prefers: those holding the most bytes of what it reads.
    fn preferred(&self, job: JobId) -> Vec<NodeId> {
        let mut by_node: HashMap<NodeId, u64> = HashMap::new();
        for name in self.reads.get(&job).into_iter().flatten() {
            if let Some(item) = self.items.get(name) {
                for &node in &item.holders {
                    *by_node.entry(node).or_default() += item.bytes.max(1);
                }
            }
        }
        let mut nodes: Vec<(NodeId, u64)> = by_node.into_iter().collect();
        // Most bytes first; ties by node id, so the choice is deterministic.
        nodes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let most = nodes.first().map_or(0, |&(_, bytes)| bytes);
        nodes
            .into_iter()
            .take_while(|&(_, bytes)| bytes == most)
            .take(MAX_PREFERRED_NODES)
            .map(|(node, _)| node)
            .collect()
    }
}

impl ItemTable {
    /// A job (new or restored) reads `reads`: it prefers their holders from now on.
    pub(super) fn note_reads(&mut self, ctx: &mut Ctx, job: JobId, reads: &[String]) {
        let finished = ctx
            .core
            .job_counts(job)
            .is_none_or(|counts| counts.is_finished());
        if reads.is_empty() || finished {
            return;
        }
        for item in reads {
            self.readers.entry(item.clone()).or_default().push(job);
        }
        self.reads.insert(job, reads.to_vec());
        self.prefer(ctx, job);
        if reads.iter().any(|item| self.recomputes.is_running(item)) {
            self.hold(ctx, job);
        }
    }

    /// Tells the core where `job` would rather run now.
    fn prefer(&mut self, ctx: &mut Ctx, job: JobId) {
        let nodes = self.preferred(job);
        let now = ctx.now();
        if let Err(error) = ctx.core.handle_prefer(job, &nodes, now) {
            tracing::debug!(%error, %job, "no preference");
        }
    }

    /// Updates the preferences of the jobs reading `item`.
    fn prefer_readers_of(&mut self, ctx: &mut Ctx, item: &str) {
        let readers = self.readers.get(item).cloned().unwrap_or_default();
        for job in readers {
            self.prefer(ctx, job);
        }
    }

    /// A job ended: it reads nothing any more (a freed item it read last goes).
    pub(in crate::actor) fn forget_reads(&mut self, ctx: &mut Ctx, nodes: &Nodes, job: JobId) {
        let Some(reads) = self.reads.remove(&job) else {
            return;
        };
        for item in reads {
            if let Some(readers) = self.readers.get_mut(&item) {
                readers.retain(|reader| *reader != job);
                if readers.is_empty() {
                    self.readers.remove(&item);
                    self.unread(ctx, nodes, &item);
                }
            }
        }
    }

    /// `node` is lost: it holds nothing any more. An item it held last is made again
    /// now if a job still reads it; what it was asked for goes to another holder.
    pub(super) fn items_lost_with(&mut self, ctx: &mut Ctx, nodes: &Nodes, node: NodeId) {
        self.fetched.remove(&node);
        self.dropped.retain(|(_, holder)| *holder != node);
        self.fetching.lost(node);
        let mut changed = Vec::new();
        for (name, item) in &mut self.items {
            if let Some(at) = item.holders.iter().position(|holder| *holder == node) {
                item.holders.remove(at);
                changed.push(name.clone());
            }
        }
        for name in changed {
            self.prefer_readers_of(ctx, &name);
            if self.readers.contains_key(&name) && !self.has_live_holder(nodes, &name) {
                self.make_again(ctx, &name);
            }
        }
        let mut asked: Vec<ItemRead> = Vec::new();
        self.pending.retain(|_, (holder, read)| {
            let keep = *holder != node;
            if !keep {
                asked.push(read.clone());
            }
            keep
        });
        for read in asked {
            if let Some(link) = nodes.get(read.reader).map(|entry| entry.link()) {
                self.on_item_read(ctx, nodes, link, read);
            }
        }
    }

    /// The live holders of `item` that serve data connections, with their address.
    fn direct_holders<'a>(
        &'a self,
        nodes: &'a Nodes,
        item: &str,
    ) -> impl Iterator<Item = (NodeId, &'a str)> + 'a {
        self.items
            .get(item)
            .into_iter()
            .flat_map(|item| item.holders.iter().copied())
            .filter_map(|holder| {
                let addr = nodes.get(holder)?.data_addr();
                (!addr.is_empty()).then_some((holder, addr))
            })
    }

    /// The live holders of `item` a client may read it from (they serve data
    /// connections), each ask starting at another one.
    pub(super) fn holders_for_client(&mut self, nodes: &Nodes, item: &str) -> Vec<NodeId> {
        let mut holders: Vec<NodeId> = self
            .direct_holders(nodes, item)
            .map(|(holder, _)| holder)
            .collect();
        if !holders.is_empty() {
            self.client_reads = self.client_reads.wrapping_add(1);
            let first = self.client_reads % holders.len();
            holders.rotate_left(first);
        }
        holders
    }

    /// Whether a live node holds `item`.
    fn has_live_holder(&self, nodes: &Nodes, item: &str) -> bool {
        self.items
            .get(item)
            .is_some_and(|item| item.holders.iter().any(|holder| nodes.contains(*holder)))
    }

    /// A resumed root's items: the jobs not finished read what they read, and
    /// prefer the holders the journal names (noted after the reads, so that they do).
    pub(super) fn resume(&mut self, ctx: &mut Ctx, journaled: Journaled) {
        for (job, writes, recipe) in journaled.writes {
            self.note_writes(job, &writes, recipe);
        }
        for (job, reads) in journaled.reads {
            self.note_reads(ctx, job, &reads);
        }
        for (item, node, bytes) in journaled.holders {
            if self.add_holder(&item, node, bytes) {
                self.prefer_readers_of(ctx, &item);
            }
        }
        for (job, items) in journaled.recomputes {
            self.resume_recompute(ctx, job, items);
        }
        self.resume_freed(ctx, journaled.freed);
    }

    /// Items an attempt wrote on `node`: journaled, and its readers told.
    pub(super) fn on_items_written(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        written: ItemsWritten,
    ) {
        if !nodes.is_live(written.node, link) {
            return;
        }
        let mut records = Vec::new();
        let mut news = Vec::new();
        for item in written.items {
            if !saker_client::spec::valid_item_name(&item.name) {
                tracing::warn!(node = %written.node, name = ?item.name, "ignoring an item with an invalid name");
                continue;
            }
            if self.add_holder(&item.name, written.node, item.bytes) {
                self.prefer_readers_of(ctx, &item.name);
                news.push(item.name.clone());
                records.push(Record::Item {
                    item: item.name,
                    node: written.node,
                    bytes: item.bytes,
                });
            }
        }
        if !records.is_empty() {
            ctx.append(records, super::journal::AfterJournal::Nothing);
        }
        for item in news {
            self.item_back(ctx, nodes, &item);
        }
    }

    /// A client put `item` (an object) on `node`: journaled, its readers told, and
    /// answered once durable.
    pub(super) fn on_put(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        node: NodeId,
        item: String,
        bytes: u64,
        reply: crate::client::Reply<()>,
    ) {
        if !self.add_holder(&item, node, bytes) {
            let _ = reply.send(Ok(()));
            return;
        }
        self.prefer_readers_of(ctx, &item);
        let record = Record::Item {
            item: item.clone(),
            node,
            bytes,
        };
        ctx.append(vec![record], super::journal::AfterJournal::Put { reply });
        self.item_back(ctx, nodes, &item);
    }

    /// A reader asks for bytes of an item: passed to a holder, or answered with why not.
    pub(super) fn on_item_read(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        read: ItemRead,
    ) {
        let reader = read.reader;
        if !nodes.is_live(reader, link) {
            return;
        }
        let holder = self.items.get(&read.item).and_then(|item| {
            item.holders
                .iter()
                .copied()
                .find(|holder| *holder != reader && nodes.contains(*holder))
        });
        match holder {
            Some(holder) => {
                self.pending
                    .insert((reader, read.request), (holder, read.clone()));
                nodes.send(ctx, holder, &ToAgent::ItemRead(read));
            }
            None if !self.has_live_holder(nodes, &read.item)
                && self.make_again(ctx, &read.item) =>
            {
                self.recomputes
                    .park(read.item.clone(), Parked::Read(link, read));
            }
            None => {
                let answer = ItemData {
                    error: Some(self.lost_reason(&read.item)),
                    item: read.item,
                    reader,
                    request: read.request,
                    offset: read.offset,
                    total: 0,
                    data: Vec::new(),
                };
                nodes.answer(ctx, link, reader, &ToAgent::ItemData(answer));
            }
        }
    }

    /// A holder's answer: passed to its reader. A holder that could not read the item
    /// no longer holds it: the reader's request goes to the next holder, if any.
    pub(super) fn on_item_data(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        from: NodeId,
        data: ItemData,
    ) {
        let key = (data.reader, data.request);
        if self
            .pending
            .get(&key)
            .is_none_or(|(holder, _)| *holder != from)
        {
            // Only the node asked may answer.
            return;
        }
        self.pending.remove(&key);
        if data.error.is_some() {
            tracing::warn!(node = %from, item = %data.item, error = ?data.error, "a holder could not give an item");
            if let Some(item) = self.items.get_mut(&data.item) {
                item.holders.retain(|node| *node != from);
            }
            if let Some(reader_link) = nodes.get(data.reader).map(|entry| entry.link()) {
                let read = ItemRead {
                    item: data.item.clone(),
                    reader: data.reader,
                    request: data.request,
                    offset: data.offset,
                    len: saker_wire::ITEM_CHUNK,
                };
                self.prefer_readers_of(ctx, &data.item);
                self.on_item_read(ctx, nodes, reader_link, read);
            }
            return;
        }
        self.root_bytes += data.data.len() as u64;
        let reader = data.reader;
        nodes.send(ctx, reader, &ToAgent::ItemData(data));
    }

    /// A reader is to fetch an item: the live holders it may dial directly, each
    /// reader starting at another one, so that many readers of one item spread over its
    /// copies, and a node fetching it too to relay it, if one is free (`relay.rs`).
    /// None: it fetches through the root.
    pub(super) fn on_item_where(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        asked: ItemWhere,
    ) {
        let reader = asked.reader;
        if !nodes.is_live(reader, link) {
            return;
        }
        if !self.has_live_holder(nodes, &asked.item) && self.make_again(ctx, &asked.item) {
            self.recomputes
                .park(asked.item.clone(), Parked::Where(link, asked));
            return;
        }
        let mut holders: Vec<ItemHolder> = self
            .direct_holders(nodes, &asked.item)
            .filter(|(holder, _)| *holder != reader)
            .map(|(node, addr)| ItemHolder {
                node,
                addr: addr.to_owned(),
            })
            .collect();
        if !holders.is_empty() {
            let first = reader.0 as usize % holders.len();
            holders.rotate_left(first);
        }
        let serves = |node: NodeId| nodes.get(node).map(|node| node.data_addr());
        let upstream = self
            .fetching
            .begin(&asked.item, reader, |node| {
                serves(node).is_some_and(|addr| !addr.is_empty())
            })
            .and_then(|node| {
                Some(ItemHolder {
                    node,
                    addr: serves(node)?.to_owned(),
                })
            });
        tracing::debug!(item = %asked.item, %reader, holders = holders.len(),
            upstream = ?upstream.as_ref().map(|holder| holder.node), "where an item is");
        let answer = ToAgent::ItemHolders(ItemHolders {
            item: asked.item,
            holders,
            upstream,
        });
        nodes.answer(ctx, link, reader, &answer);
    }

    /// A reader has the whole item now: one more holder, journaled as a writer is;
    /// the bytes it fetched directly are counted.
    pub(super) fn on_item_copied(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        copied: ItemCopied,
    ) {
        if !nodes.is_live(copied.node, link) {
            return;
        }
        self.fetching.copied(&copied.item, copied.node);
        let again = self.dropped.remove(&(copied.item.clone(), copied.node));
        if !again {
            let direct = copied.direct.min(copied.bytes);
            self.direct_bytes += direct;
            self.relayed_bytes += copied.relayed.min(direct);
            *self.fetched.entry(copied.node).or_default() += copied.bytes;
        }
        let known = self
            .items
            .get(&copied.item)
            .is_some_and(|item| item.bytes == copied.bytes);
        if !known {
            // Not an item the root knows of that size: its copy is not counted on.
            tracing::debug!(node = %copied.node, item = %copied.item, "ignoring a copy of an unknown item");
            return;
        }
        if self.add_holder(&copied.item, copied.node, copied.bytes) {
            self.prefer_readers_of(ctx, &copied.item);
            let record = Record::Item {
                item: copied.item.clone(),
                node: copied.node,
                bytes: copied.bytes,
            };
            ctx.append(vec![record], super::journal::AfterJournal::Nothing);
            self.item_back(ctx, nodes, &copied.item);
        }
    }

    /// A node short of object memory asks to drop its copy of an item: allowed when
    /// another live node holds it, and the asker is no holder from then on (readers
    /// are sent elsewhere). Asks are answered one at a time, so two nodes holding the
    /// last two copies cannot both drop theirs. Not journaled: a resumed root that
    /// still counts the node as a holder finds the copy gone when it asks, and asks
    /// the next holder, as for any copy a holder cannot give.
    pub(super) fn on_drop_copy(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        asked: saker_wire::DropCopy,
    ) {
        if !nodes.is_live(asked.node, link) {
            return;
        }
        let allowed = match self.items.get_mut(&asked.item) {
            Some(item)
                if item.holders.contains(&asked.node)
                    && item
                        .holders
                        .iter()
                        .any(|&holder| holder != asked.node && nodes.contains(holder)) =>
            {
                item.holders.retain(|&holder| holder != asked.node);
                true
            }
            _ => false,
        };
        if allowed {
            self.dropped.insert((asked.item.clone(), asked.node));
            // Its readers prefer where the item still is.
            self.prefer_readers_of(ctx, &asked.item);
        }
        tracing::debug!(node = %asked.node, item = %asked.item, allowed, "a copy asked to be dropped");
        let answer = ToAgent::CopyDrop(saker_wire::CopyDrop {
            item: asked.item,
            allowed,
        });
        nodes.answer(ctx, link, asked.node, &answer);
    }

    /// The item frames of an agent (copied out: they are few, or data to pass on).
    pub(super) fn on_item_frame(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        link: LinkId,
        route: u32,
        message: &ArchivedFromAgent,
    ) {
        use rkyv::rancor::Error;
        match message {
            ArchivedFromAgent::ItemsWritten(written) => {
                match rkyv::deserialize::<ItemsWritten, Error>(written) {
                    Ok(written) if written.node.0 == route => {
                        self.on_items_written(ctx, nodes, link, written)
                    }
                    Ok(_) => tracing::error!(route, "items written routed from another node"),
                    Err(error) => tracing::error!(%error, route, "unreadable items written"),
                }
            }
            ArchivedFromAgent::ItemRead(read) => match rkyv::deserialize::<ItemRead, Error>(read) {
                Ok(read) if read.reader.0 == route => self.on_item_read(ctx, nodes, link, read),
                Ok(_) => tracing::error!(route, "item read routed from another node"),
                Err(error) => tracing::error!(%error, route, "unreadable item read"),
            },
            ArchivedFromAgent::ItemWhere(asked) => {
                match rkyv::deserialize::<ItemWhere, Error>(asked) {
                    Ok(asked) if asked.reader.0 == route => {
                        self.on_item_where(ctx, nodes, link, asked)
                    }
                    Ok(_) => tracing::error!(route, "item where routed from another node"),
                    Err(error) => tracing::error!(%error, route, "unreadable item where"),
                }
            }
            ArchivedFromAgent::ItemCopied(copied) => {
                match rkyv::deserialize::<ItemCopied, Error>(copied) {
                    Ok(copied) if copied.node.0 == route => {
                        self.on_item_copied(ctx, nodes, link, copied)
                    }
                    Ok(_) => tracing::error!(route, "item copied routed from another node"),
                    Err(error) => tracing::error!(%error, route, "unreadable item copied"),
                }
            }
            ArchivedFromAgent::DropCopy(asked) => {
                match rkyv::deserialize::<saker_wire::DropCopy, Error>(asked) {
                    Ok(asked) if asked.node.0 == route => {
                        self.on_drop_copy(ctx, nodes, link, asked)
                    }
                    Ok(_) => tracing::error!(route, "drop copy routed from another node"),
                    Err(error) => tracing::error!(%error, route, "unreadable drop copy"),
                }
            }
            ArchivedFromAgent::ItemData(data) => match rkyv::deserialize::<ItemData, Error>(data) {
                Ok(data) if nodes.is_live(NodeId(route), link) => {
                    self.on_item_data(ctx, nodes, NodeId(route), data)
                }
                Ok(_) => {}
                Err(error) => tracing::error!(%error, route, "unreadable item data"),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
