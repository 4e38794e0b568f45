//! Data items, as bookkeeping: which items this node fetches, what of each is asked for
//! and in flight, which attempts wait for them, and what this node's attempts wrote.
//! The bytes are the shell's files ([`crate::items`]).
//!
//! An attempt whose job reads an item this node lacks is *staged*: it leaves the local
//! queue (keeping its credit, not a slot) while the item is pulled, chunk by chunk
//! ([`ItemRead`]), from its holders directly or through the root ([`ItemData`]): the
//! shell routes each read (`crate::transfer`) and says when the holders serve it
//! directly, which keeps more chunks in flight. Once the item is whole (and kept in place by the shell) the staged
//! attempts go back to the head of the queue. An item no node can give fails them as
//! their own failure, with the reason.

use std::collections::BTreeMap;
use std::path::PathBuf;

use saker_wire::messages::{AttemptId, NodeId, Outcome};
use saker_wire::{ITEM_CHUNK, ItemData, ItemRead, ItemWritten, ItemsWritten};

use super::{Board, Effect, Moment};
use crate::attempt::Queued;

/// Chunks of one item a reader keeps requested at once through the root (which holds
/// that many of each transfer).
const IN_FLIGHT: u32 = 4;

/// The same, from holders directly (nothing in between holds them). Measured with
/// `saker-perf --only fetch` (a 256 MiB item, 2 agents, this 2-vCPU VM, 2026-12-03):
/// 4 in flight moved 176 MiB/s, 16 moved 346 MiB/s, 32 no more; 8 reads of 4 MiB
/// did worse (272 MiB/s), with QUIC's stream windows at 4 MiB too.
const DIRECT_IN_FLIGHT: u32 = 16;

/// Why a data item could not be had, or was not written: the reason its attempts
/// fail with.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    /// The holder's own reason, as it gave it.
    #[error("data item {item:?}: {reason}")]
    Holder { item: String, reason: String },
    #[error("data item {item:?}: its holder's answers disagree")]
    Disagree { item: String },
    #[error("data item {item:?}: its holder sent no bytes")]
    NoBytes { item: String },
    #[error("data item {item:?}: cannot write {}", path.display())]
    Open {
        item: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("data item {item:?}: cannot write it here")]
    Write {
        item: String,
        #[source]
        source: std::io::Error,
    },
    #[error("data item {item:?}: could not keep it")]
    Keep {
        item: String,
        #[source]
        source: std::io::Error,
    },
    #[error("it exited 0 without writing data item {item:?} (a file in $SAKER_SCRATCH)")]
    NotWritten { item: String },
}

/// Bytes of an item that came from a holder directly, written in place by the shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemLanded {
    pub item: String,
    pub offset: u64,
    pub len: u64,
    pub total: u64,
}

/// See the module doc.
#[derive(Debug)]
pub(super) struct Fetches {
    node: NodeId,
    /// By item, in order.
    fetches: BTreeMap<String, Fetch>,
    next_request: u64,
    /// Requests to send up.
    pub(super) outbox: Vec<ItemRead>,
    /// What attempts wrote, to report before their results.
    pub(super) written: Vec<ItemsWritten>,
    /// Gang parts waiting for each item, by item.
    parts: BTreeMap<String, Vec<AttemptId>>,
}

#[derive(Debug)]
struct Fetch {
    /// The item's size, once the first answer said it.
    total: Option<u64>,
    /// The next byte to ask for.
    next_offset: u64,
    in_flight: u32,
    /// Requests it keeps in flight.
    window: u32,
    received: u64,
    /// Attempts waiting for the item.
    waiting: Vec<Queued>,
}

/// What an answer, a write or a keep did to a fetch.
#[derive(Debug, PartialEq)]
pub(super) enum Received {
    /// More to come (or news of no fetch in progress).
    Pending,
    /// The answer is good: the shell writes its bytes.
    Write,
    /// The item is whole: the shell keeps it.
    Keep,
    /// The item is here: these attempts may start.
    Done(Vec<Queued>),
    /// The item cannot be had: these attempts fail with the reason.
    Failed(Vec<Queued>, String),
}

impl Fetches {
    pub(super) fn new(node: u32) -> Fetches {
        Fetches {
            node: NodeId(node),
            fetches: BTreeMap::new(),
            next_request: 1,
            outbox: Vec::new(),
            written: Vec::new(),
            parts: BTreeMap::new(),
        }
    }

    /// Gang part `attempt` waits for `item`, which is fetched if it is not being
    /// already.
    pub(super) fn stage_part(&mut self, item: &str, attempt: AttemptId) {
        self.parts.entry(item.to_owned()).or_default().push(attempt);
        if !self.fetches.contains_key(item) {
            self.begin(item, Vec::new());
        }
    }

    /// The gang parts that waited for `item` (its fetch has ended).
    pub(super) fn take_parts(&mut self, item: &str) -> Vec<AttemptId> {
        self.parts.remove(item).unwrap_or_default()
    }

    /// `assignment` waits for `item` from `now_us` on, which is fetched if it is not
    /// being already.
    pub(super) fn stage(&mut self, item: &str, mut assignment: Queued, now_us: u64) {
        assignment.staged_us = now_us;
        if let Some(fetch) = self.fetches.get_mut(item) {
            fetch.waiting.push(assignment);
            return;
        }
        self.begin(item, vec![assignment]);
    }

    /// A fetch of `item` begins, for the attempts `waiting`.
    fn begin(&mut self, item: &str, waiting: Vec<Queued>) {
        let mut fetch = Fetch {
            total: None,
            next_offset: 0,
            in_flight: 0,
            window: IN_FLIGHT,
            received: 0,
            waiting,
        };
        // One chunk first: its answer tells the size.
        self.request(item, &mut fetch, 1);
        self.fetches.insert(item.to_owned(), fetch);
    }

    /// Takes a staged attempt back (cancelled, or given back), if it is staged.
    pub(super) fn unstage(&mut self, attempt: AttemptId) -> Option<Queued> {
        for fetch in self.fetches.values_mut() {
            if let Some(at) = fetch.waiting.iter().position(|a| a.attempt == attempt) {
                return Some(fetch.waiting.remove(at));
            }
        }
        None
    }

    /// Drops every fetch and what waits for it (the root replays those attempts).
    /// Returns the items whose partial files are to go.
    pub(super) fn stop_all(&mut self) -> Vec<String> {
        self.outbox.clear();
        self.parts.clear();
        std::mem::take(&mut self.fetches).into_keys().collect()
    }

    /// Queues requests for `fetch` of `item` until `window` are in flight or all of it
    /// is asked for.
    fn request(&mut self, item: &str, fetch: &mut Fetch, window: u32) {
        while fetch.in_flight < window {
            if fetch.total.is_some_and(|total| fetch.next_offset >= total) {
                return;
            }
            let len = match fetch.total {
                Some(total) => (total - fetch.next_offset).min(u64::from(ITEM_CHUNK)) as u32,
                None => ITEM_CHUNK,
            };
            self.outbox.push(ItemRead {
                item: item.to_owned(),
                reader: self.node,
                request: self.next_request,
                offset: fetch.next_offset,
                len,
            });
            self.next_request += 1;
            fetch.next_offset += u64::from(len);
            fetch.in_flight += 1;
        }
    }

    /// An answer to one of this node's requests: whether its bytes may be written.
    pub(super) fn receive(&mut self, data: &ItemData) -> Received {
        let len = data.data.len() as u64;
        self.received(
            &data.item,
            data.offset,
            len,
            data.total,
            data.error.as_deref(),
        )
    }

    /// An answer of `len` bytes at `offset` of an item of `total` bytes (or the
    /// holder's reason for none): whether they are good to write.
    fn received(
        &mut self,
        item: &str,
        offset: u64,
        len: u64,
        total: u64,
        error: Option<&str>,
    ) -> Received {
        let Some(fetch) = self.fetches.get_mut(item) else {
            return Received::Pending;
        };
        fetch.in_flight = fetch.in_flight.saturating_sub(1);
        let item = || item.to_owned();
        let bad = if let Some(reason) = error {
            Some(ItemError::Holder {
                item: item(),
                reason: reason.to_owned(),
            })
        } else if fetch.total.is_some_and(|known| known != total)
            || offset.saturating_add(len) > total
        {
            Some(ItemError::Disagree { item: item() })
        } else if len == 0 && total > 0 {
            Some(ItemError::NoBytes { item: item() })
        } else {
            None
        };
        if let Some(error) = bad {
            return self.fail(&item(), &error);
        }
        fetch.total = Some(total);
        Received::Write
    }

    /// `item` comes from holders directly: more of it is kept in flight.
    pub(super) fn direct(&mut self, item: &str) {
        if let Some(fetch) = self.fetches.get_mut(item) {
            fetch.window = DIRECT_IN_FLIGHT;
        }
    }

    /// The shell wrote `len` bytes of `item` (or could not).
    pub(super) fn written(
        &mut self,
        item: &str,
        len: u64,
        written: Result<(), ItemError>,
    ) -> Received {
        if let Err(error) = written {
            return self.fail(item, &error);
        }
        let Some(mut fetch) = self.fetches.remove(item) else {
            return Received::Pending;
        };
        fetch.received += len;
        let whole = fetch.total.is_some_and(|total| fetch.received >= total);
        if !whole {
            let window = fetch.window;
            self.request(item, &mut fetch, window);
        }
        self.fetches.insert(item.to_owned(), fetch);
        if whole {
            Received::Keep
        } else {
            Received::Pending
        }
    }

    /// The shell kept the whole `item` in place (or could not).
    pub(super) fn kept(&mut self, item: &str, kept: Result<(), ItemError>) -> Received {
        let Some(fetch) = self.fetches.remove(item) else {
            return Received::Pending;
        };
        match kept {
            Ok(()) => Received::Done(fetch.waiting),
            Err(error) => Received::Failed(fetch.waiting, crate::error_chain(&error)),
        }
    }

    fn fail(&mut self, item: &str, error: &ItemError) -> Received {
        let waiting = self
            .fetches
            .remove(item)
            .map(|fetch| fetch.waiting)
            .unwrap_or_default();
        Received::Failed(waiting, crate::error_chain(error))
    }

    /// Attempt `attempt` exited 0 and wrote `written` (or missed an item it was to
    /// write: its failure, said in `Err`).
    pub(super) fn note_written(
        &mut self,
        attempt: AttemptId,
        written: Result<Vec<ItemWritten>, ItemError>,
    ) -> Result<(), ItemError> {
        let items = written?;
        self.written.push(ItemsWritten {
            node: self.node,
            attempt,
            items,
        });
        Ok(())
    }

    /// Whether requests or written items wait to be sent up.
    pub(super) fn has_news(&self) -> bool {
        !self.outbox.is_empty() || !self.written.is_empty()
    }
}

impl Board {
    /// An answer to one of this node's item requests. Returns whether the shell is to
    /// write its bytes (then [`Board::handle_item_written`]); a bad answer fails what
    /// waits for the item, and one for no fetch in progress is dropped.
    pub fn handle_item_data(&mut self, data: &ItemData, now: Moment) -> bool {
        let received = self.fetches.receive(data);
        let write = received == Received::Write;
        self.after_fetch(&data.item, received, now);
        write
    }

    /// `len` bytes of `item` at `offset` (of `total`) came from a holder directly and
    /// are written already (a read whose bytes could not be written failed in the
    /// shell and went another way). Returns whether they are good (then the shell may
    /// relay them to other readers).
    pub fn handle_item_landed(&mut self, landed: &ItemLanded, now: Moment) -> bool {
        let ItemLanded {
            item,
            offset,
            len,
            total,
        } = landed;
        let received = self.fetches.received(item, *offset, *len, *total, None);
        if received != Received::Write {
            self.after_fetch(item, received, now);
            return false;
        }
        self.handle_item_written(item, *len, Ok(()), now);
        true
    }

    /// `item` comes from holders directly, not through the root: more of it may be
    /// in flight at once.
    pub fn handle_item_direct(&mut self, item: &str) {
        self.fetches.direct(item);
    }

    /// The shell wrote the `len` bytes of `item` the last answer carried, or could not.
    pub fn handle_item_written(
        &mut self,
        item: &str,
        len: u64,
        written: Result<(), ItemError>,
        now: Moment,
    ) {
        let received = self.fetches.written(item, len, written);
        self.after_fetch(item, received, now);
    }

    /// The shell kept the whole `item` in place ([`Effect::KeepItem`]), or could not:
    /// attempts waiting for it go back to the queue's head, or fail.
    pub fn handle_item_kept(&mut self, item: &str, kept: Result<(), ItemError>, now: Moment) {
        match self.fetches.kept(item, kept) {
            // What was written of it stays where it is, as it always did.
            Received::Failed(waiting, reason) => {
                self.fail_waiting(waiting, &reason, now);
                let parts = self.fetches.take_parts(item);
                self.parts_fetched(parts, Some(&reason), now);
            }
            received => self.after_fetch(item, received, now),
        }
    }

    fn after_fetch(&mut self, item: &str, received: Received, now: Moment) {
        match received {
            Received::Pending | Received::Write => {}
            Received::Keep => self.effects.push_back(Effect::KeepItem {
                item: item.to_owned(),
            }),
            Received::Done(ready) => {
                for mut assignment in ready.into_iter().rev() {
                    assignment.fetch_us += now.unix_us.saturating_sub(assignment.staged_us);
                    self.queue.push_front(assignment);
                }
                let parts = self.fetches.take_parts(item);
                self.parts_fetched(parts, None, now);
            }
            Received::Failed(waiting, reason) => {
                self.effects.push_back(Effect::DiscardItem {
                    item: item.to_owned(),
                });
                self.fail_waiting(waiting, &reason, now);
                let parts = self.fetches.take_parts(item);
                self.parts_fetched(parts, Some(&reason), now);
            }
        }
    }

    /// Attempts waiting for an item that cannot be had fail (their own failure: the
    /// reader cannot run without it anywhere).
    fn fail_waiting(&mut self, waiting: Vec<Queued>, reason: &str, now: Moment) {
        for assignment in waiting {
            let outcome = Outcome::SpawnFailed {
                reason: reason.to_owned(),
            };
            self.fail_unstarted(&assignment, outcome, now);
        }
    }
}
