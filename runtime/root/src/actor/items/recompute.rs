//! Lost items made again. An item no live node holds any more (its holders were lost,
//! or could not read it) is made again by running the job that wrote it once more, if
//! that job may run twice: an idempotent task, or a function task. Its readers wait
//! meanwhile, held in the core (`Core::handle_hold`): their attempts not started yet
//! are asked back, so no node's credit is kept by work that cannot start and the job
//! that makes the item finds a place. A reader's request for the item waits too
//! (parked) and is answered once the item is back, or once it cannot be: then with the
//! reason, and its attempt fails as it would have.
//!
//! The root submits the job (`RootState::recompute_wanted`): the writer's request as
//! it was, without its dependencies, time or node, journaled as any submission and
//! marked by a `recompute` record, so that a resumed root knows what it waits for.
//! Its writer's own attempt lost with the item (an unfinished writer) is replayed by
//! the core anyway: its readers wait for it the same way. A job that made nothing
//! ends the wait with the reason; such an item is not made again (until a job writes
//! it).

use std::collections::HashMap;
use std::sync::Arc;

use saker_actors::link::LinkId;
use saker_core::JobId;
use saker_wire::{ItemRead, ItemWhere};

use super::ItemTable;
use crate::actor::ctx::Ctx;
use crate::actor::nodes::Nodes;
use saker_client::spec::JobRequest;

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct Recomputes {
    /// The job that wrote each item last (its submission names it in `writes`).
    writers: HashMap<String, JobId>,
    /// The requests of those that may run twice: how to make their items again.
    recipes: HashMap<JobId, Arc<JobRequest>>,
    /// Items being made again, and the job making them.
    running: HashMap<String, JobId>,
    /// Items to make again, for the root to submit their writer's request.
    wanted: Vec<String>,
    /// Requests for items being made again, answered when they are back.
    parked: HashMap<String, Vec<Parked>>,
    /// Items that could not be made again, and why.
    failed: HashMap<String, String>,
    /// Jobs submitted to make items again, since this root started.
    pub(super) submitted: u64,
}

/// A reader's request waiting for its item.
#[derive(Debug)]
pub(super) enum Parked {
    Where(LinkId, ItemWhere),
    Read(LinkId, ItemRead),
}

/// Items for the root to make again: job `of` wrote them, its request runs again.
#[derive(Debug, Clone)]
pub(crate) struct Recompute {
    pub of: JobId,
    pub request: Arc<JobRequest>,
    pub items: Vec<String>,
}

/// What a job that writes items needs kept to run again: its request, copied only when
/// it may run twice.
pub(super) fn recipe_of(request: &JobRequest) -> Option<Arc<JobRequest>> {
    request
        .spec
        .may_remake_items()
        .then(|| Arc::new(request.clone()))
}

impl Recomputes {
    pub(super) fn is_running(&self, item: &str) -> bool {
        self.running.contains_key(item)
    }

    pub(super) fn park(&mut self, item: String, parked: Parked) {
        self.parked.entry(item).or_default().push(parked);
    }

    /// `item` is freed: it is not made again.
    pub(super) fn forget(&mut self, item: &str) {
        self.failed.remove(item);
        if let Some(writer) = self.writers.remove(item)
            && !self.writers.values().any(|other| *other == writer)
        {
            self.recipes.remove(&writer);
        }
    }
}

impl ItemTable {
    /// Job `job` writes the items its `request` names: it is their writer from now
    /// on, and its request is kept if it may run twice.
    pub(in crate::actor) fn note_request_writes(&mut self, job: JobId, request: &JobRequest) {
        if !request.spec.writes.is_empty() {
            self.note_writes(job, &request.spec.writes, recipe_of(request));
        }
    }

    /// Job `job` writes `writes`; `recipe`: its request, when it may run again.
    pub(super) fn note_writes(
        &mut self,
        job: JobId,
        writes: &[String],
        recipe: Option<Arc<JobRequest>>,
    ) {
        let recomputes = &mut self.recomputes;
        for item in writes {
            recomputes.failed.remove(item);
            if let Some(old) = recomputes.writers.insert(item.clone(), job)
                && old != job
                && !recomputes.writers.values().any(|writer| *writer == old)
            {
                recomputes.recipes.remove(&old);
            }
        }
        if let Some(recipe) = recipe {
            recomputes.recipes.insert(job, recipe);
        }
    }

    /// `item` has no live holder: is it being made again, or is it now to be? Its
    /// readers are held meanwhile. False: it cannot be (never written here, no writer
    /// known, its writer may not run twice, or making it failed).
    pub(super) fn make_again(&mut self, ctx: &mut Ctx, item: &str) -> bool {
        let recomputes = &mut self.recomputes;
        if recomputes.running.contains_key(item) || recomputes.wanted.iter().any(|w| w == item) {
            return true;
        }
        if recomputes.failed.contains_key(item) || !self.items.contains_key(item) {
            return false;
        }
        let Some(&writer) = recomputes.writers.get(item) else {
            return false;
        };
        let unfinished = ctx
            .core
            .job_counts(writer)
            .is_some_and(|counts| !counts.is_finished());
        if unfinished {
            // Its attempt was lost with the item: the core replays it.
            recomputes.running.insert(item.to_owned(), writer);
        } else if recomputes.recipes.contains_key(&writer) {
            recomputes.wanted.push(item.to_owned());
        } else {
            return false;
        }
        tracing::warn!(item, %writer, "data item lost with its holders; it is made again");
        let readers = self.readers.get(item).cloned().unwrap_or_default();
        for job in readers {
            self.hold(ctx, job);
        }
        true
    }

    /// Whether items are to be made again (see [`Self::take_wanted`]).
    pub(in crate::actor) fn wants_recomputes(&self) -> bool {
        !self.recomputes.wanted.is_empty()
    }

    /// The items to make again, by the job that wrote them.
    pub(in crate::actor) fn take_wanted(&mut self) -> Vec<Recompute> {
        let recomputes = &mut self.recomputes;
        let mut by_writer: Vec<Recompute> = Vec::new();
        for item in std::mem::take(&mut recomputes.wanted) {
            let writer = recomputes.writers[&item];
            match by_writer.iter_mut().find(|want| want.of == writer) {
                Some(want) => want.items.push(item),
                None => by_writer.push(Recompute {
                    of: writer,
                    request: Arc::clone(&recomputes.recipes[&writer]),
                    items: vec![item],
                }),
            }
        }
        by_writer
    }

    /// Job `job` was submitted to make `recompute`'s items again.
    pub(in crate::actor) fn recomputing(&mut self, recompute: &Recompute, job: JobId) {
        self.recomputes.submitted += 1;
        for item in &recompute.items {
            self.recomputes.running.insert(item.clone(), job);
        }
    }

    /// A resumed root's job `job` that makes `items` again: if it has not ended, its
    /// items' readers wait for it.
    pub(super) fn resume_recompute(&mut self, ctx: &mut Ctx, job: JobId, items: Vec<String>) {
        let unfinished = ctx
            .core
            .job_counts(job)
            .is_some_and(|counts| !counts.is_finished());
        if !unfinished {
            return;
        }
        for item in items {
            if self.recomputes.writers.get(&item) != Some(&job) {
                continue;
            }
            self.recomputes.running.insert(item.clone(), job);
            for reader in self.readers.get(&item).cloned().unwrap_or_default() {
                self.hold(ctx, reader);
            }
        }
    }

    /// The items of `recompute` cannot be made again: its readers fail with `reason`.
    pub(in crate::actor) fn recompute_failed(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        recompute: &Recompute,
        reason: &str,
    ) {
        for item in &recompute.items {
            self.give_up(ctx, nodes, item, reason.to_owned());
        }
    }

    /// Job `job` ended: an item it was to make and did not fails its readers.
    pub(in crate::actor) fn recompute_ended(&mut self, ctx: &mut Ctx, nodes: &Nodes, job: JobId) {
        let items: Vec<String> = self
            .recomputes
            .running
            .iter()
            .filter(|(_, making)| **making == job)
            .map(|(item, _)| item.clone())
            .collect();
        for item in items {
            let reason = format!(
                "no live node holds it, and job {job} that was to make it again ended without it"
            );
            self.give_up(ctx, nodes, &item, reason);
        }
    }

    fn give_up(&mut self, ctx: &mut Ctx, nodes: &Nodes, item: &str, reason: String) {
        tracing::warn!(item, %reason, "data item lost for good");
        self.recomputes.running.remove(item);
        self.recomputes.failed.insert(item.to_owned(), reason);
        self.release_readers(ctx, nodes, item);
    }

    /// `item` has a live holder again: its readers go on.
    pub(super) fn item_back(&mut self, ctx: &mut Ctx, nodes: &Nodes, item: &str) {
        self.recomputes.failed.remove(item);
        if self.recomputes.running.remove(item).is_some() {
            tracing::info!(item, "data item made again");
            self.release_readers(ctx, nodes, item);
        }
    }

    /// Releases the readers of `item` that wait for no other item, and answers the
    /// requests parked for it.
    fn release_readers(&mut self, ctx: &mut Ctx, nodes: &Nodes, item: &str) {
        let now = ctx.now();
        for job in self.readers.get(item).cloned().unwrap_or_default() {
            let waits = self
                .reads
                .get(&job)
                .is_some_and(|reads| reads.iter().any(|read| self.recomputes.is_running(read)));
            if !waits {
                ctx.core.handle_release(job, now);
            }
        }
        for parked in self.recomputes.parked.remove(item).unwrap_or_default() {
            match parked {
                Parked::Where(link, asked) => self.on_item_where(ctx, nodes, link, asked),
                Parked::Read(link, read) => self.on_item_read(ctx, nodes, link, read),
            }
        }
    }

    /// Holds `job` in the core while an item it reads is made again.
    pub(super) fn hold(&mut self, ctx: &mut Ctx, job: JobId) {
        let now = ctx.now();
        if let Err(error) = ctx.core.handle_hold(job, now) {
            tracing::debug!(%error, %job, "not held");
        }
    }

    /// Why readers of `item`, which no live node holds, fail.
    pub(super) fn lost_reason(&self, item: &str) -> String {
        if let Some(reason) = self.recomputes.failed.get(item) {
            return reason.clone();
        }
        match self.recomputes.writers.get(item) {
            Some(writer) if !self.recomputes.recipes.contains_key(writer) => format!(
                "no live node holds it, and job {writer} that wrote it may not run twice to make it again (it is not idempotent)"
            ),
            _ => "no live node holds it".to_owned(),
        }
    }
}
