//! The node's object store, the shell's side: objects kept in a shared-memory
//! directory up to a bound (`--object-memory`), the least recently used moved to the
//! scratch directory past it, none moved while an attempt here reads it. What moves
//! and when is the pure [`Store`]'s (`board/objects.rs`); this feeds it what happened
//! to the files and carries out its effects.
//!
//! Objects reach memory three ways: fetched here (the agent knows at once), made by an
//! attempt here (known when it ends), or put by a client on the node (the agent does
//! not hear of a put: it finds the file when it looks, every [`LOOK_EVERY`] and before
//! an attempt that reads it starts). So the bound can be passed for up to that long;
//! the filesystem's own size is the hard limit, and a client whose put does not fit
//! there writes it to the scratch instead.
//!
//! A copy fetched here (a *replica*) goes first when memory is short, but only once
//! the root says another live node holds it ([`ObjectStore::take_said`] gives the
//! asks to send, [`ObjectStore::drop_answered`] takes the answers); a copy the root
//! does not let go, and every other copy, moves to the scratch, never dropped. A move
//! copies the file to the scratch, then removes it from memory, so readers (who look
//! in memory first) always find it; one that mapped the memory copy keeps its pages
//! until it lets go.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ractor::ActorRef;
use saker_wire::messages::{AttemptId, ObjectId};

use super::AgentMsg;
use crate::board::{Role, Store, StoreEffect, StoreUsage, Tier};
use crate::items::{ItemDirs, is_object};

/// How often the agent looks for objects clients put in its memory.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// See the module doc.
#[derive(Debug)]
pub(crate) struct ObjectStore {
    store: Store,
    bound: u64,
    memory: PathBuf,
    scratch: PathBuf,
    /// The objects each running attempt reads, pinned for it.
    pins: HashMap<AttemptId, Vec<ObjectId>>,
    /// The thread that moves objects, one after another, and tells the agent; none:
    /// moves are made at once, on the caller's thread (tests).
    mover: Option<std::sync::mpsc::Sender<Move>>,
    /// The memory directory's modification time at the last listing, and when that
    /// listing was: unchanged, and listed well after it, nothing was put or removed
    /// there since (a look is then a stat, not a listing).
    listed: Option<(SystemTime, SystemTime)>,
    /// Replicas the root is to be asked about ([`crate::board::StoreEffect::AskDrop`]).
    asks: Vec<String>,
    /// Replicas the root let go that stay (read here now): it must hear of them again.
    kept: Vec<String>,
}

/// An object to move: its id, from where, to where.
type Move = (ObjectId, PathBuf, PathBuf);

/// A move to the scratch has ended (on the mover's thread).
#[derive(Debug)]
pub struct Spilled {
    pub id: ObjectId,
    pub result: std::io::Result<()>,
}

impl ObjectStore {
    /// A store of at most `bound` bytes in `dirs.memory` (none: no store).
    pub(crate) fn new(
        dirs: &ItemDirs,
        bound: u64,
        agent: Option<ActorRef<AgentMsg>>,
    ) -> Option<ObjectStore> {
        let memory = dirs.memory.clone()?;
        Some(ObjectStore {
            store: Store::new(bound),
            bound,
            memory,
            scratch: dirs.scratch.clone(),
            pins: HashMap::new(),
            mover: agent.map(start_mover),
            listed: None,
            asks: Vec::new(),
            kept: Vec::new(),
        })
    }

    pub(crate) fn usage(&self) -> StoreUsage {
        self.store.usage()
    }

    /// The most bytes it keeps in memory.
    pub(crate) fn bound(&self) -> u64 {
        self.bound
    }

    /// Looks at the memory directory: objects put there since the last look are
    /// counted in, and those gone from it (a client removed a call's arguments)
    /// counted out.
    pub(crate) fn look(&mut self) {
        let modified = std::fs::metadata(&self.memory).and_then(|meta| meta.modified());
        // A change in the same tick of the filesystem's clock as a listing leaves the
        // time as it was: a listing soon after a change does not count.
        let grain = Duration::from_secs(1);
        if let (Ok(modified), Some((then, listed_at))) = (&modified, self.listed)
            && *modified == then
            && listed_at
                .duration_since(then)
                .is_ok_and(|after| after > grain)
        {
            return;
        }
        self.listed = modified.ok().map(|modified| (modified, SystemTime::now()));
        let Ok(entries) = std::fs::read_dir(&self.memory) else {
            return;
        };
        let mut present = std::collections::HashSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(object_id) else {
                continue;
            };
            present.insert(id);
            if self.store.tier_of(id).is_none()
                && let Ok(meta) = entry.metadata()
                && meta.is_file()
            {
                self.admit(id, meta.len());
            }
        }
        for id in self.store.settled_in_memory() {
            if !present.contains(&id) {
                let effects = self.store.free(id);
                self.carry(effects);
            }
        }
    }

    /// `item` is whole in memory here now, made by an attempt here.
    pub(crate) fn arrived(&mut self, item: &str) {
        self.arrived_as(item, Role::Primary);
    }

    /// `item` is whole in memory here now, fetched from another node: a replica.
    pub(crate) fn fetched(&mut self, item: &str) {
        self.arrived_as(item, Role::Replica);
    }

    fn arrived_as(&mut self, item: &str, role: Role) {
        let Some(id) = object_id(item) else {
            return;
        };
        if let Ok(meta) = std::fs::metadata(self.memory.join(item)) {
            self.admit_as(id, meta.len(), role);
        }
    }

    fn admit(&mut self, id: ObjectId, size: u64) {
        self.admit_as(id, size, Role::Primary);
    }

    fn admit_as(&mut self, id: ObjectId, size: u64, role: Role) {
        match self.store.handle_admitted(id, size, role, Tier::Memory) {
            Ok(effects) => self.carry(effects),
            Err(error) => tracing::warn!(%error, "an object in memory is not counted"),
        }
    }

    /// `attempt` starts and reads `reads`: the objects among them stay where they are
    /// until it ends.
    pub(crate) fn pin(&mut self, attempt: AttemptId, reads: &[String]) {
        let mut pinned = Vec::new();
        for item in reads {
            let Some(id) = object_id(item) else {
                continue;
            };
            if self.store.tier_of(id).is_none() {
                // Put by a client since the last look.
                self.arrived(item);
            }
            if self.store.pin(id).is_ok() {
                pinned.push(id);
            }
        }
        if !pinned.is_empty() {
            self.pins.insert(attempt, pinned);
        }
    }

    /// `attempt` has ended (or never started): its objects may move again.
    pub(crate) fn unpin(&mut self, attempt: AttemptId) {
        for id in self.pins.remove(&attempt).unwrap_or_default() {
            if let Ok(effects) = self.store.unpin(id) {
                self.carry(effects);
            }
        }
    }

    /// The root freed `items` (their files are removed already).
    pub(crate) fn freed(&mut self, items: &[String]) {
        for id in items.iter().filter_map(|item| object_id(item)) {
            let effects = self.store.free(id);
            self.carry(effects);
        }
    }

    /// The root's answer about dropping the replica `item`.
    pub(crate) fn drop_answered(&mut self, item: &str, allowed: bool) {
        if let Some(id) = object_id(item) {
            let effects = self.store.handle_drop_answer(id, allowed);
            self.carry(effects);
        }
    }

    /// What the root must hear: the replicas to ask about dropping, and those it let
    /// go that stay here after all (to say as copies again).
    pub(crate) fn take_said(&mut self) -> (Vec<String>, Vec<String>) {
        (
            std::mem::take(&mut self.asks),
            std::mem::take(&mut self.kept),
        )
    }

    /// A move this store started has ended.
    pub(crate) fn spilled(&mut self, spilled: Spilled) {
        let Spilled { id, result } = spilled;
        let effects = match result {
            Ok(()) => self.store.handle_spilled(id),
            Err(error) => {
                tracing::warn!(object = %id, %error,
                    "cannot move an object out of memory; it stays there");
                self.store.handle_spill_failed(id)
            }
        };
        self.carry(effects);
    }

    fn carry(&mut self, effects: Vec<StoreEffect>) {
        for effect in effects {
            match effect {
                StoreEffect::Spill { id, size } => {
                    tracing::debug!(object = %id, size, "moving an object out of memory");
                    let name = format!("obj-{id}");
                    let (from, to) = (self.memory.join(&name), self.scratch.join(&name));
                    let queued = match &self.mover {
                        Some(mover) => mover.send((id, from, to)).map_err(|error| error.0),
                        None => Err((id, from, to)),
                    };
                    if let Err((id, from, to)) = queued {
                        let result = spill(&from, &to);
                        self.spilled(Spilled { id, result });
                    }
                }
                StoreEffect::DropMemory { id } => {
                    remove(&self.memory.join(format!("obj-{id}")));
                }
                StoreEffect::AskDrop { id } => self.asks.push(format!("obj-{id}")),
                StoreEffect::Kept { id } => self.kept.push(format!("obj-{id}")),
                StoreEffect::Drop {
                    id, memory, disk, ..
                } => {
                    let name = format!("obj-{id}");
                    if memory {
                        remove(&self.memory.join(&name));
                    }
                    if disk {
                        remove(&self.scratch.join(&name));
                    }
                }
            }
        }
    }
}

/// A thread that moves objects one after another (a disk takes one stream best, and
/// many moves at once must not mean many threads), telling `agent` of each; it ends
/// with its store.
fn start_mover(agent: ActorRef<AgentMsg>) -> std::sync::mpsc::Sender<Move> {
    let (moves, queue) = std::sync::mpsc::channel::<Move>();
    let started = std::thread::Builder::new()
        .name("saker-object-mover".into())
        .spawn(move || {
            for (id, from, to) in queue {
                let result = spill(&from, &to);
                let _ = agent.send_message(AgentMsg::Spilled(Spilled { id, result }));
            }
        });
    if let Err(error) = started {
        // Moves are then made on the agent's thread (the sender's end is dropped).
        tracing::warn!(%error, "no thread to move objects out of memory");
    }
    moves
}

/// The object an item name stands for, if it is one (`obj-` and 32 hex digits).
fn object_id(item: &str) -> Option<ObjectId> {
    let digits = item.strip_prefix("obj-").filter(|_| is_object(item))?;
    ObjectId::parse(digits).filter(|_| digits.len() == 32)
}

/// Copies `from` to `to` whole (beside it, then renamed into place).
fn spill(from: &Path, to: &Path) -> std::io::Result<()> {
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let part = to.with_file_name(format!(".{name}.spill-{}", std::process::id()));
    let copied = std::fs::copy(from, &part).and_then(|_| std::fs::rename(&part, to));
    if copied.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    copied
}

fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(path = %path.display(), %error, "cannot remove an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB4: usize = 4096;

    struct Dirs {
        _root: tempfile::TempDir,
        memory: PathBuf,
        scratch: PathBuf,
    }

    fn dirs() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        let (memory, scratch) = (root.path().join("memory"), root.path().join("scratch"));
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::create_dir_all(&scratch).unwrap();
        Dirs {
            _root: root,
            memory,
            scratch,
        }
    }

    /// Moves run on the test's thread (no agent to tell).
    fn store(dirs: &Dirs, bound: u64) -> ObjectStore {
        let item_dirs = ItemDirs {
            scratch: dirs.scratch.clone(),
            memory: Some(dirs.memory.clone()),
        };
        ObjectStore::new(&item_dirs, bound, None).unwrap()
    }

    fn name(n: u128) -> String {
        format!("obj-{}", ObjectId(n))
    }

    fn put(dirs: &Dirs, n: u128) {
        std::fs::write(dirs.memory.join(name(n)), vec![n as u8; KIB4]).unwrap();
    }

    fn where_is(dirs: &Dirs, n: u128) -> (bool, bool) {
        (
            dirs.memory.join(name(n)).is_file(),
            dirs.scratch.join(name(n)).is_file(),
        )
    }

    /// Objects past the bound move to the scratch, least recently used first, intact;
    /// one an attempt reads stays until it ends; files that are not objects are left.
    #[test]
    fn the_least_recently_used_move_to_the_scratch_and_pinned_ones_stay() {
        let dirs = dirs();
        let mut store = store(&dirs, 2 * KIB4 as u64);
        put(&dirs, 1);
        put(&dirs, 2);
        std::fs::write(dirs.memory.join(".obj-x.part-0"), b"partial").unwrap();
        std::fs::write(dirs.memory.join("obj-123"), b"not an id").unwrap();
        store.look();
        assert_eq!(
            store.usage().memory_bytes,
            2 * KIB4 as u64,
            "within the bound"
        );
        // Object 1 is read by an attempt: it stays, and 2 moves when 3 comes.
        store.pin(AttemptId(7), &[name(1), "plain-item".into()]);
        put(&dirs, 3);
        store.look();
        assert_eq!(where_is(&dirs, 1), (true, false), "pinned");
        assert_eq!(where_is(&dirs, 2), (false, true), "moved");
        assert_eq!(where_is(&dirs, 3), (true, false));
        assert_eq!(
            std::fs::read(dirs.scratch.join(name(2))).unwrap(),
            vec![2u8; KIB4],
            "moved whole"
        );
        // A fourth: nothing unpinned is left to move but itself.
        put(&dirs, 4);
        store.look();
        assert_eq!(where_is(&dirs, 1), (true, false), "still pinned");
        assert_eq!(where_is(&dirs, 3), (false, true));
        // The attempt ends: 1 is the oldest unpinned now, and moves.
        store.unpin(AttemptId(7));
        assert_eq!(where_is(&dirs, 1), (true, false), "fits again: stays");
        put(&dirs, 5);
        store.look();
        assert_eq!(where_is(&dirs, 1), (false, true), "least recently used");
        assert_eq!(where_is(&dirs, 4), (true, false));
        assert_eq!(where_is(&dirs, 5), (true, false));
        let usage = store.usage();
        assert_eq!((usage.objects, usage.spills), (5, 3));
        assert_eq!(usage.memory_bytes, 2 * KIB4 as u64);
        assert_eq!(usage.disk_bytes, 3 * KIB4 as u64);
        assert!(dirs.memory.join(".obj-x.part-0").is_file());
        assert!(dirs.memory.join("obj-123").is_file());
    }

    /// A client that removes an object (a call's arguments, once the call is done)
    /// frees its room; the root freeing one removes every copy.
    #[test]
    fn objects_removed_or_freed_are_counted_out() {
        let dirs = dirs();
        let mut store = store(&dirs, 2 * KIB4 as u64);
        put(&dirs, 1);
        put(&dirs, 2);
        store.look();
        std::fs::remove_file(dirs.memory.join(name(1))).unwrap();
        store.look();
        assert_eq!(store.usage().objects, 1);
        put(&dirs, 3);
        store.look();
        assert_eq!(
            where_is(&dirs, 2),
            (true, false),
            "room enough: nothing moved"
        );
        put(&dirs, 4);
        store.look();
        assert_eq!(where_is(&dirs, 2), (false, true));
        store.freed(&[name(2), name(3), "plain-item".into()]);
        assert_eq!(where_is(&dirs, 2), (false, false));
        assert_eq!(where_is(&dirs, 3), (false, false));
        assert_eq!(store.usage().objects, 1);
    }

    /// A look at a directory unchanged since a listing well after its last change is
    /// a stat: what was listed stands; a change is listed at the next look.
    #[test]
    fn a_quiet_memory_is_not_listed_again() {
        let dirs = dirs();
        let mut store = store(&dirs, 8 * KIB4 as u64);
        let set_modified = |at: SystemTime| {
            std::fs::File::open(&dirs.memory)
                .unwrap()
                .set_modified(at)
                .unwrap();
        };
        let past = SystemTime::now() - Duration::from_secs(60);
        put(&dirs, 1);
        set_modified(past);
        store.look();
        assert_eq!(store.usage().objects, 1);
        // Planted with the time left as it was: not seen.
        put(&dirs, 2);
        set_modified(past);
        store.look();
        assert_eq!(store.usage().objects, 1, "not listed again");
        set_modified(SystemTime::now());
        store.look();
        assert_eq!(store.usage().objects, 2, "a change is listed");
    }

    /// A copy fetched here goes first when memory is short, once the root lets it:
    /// the file is removed then, not before; a copy the root keeps moves to the
    /// scratch; one let go while an attempt reads it stays, and is said again.
    #[test]
    fn a_fetched_copy_is_dropped_only_when_the_root_lets_it() {
        let dirs = dirs();
        let mut store = store(&dirs, 2 * KIB4 as u64);
        put(&dirs, 1);
        store.fetched(&name(1));
        put(&dirs, 2);
        store.fetched(&name(2));
        assert_eq!(store.take_said(), (vec![], vec![]));
        put(&dirs, 3);
        store.look();
        assert_eq!(store.take_said(), (vec![name(1)], vec![]), "asked");
        assert_eq!(where_is(&dirs, 1), (true, false), "kept until answered");
        store.drop_answered(&name(1), true);
        assert_eq!(where_is(&dirs, 1), (false, false), "dropped");
        assert_eq!(store.usage().evictions, 1);

        // Refused (the last copy): moved to the scratch instead.
        put(&dirs, 4);
        store.look();
        assert_eq!(store.take_said(), (vec![name(2)], vec![]));
        store.drop_answered(&name(2), false);
        assert_eq!(where_is(&dirs, 2), (false, true), "moved, not dropped");

        // Let go while read here: it stays, and the root hears of it again.
        put(&dirs, 5);
        store.fetched(&name(5));
        put(&dirs, 6);
        store.look();
        let (asks, _) = store.take_said();
        assert_eq!(asks, [name(5)]);
        store.pin(AttemptId(9), &[name(5)]);
        store.drop_answered(&name(5), true);
        assert_eq!(where_is(&dirs, 5), (true, false));
        assert_eq!(store.take_said(), (vec![], vec![name(5)]));
    }

    /// A move that cannot be written (no scratch directory: a full or lost disk)
    /// leaves the object in memory, whole, and it is not tried again.
    #[test]
    fn an_object_that_cannot_move_stays_in_memory() {
        let dirs = dirs();
        let mut store = store(&dirs, KIB4 as u64);
        std::fs::remove_dir(&dirs.scratch).unwrap();
        put(&dirs, 1);
        put(&dirs, 2);
        store.look();
        assert_eq!(where_is(&dirs, 1), (true, false), "kept");
        assert_eq!(where_is(&dirs, 2), (true, false), "kept");
        let usage = store.usage();
        assert!(usage.spill_failures >= 1, "{usage:?}");
        assert_eq!(usage.spills, 0);
        let leftovers = std::fs::read_dir(&dirs.memory).unwrap().count();
        assert_eq!(leftovers, 2, "no partial copies left");
    }
}
