//! The node's object store, as bookkeeping: which objects this node holds, in memory
//! (a shared-memory directory, bounded by `--object-memory`) or on its disk (the
//! node's scratch), which are pinned by the attempts that use them, and which move
//! when memory runs short. The bytes are the shell's files; this decides what happens
//! to them and says so as [`StoreEffect`]s.
//!
//! **Copies.** A *primary* copy is one the pilot counts on (put or produced here, or
//! promoted by the root when the other copies are gone): it is spilled to disk, never
//! dropped, when memory is short. A *replica* was fetched for a task here: when memory
//! is short it goes before any primary is spilled, but only once the root says
//! another live node holds it ([`StoreEffect::AskDrop`], then
//! [`Store::handle_drop_answer`]): the root answers one node at a time, so of two
//! nodes that hold the last two copies and ask at once, one keeps its copy, and a
//! refused replica becomes a primary (spilled, never dropped).
//!
//! **Order.** Least recently used first, among unpinned copies in memory: a pinned
//! object never moves. A copy being spilled stays readable in memory until the spill
//! is done; if an attempt pins it meanwhile, its memory copy is dropped only once
//! unpinned. A spill that fails leaves the object in memory, and it is not tried again
//! (the store stays over its bound rather than lose it).
//!
//! Deterministic: candidates are taken from an index ordered by last use, never by
//! iterating a hash map.

use std::collections::{BTreeMap, HashMap};

use saker_wire::messages::ObjectId;

/// Whether the pilot counts on this node's copy (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

/// Where an object's bytes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Memory,
    Disk,
}

/// What the shell does to the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEffect {
    /// Copy the object from memory to disk; then [`Store::handle_spilled`] or
    /// [`Store::handle_spill_failed`].
    Spill { id: ObjectId, size: u64 },
    /// Delete the memory copy: the disk copy is whole.
    DropMemory { id: ObjectId },
    /// Ask the root whether this replica may go (another live node must hold it);
    /// then [`Store::handle_drop_answer`]. Its memory counts as leaving meanwhile.
    AskDrop { id: ObjectId },
    /// The root let this replica go, but an attempt here reads it now: it stays, and
    /// the root must hear again that this node holds it.
    Kept { id: ObjectId },
    /// Delete every copy here. `evicted`: a replica made room (the root let it go).
    Drop {
        id: ObjectId,
        memory: bool,
        disk: bool,
        evicted: bool,
    },
}

/// Why the store refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("object {0} is not held on this node")]
    Unknown(ObjectId),
    #[error("object {id} is already held here with {held} bytes, not {size}")]
    SizeMismatch { id: ObjectId, held: u64, size: u64 },
}

/// What the store holds, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    pub objects: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub pinned: u64,
    pub spills: u64,
    pub spilled_bytes: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub spill_failures: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    role: Role,
    memory: bool,
    disk: bool,
    spilling: bool,
    /// The root is asked whether it may go (a replica).
    asking: bool,
    /// A spill of it failed: it stays in memory.
    stuck: bool,
    pins: u32,
    /// Freed by the root while pinned: dropped when the last pin goes.
    freed: bool,
    /// Its key in `by_use`.
    last_use: u64,
}

/// See the module doc.
#[derive(Debug)]
pub struct Store {
    memory_bound: u64,
    objects: HashMap<ObjectId, Entry>,
    /// Objects with a memory copy, by last use (oldest first).
    by_use: BTreeMap<u64, ObjectId>,
    uses: u64,
    /// Bytes of memory copies, and of those being spilled (soon released).
    memory_bytes: u64,
    leaving_bytes: u64,
    usage: StoreUsage,
}

impl Store {
    /// A store keeping at most `memory_bound` bytes in memory when it can.
    pub fn new(memory_bound: u64) -> Store {
        Store {
            memory_bound,
            objects: HashMap::new(),
            by_use: BTreeMap::new(),
            uses: 0,
            memory_bytes: 0,
            leaving_bytes: 0,
            usage: StoreUsage::default(),
        }
    }

    /// Where the bytes of a new object of `size` should be written: in memory when
    /// room can be made there by moving unpinned copies, else on disk.
    pub fn tier_for(&self, size: u64) -> Tier {
        let fixed: u64 = self
            .objects
            .values()
            .filter(|e| e.memory && (e.pins > 0 || e.stuck))
            .map(|e| e.size)
            .sum();
        if fixed.saturating_add(size) <= self.memory_bound {
            Tier::Memory
        } else {
            Tier::Disk
        }
    }

    /// An object whose bytes are now whole in `tier` here. Holding it already (a
    /// second put of the same id, a fetch that raced a put) is no change, unless the
    /// sizes differ.
    pub fn handle_admitted(
        &mut self,
        id: ObjectId,
        size: u64,
        role: Role,
        tier: Tier,
    ) -> Result<Vec<StoreEffect>, StoreError> {
        if let Some(entry) = self.objects.get(&id) {
            if entry.size != size {
                return Err(StoreError::SizeMismatch {
                    id,
                    held: entry.size,
                    size,
                });
            }
            if role == Role::Primary {
                self.objects.get_mut(&id).expect("held").role = Role::Primary;
            }
            self.touch(id);
            return Ok(Vec::new());
        }
        let memory = tier == Tier::Memory;
        self.uses += 1;
        self.objects.insert(
            id,
            Entry {
                size,
                role,
                memory,
                disk: !memory,
                spilling: false,
                asking: false,
                stuck: false,
                pins: 0,
                freed: false,
                last_use: self.uses,
            },
        );
        self.usage.objects += 1;
        if memory {
            self.memory_bytes += size;
            self.by_use.insert(self.uses, id);
        } else {
            self.usage.disk_bytes += size;
        }
        // A replica just fetched is for an attempt about to pin it: never evict it
        // in the same breath.
        Ok(self.rebalance(Some(id)))
    }

    /// An attempt uses the object: it stays where it is until unpinned. Answers the
    /// tier to read it from (memory while a memory copy exists).
    pub fn pin(&mut self, id: ObjectId) -> Result<Tier, StoreError> {
        let entry = self.objects.get_mut(&id).ok_or(StoreError::Unknown(id))?;
        entry.pins += 1;
        if entry.pins == 1 {
            self.usage.pinned += 1;
        }
        let tier = if entry.memory {
            Tier::Memory
        } else {
            Tier::Disk
        };
        self.touch(id);
        Ok(tier)
    }

    /// An attempt is done with the object.
    pub fn unpin(&mut self, id: ObjectId) -> Result<Vec<StoreEffect>, StoreError> {
        let entry = self.objects.get_mut(&id).ok_or(StoreError::Unknown(id))?;
        entry.pins = entry.pins.saturating_sub(1);
        if entry.pins > 0 {
            return Ok(Vec::new());
        }
        self.usage.pinned -= 1;
        if entry.freed {
            return Ok(vec![self.remove(id, false)]);
        }
        let mut effects = Vec::new();
        if entry.memory && entry.disk && !entry.spilling {
            // Spilled while pinned: the memory copy was kept for the reader.
            self.release_memory(id);
            effects.push(StoreEffect::DropMemory { id });
        }
        effects.extend(self.rebalance(None));
        Ok(effects)
    }

    /// Nobody needs the object any more: drop it now, or when its last pin goes.
    pub fn free(&mut self, id: ObjectId) -> Vec<StoreEffect> {
        let Some(entry) = self.objects.get_mut(&id) else {
            return Vec::new();
        };
        if entry.pins > 0 {
            entry.freed = true;
            return Vec::new();
        }
        vec![self.remove(id, false)]
    }

    /// The root's answer to an [`StoreEffect::AskDrop`]: `allowed`, the replica goes
    /// (or, read by an attempt now, stays: [`StoreEffect::Kept`]); refused, it is
    /// the copy the pilot counts on from now on, spilled when memory is short.
    pub fn handle_drop_answer(&mut self, id: ObjectId, allowed: bool) -> Vec<StoreEffect> {
        let Some(entry) = self.objects.get_mut(&id).filter(|entry| entry.asking) else {
            return Vec::new();
        };
        entry.asking = false;
        let (size, pinned) = (entry.size, entry.pins > 0);
        // Made or put here meanwhile: the pilot counts on it now.
        let primary = entry.role == Role::Primary;
        self.leaving_bytes -= size;
        if !allowed {
            entry.role = Role::Primary;
            return self.rebalance(None);
        }
        if pinned || primary {
            return vec![StoreEffect::Kept { id }];
        }
        self.usage.evictions += 1;
        self.usage.evicted_bytes += size;
        let mut effects = vec![self.remove(id, true)];
        effects.extend(self.rebalance(None));
        effects
    }

    /// The root counts on this copy now (the others are gone): spill it, never drop it.
    pub fn promote(&mut self, id: ObjectId) -> Result<(), StoreError> {
        let entry = self.objects.get_mut(&id).ok_or(StoreError::Unknown(id))?;
        entry.role = Role::Primary;
        Ok(())
    }

    /// A spill is whole on disk.
    pub fn handle_spilled(&mut self, id: ObjectId) -> Vec<StoreEffect> {
        let Some(entry) = self.objects.get_mut(&id) else {
            return Vec::new();
        };
        if !entry.spilling {
            return Vec::new();
        }
        entry.spilling = false;
        entry.disk = true;
        let (size, pinned) = (entry.size, entry.pins > 0);
        self.leaving_bytes -= size;
        self.usage.disk_bytes += size;
        self.usage.spills += 1;
        self.usage.spilled_bytes += size;
        if pinned {
            return Vec::new();
        }
        self.release_memory(id);
        let mut effects = vec![StoreEffect::DropMemory { id }];
        effects.extend(self.rebalance(None));
        effects
    }

    /// A spill could not be written (a full disk): the object stays in memory and is
    /// not spilled again; others may be.
    pub fn handle_spill_failed(&mut self, id: ObjectId) -> Vec<StoreEffect> {
        let Some(entry) = self.objects.get_mut(&id) else {
            return Vec::new();
        };
        if !entry.spilling {
            return Vec::new();
        }
        entry.spilling = false;
        entry.stuck = true;
        self.leaving_bytes -= entry.size;
        self.usage.spill_failures += 1;
        self.rebalance(None)
    }

    /// Where the object is read from, if held.
    pub fn tier_of(&self, id: ObjectId) -> Option<Tier> {
        self.objects.get(&id).map(|e| match e.memory {
            true => Tier::Memory,
            false => Tier::Disk,
        })
    }

    /// Objects whose memory copy is not being moved, oldest use first.
    pub fn settled_in_memory(&self) -> Vec<ObjectId> {
        let settled = |id: &&ObjectId| self.objects.get(id).is_some_and(|e| !e.spilling);
        self.by_use.values().filter(settled).copied().collect()
    }

    pub fn usage(&self) -> StoreUsage {
        StoreUsage {
            memory_bytes: self.memory_bytes,
            ..self.usage
        }
    }

    /// Moves the least recently used unpinned copies out of memory until what stays
    /// fits the bound: replicas are dropped first, then primaries spilled.
    fn rebalance(&mut self, newcomer: Option<ObjectId>) -> Vec<StoreEffect> {
        let mut effects = Vec::new();
        for pass in [Role::Replica, Role::Primary] {
            let candidates: Vec<ObjectId> = self.by_use.values().copied().collect();
            for id in candidates {
                if self.memory_bytes - self.leaving_bytes <= self.memory_bound {
                    return effects;
                }
                let entry = &self.objects[&id];
                let moving = entry.spilling || entry.asking;
                if entry.role != pass || entry.pins > 0 || moving || entry.stuck {
                    continue;
                }
                if pass == Role::Replica && Some(id) == newcomer {
                    continue;
                }
                match pass {
                    Role::Replica => {
                        let entry = self.objects.get_mut(&id).expect("held");
                        entry.asking = true;
                        self.leaving_bytes += entry.size;
                        effects.push(StoreEffect::AskDrop { id });
                    }
                    Role::Primary if entry.disk => {
                        self.release_memory(id);
                        effects.push(StoreEffect::DropMemory { id });
                    }
                    Role::Primary => {
                        let entry = self.objects.get_mut(&id).expect("held");
                        entry.spilling = true;
                        let size = entry.size;
                        self.leaving_bytes += size;
                        effects.push(StoreEffect::Spill { id, size });
                    }
                }
            }
        }
        effects
    }

    fn touch(&mut self, id: ObjectId) {
        let entry = self.objects.get_mut(&id).expect("held");
        self.uses += 1;
        if entry.memory {
            self.by_use.remove(&entry.last_use);
            self.by_use.insert(self.uses, id);
        }
        entry.last_use = self.uses;
    }

    fn release_memory(&mut self, id: ObjectId) {
        let entry = self.objects.get_mut(&id).expect("held");
        if entry.memory {
            entry.memory = false;
            self.memory_bytes -= entry.size;
            self.by_use.remove(&entry.last_use);
        }
    }

    fn remove(&mut self, id: ObjectId, evicted: bool) -> StoreEffect {
        let entry = self.objects.remove(&id).expect("held");
        if entry.memory {
            self.memory_bytes -= entry.size;
            self.by_use.remove(&entry.last_use);
        }
        if entry.spilling || entry.asking {
            self.leaving_bytes -= entry.size;
        }
        if entry.disk {
            self.usage.disk_bytes -= entry.size;
        }
        self.usage.objects -= 1;
        StoreEffect::Drop {
            id,
            memory: entry.memory,
            disk: entry.disk || entry.spilling,
            evicted,
        }
    }
}
