//! Live nodes, their credit, and the round-robin rotation that decides which node is
//! offered work next.
//!
//! A node with credit is in exactly one of two places: the *rotation* (a FIFO of nodes
//! to offer work to, in the order their credit arrived; a node that still has credit
//! after a dispatch goes to the back) or *parked* (it was offered work and could not
//! take the first task it may run, because that task needs more cores than its
//! credit). A parked node returns to the rotation when its credit grows. Otherwise it
//! is only looked at when the rotation has run dry: parked nodes are grouped by
//! capacity and ordered by credit, so the core asks once per capacity "how many cores
//! does your first task need?" and takes the parked node with the most credit if it
//! covers that. Such a node always receives work, so parking never churns: a node is
//! parked at most once per credit grant, and dispatch costs O(log nodes) amortised
//! instead of a scan over every node holding a little credit.
//!
//! Speculative copies are placed by credit, not in turn: the core parks the whole
//! rotation ([`Nodes::park_rotation`]) and takes the parked node with the most credit
//! that is not the original's ([`Nodes::take_for_copy`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::error::NodeError;
use crate::ids::{AttemptId, NodeId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// No credit, or popped from the rotation and being served.
    Idle,
    Rotation,
    Parked,
}

/// One live node.
#[derive(Debug)]
pub(crate) struct NodeRecord {
    pub(crate) capacity: u32,
    pub(crate) credit: u32,
    /// Distinguishes this life of the node id from earlier ones in the rotation.
    incarnation: u64,
    place: Place,
    /// Live attempts on the node, in issue order (replayed in this order on loss).
    pub(crate) attempts: BTreeSet<AttemptId>,
}

/// All live nodes. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    /// A hash map: looked up by id; iterated only by the audit (order-free).
    map: HashMap<NodeId, NodeRecord>,
    /// (node, incarnation); entries of lost or re-placed nodes are skipped when popped.
    rotation: VecDeque<(NodeId, u64)>,
    /// capacity -> (credit, node) of parked nodes.
    parked: BTreeMap<u32, BTreeSet<(u32, NodeId)>>,
    next_incarnation: u64,
    total_credit: u64,
}

impl Nodes {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn total_credit(&self) -> u64 {
        self.total_credit
    }

    pub(crate) fn get(&self, node: NodeId) -> Option<&NodeRecord> {
        self.map.get(&node)
    }

    pub(crate) fn get_mut(&mut self, node: NodeId) -> Option<&mut NodeRecord> {
        self.map.get_mut(&node)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, &NodeRecord)> {
        self.map.iter().map(|(id, record)| (*id, record))
    }

    pub(crate) fn join(&mut self, node: NodeId, capacity: u32) -> Result<(), NodeError> {
        if capacity == 0 {
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
                credit: 0,
                incarnation: self.next_incarnation,
                place: Place::Idle,
                attempts: BTreeSet::new(),
            },
        );
        Ok(())
    }

    /// Adds credit (saturating) and puts the node in the rotation if it is not there.
    pub(crate) fn add_credit(&mut self, node: NodeId, cores: u32) -> Result<(), NodeError> {
        let record = self
            .map
            .get_mut(&node)
            .ok_or(NodeError::UnknownNode { node })?;
        if cores == 0 {
            return Ok(());
        }
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
            record.place = Place::Idle;
        }
        let before = record.credit;
        record.credit = record.credit.saturating_add(cores);
        self.total_credit += u64::from(record.credit - before);
        if record.place == Place::Idle {
            record.place = Place::Rotation;
            self.rotation.push_back((node, record.incarnation));
        }
        Ok(())
    }

    /// Removes a lost node; its credit vanishes.
    pub(crate) fn remove(&mut self, node: NodeId) -> Option<NodeRecord> {
        let record = self.map.remove(&node)?;
        if record.place == Place::Parked {
            unpark(&mut self.parked, record.capacity, record.credit, node);
        }
        self.total_credit -= u64::from(record.credit);
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
            if record.credit == 0 {
                continue;
            }
            return Some(node);
        }
        None
    }

    /// The node was sent work worth `used` cores; back of the rotation if credit is left.
    pub(crate) fn served(&mut self, node: NodeId, used: u32) {
        // Invariant: only called for the live node next_in_rotation just returned.
        let record = self.map.get_mut(&node).expect("served node is live");
        record.credit -= used;
        self.total_credit -= u64::from(used);
        if record.credit > 0 {
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
    /// node with the most credit, if that credit covers what the class needs next
    /// (`need(capacity)`, `None` if nothing fits it). Ties go to the lower node id.
    /// The caller must then call [`Nodes::served`] or [`Nodes::park`] for it.
    pub(crate) fn unpark_one(&mut self, need: impl Fn(u32) -> Option<u32>) -> Option<NodeId> {
        let mut chosen = None;
        for (capacity, parked) in &self.parked {
            let Some(need) = need(*capacity) else {
                continue;
            };
            let Some(&(credit, _)) = parked.last() else {
                continue;
            };
            if credit < need {
                continue;
            }
            // The lowest id among those with the most credit.
            let key = *parked
                .range((credit, NodeId(0))..)
                .next()
                .expect("the maximum is in range");
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

    /// Takes out of the parking a node for a speculative copy of `cores` cores whose
    /// original runs on `original`: per capacity class of at least `cores` cores
    /// (smallest first, keeping wide nodes for wide tasks) that `spare(capacity)`
    /// allows, the parked node other than `original` with the most credit, if that
    /// covers `cores`. Ties go to the higher node id. The caller must then call
    /// [`Nodes::served`] for it. O(capacity classes).
    pub(crate) fn take_for_copy(
        &mut self,
        cores: u32,
        original: NodeId,
        spare: impl Fn(u32) -> bool,
    ) -> Option<NodeId> {
        let mut chosen = None;
        for (capacity, parked) in self.parked.range(cores..) {
            if !spare(*capacity) {
                continue;
            }
            // At most two steps: the original is one node.
            let Some(&(credit, node)) = parked.iter().rev().find(|(_, node)| *node != original)
            else {
                continue;
            };
            if credit >= cores {
                chosen = Some((*capacity, credit, node));
                break;
            }
        }
        let (capacity, credit, node) = chosen?;
        unpark(&mut self.parked, capacity, credit, node);
        // Invariant: parked holds live nodes only (remove unparks).
        let record = self.map.get_mut(&node).expect("parked node is live");
        record.place = Place::Idle;
        Some(node)
    }

    /// The capacities of parked nodes, each once, ascending.
    pub(crate) fn parked_capacities(&self) -> impl Iterator<Item = u32> + '_ {
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
            + self.placed().1 * (size_of::<(u32, NodeId)>() + 8)
    }
}

fn unpark(
    parked: &mut BTreeMap<u32, BTreeSet<(u32, NodeId)>>,
    capacity: u32,
    credit: u32,
    node: NodeId,
) {
    if let Some(set) = parked.get_mut(&capacity) {
        set.remove(&(credit, node));
        if set.is_empty() {
            parked.remove(&capacity);
        }
    }
}
