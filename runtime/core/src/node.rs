//! Live nodes, their credit, and the round-robin rotation that decides which node is
//! offered work next.
//!
//! Capacity and credit are [`Resources`]; "covers" and "fits" mean in every kind. A
//! node with credit is in exactly one of two places: the *rotation* (a FIFO of nodes
//! to offer work to, in the order their credit arrived; a node that still has credit
//! after a dispatch goes to the back) or *parked* (it was offered work and could not
//! take the first task it may run, because that task needs more than its credit). A
//! parked node returns to the rotation when its credit grows. Otherwise it is only
//! looked at when the rotation has run dry: parked nodes are grouped by capacity and
//! ordered by credit, so the core asks once per capacity "what does your first task
//! need?" and takes the parked node with the most credit that covers that. Such a node
//! always receives work, so parking never churns: a node is parked at most once per
//! credit grant, and dispatch costs O(log nodes) amortised instead of a scan over
//! every node holding a little credit.
//!
//! Speculative copies are placed by credit, not in turn: the core parks the whole
//! rotation ([`Nodes::park_rotation`]) and takes the parked node with the most credit
//! that is not the original's ([`Nodes::take_for_copy`]).
//!
//! "Most credit" is the vectors' lexicographic order, cores first: for cores-only
//! work exactly the most cores, for other kinds a simple choice (a multi-dimensional
//! best fit is a later issue). A search never takes a node whose credit does not
//! cover the need in every kind.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::error::NodeError;
use crate::ids::{AttemptId, NodeId};
use crate::resources::{Resources, Totals};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// No credit, or popped from the rotation and being served.
    Idle,
    Rotation,
    Parked,
    /// Set aside with credit until an attempt of its own ends
    /// ([`Nodes::set_aside_until_freed`]).
    Full,
}

/// One live node.
#[derive(Debug)]
pub(crate) struct NodeRecord {
    pub(crate) capacity: Resources,
    pub(crate) credit: Resources,
    /// Distinguishes this life of the node id from earlier ones in the rotation.
    incarnation: u64,
    place: Place,
    /// Live attempts on the node, in issue order (replayed in this order on loss).
    pub(crate) attempts: BTreeSet<AttemptId>,
    /// What those attempts occupy: capacity minus this is what is really free, which
    /// is what a gang needs (credit may include a prefetch margin).
    pub(crate) in_use: Resources,
    /// It takes no more work ([`Nodes::close`]): credit it sends is ignored.
    pub(crate) closed: bool,
}

impl NodeRecord {
    /// Cores where queued work could start now: free and credited (none once closed).
    pub(crate) fn startable(&self) -> u64 {
        startable(self.free(), self)
    }

    /// Capacity not held by live attempts.
    pub(crate) fn free(&self) -> Resources {
        self.capacity
            .checked_sub(self.in_use)
            .unwrap_or(Resources::ZERO)
    }
}

/// [`NodeRecord::startable`] of `record` had its free capacity been `free`.
fn startable(free: Resources, record: &NodeRecord) -> u64 {
    if record.closed {
        return 0;
    }
    u64::from(free.core_count().min(record.credit.core_count()))
}

/// All live nodes. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    /// A hash map: looked up by id; iterated only by the audit (order-free).
    map: HashMap<NodeId, NodeRecord>,
    /// (node, incarnation); entries of lost or re-placed nodes are skipped when popped.
    rotation: VecDeque<(NodeId, u64)>,
    /// capacity -> (credit, node) of parked nodes.
    parked: BTreeMap<Resources, BTreeSet<(Resources, NodeId)>>,
    next_incarnation: u64,
    total_credit: Totals,
    /// (free, node) of every live node, for gang placement: the nodes whose free
    /// capacity covers a need are a range of it (cores-only, exactly the range).
    /// Kept only while gangs exist: it costs two B-tree updates per attempt.
    by_free: Option<BTreeSet<(Resources, NodeId)>>,
    /// [`NodeRecord::startable`] summed over live nodes, kept as attempts and credit
    /// come and go: how much queued work could start now without any prefetch.
    startable_cores: u64,
}

impl Nodes {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn total_credit(&self) -> &Totals {
        &self.total_credit
    }

    pub(crate) fn get(&self, node: NodeId) -> Option<&NodeRecord> {
        self.map.get(&node)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &NodeRecord)> {
        self.map.iter().map(|(id, record)| (*id, record))
    }

    pub(crate) fn join(&mut self, node: NodeId, capacity: Resources) -> Result<(), NodeError> {
        if capacity.core_count() == 0 {
            return Err(NodeError::ZeroCapacity { node });
        }
        if self.map.contains_key(&node) {
            return Err(NodeError::AlreadyJoined { node });
        }
        self.next_incarnation += 1;
        self.map.insert(
            node,
            NodeRecord {
                capacity,
                credit: Resources::ZERO,
                incarnation: self.next_incarnation,
                place: Place::Idle,
                attempts: BTreeSet::new(),
                in_use: Resources::ZERO,
                closed: false,
            },
        );
        if let Some(by_free) = &mut self.by_free {
            by_free.insert((capacity, node));
        }
        Ok(())
    }

    /// Cores free and credited over every live node: where queued work could start
    /// now without any prefetch.
    pub(crate) fn startable_cores(&self) -> u64 {
        self.startable_cores
    }

    /// Starts (building it) or stops keeping the index of nodes by free capacity.
    pub(crate) fn index_free(&mut self, on: bool) {
        match (on, &self.by_free) {
            (true, None) => {
                let index = self.map.iter().map(|(node, record)| (record.free(), *node));
                self.by_free = Some(index.collect());
            }
            (false, Some(_)) => self.by_free = None,
            _ => {}
        }
    }

    /// `attempt`, needing `need`, now runs on `node` (a live node).
    pub(crate) fn attach(&mut self, node: NodeId, attempt: AttemptId, need: Resources) {
        // Invariant: callers attach to nodes they just chose among live ones.
        let record = self.map.get_mut(&node).expect("attached node is live");
        let before = record.free();
        record.attempts.insert(attempt);
        record.in_use = record.in_use.saturating_add(need);
        let after = record.free();
        self.startable_cores =
            self.startable_cores - startable(before, record) + record.startable();
        if let Some(by_free) = &mut self.by_free {
            by_free.remove(&(before, node));
            by_free.insert((after, node));
        }
    }

    /// `attempt`, needing `need`, no longer runs on `node` (nothing if the node is gone).
    pub(crate) fn detach(&mut self, node: NodeId, attempt: AttemptId, need: Resources) {
        let Some(record) = self.map.get_mut(&node) else {
            return;
        };
        if !record.attempts.remove(&attempt) {
            return;
        }
        let before = record.free();
        record.in_use = record.in_use.checked_sub(need).unwrap_or(Resources::ZERO);
        let after = record.free();
        self.startable_cores =
            self.startable_cores - startable(before, record) + record.startable();
        if let Some(by_free) = &mut self.by_free {
            by_free.remove(&(before, node));
            by_free.insert((after, node));
        }
        if record.place == Place::Full {
            // Its cores freed: back in the rotation with the credit it has.
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
    }

    /// Live nodes whose free capacity and credit both cover `need`, fullest first (so
    /// that wide free nodes stay for wide work), ties by node id, skipping `skip`.
    /// None unless the index is kept ([`Nodes::index_free`]).
    pub(crate) fn free_for<'a>(
        &'a self,
        need: Resources,
        mut skip: impl FnMut(NodeId) -> bool + 'a,
    ) -> impl Iterator<Item = NodeId> + 'a {
        self.by_free
            .iter()
            .flat_map(move |by_free| by_free.range((need, NodeId(0))..))
            .filter(move |(free, node)| {
                need.fits_in(free)
                    && !skip(*node)
                    && self
                        .map
                        .get(node)
                        .is_some_and(|record| need.fits_in(&record.credit))
            })
            .map(|(_, node)| *node)
    }

    /// Takes `used` out of a node's credit outside the rotation's order (a gang member):
    /// the node keeps its place, re-filed under its new credit if parked.
    pub(crate) fn debit(&mut self, node: NodeId, used: Resources) {
        // Invariant: callers debit live nodes whose credit covers `used`.
        let record = self.map.get_mut(&node).expect("debited node is live");
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
        }
        let was = record.startable();
        record.credit = record
            .credit
            .checked_sub(used)
            .expect("gang member's credit covers its part");
        self.startable_cores = self.startable_cores - was + record.startable();
        self.total_credit.sub(used);
        if record.place == Place::Parked {
            if record.credit.core_count() > 0 {
                self.parked
                    .entry(record.capacity)
                    .or_default()
                    .insert((record.credit, node));
            } else {
                record.place = Place::Idle;
            }
        }
    }

    /// Keeps a node out of both the rotation and the parking (it is reserved for a gang
    /// and may take nothing now); [`Nodes::add_credit`] or [`Nodes::restore`] bring it
    /// back.
    pub(crate) fn set_aside(&mut self, node: NodeId) {
        // Invariant: only called for the live node next_in_rotation just returned.
        let record = self.map.get_mut(&node).expect("set-aside node is live");
        record.place = Place::Idle;
    }

    /// Keeps a node out of the rotation until an attempt of its own ends or credit
    /// comes: work was kept off it by the cap on its prefetch alone, which its own
    /// attempts hold. Its credit may be enough already (an agent grants ahead), so an
    /// ending attempt brings it back by itself ([`Nodes::detach`]).
    pub(crate) fn set_aside_until_freed(&mut self, node: NodeId) {
        // Invariant: only called for the live node next_in_rotation just returned.
        let record = self.map.get_mut(&node).expect("set-aside node is live");
        record.place = Place::Full;
    }

    /// Puts a parked node back in the rotation (work only it may take was queued).
    pub(crate) fn wake(&mut self, node: NodeId) {
        let Some(record) = self.map.get_mut(&node) else {
            return;
        };
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
    }

    /// Puts a set-aside node back in the rotation if it still has credit.
    pub(crate) fn restore(&mut self, node: NodeId) {
        let Some(record) = self.map.get_mut(&node) else {
            return;
        };
        if record.place == Place::Idle && record.credit.core_count() > 0 {
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
    }

    /// Adds credit (saturating) and puts the node in the rotation if it is not there.
    pub(crate) fn add_credit(&mut self, node: NodeId, credit: Resources) -> Result<(), NodeError> {
        let record = self
            .map
            .get_mut(&node)
            .ok_or(NodeError::UnknownNode { node })?;
        if credit.is_zero() || record.closed {
            return Ok(());
        }
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
            record.place = Place::Idle;
        }
        if record.place == Place::Full {
            record.place = Place::Idle;
        }
        let before = record.credit;
        let was = record.startable();
        record.credit = record.credit.saturating_add(credit);
        self.startable_cores = self.startable_cores - was + record.startable();
        // Invariant: a saturating sum is never below either term.
        let added = record
            .credit
            .checked_sub(before)
            .expect("credit only grows");
        self.total_credit.add(added);
        if record.place == Place::Idle {
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
        Ok(())
    }

    /// The node takes no more work: its unused credit is dropped and credit it sends
    /// later is ignored. Its live attempts are untouched. A stale rotation entry is
    /// skipped when popped (its place is no longer the rotation).
    pub(crate) fn close(&mut self, node: NodeId) -> Result<(), NodeError> {
        let record = self
            .map
            .get_mut(&node)
            .ok_or(NodeError::UnknownNode { node })?;
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
        }
        record.place = Place::Idle;
        self.total_credit.sub(record.credit);
        self.startable_cores -= record.startable();
        record.credit = Resources::ZERO;
        record.closed = true;
        Ok(())
    }

    /// Removes a lost node; its credit vanishes.
    pub(crate) fn remove(&mut self, node: NodeId) -> Option<NodeRecord> {
        let record = self.map.remove(&node)?;
        self.startable_cores -= record.startable();
        if let Some(by_free) = &mut self.by_free {
            by_free.remove(&(record.free(), node));
        }
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
        }
        self.total_credit.sub(record.credit);
        Some(record)
    }

    /// The next node to offer work to, taken out of the rotation. The caller must then
    /// call [`Nodes::served`] or [`Nodes::park`] for it.
    pub(crate) fn next_in_rotation(&mut self) -> Option<NodeId> {
        while let Some((node, incarnation)) = self.rotation.pop_front() {
            let Some(record) = self.map.get_mut(&node) else {
                continue;
            };
            if record.incarnation != incarnation || record.place != Place::Rotation {
                continue;
            }
            record.place = Place::Idle;
            // Every task needs a core: credit without one cannot take anything.
            if record.credit.core_count() == 0 {
                continue;
            }
            return Some(node);
        }
        None
    }

    /// The node was sent work worth `used`; back of the rotation if cores are left.
    pub(crate) fn served(&mut self, node: NodeId, used: Resources) {
        // Invariant: only called for the live node next_in_rotation just returned.
        let record = self.map.get_mut(&node).expect("served node is live");
        let was = record.startable();
        // Invariant: callers take `used` out of this node's credit (queue take, copy
        // placement), so it fits.
        record.credit = record
            .credit
            .checked_sub(used)
            .expect("work sent fits the credit");
        self.startable_cores = self.startable_cores - was + record.startable();
        self.total_credit.sub(used);
        if record.credit.core_count() > 0 {
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
    }

    /// The node could not take the first task it may run: park it until its credit
    /// grows or the queue changes.
    pub(crate) fn park(&mut self, node: NodeId) {
        // Invariant: only called for the live node next_in_rotation just returned.
        let record = self.map.get_mut(&node).expect("parked node is live");
        record.place = Place::Parked;
        self.parked
            .entry(record.capacity)
            .or_default()
            .insert((record.credit, node));
    }

    /// Takes out of the parking the node that can take work now, if any: per capacity
    /// class (smallest capacity first, keeping wide nodes for wide tasks), the parked
    /// node with the most credit among those whose credit covers what the class needs
    /// next (`need(capacity)`, `None` if nothing fits it). Ties go to the lower node
    /// id. The caller must then call [`Nodes::served`] or [`Nodes::park`] for it.
    pub(crate) fn unpark_one(
        &mut self,
        need: impl Fn(&Resources) -> Option<Resources>,
    ) -> Option<NodeId> {
        let mut chosen = None;
        for (capacity, parked) in &self.parked {
            let Some(need) = need(capacity) else {
                continue;
            };
            // Credit that covers `need` is not below it in the order, so the search
            // starts there. Cores-only, the first node looked at covers it.
            let Some(&(credit, _)) = parked
                .range((need, NodeId(0))..)
                .rev()
                .find(|(credit, _)| need.fits_in(credit))
            else {
                continue;
            };
            // The lowest id among those with that credit.
            let key = *parked
                .range((credit, NodeId(0))..)
                .next()
                .expect("the credit found is in range");
            chosen = Some((*capacity, key));
            break;
        }
        let (capacity, (credit, node)) = chosen?;
        unpark(&mut self.parked, capacity, credit, node);
        // Invariant: parked holds live nodes only (remove unparks).
        let record = self.map.get_mut(&node).expect("parked node is live");
        record.place = Place::Idle;
        Some(node)
    }

    /// Parks every node of the rotation, so that all nodes with credit can be searched
    /// by credit ([`Nodes::take_for_copy`]). A node is parked at most once per credit
    /// grant, as in ordinary dispatch, so this is amortised O(log nodes) per grant.
    pub(crate) fn park_rotation(&mut self) {
        while let Some(node) = self.next_in_rotation() {
            self.park(node);
        }
    }

    /// Takes out of the parking a node for a speculative copy needing `need` whose
    /// original runs on `original`: per capacity class that `need` fits (smallest
    /// first, keeping wide nodes for wide tasks) and that `spare(capacity)` allows, the
    /// parked node other than `original` with the most credit among those whose credit
    /// covers `need`. Ties go to the higher node id. The caller must then call
    /// [`Nodes::served`] for it. O(capacity classes) for cores-only work.
    pub(crate) fn take_for_copy(
        &mut self,
        need: Resources,
        original: NodeId,
        spare: impl Fn(&Resources) -> bool,
    ) -> Option<NodeId> {
        let mut chosen = None;
        // A capacity that `need` fits is not below it in the order.
        for (capacity, parked) in self.parked.range(need..) {
            if !need.fits_in(capacity) || !spare(capacity) {
                continue;
            }
            // Cores-only, at most two steps: the original is one node.
            let Some(&(credit, node)) = parked
                .range((need, NodeId(0))..)
                .rev()
                .find(|(credit, node)| *node != original && need.fits_in(credit))
            else {
                continue;
            };
            chosen = Some((*capacity, credit, node));
            break;
        }
        let (capacity, credit, node) = chosen?;
        unpark(&mut self.parked, capacity, credit, node);
        // Invariant: parked holds live nodes only (remove unparks).
        let record = self.map.get_mut(&node).expect("parked node is live");
        record.place = Place::Idle;
        Some(node)
    }

    /// The capacities of parked nodes, each once, ascending.
    pub(crate) fn parked_capacities(&self) -> impl Iterator<Item = Resources> + '_ {
        self.parked.keys().copied()
    }

    /// Nodes in the rotation plus parked ones (an upper bound on nodes with credit).
    pub(crate) fn placed(&self) -> (usize, usize) {
        let parked = self.parked.values().map(BTreeSet::len).sum();
        (self.rotation.len(), parked)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let per_node = size_of::<NodeId>() + size_of::<NodeRecord>() + 16;
        let attempts: usize = self
            .map
            .values()
            .map(|record| record.attempts.len() * (size_of::<AttemptId>() + 8))
            .sum();
        self.map.capacity() * per_node
            + attempts
            + self.rotation.capacity() * size_of::<(NodeId, u64)>()
            + self.placed().1 * (size_of::<(Resources, NodeId)>() + 8)
            + self.by_free.as_ref().map_or(0, BTreeSet::len)
                * (size_of::<(Resources, NodeId)>() * 3 / 2 + 8)
    }
}

fn unpark(
    parked: &mut BTreeMap<Resources, BTreeSet<(Resources, NodeId)>>,
    capacity: Resources,
    credit: Resources,
    node: NodeId,
) {
    if let Some(set) = parked.get_mut(&capacity) {
        set.remove(&(credit, node));
        if set.is_empty() {
            parked.remove(&capacity);
        }
    }
}
