//! A job's spec as the core keeps it: a few numbers and the number of its shape, the
//! (resources, placement) pair most jobs of a pilot share.

use std::collections::HashMap;

use crate::config::{JobSpec, Placement};
use crate::resources::Resources;

/// A job's spec as the core keeps it: its resources and placement, which most jobs of
/// a pilot share, are one of the core's [`Shapes`] (a million single-task jobs would
/// otherwise hold a million copies of the same 40 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredSpec {
    pub(crate) count: u32,
    pub(crate) shape: u32,
    pub(crate) priority: i32,
    pub(crate) max_retries: u32,
    pub(crate) max_replays: Option<u32>,
    pub(crate) time_limit: Option<u64>,
    pub(crate) class: u32,
    pub(crate) speculative: bool,
}

/// The distinct (resources, placement) pairs of the pilot's jobs, numbered in the
/// order first seen. Only looked up by pair, never iterated: no hash order leaks.
#[derive(Debug, Default)]
pub(crate) struct Shapes {
    list: Vec<(Resources, Placement)>,
    index: HashMap<(Resources, Placement), u32>,
}

impl Shapes {
    /// The number of `spec`'s shape, numbering it if it is new.
    pub(crate) fn intern(&mut self, spec: &JobSpec) -> u32 {
        let key = (spec.resources, spec.placement);
        if let Some(&shape) = self.index.get(&key) {
            return shape;
        }
        // More than 2^32 distinct shapes would need more than 2^32 jobs first.
        let shape = u32::try_from(self.list.len()).unwrap_or(u32::MAX);
        self.list.push(key);
        self.index.insert(key, shape);
        shape
    }

    pub(crate) fn resources(&self, shape: u32) -> Resources {
        self.list[shape as usize].0
    }

    pub(crate) fn placement(&self, shape: u32) -> Placement {
        self.list[shape as usize].1
    }
}

impl StoredSpec {
    pub(crate) fn new(spec: &JobSpec, shape: u32) -> StoredSpec {
        StoredSpec {
            count: spec.count,
            shape,
            priority: spec.priority,
            max_retries: spec.max_retries,
            max_replays: spec.max_replays,
            time_limit: spec.time_limit,
            class: spec.class,
            // A gang's attempt spans its nodes: no copy of it can start elsewhere.
            speculative: spec.speculative && spec.placement == Placement::Single,
        }
    }

    /// The spec this was made from (a gang's `speculative` is false).
    pub(crate) fn to_spec(self, shapes: &Shapes) -> JobSpec {
        JobSpec {
            count: self.count,
            resources: shapes.resources(self.shape),
            placement: shapes.placement(self.shape),
            priority: self.priority,
            max_retries: self.max_retries,
            max_replays: self.max_replays,
            time_limit: self.time_limit,
            class: self.class,
            speculative: self.speculative,
        }
    }
}
