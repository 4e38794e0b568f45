//! What keeps the pilot itself going, beside its work: its journal compacted, an
//! elastic pilot's allocations, and the walltime deadline.

use saker_core::Time;

#[derive(Debug, Default)]
pub(super) struct Upkeep {
    pub compaction: super::compaction::Compaction,
    /// An elastic pilot's batch allocations (`elastic.rs`).
    pub elastic: Option<super::elastic::Elastic>,
    pub walltime: Walltime,
}

/// The walltime deadline and what reaching it left.
#[derive(Debug, Default)]
pub(super) struct Walltime {
    /// The deadline on the core's clock, if any.
    pub deadline: Option<Time>,
    pub reached: bool,
    /// `status` as the deadline left the pilot, reported from then on.
    pub status: Option<crate::client::StatusReport>,
}
